import CSQLite
import Foundation
import GranaryTestSupport
import Testing

@testable import GranaryKit

#if canImport(Glibc)
    import Glibc
#endif

/// Phase 2's copy (issue 51, invariant D14): with follow's candidates, a WAL store's pages are
/// read one by one from the database file and the `-wal` (``LivePages``) instead of through
/// SQLite's backup API, and the `.pages` and `.delta` made are byte for byte the old way's (a
/// snapshot file, hashed and read), page 1 included.
@Suite("delta phase 2: the candidate pages read alone")
struct LivePagesTests {
    typealias NoCopyTests = DeltaNoCopyTests

    /// The owner's connection: kept open, its checkpoints left to the test (frames stay in the -wal).
    static func owner(_ live: String) throws -> Database {
        let db = try Database(path: live, mode: .readWrite)
        try db.execute("PRAGMA wal_autocheckpoint=0")
        try db.keepWALOnClose()
        return db
    }

    /// A discarded copy with a follow record whose candidates are `pages` (indexes from 0; nil:
    /// every page) and every page from `from` on, the cross-check on or off.
    static func followedWay(
        _ folder: TemporaryFolder, base: String, tag: String, pages: [Int]?, crossCheck: Bool,
        snapshotter: Snapshotter = Snapshotter()
    ) throws -> (pages: Data, delta: Data, recorder: PageRecorder, result: Snapshotter.Result) {
        let store = try NoCopyTests.store(folder)
        let count = try Database(path: folder.child("root/\(NoCopyTests.user)/Live.sqlite"), mode: .readOnly)
            .pageCount()
        let basePages = try PagesReader(path: base).pageCount
        var changes = FollowedChanges()
        if let pages {
            for page in pages { changes.frame(page: page + 1) }
            changes.commit(pages: count)
            changes.smallest = max(count, basePages)
        } else {
            changes.commit(pages: count)
            changes.smallest = 0
        }
        let record = FollowedRecord.Store(pageSize: nil, changes: changes, tail: { _ in .success(.init()) })
        let copy = folder.child("\(tag)-new.sqlite")
        let recorder = try PageRecorder(path: folder.child("\(tag)-new.hashes"))
        var noCopy = Snapshotter.NoCopy(
            pageSize: try PagesReader(path: base).pageSize, journalMode: "wal", basePages: base,
            log: folder.child("\(tag)-new.changes"), maxChanged: .max,
            account: ContentAccount(limits: .defaults, storesOfSize: 1 << 20)
        ) { db throws in
            let integrity = try ArchiveBuilder.check(db, mode: .quick, user: NoCopyTests.user, store: "Live.sqlite")
            #expect(integrity == "ok")
        }
        noCopy.followed = FollowedStore(
            record: .success(record), store: store, basePages: basePages, crossCheck: crossCheck)
        let result = try snapshotter.snapshot(store, to: copy, track: nil, pages: recorder, noCopy: noCopy)
        #expect(result.discarded)
        let pagesFile = folder.child("\(tag)-new.pages"), delta = folder.child("\(tag)-new.delta")
        _ = try recorder.finishDiscarded(writingTo: pagesFile)
        _ = try recorder.writeChanges(current: pagesFile, base: base, to: delta)
        return (NoCopyTests.bytes(pagesFile), NoCopyTests.bytes(delta), recorder, result)
    }

    /// The pages whose hashes differ between two `.pages` files (indexes from 0), and the larger count.
    static func changed(_ base: String, _ pages: Data) throws -> [Int] {
        let old = NoCopyTests.bytes(base)
        let count = (pages.count - 20) / 32
        let header = pages.count - count * 32
        var result: [Int] = []
        for page in 0..<count {
            let range = header + page * 32..<header + page * 32 + 32
            if range.upperBound > old.count || old[range] != pages[range] { result.append(page) }
        }
        return result
    }

