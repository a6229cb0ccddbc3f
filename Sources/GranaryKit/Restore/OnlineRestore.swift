import Foundation

/// Writes restored content into a live database through the SQLite backup API, under SQLite's
/// own locking, for stores whose owner does not speak the reopen protocol. Other connections
/// see the new content at their next transaction (the backup bumps the change counter, which
/// makes every connection drop its page cache). See <https://www.sqlite.org/backup.html>.
enum OnlineRestore {
    /// Copies `staged` into the live store `file` of `folder` (opened beneath it), keeping the
    /// content it replaces in `aside` (a backup-API snapshot, written under a temporary name and
    /// renamed, so that an aside file that exists is complete).
    ///
    /// The snapshot and the copy are one step for every other connection: the copy's first page
    /// takes the live store's write lock, which it holds until the copy commits, and the
    /// snapshot is read while it is held. So no write of another process can land between the
    /// content kept aside and the content copied in: each one is either in the safety archive or
    /// made on top of the restored content. When the copy cannot take the lock within
    /// `busyTimeout` it gives up having written nothing (SQLite rolls its transaction back).
    ///
    /// A WAL-mode destination must have the source's page size (the backup fails with
    /// SQLITE_READONLY otherwise, because a WAL database cannot change its page size). When they
    /// differ, the staged copy — ours to change — is rebuilt at the live page size first:
    /// `PRAGMA page_size` only takes effect through `VACUUM`, and `VACUUM` only changes the page
    /// size outside WAL mode, so the staged copy is switched to `journal_mode=DELETE` before.
    /// Every connection works under `limits` (the run's, ``RunContext/limits``).
    static func restore(
        staged: String, into folder: Folder<UserOwned>, _ file: String, aside: String, busyTimeout: Duration,
        limits: ContentLimits
    ) throws {
        let liveDB = try Database(
            try folder.sqliteName(file), mode: .readWrite, busyTimeout: busyTimeout, limits: limits)
        let source = try Database(path: staged, mode: .readWrite, limits: limits)
        let livePageSize = try liveDB.pageSize()
        if try liveDB.journalMode() == "wal", try source.pageSize() != livePageSize {
            try source.execute("PRAGMA journal_mode=DELETE")
            try source.execute("PRAGMA page_size=\(livePageSize)")
            try source.execute("VACUUM")
        }
        if try liveDB.journalMode() == "wal" {
            try copyKeepingAside(
                source: source, into: liveDB, folder: folder, file, aside: aside, busyTimeout: busyTimeout)
        } else {
            try copyKeepingAsideRollback(
                source: source, into: liveDB, folder: folder, file, aside: aside, busyTimeout: busyTimeout)
        }
    }

    /// Snapshots the live store into `aside` (unless a recovery that runs the copy again finds the
    /// first snapshot there: it is the content the restore replaced). `reader` reads it.
    private static func keepAside(_ reader: () throws -> Database, aside: String, busyTimeout: Duration) throws {
        guard !FileSystem.isRegularFile(aside) else { return }
        try FileSystem.makeDirectory(PathText.parent(aside))
        let temporary = aside + ".partial"
        try FileSystem.removeFile(temporary)
        let from = try reader()
        try copy(
            from: from, to: Database(path: temporary, mode: .create, limits: from.budget.limits),
            busyTimeout: busyTimeout)
        try FileSystem.rename(temporary, to: aside)
    }

    /// WAL: the copy's first page takes the live store's write lock, which it holds until the copy
    /// commits; readers are not blocked by it, so the snapshot is read while it is held.
    private static func copyKeepingAside(
        source: Database, into liveDB: Database, folder: Folder<UserOwned>, _ file: String, aside: String,
        busyTimeout: Duration
    ) throws {
        let deadline = ContinuousClock.now + busyTimeout
        let reader = {
            try Database(
                try folder.sqliteName(file), mode: .readOnly, busyTimeout: busyTimeout, limits: liveDB.budget.limits)
        }
        let backup = try SQLiteBackup(from: source, to: liveDB)
        // A one-page database is copied whole by the first step: its snapshot is taken before.
        if try source.pageCount() <= 1 { try keepAside(reader, aside: aside, busyTimeout: busyTimeout) }
        var result = try step(backup, pages: 1, until: deadline, store: liveDB.path, busyTimeout: busyTimeout)
        // The live store's write lock is held from here until the copy is done.
        try keepAside(reader, aside: aside, busyTimeout: busyTimeout)
        while result != .done {
            result = try step(backup, pages: -1, until: deadline, store: liveDB.path, busyTimeout: busyTimeout)
        }
        try backup.finish()
    }

