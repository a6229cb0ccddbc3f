import Foundation
import GranaryKit

/// The test switches of a debug build (what `make test` builds), read from the environment once
/// at start; a release build has none of them (`make check-release` proves it):
/// - `GRANARY_TEST_CRASH_AT=NAME[:N]` kills granary (SIGKILL) the N-th time (default the first) it
///   reaches the named point (`CrashPoint.Name`: staged, paused, checked, committed, …);
/// - `GRANARY_TEST_STALL_AT=NAME[:N]:MS` sleeps MS milliseconds there instead (a lease runs out);
/// - `GRANARY_TEST_PAUSE_AT=NAME[:N]` stops granary (SIGSTOP) there, for the link-swap tests;
/// - `GRANARY_TEST_SIGNAL_AT=NAME[:N]` sends granary SIGTERM there (a signal's request, polled);
/// - `GRANARY_TEST_LEASE_MS=MS` asks owners for leases of MS milliseconds;
/// - `GRANARY_TEST_FAIL_SAFETY_ARCHIVE=1` makes writing a safety archive fail;
/// - `GRANARY_TEST_NOW=YYYYMMDDTHHMMSS[.ffffff]Z` stamps new archives at that time (after the
///   newest of the user and host, as ever): archives of given times without a clock to wait for;
/// - `GRANARY_TEST_RCLONE_FOLDER=DIR` looks for rclone in DIR only (a machine without rclone);
/// - `GRANARY_TEST_WORKER_TRAP=ID` makes the backup worker of user ID trap as it starts;
///   `GRANARY_TEST_WORKER_SAYS=ID:FILE` makes it first write FILE's bytes to its parent as they
///   are, and `GRANARY_TEST_WORKER_EXIT=ID` exit 0 right after (read in `BackupWorkers.serve`);
/// - `GRANARY_TEST_INOTIFY_WATCHES=N` lets `follow` hold at most N inotify watches, as if the
///   kernel's `fs.inotify.max_user_watches` were that low;
/// - `GRANARY_TEST_FOLLOW_STOP_MS=MS` gives a stop of `follow` MS milliseconds to read the users
///   with changes not yet shipped (the oldest is read all the same), instead of 500;
/// - `GRANARY_TEST_READ_TRACE=FILE` appends a line to FILE for each archive read (`ReadTrace`), and
///   for each user `follow` scans (`scan USER`) and store it reads (`read USER/STORE`);
/// - `GRANARY_TEST_CRASH=1` makes granary crash (a Swift runtime trap) as soon as it starts, to
///   prove what the crash handler may and may not run.
enum TestHooks {
    static func apply(_ environment: [String: String] = ProcessInfo.processInfo.environment) {
        #if TEST_HOOKS
            if environment["GRANARY_TEST_CRASH"] == "1" { fatalError("crash asked for by GRANARY_TEST_CRASH") }
            var plan = CrashPoint.Plan()
            plan.crashAt = environment["GRANARY_TEST_CRASH_AT"].flatMap(CrashPoint.Plan.point)
            plan.stall = environment["GRANARY_TEST_STALL_AT"].flatMap { text in
                guard let colon = text.lastIndex(of: ":"), let ms = UInt32(text[text.index(after: colon)...]),
                    let point = CrashPoint.Plan.point(String(text[..<colon]))
                else { return nil }
                return (point.0, point.1, ms)
            }
            plan.pauseAt = environment["GRANARY_TEST_PAUSE_AT"].flatMap(CrashPoint.Plan.point)
            plan.signalAt = environment["GRANARY_TEST_SIGNAL_AT"].flatMap(CrashPoint.Plan.point)
            plan.lease = environment["GRANARY_TEST_LEASE_MS"].flatMap(Int64.init).map { .milliseconds($0) }
            plan.failSafetyArchive = environment["GRANARY_TEST_FAIL_SAFETY_ARCHIVE"] == "1"
            plan.now = environment["GRANARY_TEST_NOW"].flatMap(ArchiveName.parseMicros)
            plan.inotifyWatches = environment["GRANARY_TEST_INOTIFY_WATCHES"].flatMap(Int.init)
            plan.followStopMilliseconds = environment["GRANARY_TEST_FOLLOW_STOP_MS"].flatMap(Int64.init)
            CrashPoint.plan = plan
            Rclone.searchOnly(in: environment["GRANARY_TEST_RCLONE_FOLDER"])
            ReadTrace.file = environment["GRANARY_TEST_READ_TRACE"]
        #endif
    }
}
