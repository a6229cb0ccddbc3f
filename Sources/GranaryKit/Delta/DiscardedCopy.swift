import CSQLite
import CSnapshotTee
import Foundation
import Synchronization

/// The copy of a WAL store for `backup --delta` without its file (issue 35): SQLite's backup API
/// writes through the `granary-tee` VFS in its discarding mode, the ``PageRecorder`` keeps the
/// pages that differ from the base, and the check runs on the live store in a read transaction on
/// the state the copy reads. Its settings are ``DeltaAttempt/NoCopy``; the snapshotter opens the
/// live store and hands it over (`Snapshotter.snapshot(_:to:track:limits:pages:noCopy:charge:)`).
/// Anything that makes a delta without a snapshot file impossible throws ``NoCopyFallback``: the
/// stores are copied again with files (``DeltaAttempt/run(in:snapshot:)``).
struct DiscardedCopy {
    /// The live store's read-only connection (through the tee when `readAhead`).
    let source: Database
    /// The copy's file, which keeps only page 1 and is removed afterwards.
    let destination: String
    let recorder: PageRecorder
    let noCopy: DeltaAttempt.NoCopy
    /// Whether the copy's connection reads the live store in the tee's 64 KiB blocks.
    let readAhead: Bool
    /// Opens the check's own connection (as the copy's is), or nil: the check runs after the copy.
    let openChecker: (() throws -> Database)?
    /// How long a step waits for a writer's lock.
    let busyTimeout: Duration
    /// Tests: runs after the copy's read transaction began and before the check's connection
    /// begins its own, or before phase 2 opens the store's files (``LivePages``), once.
    let beforeChecker: (@Sendable () -> Void)?
    /// Given the size SQLite will copy, before a page is copied (throws to refuse it).
    let charge: ((Int64) throws -> Void)?

    /// What the copy found out besides its pages.
    struct Outcome {
        /// Why the check ran after the copy rather than beside it (nil: beside it, on a
        /// connection of its own).
        var checkedAfter: String?
    }