    /// Rollback journal: the copy's lock is exclusive (no reader either), and SQLite lets go of
    /// every lock between the attempts of a backup step, so a writer that commits every few
    /// milliseconds slips in between a snapshot and the copy's lock again and again (a restore
    /// under 200 writes a second gave up one time in six). So the live connection takes the
    /// store's exclusive lock itself first, in `locking_mode=EXCLUSIVE` (it keeps the lock after
    /// its transaction, and while it waits it holds SQLite's pending lock, which lets no new
    /// reader or writer in), for up to `busyTimeout`; then the snapshot is read through it and the
    /// copy written through it, as one bounded step under that one lock. Other connections wait
    /// (their busy timeout) or get SQLITE_BUSY meanwhile; none can commit between the snapshot and
    /// the copy. The lock goes with the connection.
    private static func copyKeepingAsideRollback(
        source: Database, into liveDB: Database, folder: Folder<UserOwned>, _ file: String, aside: String,
        busyTimeout: Duration
    ) throws {
        let deadline = ContinuousClock.now + busyTimeout
        try liveDB.execute("PRAGMA locking_mode=EXCLUSIVE")
        while try !lockExclusively(liveDB) {
            if ContinuousClock.now >= deadline {
                throw RestoreError.storeBusy(store: liveDB.path, detail: Self.lockedTooLong(busyTimeout))
            }
            try Interruption.check()
            Thread.sleep(forTimeInterval: Double.random(in: 0.001...0.005))
        }
        // From here until the connection closes, this process alone reads or writes the store.
        let reader: () throws -> Database = { liveDB }
        try keepAside(reader, aside: aside, busyTimeout: busyTimeout)
        let backup = try SQLiteBackup(from: source, to: liveDB)
        var result = try step(
            backup, pages: -1, until: deadline + busyTimeout, store: liveDB.path, busyTimeout: busyTimeout)
        while result != .done {
            result = try step(
                backup, pages: -1, until: deadline + busyTimeout, store: liveDB.path, busyTimeout: busyTimeout)
        }
        try backup.finish()
    }

    /// Whether `db` (in `locking_mode=EXCLUSIVE`) took the store's exclusive lock, which it then
    /// keeps; false when another connection holds a lock past `db`'s busy timeout.
    private static func lockExclusively(_ db: Database) throws(SQLiteError) -> Bool {
        do {
            try db.execute("BEGIN EXCLUSIVE")
        } catch {
            if error.kind == .busy { return false }
            throw error
        }
        try db.execute("COMMIT")
        return true
    }

    /// One backup step, waiting out a locked store until `deadline`.
    private static func step(
        _ backup: SQLiteBackup, pages: Int32, until deadline: ContinuousClock.Instant, store: String,
        busyTimeout: Duration
    ) throws -> SQLiteBackup.StepResult {
        while true {
            let result = try backup.step(pages: pages)
            if result != .busy { return result }
            if ContinuousClock.now >= deadline {
                throw RestoreError.storeBusy(store: store, detail: Self.lockedTooLong(busyTimeout))
            }
            try Interruption.check()
            // A short, uneven wait: a writer that commits every few milliseconds leaves gaps of a
            // few milliseconds between its transactions, which a 20 ms rhythm kept missing.
            Thread.sleep(forTimeInterval: Double.random(in: 0.001...0.005))
        }
    }

    /// Copies the kept-aside old content back into the live store (rolling back an online copy
    /// made before a restore's commit point).
    static func putBack(
        aside: String, into folder: Folder<UserOwned>, _ file: String, busyTimeout: Duration, limits: ContentLimits
    ) throws {
        let liveDB = try Database(
            try folder.sqliteName(file), mode: .readWrite, busyTimeout: busyTimeout, limits: limits)
        try copy(from: Database(path: aside, mode: .readOnly, limits: limits), to: liveDB, busyTimeout: busyTimeout)
    }

    /// One backup, all pages in one step (so it cannot be restarted by a writer on the source),
    /// retrying while the other side is locked, up to `busyTimeout`.
    static func copy(from source: Database, to destination: Database, busyTimeout: Duration) throws {
        let deadline = ContinuousClock.now + busyTimeout
        let backup = try SQLiteBackup(from: source, to: destination)
        while try backup.step(pages: -1) != .done {
            if ContinuousClock.now >= deadline {
                throw RestoreError.storeBusy(store: destination.path, detail: Self.lockedTooLong(busyTimeout))
            }
            try Interruption.check()
            Thread.sleep(forTimeInterval: Double.random(in: 0.001...0.005))
        }
        try backup.finish()
    }

    /// Why an online copy gave up on a store whose lock it never got.
    static func lockedTooLong(_ busyTimeout: Duration) -> String {
        "it stayed locked for \(busyTimeout): another connection held its write lock whenever the copy tried (an online copy cannot finish under a writer that never pauses; stop the writer, or restore with an owner that speaks the reopen protocol, --method swap)"
    }
}
