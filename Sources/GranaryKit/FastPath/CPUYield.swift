import CLinux
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// granary's own CPU work (compressing, checking and hashing its private snapshots) runs under
/// `SCHED_IDLE`, so that the programs that own the stores get a CPU the moment they want one.
///
/// Why `SCHED_IDLE` and not `nice`: a waking `SCHED_OTHER` thread always preempts a
/// `SCHED_IDLE` one at once, whereas under EEVDF a niced thread keeps the CPU to the end of its
/// slice, and an owner waking from its fsync waits for that (docs/performance.md has the
/// measurements: `SCHED_IDLE` is what moves the owner's share, `nice` does not).
///
/// Why not all of it: the thread that snapshots a live store holds SQLite locks on it (a read
/// lock that keeps the owner's checkpoint from resetting the `-wal`; in rollback mode a shared
/// lock the owner's writes wait for), so that stage runs at the caller's priority (`normal`).
///
/// **Never starved**: a `SCHED_IDLE` thread gets almost nothing while other threads keep every
/// CPU busy, so a monitor thread reads the yielding threads' scheduler statistics every 250 ms.
/// When over the last second they waited at least 0.5 s for a CPU and ran less than 0.25 s,
/// every one of them goes back to `SCHED_OTHER`, and the rest of the process's work does not
/// yield any more (`Mode.raised`): under such load granary competes like any other program.
///
/// Only when the process runs under `SCHED_OTHER` and a thread may come back from
/// `SCHED_IDLE` (root, `CAP_SYS_NICE`, or an `RLIMIT_NICE` that allows it); otherwise, or when the
/// run's context turned it off (``RunContext/yieldPermitted``), nothing changes (`Mode.normal`).
public final class CPUYield: @unchecked Sendable {
    /// How a run's work was scheduled.
    public enum Mode: String, Sendable, Codable {
        /// The work on private files ran under `SCHED_IDLE`.
        case yielded
        /// It started so, then other load left it no CPU and it went back to normal priority.
        case raised
        /// It ran at the caller's priority throughout.
        case normal
    }

    /// The process's governor for work that may yield, and the one for work that may not: a run
    /// takes its own through its context (``RunContext/cpu``; the `granary` command turns yielding
    /// off when its environment asks). One of each per process, since the monitor watches the
    /// process's threads.
    public static func governor(permitted: Bool) -> CPUYield { permitted ? mayYield : mayNotYield }
    private static let mayYield = CPUYield(permitted: true)
    private static let mayNotYield = CPUYield(permitted: false)

    /// How often the monitor looks, and over how many looks it judges.
    static let tick = 0.25
    static let windowTicks = 4
    /// Starved: waited at least this long for a CPU in the window, in nanoseconds…
    static let starvedWaiting: Int64 = 500_000_000
    /// … and ran less than this.
    static let starvedRunning: Int64 = 250_000_000

    /// Whether this process yields at all.
    public let enabled: Bool
    private let lock = NSLock()
    private var active = 0
    private var raisedFlag = false
    private var monitoring = false

    init(permitted: Bool) {
        enabled =
            permitted
            && sched_getscheduler(0) == granary_sched_other()
            && granary_can_leave_idle() != 0
    }

    /// Whether other load made the process stop yielding.
    public var raised: Bool { lock.withLock { raisedFlag } }

    /// The mode of work done so far.
    public var mode: Mode {
        lock.withLock { !enabled ? .normal : raisedFlag ? .raised : .yielded }
    }

    /// Runs `body` with the calling thread under `SCHED_IDLE` (threads it starts inherit it),
    /// and restores its policy afterwards. Nested calls change nothing.
    public func yielding<T>(_ body: () throws -> T) rethrows -> T {
        let lowered = lock.withLock { () -> Bool in
            guard enabled, !raisedFlag, sched_getscheduler(0) == granary_sched_other(), granary_set_idle(0, 1) == 0
            else {
                return false
            }
            active += 1
            if !monitoring {
                monitoring = true
                startMonitor()
            }
            return true
        }
        defer {
            if lowered {
                lock.withLock {
                    active -= 1
                    if !raisedFlag { _ = granary_set_idle(0, 0) }
                }
            }
        }
        return try body()
    }