    /// The copy of a WAL store without its file (``DeltaAttempt/NoCopy``), and the check of the state it
    /// copied: beside the copy, on a second connection (`checker` opens it) whose read transaction
    /// reads the same state, or else after the copy in the copy's own read transaction.
    ///
    /// `charge` is given the size SQLite will copy (`PRAGMA page_count` inside the copy's read
    /// transaction, before a page is copied), as a copy with its file is (`Snapshotter`): the
    /// changes the recorder keeps, and the full copy that may follow, are what the user's cap
    /// and the scratch folder's room must hold, and a hand-written `-wal` decides that count.
    func run() throws -> Outcome {
        let pageSize = try source.pageSize()
        // Invariant D4 (docs/delta-invariants.md)
        guard pageSize == noCopy.pageSize, noCopy.journalMode == "wal" else {
            throw NoCopyFallback(reason: "the page size or journal mode is not the base's")
        }
        // The wal-index header before the copy's read transaction begins (the statements above
        // have had SQLite map it): the same bytes once the checker's has begun mean that nothing
        // committed in between, so that both read one state.
        let header = openChecker == nil && noCopy.followed == nil ? nil : Self.walIndexHeader(source)
        let before = openChecker == nil ? nil : header
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
        // Invariant D5 (docs/delta-invariants.md)
        try charge?(Int64(pages) * Int64(pageSize))
        // The journal mode read above was read before this transaction: an owner that left WAL
        // mode in between would have the copy hold a shared lock its writes wait for, and the
        // copy recorded as a WAL store's. The mode this transaction reads is the one that counts.
        let mode = try source.journalMode()
        guard mode == "wal" else {
            throw NoCopyFallback(reason: "the store left WAL mode (journal mode \(mode)) as the copy began")
        }
        // Phase 2: the pages follow saw change (its segments, and the live -wal from its last
        // cursor read now, inside this read transaction), or why every page is hashed.
        // Invariant D13 (docs/delta-invariants.md)
        var live: LivePages?
        var hooked = false
        if let followed = noCopy.followed {
            switch followed.candidates(pageCount: Int(pages), pageSize: pageSize) {
            case .success(let candidates):
                recorder.candidates = candidates
                recorder.followed = .success(candidates.count(upTo: Int(pages)))
                // The candidates alone are read, from the state this transaction reads (the same
                // wal-index header before it began and now: nothing committed in between), or the
                // copy goes through SQLite's backup API as before and says why.
                // Invariant D14 (docs/delta-invariants.md)
                beforeChecker?()
                hooked = true
                switch Self.livePages(
                    source, store: followed.store, before: header, pageSize: pageSize, pageCount: Int(pages),
                    wanted: candidates.crossCheck ? { _ in true } : candidates.contains)
                {
                case .success(let pages): live = pages
                case .failure(let why): recorder.pagesRead = .failure(.init(why.reason))
                }
            case .failure(let why): recorder.followed = .failure(why)
            }
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
        // The check in this read transaction. A check that failed inside SQLite (its memory
        // ceiling, an I/O error) may have ended the transaction and still reported nothing: then
        // the check did not read what the copy read.
        func checkInTransaction() throws {
            try noCopy.inTransaction(source)
            guard sqlite3_get_autocommit(source.handle) == 0 else {
                throw NoCopyFallback(reason: "the check's read transaction ended before the check did")
            }
        }
        // Ends the read transaction: the read-ahead off first (its blocks hold only while the
        // transaction lasts).
        func commit() throws {
            if reading {
                var off: Int32 = 0
                _ = sqlite3_file_control(source.handle, "main", SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &off)
            }
            open = false
            try source.execute("COMMIT")
        }
        if let live, let candidates = recorder.candidates {
            // Phase 2's copy: the candidates read alone, then the check in this transaction: the
            // pages read, each parsed (``PageCheck``), when the policy allows it, else the
            // configured one.
            // Invariant D15 (docs/delta-invariants.md)
            recorder.pageSize = pageSize
            try recorder.startDiscarding(base: noCopy.basePages, log: noCopy.log, maxChanged: noCopy.maxChanged)
            var pageCheck: PageCheck?
            switch noCopy.pagesCheck {
            case .success? where noCopy.checkedByPages != nil:
                switch Self.pageCheck(live) {
                case .success(let check): pageCheck = check
                case .failure(let why): recorder.pagesChecked = .failure(why)
                }
            case .failure(let why)?: recorder.pagesChecked = .failure(why)
            case .success?, nil: break
            }
            recorder.pagesRead = .success(try readPages(live, candidates: candidates, check: &pageCheck))
            if let problem = pageCheck?.problem {
                // A page that does not parse may be one no b-tree uses (a page past the end of a
                // store VACUUM shrank, allocated and freed in one transaction, is never written):
                // the configured check, on every page in use, decides; it refuses a damaged page
                // in use with its own words.
                recorder.pagesChecked = .failure(.init("\(problem); the configured check decides"))
                pageCheck = nil
            }
            if let pageCheck, case .success(let run)? = noCopy.pagesCheck, let checkedByPages = noCopy.checkedByPages {
                try checkedByPages(source, DeltaAttempt.PagesChecked(problem: pageCheck.problem))
                guard sqlite3_get_autocommit(source.handle) == 0 else {
                    throw NoCopyFallback(reason: "the read transaction ended before the check did")
                }
                recorder.pagesChecked = .success(run)
            } else {
                try checkInTransaction()
            }
            try commit()
            return Outcome(checkedAfter: "phase 2 read only the pages follow saw change")
        }
        // The configured check runs on every page read below; why the pages' own did not.
        switch noCopy.pagesCheck {
        case .failure(let why)?: recorder.pagesChecked = .failure(why)
        case .success?: recorder.pagesChecked = .failure(.init("every page was read (phase 2's copy did not run)"))
        case nil: break
        }
        // The check's connection, in a read transaction on the copy's state, or nil (the check
        // then runs after the copy). Closed, its transaction ended, whatever happens below.
        if !hooked { beforeChecker?() }
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
                    try copy(pageSize: pageSize)
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
            try copy(pageSize: pageSize)
            try checkInTransaction()
        }
        try commit()
        var outcome = Outcome()
        if case .failure(let why) = opened { outcome.checkedAfter = why.reason }
        return outcome
    }

