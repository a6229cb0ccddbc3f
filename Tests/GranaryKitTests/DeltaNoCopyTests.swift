import CSQLite
import CSnapshotTee
import Foundation
import GranaryDigest
import GranaryTestSupport
import Testing

@testable import GranaryKit

/// `backup --delta` of a WAL store without a snapshot file (issue 35, `Snapshotter.NoCopy`): the
/// `granary-tee` VFS discards the copy's pages beyond page 1, the recorder keeps the changed ones
/// in a log, and the `.pages` and `.delta` files made from them are byte for byte those the old way
/// (a real snapshot file, hashed and read) gives for the same store state.
@Suite("delta without a snapshot file")
struct DeltaNoCopyTests {
    static let user = "alice@example.com"

    /// A user folder under `folder` holding one WAL store `Live.sqlite` with `rows` rows of ~600
    /// bytes (pages of `pageSize`), and the store as a backup finds it.
    static func makeStore(in folder: TemporaryFolder, rows: Int, pageSize: Int = 4096) throws -> String {
        let root = folder.child("root")
        try FileSystem.makeDirectory(root, mode: 0o755)
        try FileSystem.makeDirectory(root + "/\(user)", mode: 0o700)
        let live = root + "/\(user)/Live.sqlite"
        let db = try Database(path: live, mode: .create)
        try db.execute("PRAGMA page_size=\(pageSize); PRAGMA journal_mode=WAL")
        try db.execute(
            """
            CREATE TABLE t(id INTEGER PRIMARY KEY, body BLOB);
            CREATE INDEX t_body ON t(substr(body, 1, 16));
            WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < \(rows))
            INSERT INTO t(body) SELECT randomblob(600) FROM c;
            """)
        return live
    }

