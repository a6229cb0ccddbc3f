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
    /// The WAL reader tests' store: automatic checkpoints off, one connection writing.
    let store: WALReaderTests.Store
    var path: String { store.path }
    var db: Database { store.db }

    init() throws { store = try WALReaderTests.Store() }

    func insert(commits: Int, rows: Int) throws {
        for _ in 0..<commits { try store.insert(rows) }
    }

    func reader() throws -> WALReader { try store.reader() }

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
        #expect(size > 2 * WALReader.ReadAhead.defaultWindowCapacity)
        let reader = try reader()
        let (read, handed) = try readAll(reader)
        #expect(read.broken == nil && read.commits == 30)
        #expect(handed == (size - WALReader.headerSize) / (WALReader.frameHeaderSize + 4096))
        // The windows were filled again as the run went past them, and the first pass's frames
        // that had left them were read again for the second.
        #expect(reader.ahead.fileReads > 2 * 6, "\(reader.ahead.fileReads)")
    }

    @Test("a frame read again from the file and changed since the first pass fails the read")
    func changedWhenReadAgain() throws {
        try insert(commits: 20, rows: 1)
        let frameSize = WALReader.frameHeaderSize + 4096
        // Windows of three frames: by the second pass, the first frames have left them.
        let fd = open(path + "-wal", O_RDWR)
        #expect(fd >= 0)
        defer { close(fd) }
        let reader = try WALReader(file: Descriptor(dup(fd), display: path + "-wal"), windowCapacity: 3 * frameSize)
        var handed = 0
        #expect(throws: WALReader.Failure.changedWhileRead(path: path + "-wal", frame: 5)) {
            _ = try reader.read(from: nil, limit: .max) { frame, _ in
                handed += 1
                if frame.index == 1 {
                    // The second pass has frames 1 to 3 in a window now (read again from the
                    // file); the owner rewrites a byte of the fifth frame's page, which it reads
                    // again next, after the fourth.
                    var byte: UInt8 = 0
                    let at = off_t(WALReader.headerSize + 4 * frameSize + WALReader.frameHeaderSize + 100)
                    #expect(pread(fd, &byte, 1, at) == 1)
                    byte ^= 0xFF
                    #expect(pwrite(fd, &byte, 1, at) == 1)
                }
            }
        }
        #expect(handed == 4)
    }

    @Test("after a restart, a -wal cut while its old chain's tail is read proves nothing: tailUnproven")
    func cutDuringTail() throws {
        try insert(commits: 6, rows: 1)
        let (first, _) = try readAll(try reader())
        let cursor = try #require(first.cursor)
        try insert(commits: 1, rows: 1)
        try db.checkpoint(.restart)
        try insert(commits: 1, rows: 1)
        let frameSize = WALReader.frameHeaderSize + 4096
        // Opened (its length counted) before the cut: the old tail's second frame is gone.
        let reader = try reader()
        let cut = WALReader.headerSize + (cursor.frame + 1) * frameSize + 10
        #expect(truncate(path + "-wal", off_t(cut)) == 0)
        var handed = 0
        let read = try reader.read(from: cursor, limit: .max) { _, _ in handed += 1 }
        #expect(handed == 0)
        guard case .tailUnproven = read.broken else {
            Issue.record("a cut file was taken for the old chain's end: \(String(describing: read.broken))")
            return
        }
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