    /// The copy itself: SQLite's backup into a file that keeps only page 1, every page handed to
    /// the recorder. Only page 1 is in the file afterwards: it is removed.
    private func copy(pageSize: Int) throws {
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
                try backup.stepToEnd(busyTimeout: busyTimeout)
                try backup.finish()
            } catch let error as SQLiteError {
                // A page SQLite read back that the file does not hold, or a copy the recorder
                // stopped: the copy is made again for real; anything else is the copy's failure.
                var reads: Int64 = 0
                _ = sqlite3_file_control(copy.handle, "main", SNAPSHOT_TEE_FCNTL_DISCARDED_READS, &reads)
                // Invariant D4 (docs/delta-invariants.md)
                if reads > 0 { throw NoCopyFallback(reason: "SQLite read back a page of the copy (\(error))") }
                if recorder.stopped { throw NoCopyFallback(reason: "the recorder stopped the copy") }
                throw error
            }
        }
    }

    /// Phase 2 (issue 51): the pages of `store` in the state `source`'s read transaction reads,
    /// when the wal-index header `before` (read before the transaction began) is still the header
    /// now: nothing committed in between, so that header's state is the transaction's.
    /// Invariant D14 (docs/delta-invariants.md)
    private static func livePages(
        _ source: Database, store: StoreFile, before: [UInt8]?, pageSize: Int, pageCount: Int,
        wanted: (Int) -> Bool
    ) -> Swift.Result<LivePages, LivePages.Unusable> {
        guard let before else { return .failure(.init("no wal-index header")) }
        guard walIndexHeader(source) == before else {
            return .failure(.init("a commit as the read transaction began"))
        }
        guard !hasMoved(source) else { return .failure(.init("the store was replaced")) }
        return Swift.Result { () throws(LivePages.Unusable) in
            try LivePages(store: store, header: before, pageSize: pageSize, pageCount: pageCount, wanted: wanted)
        }
    }

    /// Phase 2's copy without SQLite's backup API: the pages are handed to the recorder's hook as
    /// the tee hands it the copy's writes, in the backup's order (pages 2 on, the lock-byte page
    /// never, page 1 last, as the copy's page 1 is: ``LivePages/backupPageOne(_:pageCount:libraryVersion:)``).
    /// A candidate is read (``LivePages``); a run of other pages is handed on unread (its bytes are
    /// not looked at: each takes its base's hash), except for the cross-check, which reads every
    /// page. Returns the pages read.
    /// Invariant D14 (docs/delta-invariants.md)
    private func readPages(_ live: LivePages, candidates: PageRecorder.Candidates, check: inout PageCheck?) throws
        -> Int
    {
        let pageSize = live.pageSize, pageCount = live.pageCount
        guard pageCount > 0 else { throw NoCopyFallback(reason: "the store has no page") }
        recorder.attached = true
        let hook = recorder.hook.pointee
        let run = 64
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: run * pageSize, alignment: 16)
        defer { buffer.deallocate() }
        buffer.initializeMemory(as: UInt8.self, repeating: 0)
        let lockPage = 0x4000_0000 / pageSize
        let readAll = candidates.crossCheck
        var read = 0
        func hand(_ count: Int, from first: Int) throws {
            hook.write?(hook.context, buffer.baseAddress, Int32(count * pageSize), Int64(first) * Int64(pageSize))
            if recorder.stopped { throw NoCopyFallback(reason: "the recorder stopped the copy") }
        }
        func readPage(_ page: Int, at slot: Int) throws {
            do {
                try live.read(
                    page: page,
                    into: UnsafeMutableRawBufferPointer(rebasing: buffer[slot * pageSize..<(slot + 1) * pageSize]))
            } catch {
                throw NoCopyFallback(reason: error.reason)
            }
            read += 1
        }
        var page = 1
        while page < pageCount {
            try Interruption.check()
            if page == lockPage {
                page += 1
                continue
            }
            let wanted = readAll || candidates.contains(page)
            var count = 0
            while count < run && page + count < pageCount && page + count != lockPage
                && (readAll || candidates.contains(page + count)) == wanted
            {
                if wanted {
                    try readPage(page + count, at: count)
                    // The check sees the candidates alone, in debug builds as in release ones.
                    if check != nil && candidates.contains(page + count) {
                        check?.check(
                            page: page + count,
                            UnsafeRawBufferPointer(rebasing: buffer[count * pageSize..<(count + 1) * pageSize]))
                    }
                }
                count += 1
            }
            try hand(count, from: page)
            page += count
        }
        try readPage(0, at: 0)
        check?.check(page: 0, UnsafeRawBufferPointer(rebasing: buffer[0..<pageSize]))
        LivePages.backupPageOne(
            UnsafeMutableRawBufferPointer(rebasing: buffer[0..<pageSize]), pageCount: pageCount,
            libraryVersion: sqlite3_libversion_number())
        try hand(1, from: 0)
        return read
    }

    /// The proportional check of the pages `live` reads (``PageCheck``), from its page 1 (the
    /// reserved bytes at each page's end), or why the configured check runs instead.
    private static func pageCheck(_ live: LivePages) -> Swift.Result<PageCheck, FollowedFallback> {
        let one = UnsafeMutableRawBufferPointer.allocate(byteCount: live.pageSize, alignment: 16)
        defer { one.deallocate() }
        do {
            try live.read(page: 0, into: one)
        } catch {
            return .failure(.init("page 1 could not be read (\(error.reason))"))
        }
        if let why = PageCheck.applies(pageOne: UnsafeRawBufferPointer(one), pageCount: live.pageCount) {
            return .failure(.init(why))
        }
        return .success(PageCheck(pageSize: live.pageSize, reserved: Int(one[20]), pageCount: live.pageCount))
    }

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
    /// Invariant D3 (docs/delta-invariants.md).
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

    /// The check's connection and its read transaction (``run()``).
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
}
