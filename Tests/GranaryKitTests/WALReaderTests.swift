import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The WAL reader on `-wal` files a real SQLite connection wrote: whole commits only, each
/// chain's checksums, restarts followed through the old chain's tail, and every case where it
/// cannot prove it missed nothing.
@Suite("WAL reader")
struct WALReaderTests {
    /// A WAL store with automatic checkpoints off, written by one connection.
    final class Store {
        let folder = TemporaryFolder("granary-wal")
        let path: String
        let db: Database

        init() throws {
            path = folder.child("Notes.sqlite")
            db = try Database(path: path, mode: .create)
            try db.execute("PRAGMA journal_mode=WAL")
            try db.execute("PRAGMA wal_autocheckpoint=0")
            try db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body BLOB)")
            try db.checkpoint(.truncate)
        }

        func insert(_ count: Int, size: Int = 3000) throws {
            try db.execute("BEGIN")
            for _ in 0..<count { try db.run("INSERT INTO notes(body) VALUES (randomblob(?))", [.integer(Int64(size))]) }
            try db.execute("COMMIT")
        }

        var wal: String { path + "-wal" }

        func reader(_ path: String? = nil) throws -> WALReader {
            let fd = open(path ?? wal, O_RDONLY)
            #expect(fd >= 0)
            return try WALReader(file: Descriptor(fd, display: path ?? wal))
        }

