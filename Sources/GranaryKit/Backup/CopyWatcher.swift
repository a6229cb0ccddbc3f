import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Reports how far a file being written has grown, a few times a second, while some work that
/// gives no progress of its own runs: a WAL store's snapshot is one `sqlite3_backup_step(-1)`, so
/// without it a progress bar would sit at 0 B for the whole copy of a large store.
///
/// It only reads the size of granary's own scratch file (`stat`): it never touches a user's folder.
final class CopyWatcher: Sendable {
    private final class State: Sendable {
        let stopped = Mutex(false)
        let finished = DispatchSemaphore(value: 0)
    }
    private let state = State()

    /// Starts reporting the size of `path` to `report` every `interval` until ``stop()``; with
    /// `written`, the larger of the two (a copy whose pages are discarded, `backup --delta`, leaves
    /// a file of one page: the page recorder counts what was written).
    init(
        path: String, interval: Duration = .milliseconds(250), written: (@Sendable () -> Int64)? = nil,
        report: @escaping @Sendable (Int64) -> Void
    ) {
        let thread = Thread { [state] in
            var last: Int64 = -1
            func look() {
                var info = stat()
                let size = stat(path, &info) == 0 ? Int64(info.st_size) : -1
                let now = max(size, written?() ?? -1)
                if now >= 0, now != last {
                    last = now
                    report(last)
                }
            }
            while !state.stopped.withLock({ $0 }) {
                look()
                Thread.sleep(forTimeInterval: interval.timeInterval)
            }
            // The size the work ended with is always reported.
            look()
            state.finished.signal()
        }
        thread.name = "granary-copy-watcher"
        thread.start()
    }

    /// Stops reporting; returns once the last report (the file's size now) is made.
    func stop() {
        guard
            !state.stopped.withLock({ value -> Bool in
                defer { value = true }
                return value
            })
        else { return }
        state.finished.wait()
    }

    deinit { stop() }
}
