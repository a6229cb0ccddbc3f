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
    static func restore(staged: String, into folder: Folder, _ file: String, aside: String, busyTimeout: Duration)
        throws
    {
        let liveDB = try Database(try folder.sqliteName(file), mode: .readWrite, busyTimeout: busyTimeout)
        let source = try Database(path: staged, mode: .readWrite)
        let livePageSize = try liveDB.pageSize()
        if try liveDB.journalMode() == "wal", try source.pageSize() != livePageSize {
            try source.execute("PRAGMA journal_mode=DELETE")
            try source.execute("PRAGMA page_size=\(livePageSize)")
            try source.execute("VACUUM")
        }
        let keepAside = {
            // A recovery that runs the copy again keeps the first snapshot: it is the content the
            // restore replaced.
            guard !FileSystem.isRegularFile(aside) else { return }
            try FileSystem.makeDirectory((aside as NSString).deletingLastPathComponent)
            let temporary = aside + ".partial"
            try FileSystem.removeFile(temporary)
            let reader = try Database(try folder.sqliteName(file), mode: .readOnly, busyTimeout: busyTimeout)
            try copy(from: reader, to: Database(path: temporary, mode: .create), busyTimeout: busyTimeout)
            try FileSystem.rename(temporary, to: aside)
        }
        let deadline = ContinuousClock.now + busyTimeout
        let backup = try SQLiteBackup(from: source, to: liveDB)
        // A one-page database is copied whole by the first step: its snapshot is taken before.
        if try source.pageCount() <= 1 { try keepAside() }
        var result = try backup.step(pages: 1)
        while result == .busy {
            if ContinuousClock.now >= deadline {
                throw RestoreError.storeBusy(store: liveDB.path, detail: "it stayed locked for \(busyTimeout)")
            }
            try Interruption.check()
            Thread.sleep(forTimeInterval: 0.02)
            result = try backup.step(pages: 1)
        }
        // The live store's write lock is held from here until the copy is done.
        try keepAside()
        while result != .done {
            if ContinuousClock.now >= deadline {
                throw RestoreError.storeBusy(store: liveDB.path, detail: "it stayed locked for \(busyTimeout)")
            }
            result = try backup.step(pages: -1)
            if result == .busy {
                try Interruption.check()
                Thread.sleep(forTimeInterval: 0.02)
            }
        }
        try backup.finish()
    }

    /// Copies the kept-aside old content back into the live store (rolling back an online copy
    /// made before a restore's commit point).
    static func putBack(aside: String, into folder: Folder, _ file: String, busyTimeout: Duration) throws {
        let liveDB = try Database(try folder.sqliteName(file), mode: .readWrite, busyTimeout: busyTimeout)
        try copy(from: Database(path: aside, mode: .readOnly), to: liveDB, busyTimeout: busyTimeout)
    }

    /// One backup, all pages in one step (so it cannot be restarted by a writer on the source),
    /// retrying while the other side is locked, up to `busyTimeout`.
    static func copy(from source: Database, to destination: Database, busyTimeout: Duration) throws {
        let deadline = ContinuousClock.now + busyTimeout
        let backup = try SQLiteBackup(from: source, to: destination)
        while try backup.step(pages: -1) != .done {
            if ContinuousClock.now >= deadline {
                throw RestoreError.storeBusy(store: destination.path, detail: "it stayed locked for \(busyTimeout)")
            }
            try Interruption.check()
            Thread.sleep(forTimeInterval: 0.02)
        }
        try backup.finish()
    }
}
