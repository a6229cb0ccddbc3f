import CSQLite
import Foundation

/// SQLite's online backup API with a step loop the caller controls.
///
/// `step(pages:)` copies up to `pages` pages (`-1` for all). The sharp edges, from
/// <https://www.sqlite.org/c3ref/backup_finish.html>:
/// - each step takes a read lock on the source for its duration; between steps the
///   lock is released, and if another connection writes to the source in between,
///   the next step restarts the copy from the first page (unless the writer uses the
///   same connection as the backup). In WAL mode a single `step(-1)` reads one
///   consistent snapshot without blocking writers; in rollback mode the same call
///   blocks writers for the whole copy.
/// - `SQLITE_BUSY` and `SQLITE_LOCKED` from a step are temporary: the caller may retry.
/// - the destination's page size must match the source's when the destination is in
///   WAL mode, or the step fails with `SQLITE_READONLY`.
///
/// ```swift
/// let backup = try SQLiteBackup(from: live, to: copy)
/// while try !backup.step(pages: -1) {}
/// try backup.finish()
/// ```
public final class SQLiteBackup {
    private var handle: OpaquePointer?
    private let destination: Database
    private let source: Database

    /// Starts a backup of `source`'s main database into `destination`'s main database.
    public init(from source: Database, to destination: Database) throws(SQLiteError) {
        guard let handle = sqlite3_backup_init(destination.handle, "main", source.handle, "main") else {
            throw destination.lastError(sqlite3_errcode(destination.handle), operation: "backup_init")
        }
        self.handle = handle
        self.source = source
        self.destination = destination
    }

    deinit {
        if let handle { sqlite3_backup_finish(handle) }
    }

    /// The outcome of one step.
    public enum StepResult: Sendable, Equatable {
        /// Every page has been copied.
        case done
        /// More pages remain.
        case more
        /// The source was locked; nothing was copied this time.
        case busy
    }

    /// Copies up to `pages` pages (`-1`: all that remain).
    public func step(pages: Int32) throws(SQLiteError) -> StepResult {
        guard let handle else { return .done }
        SQLiteName.clearRefusal()
        let rc = sqlite3_backup_step(handle, pages)
        switch rc {
        case SQLITE_DONE: return .done
        case SQLITE_OK: return .more
        case SQLITE_BUSY, SQLITE_LOCKED: return .busy
        default:
            // The step's error is left on the destination connection.
            let error = destination.lastError(rc, operation: "backup_step")
            return try rethrowStep(error, rc: rc)
        }
    }

    private func rethrowStep(_ error: SQLiteError, rc: Int32) throws(SQLiteError) -> StepResult {
        // A file of a source beneath a user's folder that granary refused (its -wal, its -shm).
        if let refusal = Database.refusal(near: source.path) {
            throw SQLiteError(
                code: rc, message: String(cString: sqlite3_errstr(rc)), path: source.path, operation: "backup_step",
                refusal: refusal)
        }
        // Report the source path when the failure came from reading it.
        if [SQLITE_CORRUPT, SQLITE_NOTADB, SQLITE_IOERR].contains(rc & SQLiteError.primaryMask) {
            throw SQLiteError(
                code: rc, message: String(cString: sqlite3_errstr(rc)), path: source.path, operation: "backup_step")
        }
        throw error
    }

    /// Pages still to copy after the last step.
    public var remaining: Int { handle.map { Int(sqlite3_backup_remaining($0)) } ?? 0 }

    /// Pages in the source as of the last step.
    public var pageCount: Int { handle.map { Int(sqlite3_backup_pagecount($0)) } ?? 0 }

    /// Releases the backup; reports the error of the last step, if any.
    public func finish() throws(SQLiteError) {
        guard let handle else { return }
        self.handle = nil
        let rc = sqlite3_backup_finish(handle)
        if rc != SQLITE_OK { throw destination.lastError(rc, operation: "backup_finish") }
    }
}

extension SQLiteBackup {
    /// Copies the rest in one step (`-1`), trying again while the source is busy, for up to
    /// `busyTimeout` (then `SQLITE_BUSY`); ``Interruption`` is checked between tries.
    func stepToEnd(busyTimeout: Duration) throws {
        let deadline = ContinuousClock.now + busyTimeout
        while true {
            switch try step(pages: -1) {
            case .done: return
            case .more: continue
            case .busy:
                try Interruption.check()
                if ContinuousClock.now > deadline {
                    throw SQLiteError(
                        code: SQLITE_BUSY, message: "database is locked", path: nil, operation: "backup_step")
                }
                Thread.sleep(forTimeInterval: 0.01)
            }
        }
    }
}
