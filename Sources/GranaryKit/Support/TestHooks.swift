import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Crash injection for the recovery tests, compiled only into debug builds (what `make test`
/// builds): a release build (`make install`, `make bench`) has no such switch at all, so nothing
/// in its environment can make a real restore stop half-way.
///
/// In a debug build, `GRANARY_TEST_CRASH_AT_STEP=N` makes granary kill itself with SIGKILL just
/// before its Nth restore step (counted from 1 across the whole run), to prove that a crash at any
/// step leaves every store of the user fully old or fully new after `granary recover`.
enum CrashPoint {
    #if GRANARY_TEST_HOOKS
        nonisolated(unsafe) private static var count = 0
        private static let target: Int? = ProcessInfo.processInfo.environment["GRANARY_TEST_CRASH_AT_STEP"].flatMap(Int.init)

        static func reach() {
            count += 1
            if let target, count == target { kill(getpid(), SIGKILL) }
        }
    #else
        @inline(__always) static func reach() {}
    #endif
}
