import Foundation

/// Writes restored content into a live database through the SQLite backup API, under SQLite's
/// own locking, for stores whose owner does not speak the reopen protocol. Other connections
/// see the new content at their next transaction (the backup bumps the change counter, which
/// makes every connection drop its page cache). See <https://www.sqlite.org/backup.html>.
enum OnlineRestore {
    /// Keeps the live content in `aside` (a backup-API snapshot, written under a temporary name
    /// and renamed, so that an aside file that exists is complete) unless it is there already,
    /// then copies `staged` into the live store `file` of `folder` (opened beneath it).
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
        if !FileSystem.isRegularFile(aside) {
            try FileSystem.makeDirectory(PathText.parent(aside))
            let temporary = aside + ".partial"
            try FileSystem.removeFile(temporary)
            try copy(from: liveDB, to: Database(path: temporary, mode: .create), busyTimeout: busyTimeout)
            try FileSystem.rename(temporary, to: aside)
        }
        let source = try Database(path: staged, mode: .readWrite)
        let livePageSize = try liveDB.pageSize()
        if try liveDB.journalMode() == "wal", try source.pageSize() != livePageSize {
            try source.execute("PRAGMA journal_mode=DELETE")
            try source.execute("PRAGMA page_size=\(livePageSize)")
            try source.execute("VACUUM")
        }
        try copy(from: source, to: liveDB, busyTimeout: busyTimeout)
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