        func copyWAL(_ name: String) throws -> String {
            let copy = folder.child(name)
            try? FileManager.default.removeItem(atPath: copy)
            try FileManager.default.copyItem(atPath: wal, toPath: copy)
            return copy
        }
    }

    struct Taken {
        var frames: [WALFrame] = []
        var pages: [[UInt8]] = []
        var commits: Int { frames.filter(\.isCommit).count }
    }

    func read(_ reader: WALReader, from cursor: WALCursor?, limit: Int64 = .max, maxDatabaseBytes: Int64 = .max)
        throws -> (WALRead, Taken)
    {
        var taken = Taken()
        let result = try reader.read(from: cursor, limit: limit, maxDatabaseBytes: maxDatabaseBytes) { frame, page in
            taken.frames.append(frame)
            taken.pages.append(Array(page))
        }
        #expect(result.frames == taken.frames.count)
        #expect(result.commits == taken.commits)
        if let last = taken.frames.last { #expect(last.isCommit, "a read ends on a commit frame") }
        return (result, taken)
    }

    @Test("whole commits are read, then the next read continues from the cursor")
    func continues() throws {
        let store = try Store()
        try store.insert(3)
        try store.insert(1)
        try store.insert(2)
        let (first, taken) = try read(try store.reader(), from: nil)
        #expect(first.broken == nil)
        #expect(first.commits == 3)
        #expect(taken.pages.allSatisfy { $0.count == 4096 })
        let cursor = try #require(first.cursor)
        #expect(cursor.frame == taken.frames.count)
        let (again, none) = try read(try store.reader(), from: cursor)
        #expect(again.broken == nil && none.frames.isEmpty && again.cursor == cursor)
        try store.insert(4)
        let (second, more) = try read(try store.reader(), from: cursor)
        #expect(second.broken == nil)
        #expect(second.commits == 1)
        #expect(more.frames.first?.index == cursor.frame + 1)
    }

    @Test("the frames replayed onto the database file as it was give the database as it is")
    func replayMatches() throws {
        let store = try Store()
        let before = try Data(contentsOf: URL(fileURLWithPath: store.path))
        try store.insert(5)
        try store.db.execute("DELETE FROM notes WHERE id % 2 = 0")
        try store.insert(2, size: 9000)
        let (result, taken) = try read(try store.reader(), from: nil)
        #expect(result.commits == 3)
        let replay = store.folder.child("Replay.sqlite")
        try before.write(to: URL(fileURLWithPath: replay))
        let fd = open(replay, O_RDWR)
        defer { close(fd) }
        for (frame, page) in zip(taken.frames, taken.pages) {
            _ = page.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(Int(frame.pageNumber - 1) * 4096)) }
            if frame.isCommit { ftruncate(fd, off_t(Int(frame.commitPages) * 4096)) }
        }
        let copy = try Database(path: replay, mode: .readOnly)
        #expect(copy.integrityCheck(full: true) == ["ok"])
        let want = try store.db.rows("SELECT id, hex(body) FROM notes ORDER BY id").map { "\($0)" }
        let got = try copy.rows("SELECT id, hex(body) FROM notes ORDER BY id").map { "\($0)" }
        #expect(got == want)
        #expect(got.count == 5)
    }

    @Test("a torn last frame and an uncommitted transaction are not read")
    func tornAndUncommitted() throws {
        let store = try Store()
        try store.insert(2)
        try store.insert(2)
        let whole = try store.copyWAL("whole-wal")
        let size = try #require(try FileManager.default.attributesOfItem(atPath: whole)[.size] as? Int)
        // Cut the last frame in half: the second commit is gone, the first stays.
        #expect(truncate(whole, off_t(size - 2000)) == 0)
        let (torn, taken) = try read(try store.reader(whole), from: nil)
        #expect(torn.broken == nil)
        #expect(torn.commits == 1)
        #expect(taken.frames.last?.isCommit == true)
        // An open transaction's frames (spilled by a tiny cache) are in the -wal but not committed.
        let (committed, _) = try read(try store.reader(), from: nil)
        let cursor = try #require(committed.cursor)
        try store.db.execute("PRAGMA cache_size=2")
        try store.db.execute("BEGIN")
        for _ in 0..<50 { try store.db.run("INSERT INTO notes(body) VALUES (randomblob(4000))") }
        let spilled = try read(try store.reader(), from: cursor)
        #expect(spilled.0.commits == 0 && spilled.1.frames.isEmpty, "frames of an open transaction are not read")
        try store.db.execute("ROLLBACK")
    }

    @Test("garbage, and a -wal with a header only, give nothing")
    func garbage() throws {
        let store = try Store()
        let junk = store.folder.child("junk-wal")
        var bytes = [UInt8](repeating: 0, count: 100_000)
        for i in bytes.indices { bytes[i] = UInt8(truncatingIfNeeded: i &* 2_654_435_761 >> 13) }
        try Data(bytes).write(to: URL(fileURLWithPath: junk))
        let (result, taken) = try read(try store.reader(junk), from: nil)
        #expect(result.cursor == nil && taken.frames.isEmpty)
        // A real header followed by garbage frames: the chain is empty.
        try store.insert(1)
        let copy = try store.copyWAL("header-wal")
        let fd = open(copy, O_RDWR)
        _ = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress! + 100, 4120, 32) }
        close(fd)
        let (headerOnly, none) = try read(try store.reader(copy), from: nil)
        #expect(headerOnly.broken == nil && none.frames.isEmpty)
        #expect(headerOnly.cursor?.frame == 0)
    }

    @Test(
        "a frame whose checksums are valid but which claims a huge page count breaks the chain, and nothing is handed on"
    )
    func hugePageCount() throws {
        let store = try Store()
        try store.insert(1)
        let copy = try store.copyWAL("huge-wal")
        var data = [UInt8](try Data(contentsOf: URL(fileURLWithPath: copy)))
        let frameSize = 24 + 4096
        let frames = (data.count - 32) / frameSize
        // Rewrite the last (commit) frame to claim 2^31 pages, and recompute the chain's checksums.
        let last = 32 + (frames - 1) * frameSize
        data[last + 4] = 0x80
        data[last + 5] = 0
        data[last + 6] = 0
        data[last + 7] = 0
        WALChecksums.rechecksum(&data, pageSize: 4096)
        try Data(data).write(to: URL(fileURLWithPath: copy))
        let (result, taken) = try read(try store.reader(copy), from: nil, maxDatabaseBytes: 1 << 30)
        #expect(result.broken == .tooLarge(frame: frames, pages: 0x8000_0000))
        #expect(taken.frames.isEmpty)
        // Without a cap it is a commit like any other: the checksums were right.
        let (uncapped, _) = try read(try store.reader(copy), from: nil)
        #expect(uncapped.commits == 1)
    }

    @Test("a read hands on whole commits up to the limit and says it stopped")
    func limit() throws {
        let store = try Store()
        for _ in 0..<6 { try store.insert(1) }
        let (all, everything) = try read(try store.reader(), from: nil)
        #expect(all.commits == 6)
        var cursor: WALCursor? = nil
        var seen: [WALFrame] = []
        var rounds = 0
        repeat {
            let (part, taken) = try read(try store.reader(), from: cursor, limit: 32768)
            #expect(part.bytes <= 32768)
            seen += taken.frames
            cursor = part.cursor
            rounds += 1
            if !part.capped { break }
        } while rounds < 10
        #expect(seen == everything.frames)
        #expect(rounds >= 2)
    }

    @Test(
        "a transaction larger than the limit is handed on whole, alone in its read (never left behind at every read)"
    )
    func transactionLargerThanTheLimit() throws {
        let store = try Store()
        try store.insert(1)
        try store.insert(40)  // about 40 pages of 4 KiB: more than the limit below
        try store.insert(1)
        let limit: Int64 = 32768
        let (first, one) = try read(try store.reader(), from: nil, limit: limit)
        #expect(first.commits == 1 && first.capped, "the small first commit, then the large one waits")
        let (second, large) = try read(try store.reader(), from: first.cursor, limit: limit)
        #expect(second.commits == 1 && second.bytes > limit, "the large commit, whole: \(second)")
        #expect(second.capped, "the last commit waits for the next read")
        let (third, last) = try read(try store.reader(), from: second.cursor, limit: limit)
        #expect(third.commits == 1 && !third.capped)
        let (_, everything) = try read(try store.reader(), from: nil)
        #expect(one.frames + large.frames + last.frames == everything.frames)
    }

    @Test("after a restart, the old chain's tail is read, then the new chain")
    func restartWithTail() throws {
        let store = try Store()
        // An old, long chain A whose frames stay in the file past later chains.
        try store.insert(30)
        try store.db.checkpoint(.restart)
        try store.insert(2)  // chain B
        let (b, _) = try read(try store.reader(), from: nil)
        let cursor = try #require(b.cursor)
        try store.insert(1)  // more of chain B, not read yet
        try store.db.checkpoint(.restart)
        try store.insert(1)  // chain C: shorter than what was read of B
        let (result, taken) = try read(try store.reader(), from: cursor)
        #expect(result.broken == nil)
        #expect(result.commits == 2)
        #expect(taken.frames.first?.salt1 == cursor.salt1, "the old chain's tail first")
        #expect(taken.frames.last?.salt1 == cursor.salt1 &+ 1, "then the new chain")
        #expect(result.cursor?.salt1 == cursor.salt1 &+ 1)
    }

    @Test("after a restart, an old chain that ends at the end of the file (no truncation since) is read")
    func restartTailAtEnd() throws {
        let store = try Store()
        try store.insert(6)
        let (first, _) = try read(try store.reader(), from: nil)
        let cursor = try #require(first.cursor)
        try store.insert(1)
        try store.db.checkpoint(.restart)
        try store.insert(1)
        // The old chain (two commits) ends where the file ends, a whole number of frames past the new chain.
        let (ended, taken) = try read(try store.reader(), from: cursor)
        #expect(ended.broken == nil)
        #expect(ended.commits == 2)
        #expect(taken.frames.first?.salt1 == cursor.salt1 && taken.frames.last?.salt1 == cursor.salt1 &+ 1)
        // The new chain grows past what was read of the old one: frames may have been overwritten.
        try store.insert(20)
        let (over, _) = try read(try store.reader(), from: cursor)
        #expect(over.broken?.isOverwritten == true)
    }

    @Test("a TRUNCATE checkpoint after the cursor, then a new chain, is never taken for a continuation")
    func truncatedThenGrown() throws {
        for rows in 1...4 {
            let store = try Store()
            try store.insert(rows)
            let (first, _) = try read(try store.reader(), from: nil)
            let cursor = try #require(first.cursor)
            try store.insert(1)  // committed, then lost to the truncation before it was read
            try store.db.checkpoint(.truncate)
            try store.insert(rows)
            let (after, taken) = try read(try store.reader(), from: cursor)
            #expect(after.broken != nil, "\(rows) rows: \(String(describing: after.broken))")
            #expect(taken.frames.isEmpty)
        }
    }

    @Test("a TRUNCATE checkpoint, two restarts and a rewritten chain break; the -wal's absence is the caller's")
    func truncatedAndSkipped() throws {
        let store = try Store()
        try store.insert(3)
        let (first, _) = try read(try store.reader(), from: nil)
        let cursor = try #require(first.cursor)
        try store.db.checkpoint(.truncate)
        let (truncated, _) = try read(try store.reader(), from: cursor)
        #expect(truncated.broken == .truncated(was: cursor.fileLength, now: 0))
        // Two restarts: salt1 moved by two.
        var skipped = cursor
        skipped.salt1 = cursor.salt1 &- 1
        skipped.fileLength = 0
        try store.insert(1)
        let (two, _) = try read(try store.reader(), from: skipped)
        if case .saltsNotConsecutive = two.broken {} else { Issue.record("got \(String(describing: two.broken))") }
        // Same salts, but the cursor's checksum is not the file's any more.
        let (now, _) = try read(try store.reader(), from: nil)
        var wrong = try #require(now.cursor)
        wrong.checksum1 &+= 1
        let (rewritten, _) = try read(try store.reader(), from: wrong)
        #expect(rewritten.broken == .chainRewritten(frame: wrong.frame))
    }

    @Test("the -wal is opened beneath the user's folder: a link in its place is refused, and a missing one is nil")
    func opensBeneath() throws {
        let store = try Store()
        try store.insert(1)
        let folder = try Folder<UserOwned>.open(path: store.folder.path)
        let reader = try #require(try WALReader.open(in: folder, store: "Notes.sqlite", storeOwner: getuid()))
        #expect(reader.length > 0)
        #expect(try WALReader.open(in: folder, store: "Absent.sqlite", storeOwner: getuid()) == nil)
        // Swap the -wal for a link to another file while the follower runs.
        let outside = store.folder.child("outside")
        try Data(repeating: 7, count: 5000).write(to: URL(fileURLWithPath: outside))
        let other = store.folder.child("Other.sqlite-wal")
        #expect(symlink(outside, other) == 0)
        #expect(throws: (any Error).self) {
            try WALReader.open(in: folder, store: "Other.sqlite", storeOwner: getuid())
        }
        // A -wal of another owner than the store's.
        #expect(throws: WALReader.Failure.self) {
            try WALReader.open(in: folder, store: "Notes.sqlite", storeOwner: getuid() + 1)
        }
    }
}

extension WALBreak {
    fileprivate var isOverwritten: Bool {
        if case .overwritten = self { return true }
        return false
    }
    fileprivate var isTailUnproven: Bool {
        if case .tailUnproven = self { return true }
        return false
    }
}
