import CSQLite
import CSnapshotTee
import Foundation
import Synchronization

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
    /// connection begins its own (``discarded``).
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

    /// `backup --delta` of a WAL store (issue 35): the copy is made without its file. The
    /// `granary-tee` VFS hands every page to the recorder and writes only page 1 (SNAPSHOT_TEE_FCNTL_DISCARD);
    /// the recorder keeps the pages that differ from the base. The check (`inTransaction`) runs on
    /// the live store in a read transaction on the state the copy reads: beside the copy on a
    /// second connection, or after it in the copy's own (the backup API reuses a read transaction
    /// that is open on its source); see ``discarded(_:to:recorder:_:readAhead:checker:)``.
    /// A store in another journal mode is copied as before (a real file).
    struct NoCopy {
        /// The base's page size and journal mode of this store: another one needs a full
        /// (``NoCopyFallback``, before anything is copied).
        var pageSize: Int
        var journalMode: String
        /// The base's `.pages` file of this store, and where the change log goes.
        var basePages: String
        var log: String
        /// More changed pages than this gives up (the user's budget left: the backup is a full,
        /// and a full needs a real copy).
        var maxChanged: Int
        /// The user's time across stores, charged with the check (as a snapshot's check is).
        var account: ContentAccount
        /// Runs on a connection to the live store inside a read transaction on the copied state,
        /// on another thread than the copy's when it runs beside it.
        var inTransaction: (Database) throws -> Void
    }

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
        // copy's read transaction, ``discarded(_:to:recorder:_:)``); its writes and locks pass through.
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
            // The check's own connection, opened as the copy's is (``discarded``: beside the copy).
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
            return try discarded(
                source, to: destination, recorder: pages, noCopy, readAhead: throughTee, checker: checker,
                charge: charge)
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

    /// The copy of a WAL store without its file (``NoCopy``), and the check of the state it
    /// copied: beside the copy, on a second connection (`checker` opens it) whose read transaction
    /// reads the same state, or else after the copy in the copy's own read transaction.
    ///
    /// `charge` is given the size SQLite will copy (`PRAGMA page_count` inside the copy's read
    /// transaction, before a page is copied), as a copy with its file is (``stepCharged``): the
    /// changes the recorder keeps, and the full copy that may follow, are what the user's cap
    /// and the scratch folder's room must hold, and a hand-written `-wal` decides that count.
    private func discarded(
        _ source: Database, to destination: String, recorder: PageRecorder, _ noCopy: NoCopy, readAhead: Bool,
        checker openChecker: (() throws -> Database)?, charge: ((Int64) throws -> Void)? = nil
    ) throws -> Result {
        let pageSize = try source.pageSize()
        guard pageSize == noCopy.pageSize, noCopy.journalMode == "wal" else {
            throw NoCopyFallback(reason: "the page size or journal mode is not the base's")
        }
        // The wal-index header before the copy's read transaction begins (the statements above
        // have had SQLite map it): the same bytes once the checker's has begun mean that nothing
        // committed in between, so that both read one state.
        let before = openChecker == nil ? nil : Self.walIndexHeader(source)
        // The read transaction of the copy (the backup API keeps an open one), and of the check
        // when it runs after the copy.
        try source.execute("BEGIN")
        // Whatever fails from here ends the read transaction before the error goes on: the
        // connection is the live store's, and its shared lock would hold up the owner's writes.
        var open = true
        defer { if open { try? source.execute("ROLLBACK") } }
        // (Reading the page count starts the transaction: the journal mode below is then its own.)
        let pages = try source.pageCount()
        // The size this transaction reads, charged before a page is copied.
        try charge?(Int64(pages) * Int64(pageSize))
        // The journal mode read above was read before this transaction: an owner that left WAL
        // mode in between would have the copy hold a shared lock its writes wait for, and the
        // copy recorded as a WAL store's. The mode this transaction reads is the one that counts.
        let mode = try source.journalMode()
        guard mode == "wal" else {
            throw NoCopyFallback(reason: "the store left WAL mode (journal mode \(mode)) as the copy began")
        }
        // The copy and the check read the database file in 64 KiB blocks, not page by page: its
        // bytes that SQLite reads do not change while this read transaction lasts (the tee's job 7).
        var on: Int32 = 1
        let reading =
            readAhead
            && sqlite3_file_control(source.handle, "main", SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &on) == SQLITE_OK
        defer {
            var off: Int32 = 0
            if reading { _ = sqlite3_file_control(source.handle, "main", SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &off) }
        }
        // The check's connection, in a read transaction on the copy's state, or nil (the check
        // then runs after the copy). Closed, its transaction ended, whatever happens below.
        beforeChecker?()
        let opened =
            before.map { Self.checker(on: source, before: $0, open: openChecker) }
            ?? .failure(.init("no wal-index header"))
        let checker = try? opened.get()
        defer { checker?.end() }
        recorder.pageSize = pageSize
        try recorder.startDiscarding(
            base: noCopy.basePages, log: noCopy.log,
            maxChanged: noCopy.maxChanged)
        if let checker {
            // The copy on a thread of its own and the check on this one, at once. The copy's error
            // goes first, and a copy that fails interrupts the check (a copy that gave up makes
            // it moot, and the read transactions would hold up the owner's checkpoints meanwhile).
            let copied = UncheckedSendable { [self] in
                do {
                    try copy(source, to: destination, recorder: recorder, pageSize: pageSize)
                } catch {
                    // Again and again until the check has ended: an interrupt that comes between
                    // two of its statements is lost.
                    while !checker.finished.load(ordering: .acquiring) {
                        sqlite3_interrupt(checker.db.handle)
                        usleep(10_000)
                    }
                    throw error
                }
            }
            let copying = Pending { try copied.value() }
            let checked = Swift.Result { try checker.check(noCopy.inTransaction) }
            checker.finished.store(true, ordering: .releasing)
            try copying.wait()
            try checked.get()
        } else {
            try copy(source, to: destination, recorder: recorder, pageSize: pageSize)
            try noCopy.inTransaction(source)
            // A check that failed inside SQLite (its memory ceiling, an I/O error) may have ended the
            // transaction and still reported nothing: then the check did not read what the copy read.
            guard sqlite3_get_autocommit(source.handle) == 0 else {
                throw NoCopyFallback(reason: "the check's read transaction ended before the check did")
            }
        }
        if reading {
            var off: Int32 = 0
            _ = sqlite3_file_control(source.handle, "main", SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &off)
        }
        open = false
        try source.execute("COMMIT")
        var result = Result(journalMode: "wal", restarts: 0)
        result.discarded = true
        if case .failure(let why) = opened { result.checkedAfter = why.reason }
        return result
    }

    /// The copy itself: SQLite's backup into a file that keeps only page 1, every page handed to
    /// the recorder. Only page 1 is in the file afterwards: it is removed.
    private func copy(_ source: Database, to destination: String, recorder: PageRecorder, pageSize: Int) throws {
        defer { unlink(destination) }
        do {
            let copy = try Database(path: destination, mode: .create, vfs: "granary-tee", limits: source.budget.limits)
            var size = Int64(pageSize)
            guard sqlite3_file_control(copy.handle, "main", SNAPSHOT_TEE_FCNTL_HOOK, recorder.hook) == SQLITE_OK,
                sqlite3_file_control(copy.handle, "main", SNAPSHOT_TEE_FCNTL_DISCARD, &size) == SQLITE_OK
            else { throw NoCopyFallback(reason: "the tee VFS did not take the copy") }
            recorder.attached = true
            try copy.execute("PRAGMA synchronous=OFF; PRAGMA journal_mode=OFF; PRAGMA locking_mode=EXCLUSIVE")
            do {
                let backup = try SQLiteBackup(from: source, to: copy)
                try stepToEnd(backup)
                try backup.finish()
            } catch let error as SQLiteError {
                // A page SQLite read back that the file does not hold, or a copy the recorder
                // stopped: the copy is made again for real; anything else is the copy's failure.
                var reads: Int64 = 0
                _ = sqlite3_file_control(copy.handle, "main", SNAPSHOT_TEE_FCNTL_DISCARDED_READS, &reads)
                if reads > 0 { throw NoCopyFallback(reason: "SQLite read back a page of the copy (\(error))") }
                if recorder.stopped { throw NoCopyFallback(reason: "the recorder stopped the copy") }
                throw error
            }
        }
    }

    /// Lets SQLite take pages in place (xFetch) from a connection through the tee, whose
    /// live read-ahead then hands out pages of its blocks. The size only switches fetching on
    /// (the tee keeps it and maps nothing); a SQLite built without memory mapping ignores it, and
    /// every page is read as before.
    static let pagesInPlace = "PRAGMA mmap_size=\(Int64(1) << 40)"

    /// The wal-index header of `db`'s store now (both copies, equal), or nil.
    private static func walIndexHeader(_ db: Database) -> [UInt8]? {
        var header = [UInt8](repeating: 0, count: 96)
        let rc = header.withUnsafeMutableBytes {
            sqlite3_file_control(db.handle, "main", SNAPSHOT_TEE_FCNTL_WAL_INDEX_HEADER, $0.baseAddress)
        }
        guard rc == SQLITE_OK, header[0..<48] == header[48..<96] else { return nil }
        return header
    }

    /// A second connection to the store of `source`, in a read transaction on the state the
    /// source's (begun after `before` was read) reads, its read-ahead on; or why there is none
    /// (the check then runs after the copy, in the copy's transaction).
    private static func checker(
        on source: Database, before: [UInt8], open: (() throws -> Database)?
    ) -> Swift.Result<Checker, CheckAfter> {
        guard let open, let db = try? open() else { return .failure(.init("no second connection")) }
        // It opened the store by name again, before reading anything (nothing of the -shm is
        // mapped for it yet): the name must lead to the copy's file, then to the checker's. A
        // store replaced by a rename in between (a program migrating it) fails one of the two;
        // only an owner renaming back and forth within that moment gets past both (its own
        // backup then records the check of another file: docs/security.md, "What is left").
        guard !hasMoved(source), !hasMoved(db) else { return .failure(.init("the store was replaced")) }
        guard (try? db.execute("BEGIN")) != nil else { return .failure(.init("no read transaction")) }
        let checker = Checker(db)
        // Reading the page count begins the read transaction; only then is the header read again.
        let pages = try? db.pageCount()
        let after = walIndexHeader(source)
        let why: String? = {
            guard pages != nil else { return "no read transaction" }
            guard after == before else { return "a commit between the two read transactions" }
            guard (try? db.journalMode()) == "wal" else { return "not in WAL mode" }
            guard pages == (try? source.pageCount()) else { return "another page count" }
            return nil
        }()
        if let why {
            checker.end()
            return .failure(.init(why))
        }
        checker.readAhead()
        return .success(checker)
    }

    /// Why a check runs after its copy rather than beside it.
    struct CheckAfter: Error, Equatable {
        let reason: String
        init(_ reason: String) { self.reason = reason }
    }

    /// Whether the name `db` opened its store by leads to another file now
    /// (`SQLITE_FCNTL_HAS_MOVED`: SQLite stats the name, beneath the user's folder like its every
    /// file access); true when SQLite cannot tell.
    private static func hasMoved(_ db: Database) -> Bool {
        var moved: Int32 = 1
        return sqlite3_file_control(db.handle, "main", SQLITE_FCNTL_HAS_MOVED, &moved) != SQLITE_OK || moved != 0
    }

    /// The check's connection and its read transaction (``discarded``).
    private final class Checker {
        let db: Database
        /// Set once the check has returned (the copy's thread interrupts it until then when the copy fails).
        let finished = Atomic<Bool>(false)
        private var open = true
        private var reading = false

        init(_ db: Database) { self.db = db }

        func readAhead() {
            var on: Int32 = 1
            reading =
                sqlite3_file_control(db.handle, "main", SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &on) == SQLITE_OK
        }

        /// Runs `body` in the read transaction; throws ``NoCopyFallback`` when it ended before
        /// `body` did (a failure inside SQLite that reported nothing).
        func check(_ body: (Database) throws -> Void) throws {
            try body(db)
            guard sqlite3_get_autocommit(db.handle) == 0 else {
                throw NoCopyFallback(reason: "the check's read transaction ended before the check did")
            }
        }

        /// Ends the read transaction (its read-ahead first). Once only.
        func end() {
            guard open else { return }
            open = false
            if reading {
                var off: Int32 = 0
                _ = sqlite3_file_control(db.handle, "main", SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &off)
            }
            try? db.execute("ROLLBACK")
        }
    }

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
        let deadline = ContinuousClock.now + busyTimeout
        while true {
            switch try backup.step(pages: -1) {
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