    static func store(_ folder: TemporaryFolder) throws -> StoreFile {
        try #require(
            try Root(path: folder.child("root")).user(UserID(user)).scan().stores.first { $0.name == "Live.sqlite" })
    }

    static func bytes(_ path: String) -> Data { FileManager.default.contents(atPath: path) ?? Data() }

    /// The `.pages` of a real snapshot of the store as it is now (the base of the next steps).
    static func basePages(_ folder: TemporaryFolder, _ name: String) throws -> String {
        let copy = folder.child("\(name).sqlite")
        _ = try Snapshotter().snapshot(try store(folder), to: copy)
        let pageSize = try Database(path: copy, mode: .readOnly).pageSize()
        let pages = folder.child("\(name).pages")
        try PageFiles.hash(file: copy, pageSize: pageSize, writingTo: pages)
        try FileSystem.removeFile(copy)
        return pages
    }

    /// The old way: a snapshot file, its recorded hashes, its changed pages read from it.
    static func oldWay(_ folder: TemporaryFolder, base: String, tag: String) throws -> (pages: Data, delta: Data) {
        let copy = folder.child("\(tag)-old.sqlite")
        let recorder = try PageRecorder(path: folder.child("\(tag)-old.hashes"))
        _ = try Snapshotter().snapshot(try store(folder), to: copy, track: nil, pages: recorder)
        let pageSize = try Database(path: copy, mode: .readOnly).pageSize()
        let pages = folder.child("\(tag)-old.pages"), delta = folder.child("\(tag)-old.delta")
        _ = try recorder.finish(snapshot: copy, pageSize: pageSize, writingTo: pages)
        _ = try PageChanges.write(snapshot: copy, current: pages, base: base, to: delta)
        try FileSystem.removeFile(copy)
        return (bytes(pages), bytes(delta))
    }

    /// The new way: no snapshot file; `inTransaction` runs in the copy's read transaction.
    static func newWay(
        _ folder: TemporaryFolder, base: String, tag: String, maxChanged: Int = .max,
        snapshotter: Snapshotter = Snapshotter(), writerHashes: PageRecorder.WriterHashing = .whenBehind,
        inTransaction: @escaping (Database) throws -> Void = { _ in }
    ) throws -> (pages: Data, delta: Data, recorder: PageRecorder, result: Snapshotter.Result) {
        let copy = folder.child("\(tag)-new.sqlite")
        let recorder = try PageRecorder(path: folder.child("\(tag)-new.hashes"))
        recorder.writerHashes = writerHashes
        let basePageSize = try PagesReader(path: base).pageSize
        let noCopy = Snapshotter.NoCopy(
            pageSize: basePageSize, journalMode: "wal", basePages: base, log: folder.child("\(tag)-new.changes"),
            maxChanged: maxChanged, account: ContentAccount(limits: .defaults, storesOfSize: 1 << 20),
            inTransaction: inTransaction)
        let result = try snapshotter.snapshot(
            try store(folder), to: copy, track: nil, pages: recorder, noCopy: noCopy)
        #expect(result.discarded)
        #expect(!FileManager.default.fileExists(atPath: copy), "no snapshot file is left")
        let pages = folder.child("\(tag)-new.pages"), delta = folder.child("\(tag)-new.delta")
        _ = try recorder.finishDiscarded(writingTo: pages)
        _ = try recorder.writeChanges(current: pages, base: base, to: delta)
        return (bytes(pages), bytes(delta), recorder, result)
    }

    @Test(
        "the .pages and .delta of a copy without a file equal those of a snapshot file: changes, growth, shrink",
        arguments: ["update", "growth", "shrink", "vacuum-into-fewer"], [PageRecorder.WriterHashing.never, .everyOther])
    func sameAsSnapshot(change: String, writerHashes: PageRecorder.WriterHashing) throws {
        let folder = TemporaryFolder()
        let live = try Self.makeStore(in: folder, rows: 6000)
        let base = try Self.basePages(folder, "base")
        let db = try Database(path: live, mode: .readWrite)
        switch change {
        case "update": try db.execute("UPDATE t SET body = randomblob(600) WHERE id % 97 = 0")
        case "growth":
            try db.execute(
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000) INSERT INTO t(body) SELECT randomblob(900) FROM c"
            )
        case "shrink":
            try db.execute("DELETE FROM t WHERE id > 2000")
            try db.execute("VACUUM")
        default:
            try db.execute("DELETE FROM t WHERE id % 3 = 0")
            try db.execute("UPDATE t SET body = randomblob(300) WHERE id % 5 = 0")
            try db.execute("VACUUM")
        }
        let old = try Self.oldWay(folder, base: base, tag: change)
        var integrity = ""
        // Hashed by the hashing thread alone, or by the copy's thread every other batch: the same files.
        let new = try Self.newWay(folder, base: base, tag: change, writerHashes: writerHashes) { db in
            integrity = try ArchiveBuilder.check(db, mode: .quick, user: Self.user, store: "Live.sqlite")
        }
        #expect(integrity == "ok")
        #expect(new.pages == old.pages, "the same page hashes")
        #expect(new.delta == old.delta, "the same changed pages")
        let header = try #require(old.delta.count >= 28 ? old.delta : nil)
        let changed = header[20..<28].reduce(0) { $0 << 8 | Int($1) }
        #expect(changed > 0)
        #expect(new.recorder.hashed > 0)
        #expect(writerHashes == .never ? new.recorder.hashedByWriter == 0 : new.recorder.hashedByWriter > 0)
        #expect(new.recorder.usedGivenHashes == new.recorder.hashedByWriter, "the hashing thread took them")
    }

    /// A store of 3,000 rows, its base, 49 rows changed since, and the old way's files of that state.
    static func changedSinceBase(_ folder: TemporaryFolder) throws -> (
        live: String, base: String, old: (pages: Data, delta: Data)
    ) {
        let live = try makeStore(in: folder, rows: 3000)
        let base = try basePages(folder, "base")
        try Database(path: live, mode: .readWrite).execute("UPDATE t SET body = randomblob(600) WHERE id < 50")
        return (live, base, try oldWay(folder, base: base, tag: "before"))
    }

    @Test("the check in the copy's read transaction sees the copied state, not a write committed after the copy")
    func checkSeesTheCopiedState() throws {
        let folder = TemporaryFolder()
        let (live, base, old) = try Self.changedSinceBase(folder)
        var seen = -1
        let new = try Self.newWay(folder, base: base, tag: "after") { db in
            // Another connection commits while the copy's read transaction is open.
            try Database(path: live, mode: .readWrite).execute("INSERT INTO t(body) VALUES (randomblob(5000))")
            seen = Int(try db.scalar("SELECT count(*) FROM t")?.integer ?? -1)
        }
        #expect(seen == 3000)
        #expect(new.pages == old.pages && new.delta == old.delta)
        #expect(new.result.checkedBeside, "the check ran beside the copy, on a connection of its own")
        let now = try Database(path: live, mode: .readOnly).scalar("SELECT count(*) FROM t")?.integer
        #expect(now == 3001)
    }

    @Test(
        "a write committed between the copy's read transaction and the check's keeps the check off it: it runs after the copy, in the copy's transaction"
    )
    func commitBeforeTheCheckBegins() throws {
        let folder = TemporaryFolder()
        let (live, base, old) = try Self.changedSinceBase(folder)
        let copied = try Database(path: live, mode: .readOnly).pageCount()
        var snapshotter = Snapshotter()
        snapshotter.beforeChecker = {
            // Changes a row in place: the store keeps its page count, only its content differs.
            try? Database(path: live, mode: .readWrite).execute("UPDATE t SET body = zeroblob(600) WHERE id = 7")
        }
        var seen = -1
        var pages = -1
        let new = try Self.newWay(folder, base: base, tag: "after", snapshotter: snapshotter) { db in
            seen = Int(try db.scalar("SELECT count(*) FROM t WHERE body = zeroblob(600)")?.integer ?? -1)
            pages = try db.pageCount()
        }
        #expect(new.result.checkedAfter == "a commit between the two read transactions")
        #expect(seen == 0, "the check read the copied state, not the row changed since")
        #expect(pages == copied)
        #expect(new.pages == old.pages && new.delta == old.delta)
        let now = try Database(path: live, mode: .readOnly).scalar(
            "SELECT count(*) FROM t WHERE body = zeroblob(600)")?.integer
        #expect(now == 1)
    }

    @Test(
        "a store replaced by a rename as the check opens it (a program migrating it): the check runs after the copy, on the copied file"
    )
    func replacedBeforeTheCheckOpens() throws {
        let folder = TemporaryFolder()
        let (live, base, old) = try Self.changedSinceBase(folder)
        // Another database, of 10 rows, that a program puts in the store's place by a rename.
        let other = folder.child("root/\(Self.user)/Other.sqlite")
        let db = try Database(path: other, mode: .create)
        try db.execute(
            "CREATE TABLE t(id INTEGER PRIMARY KEY, body BLOB); INSERT INTO t(body) SELECT randomblob(600) FROM (SELECT 1 UNION ALL SELECT 2) a, (SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5) b"
        )
        var snapshotter = Snapshotter()
        snapshotter.beforeChecker = { _ = rename(other, live) }
        var seen = -1
        let new = try Self.newWay(folder, base: base, tag: "after", snapshotter: snapshotter) { db in
            seen = Int(try db.scalar("SELECT count(*) FROM t")?.integer ?? -1)
        }
        #expect(new.result.checkedAfter == "the store was replaced")
        #expect(seen == 3000, "the check read the copied file, not the one now at its name")
        #expect(new.pages == old.pages && new.delta == old.delta)
        #expect(try Database(path: live, mode: .readOnly).scalar("SELECT count(*) FROM t")?.integer == 10)
    }

    @Test(
        "a store swapped for a link as the check opens it: the check's connection does not follow it, and the check runs on the copied file"
    )
    func linkBeforeTheCheckOpens() throws {
        let folder = TemporaryFolder()
        let (live, base, old) = try Self.changedSinceBase(folder)
        // A database outside the user's folder, of one row, that the link points at.
        let outside = folder.child("outside.sqlite")
        try Database(path: outside, mode: .create).execute("CREATE TABLE t(id INTEGER PRIMARY KEY, body BLOB)")
        try Database(path: outside, mode: .readWrite).execute("INSERT INTO t(body) VALUES (x'00')")
        var snapshotter = Snapshotter()
        snapshotter.beforeChecker = {
            _ = rename(live, live + ".moved")
            _ = symlink(outside, live)
        }
        var seen = -1
        let new = try Self.newWay(folder, base: base, tag: "after", snapshotter: snapshotter) { db in
            seen = Int(try db.scalar("SELECT count(*) FROM t")?.integer ?? -1)
        }
        #expect(new.result.checkedAfter != nil, "no check beside the copy through a link")
        #expect(seen == 3000, "the check read the copied file, not the link's target")
        #expect(new.pages == old.pages && new.delta == old.delta)
    }

    @Test("a store whose page size is not the base's is not copied without a file")
    func pageSizeChange() throws {
        let folder = TemporaryFolder()
        let live = try Self.makeStore(in: folder, rows: 2000)
        let base = try Self.basePages(folder, "base")
        let db = try Database(path: live, mode: .readWrite)
        try db.execute("PRAGMA journal_mode=DELETE")
        try db.execute("PRAGMA page_size=8192")
        try db.execute("VACUUM")
        try db.execute("PRAGMA journal_mode=WAL")
        #expect(throws: NoCopyFallback.self) { _ = try Self.newWay(folder, base: base, tag: "resized") }
    }

    struct CheckFailed: Error {}

    @Test("a check that fails names itself, not the transaction's COMMIT; one that ends the transaction falls back")
    func failingCheck() throws {
        let folder = TemporaryFolder()
        let live = try Self.makeStore(in: folder, rows: 3000)
        let base = try Self.basePages(folder, "base")
        try Database(path: live, mode: .readWrite).execute("UPDATE t SET body = randomblob(600) WHERE id % 7 = 0")
        #expect(throws: CheckFailed.self) {
            _ = try Self.newWay(folder, base: base, tag: "throws") { _ in throw CheckFailed() }
        }
        // A check that ended the transaction (as SQLite does on some errors) did not read what the
        // copy read: the copy is made again, for real.
        let fallback = #expect(throws: NoCopyFallback.self) {
            _ = try Self.newWay(folder, base: base, tag: "ends") { db in try db.execute("COMMIT") }
        }
        #expect(fallback?.reason.contains("read transaction ended") == true, "\(String(describing: fallback))")
        // Either way the live store's read transactions are gone: a writer that does not wait gets
        // in, and a checkpoint that does not wait moves the whole WAL and empties it (one reader
        // left on an older state, the copy's or the check's, would make it busy).
        let owner = try Database(path: live, mode: .readWrite, busyTimeout: .zero)
        try owner.execute("UPDATE t SET body = 'x' WHERE id = 1")
        let checkpoint = try owner.rows("PRAGMA wal_checkpoint(TRUNCATE)")
        #expect(checkpoint.first?.values.first?.integer == 0, "not busy: no reader holds an older state")
        #expect(FileSystem.size(live + "-wal") == 0, "the WAL was emptied")
    }

    @Test("more changed pages than the share allowed stops the copy and gives up")
    func tooManyChanged() throws {
        let folder = TemporaryFolder()
        let live = try Self.makeStore(in: folder, rows: 6000)
        let base = try Self.basePages(folder, "base")
        try Database(path: live, mode: .readWrite).execute("UPDATE t SET body = randomblob(600)")
        #expect(throws: NoCopyFallback.self) {
            _ = try Self.newWay(folder, base: base, tag: "all", maxChanged: 100)
        }
        // With a check beside the copy that would run long: the copy's give-up is the error, and
        // it interrupts the check (which would otherwise count the rows again and again).
        var interrupted = false
        #expect(throws: NoCopyFallback.self) {
            _ = try Self.newWay(folder, base: base, tag: "checked", maxChanged: 100) { db in
                do {
                    for _ in 0..<100_000 { _ = try db.scalar("SELECT count(*) FROM t WHERE body > x'00'") }
                } catch let error as SQLiteError where error.code == SQLITE_INTERRUPT {
                    interrupted = true
                    throw error
                }
            }
        }
        #expect(interrupted, "the copy's give-up interrupted the check")
    }

    @Test("a read of a discarded page fails loudly and is counted; page 1 reads back")
    func discardedRead() throws {
        let folder = TemporaryFolder()
        #expect(granary_tee_register() == SQLITE_OK)
        let path = folder.child("discarded.sqlite")
        let db = try Database(path: path, mode: .create, vfs: "granary-tee")
        var pageSize: Int64 = 4096
        #expect(sqlite3_file_control(db.handle, "main", SNAPSHOT_TEE_FCNTL_DISCARD, &pageSize) == SQLITE_OK)
        try db.execute("PRAGMA page_size=4096; PRAGMA journal_mode=OFF; PRAGMA cache_size=10")
        try db.execute(
            """
            CREATE TABLE t(id INTEGER PRIMARY KEY, body BLOB);
            WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 500)
            INSERT INTO t(body) SELECT randomblob(2000) FROM c;
            """)
        // The schema is on page 1, which is real.
        #expect(try db.tableNames() == ["t"])
        #expect(throws: SQLiteError.self) { _ = try db.scalar("SELECT sum(length(body)) FROM t") }
        var reads: Int64 = 0
        #expect(sqlite3_file_control(db.handle, "main", SNAPSHOT_TEE_FCNTL_DISCARDED_READS, &reads) == SQLITE_OK)
        #expect(reads > 0)
        // The file holds page 1 alone; its logical size is every page written.
        #expect((FileSystem.status(path).map { Int64($0.st_size) } ?? -1) <= 4096)
    }

    @Test(
        "over 1 GiB: the lock-byte page, never written, hashes as a zero page, as a read of the file gives",
        .enabled(if: ProcessInfo.processInfo.environment["GRANARY_SLOW_TESTS"] == "1", "over 1 GiB of I/O"))
    func lockBytePage() throws {
        let folder = TemporaryFolder()
        let root = folder.child("root")
        try FileSystem.makeDirectory(root, mode: 0o755)
        try FileSystem.makeDirectory(root + "/\(Self.user)", mode: 0o700)
        let live = root + "/\(Self.user)/Live.sqlite"
        let db = try Database(path: live, mode: .create)
        // 64 KiB pages: the lock-byte page (bytes 2^30 … 2^30 + 65535) is page 16385.
        try db.execute("PRAGMA page_size = 65536; PRAGMA journal_mode = WAL")
        try db.execute("CREATE TABLE big(id INTEGER PRIMARY KEY, b BLOB)")
        try db.execute(
            "INSERT INTO big(b) SELECT zeroblob(1000000) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1100) SELECT x FROM c)"
        )
        try db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        let base = try Self.basePages(folder, "base")
        try db.execute("UPDATE big SET b = randomblob(1000000) WHERE id IN (5, 1050, 1090)")
        try db.execute("INSERT INTO big(b) VALUES (randomblob(300000))")
        let old = try Self.oldWay(folder, base: base, tag: "lock")
        let new = try Self.newWay(folder, base: base, tag: "lock")
        let count = try PagesReader(path: folder.child("lock-new.pages")).pageCount
        try #require(count > 16385)
        #expect(new.pages == old.pages)
        #expect(new.delta == old.delta)
        // The lock-byte page's hash is a zero page's.
        let zeros = folder.child("zeros")
        try Data(count: 65536).write(to: URL(fileURLWithPath: zeros))
        try PageFiles.hash(file: zeros, pageSize: 65536, writingTo: zeros + ".pages")
        let zero = Array(Self.bytes(zeros + ".pages")[PageFiles.pagesHeader...])
        let at = PageFiles.pagesHeader + 16384 * 32
        #expect(Array(new.pages[at..<at + 32]) == zero)
    }

    // MARK: Through BackupOperation

    final class Site {
        let folder = TemporaryFolder()
        var root: String { folder.child("root") }
        let repository: LocalRepository
        init() throws {
            try SampleData.generate(in: folder.child("root"))
            repository = LocalRepository(path: initializedRepository(folder.child("repo")))
        }

        func backup(everyStore: Bool = false, progress: (any BackupProgress)? = nil) throws -> BackupOperation.Result {
            var options = BackupOperation.Options()
            options.delta = DeltaPolicy()
            options.snapshotEveryStore = everyStore
            let result = try BackupOperation(
                root: Root(path: root), repository: repository, options: options, progress: progress
            ).run(try UserID(DeltaNoCopyTests.user))
            return result
        }

        func change(_ sql: String, store: String = "Local.sqlite") throws {
            try Database(path: root + "/\(DeltaNoCopyTests.user)/\(store)", mode: .readWrite).execute(sql)
        }

        func manifest(_ result: BackupOperation.Result) throws -> Manifest {
            try ArchiveHead(file: try #require(result.entry.localFile)).manifest
        }
    }

    @Test("a delta archive made without snapshot files has the members of one made with them, byte for byte")
    func sameArchiveMembers() throws {
        let site = try Site()
        let first = try site.backup()
        #expect(first.delta?.isDelta == false)
        #expect(first.discardedCopies == 0, "no base: a full, copied as always")
        try site.change("UPDATE items SET body = 'changed' WHERE id % 50 = 0")
        try site.change("UPDATE items SET body = 'changed too' WHERE id = 3", store: "Cloud.sqlite")
        let old = try site.backup(everyStore: true)
        #expect(old.delta?.isDelta == true)
        #expect(old.discardedCopies == 0)
        let oldManifest = try site.manifest(old)
        try FileSystem.removeFile(try #require(old.entry.localFile))
        let new = try site.backup()
        #expect(new.delta?.isDelta == true, "\(String(describing: new.delta))")
        #expect(new.discardedCopies == 2, "\(String(describing: new.copiedAgain))")
        #expect(new.copiedAgain == nil)
        let newManifest = try site.manifest(new)
        func members(_ manifest: Manifest) -> [String] {
            manifest.files.map { "\($0.path) \($0.size) \($0.sha256) \($0.kind)" }
        }
        #expect(members(newManifest) == members(oldManifest))
        #expect(newManifest.delta?.stores == oldManifest.delta?.stores)
        #expect(newManifest.stores.map(\.integrity) == oldManifest.stores.map(\.integrity))
        #expect(newManifest.stores.map(\.pageCount) == oldManifest.stores.map(\.pageCount))
        #expect(newManifest.stores.map(\.integrity) == ["ok", "ok"])
        #expect(newManifest.stores.map(\.externalDataPath) == oldManifest.stores.map(\.externalDataPath))
        #expect(newManifest.stores.map(\.coreData) == oldManifest.stores.map(\.coreData))
    }

    @Test("a full needed after a copy without a file copies the stores again, and says so")
    func fullAfterAll() throws {
        let site = try Site()
        _ = try site.backup()
        try site.change(
            "INSERT INTO items(body, created) SELECT hex(randomblob(500)), 1 FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 2000) SELECT x FROM c)"
        )
        _ = try site.backup()
        try site.change("DELETE FROM items WHERE id % 2 = 0")
        try site.change("VACUUM")
        let vacuumed = try site.backup()
        #expect(vacuumed.delta?.isDelta == false)
        #expect(vacuumed.copiedAgain != nil)
        #expect(vacuumed.delta?.reason?.contains("% of the pages changed (a full above 50 %)") == true)
        #expect(vacuumed.delta?.reason?.contains("copied again") == true, "\(String(describing: vacuumed.delta))")
        // The full packs real snapshots: it verifies, and a delta builds on it.
        let into = site.folder.child("extracted")
        try FileSystem.makeDirectory(into)
        let outcome = try ArchiveVerifier.extract(archive: try #require(vacuumed.entry.localFile), into: into)
        #expect(outcome.checks == ["Local.sqlite": "ok", "Cloud.sqlite": "ok"])
        try site.change("UPDATE items SET body = 'small' WHERE id = 1")
        let small = try site.backup()
        #expect(small.delta?.isDelta == true)
        #expect(small.discardedCopies == 2)
    }

    @Test("a small store that changes whole is a delta of the user's stores, copied once: the share is the user's")
    func shareIsTheUsers() throws {
        let site = try Site()
        // Local.sqlite grows well past Cloud.sqlite, then Cloud.sqlite changes every page.
        try site.change(
            "INSERT INTO items(body, created) SELECT hex(randomblob(500)), 1 FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 4000) SELECT x FROM c)"
        )
        _ = try site.backup()
        try site.change("UPDATE items SET body = hex(randomblob(40)) || body", store: "Cloud.sqlite")
        let changed = try site.backup()
        let manifest = try site.manifest(changed)
        let stores = try #require(manifest.delta?.stores)
        let cloud = try #require(stores.first { $0.name == "Cloud.sqlite" })
        let total = stores.reduce(0) { $0 + $1.pageCount }
        // (The case this test is about: over half of the store's pages, under half of the user's.)
        #expect(Double(cloud.changedPages ?? 0) > 0.5 * Double(cloud.pageCount))
        #expect(Double(cloud.changedPages ?? 0) < 0.5 * Double(total))
        #expect(changed.delta?.isDelta == true, "\(String(describing: changed.delta))")
        #expect(changed.copiedAgain == nil, "\(String(describing: changed.copiedAgain))")
        #expect(changed.discardedCopies == 2)
    }

    /// The snapshot phase's reports of a backup, per `done`/`total`.
    final class SnapshotBar: BackupProgress, @unchecked Sendable {
        private let lock = NSLock()
        private var seen: [(done: Int64, total: Int64)] = []
        var reports: [(done: Int64, total: Int64)] { lock.withLock { seen } }
        func update(user: String, phase: String, done: Int64, total: Int64) {
            if phase == "snapshot" { lock.withLock { seen.append((done, total)) } }
        }
    }

    @Test("the progress bar of a copy without a file reaches the store's size (the recorder counts what was written)")
    func progressOfADiscardedCopy() throws {
        let site = try Site()
        _ = try site.backup()
        try site.change("UPDATE items SET body = 'changed' WHERE id % 50 = 0")
        let bar = SnapshotBar()
        let delta = try site.backup(progress: bar)
        #expect(delta.discardedCopies == 2)
        // Per store: reports start at 0 and end at its size (the file itself is one page long).
        let ends = bar.reports.filter { $0.done > 0 && $0.done == $0.total }
        #expect(ends.count >= 2, "\(bar.reports)")
        #expect(bar.reports.allSatisfy { $0.done <= $0.total })
    }

    @Test("a page-size change goes to a full, with today's reason")
    func pageSizeChangeIsAFull() throws {
        let site = try Site()
        _ = try site.backup()
        // (One connection: the page size is set for its VACUUM.)
        try site.change("PRAGMA journal_mode=DELETE; PRAGMA page_size=8192; VACUUM; PRAGMA journal_mode=WAL")
        let resized = try site.backup()
        #expect(resized.delta?.isDelta == false)
        #expect(
            resized.delta?.reason?.contains("has pages of 8192 bytes, 4096 before") == true,
            "\(String(describing: resized.delta))")
        #expect(resized.copiedAgain != nil, "the copy without a file gave up before copying")
    }

    /// What a test's closures saw (they are not `Sendable`, and run on the caller's thread).
    final class Seen {
        var sizes: [Int64] = []
        var checked = false
    }

    struct Refused: Error {}

    @Test(
        "a copy without a file is charged the size SQLite will read (PRAGMA page_count in its read transaction, the -wal applied) before a page is copied; a refusal stops it there"
    )
    func chargedFromPageCount() throws {
        let folder = TemporaryFolder()
        let live = try Self.makeStore(in: folder, rows: 2000)
        let base = try Self.basePages(folder, "base")
        // Growth that is still in the -wal (the writer stays open): the files' lengths do not
        // say what SQLite reads, its page count does.
        let db = try Database(path: live, mode: .readWrite)
        try db.execute("PRAGMA wal_autocheckpoint=0")
        try db.execute(
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000) INSERT INTO t(body) SELECT randomblob(900) FROM c"
        )
        let expected = Int64(try db.pageCount()) * Int64(try db.pageSize())
        let basePageSize = try PagesReader(path: base).pageSize
        func attempt(_ tag: String, refuse: Bool) throws -> (Seen, PageRecorder, Snapshotter.Result?) {
            let seen = Seen()
            let recorder = try PageRecorder(path: folder.child("\(tag).hashes"))
            let noCopy = Snapshotter.NoCopy(
                pageSize: basePageSize, journalMode: "wal", basePages: base, log: folder.child("\(tag).changes"),
                maxChanged: .max, account: ContentAccount(limits: .defaults, storesOfSize: 1 << 20)
            ) { _ in seen.checked = true }
            do {
                let result = try Snapshotter().snapshot(
                    try Self.store(folder), to: folder.child("\(tag).sqlite"), track: nil, pages: recorder,
                    noCopy: noCopy
                ) { size in
                    seen.sizes.append(size)
                    if refuse { throw Refused() }
                }
                return (seen, recorder, result)
            } catch is Refused {
                return (seen, recorder, nil)
            }
        }
        let (refused, refusedRecorder, none) = try attempt("refused", refuse: true)
        #expect(none == nil, "the refusal stops the copy")
        #expect(refused.sizes == [expected], "charged once, from the page count, before the copy")
        #expect(!refused.checked)
        #expect(refusedRecorder.changedPages == 0, "no page was copied")
        let (accepted, _, result) = try attempt("accepted", refuse: false)
        #expect(result?.discarded == true)
        #expect(accepted.sizes == [expected])
        #expect(accepted.checked)
        #expect(expected > FileSystem.size(live), "the growth is in the -wal, not in the database file")
    }
}

