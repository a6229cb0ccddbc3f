import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Fault injection for the recovery tests, compiled only into debug builds (what `make test`
/// builds): a release build (`make install`, `make bench`) has no such switch at all, so nothing
/// can make a real restore stop half-way. The program using the core sets `plan` once, before
/// any work (the `granary` command reads it from its environment in a debug build).
public enum CrashPoint {
    #if TEST_HOOKS
        /// What to do at the restore steps, counted from 1 across the whole run.
        public struct Plan: Sendable {
            /// Kill the process (SIGKILL) just before this step: a crash at any step must leave
            /// every store of the user fully old or fully new after a recovery.
            public var crashAt: Int?
            /// Sleep this many milliseconds at this step instead (a lease runs out).
            public var stall: (step: Int, milliseconds: UInt32)?
            /// Stop the process (SIGSTOP) at this step, so that a test can swap a path in a
            /// user's folder for a link at exactly that step, then continue it.
            public var pauseAt: Int?
            /// Ask owners for leases this long.
            public var lease: Duration?
            /// Make writing a safety archive fail (a repository that turned read-only after the
            /// restore committed).
            public var failSafetyArchive = false

            public init() {}
        }

        /// The plan of this process.
        nonisolated(unsafe) public static var plan = Plan()
        nonisolated(unsafe) private static var count = 0

        static func reach() {
            count += 1
            if let target = plan.crashAt, count == target { kill(getpid(), SIGKILL) }
            if let stall = plan.stall, count == stall.step { usleep(stall.milliseconds * 1000) }
            if let pause = plan.pauseAt, count == pause { kill(getpid(), SIGSTOP) }
        }

        static var lease: Duration? { plan.lease }
        static var failSafetyArchive: Bool { plan.failSafetyArchive }
    #else
        @inline(__always) static func reach() {}

        static var lease: Duration? { nil }
        static var failSafetyArchive: Bool { false }
    #endif
}
