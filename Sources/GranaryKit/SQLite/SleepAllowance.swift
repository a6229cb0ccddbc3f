import CSQLiteLimits

/// How long SQLite may sleep, in all, on the calling thread while `body` runs.
///
/// SQLite sleeps in two places a store's owner controls: between its tries to begin a read on a
/// WAL store (a `-shm` whose two header copies the owner keeps apart, while holding its write
/// lock, makes it try 100 times over about 10 s before it fails with `SQLITE_PROTOCOL`; no busy
/// timeout shortens that), and in busy handlers waiting for the owner's locks. One process that
/// serves many users in turn (`follow`) bounds a turn's sleeping with this: once the allowance is
/// spent, SQLite tries again at once instead of sleeping and gives up as it would at the end of
/// its waits, so a hostile store costs its user, not everyone after them.
///
/// The allowance is the calling thread's (SQLite sleeps on the thread that called it); it nests
/// (the smaller of the two holds) and is restored after `body`. It bounds anything only once
/// ``ProcessSetup/install()`` ran (``isEnforced``).
public enum SleepAllowance {
    /// Whether SQLite's sleeps go through the allowance in this process.
    public static var isEnforced: Bool { granary_sleep_bounded() != 0 }

    public static func within<T, E: Error>(_ allowance: Duration, _ body: () throws(E) -> T) throws(E) -> T {
        let ns = max(0, allowance.components.seconds * 1_000_000_000 + allowance.components.attoseconds / 1_000_000_000)
        let outer = granary_sleep_allowance_set(-1)
        let effective = outer >= 0 ? min(ns, outer) : ns
        granary_sleep_allowance_set(effective)
        defer {
            // An outer allowance keeps what it had, less what was slept meanwhile.
            let left = granary_sleep_allowance_set(outer)
            if outer >= 0 { granary_sleep_allowance_set(outer - (effective - left)) }
        }
        return try body()
    }
}
