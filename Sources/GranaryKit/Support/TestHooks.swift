import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Fault injection for the recovery tests, compiled only into debug builds (what `make test`
/// builds): a release build (`make install`, `make bench`) has no such switch at all, so nothing
/// in its environment can make a real restore stop half-way.
///
/// In a debug build:
/// - `GRANARY_TEST_CRASH_AT_STEP=N` kills granary (SIGKILL) just before its Nth restore step
///   (counted from 1 across the whole run), to prove that a crash at any step leaves every store
///   of the user fully old or fully new after `granary recover`;
/// - `GRANARY_TEST_STALL_AT_STEP=N:MS` sleeps MS milliseconds there instead (a lease runs out);
/// - `GRANARY_TEST_PAUSE_AT_STEP=N` stops granary (SIGSTOP) there, so that the attack tests can
///   swap a path in a user's folder for a link at exactly that step, then SIGCONT it;
/// - `GRANARY_TEST_LEASE_MS=MS` asks owners for leases of MS milliseconds;
/// - `GRANARY_TEST_FAIL_SAFETY_ARCHIVE=1` makes writing a safety archive fail (a repository that
///   turned read-only after the restore committed);
/// - `GRANARY_TEST_CRASH=1` makes granary crash (a Swift runtime trap) as soon as it starts, to
///   prove what the crash handler may and may not run.
public enum CrashPoint {
    #if GRANARY_TEST_HOOKS
        nonisolated(unsafe) private static var count = 0
        private static let environment = ProcessInfo.processInfo.environment
        private static let target: Int? = environment["GRANARY_TEST_CRASH_AT_STEP"].flatMap(Int.init)
        private static let stall: (step: Int, ms: UInt32)? = environment["GRANARY_TEST_STALL_AT_STEP"].flatMap { text in
            let parts = text.split(separator: ":")
            guard parts.count == 2, let step = Int(parts[0]), let ms = UInt32(parts[1]) else { return nil }
            return (step, ms)
        }
        private static let pause: Int? = environment["GRANARY_TEST_PAUSE_AT_STEP"].flatMap(Int.init)

        static func reach() {
            count += 1
            if let target, count == target { kill(getpid(), SIGKILL) }
            if let stall, count == stall.step { usleep(stall.ms * 1000) }
            if let pause, count == pause { kill(getpid(), SIGSTOP) }
        }

        public static func crashIfAsked() {
            if environment["GRANARY_TEST_CRASH"] == "1" { fatalError("crash asked for by GRANARY_TEST_CRASH") }
        }

        static var lease: Duration? { environment["GRANARY_TEST_LEASE_MS"].flatMap(Int64.init).map { .milliseconds($0) } }
        static var failSafetyArchive: Bool { environment["GRANARY_TEST_FAIL_SAFETY_ARCHIVE"] == "1" }
    #else
        @inline(__always) static func reach() {}
        @inline(__always) public static func crashIfAsked() {}

        static var lease: Duration? { nil }
        static var failSafetyArchive: Bool { false }
    #endif
}