    @Test(
        "every page read alone (from the -wal's frames and the file) gives the old way's .pages and .delta, page 1 included",
        arguments: ["frames", "checkpointed", "restarted", "growth", "shrink"])
    func everyPageReadAlone(change: String) throws {
        let folder = TemporaryFolder()
        let live = try NoCopyTests.makeStore(in: folder, rows: 6000)
        let base = try NoCopyTests.basePages(folder, "base")
        let db = try Self.owner(live)
        try db.execute("UPDATE t SET body = randomblob(600) WHERE id % 97 = 0")
        switch change {
        case "frames": break
        case "checkpointed":
            // Some frames copied into the file, more written after.
            try db.execute("PRAGMA wal_checkpoint(PASSIVE)")
            try db.execute("UPDATE t SET body = randomblob(600) WHERE id % 89 = 0")
        case "restarted":
            try db.execute("PRAGMA wal_checkpoint(RESTART)")
            try db.execute("UPDATE t SET body = randomblob(600) WHERE id % 83 = 0")
        case "growth":
            try db.execute(
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000) INSERT INTO t(body) SELECT randomblob(900) FROM c"
            )
        default:
            try db.execute("DELETE FROM t WHERE id > 2000")
            try db.execute("VACUUM")
        }
        let old = try NoCopyTests.oldWay(folder, base: base, tag: change)
        let new = try Self.followedWay(folder, base: base, tag: change, pages: nil, crossCheck: false)
        #expect(
            new.recorder.pagesRead.flatMap { try? $0.get() } ?? 0 > 0, "\(String(describing: new.recorder.pagesRead))")
        #expect(new.pages == old.pages, "the same page hashes")
        #expect(new.delta == old.delta, "the same changed pages")
    }

    @Test("only the changed pages read, the others taken from the base and cross-checked: the old way's files")
    func candidatesReadAlone() throws {
        let folder = TemporaryFolder()
        let live = try NoCopyTests.makeStore(in: folder, rows: 6000)
        let base = try NoCopyTests.basePages(folder, "base")
        let db = try Self.owner(live)
        try db.execute("UPDATE t SET body = randomblob(600) WHERE id % 97 = 0")
        try db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        try db.execute("UPDATE t SET body = randomblob(600) WHERE id % 89 = 0")
        let old = try NoCopyTests.oldWay(folder, base: base, tag: "old")
        let changed = try Self.changed(base, old.pages)
        #expect(changed.count > 10 && changed.count < 600, "\(changed.count)")
        for crossCheck in [true, false] {
            let new = try Self.followedWay(
                folder, base: base, tag: "new-\(crossCheck)", pages: changed, crossCheck: crossCheck)
            let read = try #require(try new.recorder.pagesRead?.get())
            let pageCount = try Database(path: live, mode: .readOnly).pageCount()
            #expect(crossCheck ? read == pageCount : read <= changed.count + 1, "\(read) of \(pageCount)")
            #expect(new.pages == old.pages && new.delta == old.delta)
        }
    }

    @Test(
        "the store or its -wal swapped for a link as phase 2 opens them: never read through the link, the copy goes through SQLite"
    )
    func linkAsItOpens() throws {
        for swapped in ["", "-wal"] {
            let folder = TemporaryFolder()
            let live = try NoCopyTests.makeStore(in: folder, rows: 3000)
            let base = try NoCopyTests.basePages(folder, "base")
            let db = try Self.owner(live)
            try db.execute("UPDATE t SET body = randomblob(600) WHERE id < 50")
            let old = try NoCopyTests.oldWay(folder, base: base, tag: "old")
            // Another store outside the folder, with the same page size and frames of its own.
            let outside = folder.child("outside.sqlite")
            let other = try Database(path: outside, mode: .create)
            try other.execute("PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0")
            try other.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, body BLOB)")
            try other.execute("INSERT INTO t(body) SELECT randomblob(600) FROM t UNION ALL SELECT x'00'")
            try other.keepWALOnClose()
            var snapshotter = Snapshotter()
            let target = live + swapped
            snapshotter.beforeChecker = {
                _ = rename(target, target + ".moved")
                _ = symlink(outside + swapped, target)
            }
            let new = try Self.followedWay(
                folder, base: base, tag: "new", pages: nil, crossCheck: true, snapshotter: snapshotter)
            unlink(target)
            _ = rename(target + ".moved", target)
            guard case .failure(let why)? = new.recorder.pagesRead else {
                Issue.record("phase 2 read pages through a link (\(swapped))")
                continue
            }
            #expect(!why.reason.isEmpty)
            #expect(new.pages == old.pages && new.delta == old.delta, "the copy through SQLite, as before")
            _ = other
        }
    }

    @Test(
        "a frame rewritten after it was indexed (a -wal restarted as it is read), data or header, is refused, never taken half old, half new"
    )
    func frameRewrittenAsRead() throws {
        for part in ["data", "header"] {
            let folder = TemporaryFolder()
            let live = try NoCopyTests.makeStore(in: folder, rows: 3000)
            let db = try Self.owner(live)
            try db.execute("UPDATE t SET body = randomblob(600) WHERE id < 50")
            let store = try NoCopyTests.store(folder)
            let header = [UInt8](try #require(FileManager.default.contents(atPath: live + "-shm")).prefix(96))
            let index = WALIndexHeader(header)
            let pageSize = 4096
            let pages = try LivePages(
                store: store, header: header, pageSize: pageSize, pageCount: Int(index.pages), wanted: { _ in true })
            #expect(pages.framedPages > 0)
            // The last frame of the state is the newest of its page.
            let offset = Int64(32) + Int64(index.mxFrame - 1) * Int64(24 + pageSize)
            let fd = open(live + "-wal", O_RDWR)
            defer { close(fd) }
            var head = [UInt8](repeating: 0, count: 24)
            #expect(pread(fd, &head, 24, off_t(offset)) == 24)
            let page = Int(UInt32(head[0]) << 24 | UInt32(head[1]) << 16 | UInt32(head[2]) << 8 | UInt32(head[3])) - 1
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: pageSize, alignment: 16)
            defer { buffer.deallocate() }
            try pages.read(page: page, into: buffer)
            // A byte of the page rewritten (its header kept), or its header's checksum: as a writer
            // after a restart leaves a frame half written.
            let at = part == "data" ? offset + 24 + 100 : offset + 16
            var byte: UInt8 = 0
            #expect(pread(fd, &byte, 1, off_t(at)) == 1)
            byte ^= 0x5A
            #expect(pwrite(fd, &byte, 1, off_t(at)) == 1)
            #expect(throws: LivePages.Unusable.self, "\(part)") { try pages.read(page: page, into: buffer) }
            _ = db
        }
    }
}