    /// Runs `body` at normal priority on a thread that is yielding (for work that holds locks
    /// another program waits for), then yields again unless the process was raised meanwhile.
    public func normal<T>(_ body: () throws -> T) rethrows -> T {
        let wasIdle = lock.withLock { () -> Bool in
            guard sched_getscheduler(0) == granary_sched_idle(), enabled else { return false }
            return granary_set_idle(0, 0) == 0
        }
        defer {
            if wasIdle { lock.withLock { if !raisedFlag { _ = granary_set_idle(0, 1) } } }
        }
        return try body()
    }

    // MARK: - The monitor

    private func startMonitor() {
        let thread = Thread { [self] in
            // Threads inherit the policy of the one that starts them (here a yielding one): the
            // monitor must not yield.
            _ = granary_set_idle(0, 0)
            monitor()
        }
        thread.stackSize = 1 << 18
        thread.start()
    }

    private func monitor() {
        var previous: [Int32: Times] = [:]
        var window: [Times] = []
        while true {
            Thread.sleep(forTimeInterval: Self.tick)
            let (stop, raised) = lock.withLock { () -> (Bool, Bool) in
                if active == 0 {
                    monitoring = false
                } else if raisedFlag {
                    // A thread started by a yielding one just before the raise may still be idle.
                    raiseAll()
                }
                return (active == 0, raisedFlag)
            }
            if stop { return }
            if raised { continue }
            var sum = Times()
            var current: [Int32: Times] = [:]
            for tid in Self.idleThreads() {
                guard let times = Self.times(of: tid) else { continue }
                current[tid] = times
                if let before = previous[tid] {
                    sum.running += times.running - before.running
                    sum.waiting += times.waiting - before.waiting
                }
            }
            previous = current
            window.append(sum)
            if window.count > Self.windowTicks { window.removeFirst() }
            let total = window.reduce(Times()) {
                Times(running: $0.running + $1.running, waiting: $0.waiting + $1.waiting)
            }
            if window.count == Self.windowTicks && Self.starved(total) {
                lock.withLock {
                    raisedFlag = true
                    raiseAll()
                }
            }
        }
    }

    /// Time on a CPU and time waiting for one, in nanoseconds.
    struct Times {
        var running: Int64 = 0
        var waiting: Int64 = 0
    }

    /// The starvation rule, over one window.
    static func starved(_ window: Times) -> Bool {
        window.waiting >= starvedWaiting && window.running < starvedRunning
    }

    /// Every idle thread of the process back to `SCHED_OTHER` (under the lock).
    private func raiseAll() {
        for tid in Self.idleThreads() { _ = granary_set_idle(tid, 0) }
    }

    /// The process's threads.
    static func threads() -> [Int32] {
        FileSystem.contents(of: "/proc/self/task").compactMap { Int32($0) }
    }

    /// The process's threads under `SCHED_IDLE`.
    static func idleThreads() -> [Int32] {
        threads().filter { sched_getscheduler($0) == granary_sched_idle() }
    }

    /// A thread's scheduler statistics (`/proc/self/task/TID/schedstat`: run time, wait time, slices).
    static func times(of tid: Int32) -> Times? {
        let fields = FileSystem.head("/proc/self/task/\(tid)/schedstat", count: 96).split(separator: UInt8(ascii: " "))
            .prefix(2).compactMap { Int64(String(decoding: $0, as: UTF8.self)) }
        return fields.count == 2 ? Times(running: fields[0], waiting: fields[1]) : nil
    }
}

extension RunContext {
    /// The CPU governor this run's work yields through (one per process for each permission).
    public var cpu: CPUYield { CPUYield.governor(permitted: yieldPermitted) }
}
