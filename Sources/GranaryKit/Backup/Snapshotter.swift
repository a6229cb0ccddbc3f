import CSQLite
import CSnapshotTee
import Foundation

/// Copies one live store into a self-contained database file with SQLite's online backup API.
///
/// The locking policy, by journal mode (<https://www.sqlite.org/backup.html>):
/// - **WAL**: one `sqlite3_backup_step(-1)`. It reads a single point-in-time snapshot,
///   including transactions that are still only in the `-wal`, and never blocks writers
///   (readers and writers do not exclude each other in WAL mode).
/// - **rollback journal**: a read lock blocks writers, so the copy goes `pagesPerStep`
///   pages at a time with `pause` between steps, releasing the lock. When another
///   connection writes between steps, SQLite restarts the copy from page 1. After
///   `maxRestarts` restarts granary stops being polite and copies everything in one
///   `step(-1)` under one read lock: writers then wait for the length of one copy
///   (their busy timeout absorbs it), and the backup always finishes.
///
/// The live store is opened read-only, beneath its folder (``Folder``): SQLite reaches the
/// database, `-wal` and `-shm` only as regular files with one link owned by the folder's owner,
/// with the owner's permissions, so a `-shm` that opening creates belongs to the owner. A
/// read-only connection never checkpoints; the checkpoint on close is turned off all the same.
public struct Snapshotter: Sendable {
    /// Pages copied per step in rollback mode.
    public var pagesPerStep: Int32 = 1024
    /// Sleep between rollback-mode steps, so writers get the lock.
    public var pause: Duration = .milliseconds(2)
    /// Restarts allowed before the one-step fallback.
    public var maxRestarts = 8
    /// How long a step waits for a writer's lock.
    public var busyTimeout: Duration = .seconds(10)
    /// Tests: runs after a discarded copy's read transaction began and before the check's
    /// connection begins its own (``DiscardedCopy``).
    var beforeChecker: (@Sendable () -> Void)?

    /// A snapshotter with the default policy.
    public init() {}

    /// What a snapshot found out about the live store.
    public struct Result: Sendable {
        /// The live store's journal mode.
        public var journalMode: String
        /// How many times the copy restarted (rollback mode only).
        public var restarts: Int
        /// Whether the copy was discarded (``NoCopy``): no snapshot file was written.
        var discarded = false
        /// Why the check of a discarded copy ran after it (nil: beside it, on a connection of its own).
        var checkedAfter: String?
        var checkedBeside: Bool { discarded && checkedAfter == nil }
    }

    /// `backup --delta` of a WAL store (issue 35): the copy is made without its file
    /// (``DeltaAttempt/NoCopy``, ``DiscardedCopy``; the delta layer's).
    typealias NoCopy = DeltaAttempt.NoCopy

    /// Snapshots `store` into a new file at `destination` (which must not exist).
    public func snapshot(_ store: StoreFile, to destination: String) throws -> Result {
        try snapshot(store, to: destination, track: nil)
    }

