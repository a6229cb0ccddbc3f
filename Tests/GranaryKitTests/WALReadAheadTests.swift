import Foundation
import GranaryTestSupport
import Testing

@testable import GranaryKit

#if canImport(Glibc)
    import Glibc
#endif

/// The WAL reader's read-ahead (``WALReader/ReadAhead``) on `-wal` files a real SQLite connection
/// wrote: a run of frames costs a few reads of the file, not two a frame; what is handed on is,
/// byte for byte, what the file holds at each frame's place; a `-wal` larger than both windows is
/// read whole through bounded memory; one cut short after it was opened hands on only what is
/// still there.
@Suite("WAL reader: read-ahead")
struct WALReadAheadTests {
    let folder = TemporaryFolder("granary-wal-ahead")
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

    func insert(commits: Int, rows: Int) throws {
        for _ in 0..<commits {
            try db.execute("BEGIN")
            for _ in 0..<rows { try db.run("INSERT INTO notes(body) VALUES (randomblob(3000))") }
            try db.execute("COMMIT")
        }
    }

    func reader() throws -> WALReader {
        let fd = open(path + "-wal", O_RDONLY)
        #expect(fd >= 0)
        return try WALReader(file: Descriptor(fd, display: path + "-wal"))
    }

    /// Every frame handed on, checked against the file's own bytes at that frame's place (read
    /// here with Foundation, one frame at a time); the frames' count.
    func readAll(_ reader: WALReader, from cursor: WALCursor? = nil) throws -> (WALRead, Int) {
        let bytes = try Data(contentsOf: URL(fileURLWithPath: path + "-wal"))
        var handed = 0
        var mismatches = 0
        let read = try reader.read(from: cursor, limit: .max) { frame, page in
            let at = WALReader.headerSize + (frame.index - 1) * (WALReader.frameHeaderSize + 4096)
            let header = bytes[at..<(at + WALReader.frameHeaderSize)]
            let expected = bytes[(at + WALReader.frameHeaderSize)..<(at + WALReader.frameHeaderSize + 4096)]
            if !page.elementsEqual(expected) || WALReader.big32(Array(header), 0) != frame.pageNumber {
                mismatches += 1
            }
            handed += 1
        }
        #expect(mismatches == 0)
        #expect(read.frames == handed)
        return (read, handed)
    }

    @Test("a run of frames costs a few reads of the file, and each page handed on is the file's")
    func fewReads() throws {
        try insert(commits: 40, rows: 2)
        let reader = try reader()
        let (read, handed) = try readAll(reader)
        #expect(read.broken == nil && read.commits == 40)
        #expect(handed >= 80)
        // Two passes read each frame on its own before (twice the frames' count: 320 here);
        // windows that double need about a tenth of that for this -wal of 0.65 MiB.
        #expect(
            reader.ahead.fileReads * 10 < 2 * handed, "\(reader.ahead.fileReads) reads of the file for \(handed) frames"
        )
        #expect(reader.ahead.served >= 2 * handed)
        // The next read goes on from the cursor, and reads the new frames only.
        try insert(commits: 3, rows: 1)
        let next = try self.reader()
        let (more, count) = try readAll(next, from: read.cursor)
        #expect(more.commits == 3 && count >= 3, "\(count) frames")
        // The cursor's frame looked at, then the new ones twice: one read for each before (19
        // for 9 frames); three here (16 KiB, then 16 and 32 more).
        #expect(next.ahead.fileReads <= 3, "\(next.ahead.fileReads) reads for \(count) frames")
    }

    @Test("a -wal larger than both windows is read whole through them, and each page is the file's")
    func largerThanWindows() throws {
        try insert(commits: 30, rows: 12)
        let size = try #require(FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int)
        #expect(size > 2 * WALReader.ReadAhead.windowCapacity)
        let reader = try reader()
        let (read, handed) = try readAll(reader)
        #expect(read.broken == nil && read.commits == 30)
        #expect(handed == (size - WALReader.headerSize) / (WALReader.frameHeaderSize + 4096))
        #expect(reader.ahead.windows.count == 2)
    }

    @Test("a -wal cut short after it was opened hands on the whole commits still there, nothing past")
    func cutShort() throws {
        try insert(commits: 20, rows: 2)
        let reader = try reader()
        let frameSize = WALReader.frameHeaderSize + 4096
        let cut = WALReader.headerSize + 17 * frameSize + 100
        #expect(truncate(path + "-wal", off_t(cut)) == 0)
        let (read, handed) = try readAll(reader)
        #expect(read.broken == nil)
        #expect(read.commits > 0 && handed > 0)
        #expect(WALReader.headerSize + handed * frameSize <= cut, "\(handed) frames handed on")
    }
}