/// The bulk ways phase 2 takes a run of unchanged pages (``PageBits/insert(from:through:)``) and a
/// `.pages` file's summary is read (a piece at a time) give what the page-by-page ways give.
@Suite("delta: bulk page sets and list summaries")
struct DeltaBulkTests {
    @Test("a range inserted word by word is the set the pages inserted one by one make, count included")
    func rangeInsert() {
        let ranges = [(0, 0), (0, 63), (1, 62), (5, 200), (63, 64), (64, 127), (100, 1000), (130, 130), (3, 700)]
        var bulk = PageBits()
        var single = PageBits()
        bulk.insert(7)
        single.insert(7)
        for (first, last) in ranges {
            bulk.insert(from: first, through: last)
            for page in first...last { single.insert(page) }
            #expect(bulk.count == single.count)
            var inBulk: [Int] = []
            var inSingle: [Int] = []
            bulk.forEach { inBulk.append($0) }
            single.forEach { inSingle.append($0) }
            #expect(inBulk == inSingle)
        }
        var empty = PageBits()
        empty.insert(from: 9, through: 8)
        #expect(empty.count == 0)
    }

    @Test("a list's summary read a piece at a time is the state digest hash by hash gives")
    func summaryInPieces() throws {
        let folder = TemporaryFolder()
        // More hashes than one piece holds (32,768), and a last piece cut short.
        let count = 70_001
        let path = folder.child("0.pages")
        var bytes = PageFiles.pagesMagic + BigEndian.u32(4096) + BigEndian.u64(UInt64(count))
        var hashes: [UInt8] = []
        for page in 0..<count { hashes += Array(SHA256.hash(data: Array("page \(page)".utf8))) }
        bytes += hashes
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        var state = SHA256()
        state.update(data: PageFiles.statePrefix + BigEndian.u32(4096) + BigEndian.u64(UInt64(count)))
        for page in 0..<count { state.update(data: hashes[page * 32..<page * 32 + 32]) }
        let summary = try PageFiles.summary(ofPages: path)
        #expect(summary == PageFiles.Summary(pageSize: 4096, pageCount: count, stateDigest: state.finalize().hex))
    }
}