    /// The same, publishing in `track` how far the copy is final (the fast path, FastPath/).
    ///
    /// Every copy is written through the `granary-tee` VFS, which gathers its page writes. With
    /// `track`, it also publishes in it how far the file is final (`OverlappedPack` compresses
    /// behind it). Only a WAL store's single-step copy writes in order; for a rollback-journal
    /// store, whose stepwise copy restarts, the track is marked broken at once and the follower
    /// gives up.
    func snapshot(
        _ store: StoreFile, to destination: String, track: SnapshotTrack?, limits: ContentLimits = .defaults,
        pages: PageRecorder? = nil, noCopy: NoCopy? = nil, charge: ((Int64) throws -> Void)? = nil
    ) throws -> Result {
        // A WAL store whose copy may be discarded is read through the tee (read-ahead in the
        // copy's read transaction, ``DiscardedCopy``); its writes and locks pass through.
        let throughTee = noCopy != nil && store.header.isWAL && granary_tee_register() == SQLITE_OK
        let source = try Database(
            try store.sqliteName(), mode: .readOnly, busyTimeout: busyTimeout, limits: limits,
            account: noCopy?.account, vfs: throughTee ? "granary-tee" : nil)
        try? source.keepWALOnClose()
        // Pages in place from the tee's read-ahead blocks, not copied out of them (job 7: the tee
        // never maps the user's file; outside the read-ahead every page is read as before).
        if throughTee { try? source.execute(Self.pagesInPlace) }
        let journalMode = try source.journalMode()
        if let noCopy, let pages, journalMode == "wal", granary_tee_register() == SQLITE_OK {
            // The check's own connection, opened as the copy's is (``DiscardedCopy``: beside the copy).
            let checker: (() throws -> Database)? =
                throughTee
                ? { [busyTimeout] in
                    let db = try Database(
                        try store.sqliteName(), mode: .readOnly, busyTimeout: busyTimeout, limits: limits,
                        account: noCopy.account, vfs: "granary-tee")
                    try? db.keepWALOnClose()
                    try? db.execute(Self.pagesInPlace)
                    return db
                } : nil
            let copy = DiscardedCopy(
                source: source, destination: destination, recorder: pages, noCopy: noCopy, readAhead: throughTee,
                openChecker: checker, busyTimeout: busyTimeout, beforeChecker: beforeChecker, charge: charge)
            var result = Result(journalMode: "wal", restarts: 0)
            result.discarded = true
            result.checkedAfter = try copy.run().checkedAfter
            return result
        }
        // Every snapshot is written through the tee when it can be: its writes reach the file 64 KiB
        // at a time instead of one system call per page (docs/performance.md, "Fewer system calls").
        let registered = granary_tee_register() == SQLITE_OK
        if let track, !registered || journalMode != "wal" { track.markBroken() }
        let copy = try Database(
            path: destination, mode: .create, vfs: registered ? "granary-tee" : nil, limits: limits)
        if registered {
            var pageSize = Int64(try source.pageSize())
            // `backup --delta` (issue 35): the page hashes as the copy is written.
            if let pages {
                pages.pageSize = Int(pageSize)
                pages.attached =
                    sqlite3_file_control(copy.handle, "main", SNAPSHOT_TEE_FCNTL_HOOK, pages.hook) == SQLITE_OK
            }
            if let track, !track.isBroken {
                track.pageSize = pageSize
                if sqlite3_file_control(copy.handle, "main", SNAPSHOT_TEE_FCNTL_TRACK, track.raw) != SQLITE_OK {
                    track.markBroken()
                }
            } else {
                // Only a hint: without it the writes go one page at a time.
                _ = sqlite3_file_control(copy.handle, "main", SNAPSHOT_TEE_FCNTL_COMBINE, &pageSize)
            }
        }
        // The snapshot is a scratch file: the archive made from it is what gets fsynced. With
        // SQLite's defaults the backup's commit would fsync the whole copy (a second write-back
        // of the store) and keep a rollback journal beside it.
        try copy.execute("PRAGMA synchronous=OFF; PRAGMA journal_mode=OFF; PRAGMA locking_mode=EXCLUSIVE")
        let backup = try SQLiteBackup(from: source, to: copy)
        var restarts = 0
        if journalMode == "wal" {
            try stepCharged(backup, source: source, charge: charge)
        } else {
            var lastRemaining = Int.max
            var politeDone = false
            let pageSize = Int64(try source.pageSize())
            while !politeDone && restarts <= maxRestarts {
                try Interruption.check()
                switch try backup.step(pages: pagesPerStep) {
                case .done: politeDone = true
                case .busy: Thread.sleep(forTimeInterval: 0.01)
                case .more:
                    // The store's owner may lengthen it between two steps: what the copy will
                    // hold is charged again after each, so it stops within a step of the cap.
                    try charge?(Int64(backup.pageCount) * pageSize)
                    // SQLite restarts silently; a growing remaining count is how a restart shows.
                    let remaining = backup.remaining
                    if remaining > lastRemaining { restarts += 1 }
                    lastRemaining = remaining
                    Thread.sleep(forTimeInterval: pause.timeInterval)
                }
            }
            if !politeDone { try stepCharged(backup, source: source, charge: charge) }
        }
        try backup.finish()
        if registered {
            // The last gathered writes reach the file here, where a full disk can still be reported.
            let rc = sqlite3_file_control(copy.handle, "main", SNAPSHOT_TEE_FCNTL_FLUSH, nil)
            if rc != SQLITE_OK {
                throw SQLiteError(
                    code: rc, message: String(cString: sqlite3_errstr(rc)), path: destination, operation: "write")
            }
        }
        return Result(journalMode: journalMode, restarts: restarts)
    }

    /// Lets SQLite take pages in place (xFetch) from a connection through the tee, whose
    /// live read-ahead then hands out pages of its blocks. The size only switches fetching on
    /// (the tee keeps it and maps nothing); a SQLite built without memory mapping ignores it, and
    /// every page is read as before.
    static let pagesInPlace = "PRAGMA mmap_size=\(Int64(1) << 40)"

    /// Copies the rest in the source's own read transaction, charging first the size SQLite will
    /// write (`charge`, which throws to refuse it).
    ///
    /// What SQLite copies is the page count its read transaction sees, and a user decides that
    /// count without the blocks to back it: a commit frame of a hand-written `-wal` says "the
    /// database is now 262,144 pages long" (<https://www.sqlite.org/fileformat2.html#walformat>,
    /// the frame header's "size of database after commit"), and every page it does not hold reads
    /// as zeros, 1 GiB of them written into the repository's scratch folder from a 4 KiB file.
    /// Neither the database file's length nor its header tells; only `PRAGMA page_count` inside
    /// the transaction the copy reads does (the backup API uses a read transaction the source
    /// already has, <https://www.sqlite.org/c3ref/backup_finish.html>). The copy then goes in
    /// pieces of `pagesPerStep`, checking ``Interruption`` between them.
    private func stepCharged(_ backup: SQLiteBackup, source: Database, charge: ((Int64) throws -> Void)?) throws {
        guard let charge else { return try stepToEnd(backup) }
        try source.execute("BEGIN")
        // Whatever fails ends the read transaction: its lock on the live store would hold up
        // the owner's writes (and, in WAL mode, its checkpoints).
        defer { try? source.execute("ROLLBACK") }
        // (Reading the page count starts the read transaction.)
        let pages = try source.pageCount()
        try charge(Int64(pages) * Int64(try source.pageSize()))
        let deadline = ContinuousClock.now + busyTimeout
        while true {
            try Interruption.check()
            switch try backup.step(pages: max(pagesPerStep, 4096)) {
            case .done: return
            case .more:
                // Inside one read transaction the count cannot change; checked all the same, as
                // the copy must never pass what was charged.
                guard backup.pageCount <= pages else {
                    throw SQLiteError(
                        code: SQLITE_CORRUPT, message: "the page count changed inside a read transaction",
                        path: nil, operation: "backup_step")
                }
            case .busy:
                if ContinuousClock.now > deadline {
                    throw SQLiteError(
                        code: SQLITE_BUSY, message: "database is locked", path: nil, operation: "backup_step")
                }
                Thread.sleep(forTimeInterval: 0.01)
            }
        }
    }

    private func stepToEnd(_ backup: SQLiteBackup) throws {
        try backup.stepToEnd(busyTimeout: busyTimeout)
    }
}
