import Foundation
import Testing

@testable import GranaryKit

#if canImport(Glibc)
    import Glibc
#endif

/// Segments as `follow` writes them: read back record for record, and refused whole when a
/// byte changed, when they end early, or when their name does not parse.
@Suite("follow segments")
struct SegmentTests {
    let folder = TemporaryFolder("granary-segment")

    /// A segment of two commits read from a real -wal.
    func write(_ path: String) throws -> (frames: [WALFrame], pages: [[UInt8]]) {
        let store = folder.child("Notes.sqlite")
        let db = try Database(path: store, mode: .create)
        try db.execute("PRAGMA journal_mode=WAL")
        try db.execute("PRAGMA wal_autocheckpoint=0")
        try db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body BLOB)")
        try db.run("INSERT INTO notes(body) VALUES (randomblob(5000))")
        let fd = open(store + "-wal", O_RDONLY)
        let reader = try WALReader(file: Descriptor(fd, display: store + "-wal"))
        let writer = try SegmentWriter(
            path: path, header: Segment.Header(user: "alice", host: "h", generation: "G", sequence: 1))
        var taken: [WALFrame] = []
        var pages: [[UInt8]] = []
        try writer.store(Segment.StoreRun(store: "Notes.sqlite", pageSize: 4096, observed: 1_000_000))
        let read = try reader.read(from: nil, limit: .max) { frame, page in
            taken.append(frame)
            pages.append(Array(page))
            try writer.frame(frame, page: page)
        }
        try writer.finish(
            first: 1_000_000, last: 2_000_000,
            cursors: ["Notes.sqlite": Segment.StoreCursor(device: 1, inode: 2, wal: read.cursor)])
        return (taken, pages)
    }

    @Test("a segment reads back frame for frame, with its trailer's cursors")
    func roundTrip() throws {
        let path = folder.child("1.seg")
        let (frames, pages) = try write(path)
        #expect(frames.count >= 2)
        var seen: [(UInt32, [UInt8])] = []
        var commits = 0
        let trailer = try SegmentReader.read(path) { record in
            switch record {
            case .frame(let number, let page): seen.append((number, Array(page)))
            case .commit: commits += 1
            default: break
            }
        }
        #expect(seen.map(\.0) == frames.map(\.pageNumber))
        #expect(seen.map(\.1) == pages)
        #expect(commits == frames.filter(\.isCommit).count)
        #expect(trailer.commits == commits && trailer.frames == frames.count)
        #expect(trailer.cursors["Notes.sqlite"]?.wal?.frame == frames.last?.index)
        #expect(trailer.first == 1_000_000 && trailer.last == 2_000_000)
    }

    @Test("segments merged record for record read back as the earlier one's records, then the later one's")
    func merged() throws {
        let earlier = folder.child("1.seg")
        let (frames, pages) = try write(earlier)
        // A later round of the same store, observed later: the same frames under another run.
        let later = folder.child("2.seg")
        let second = try SegmentWriter(
            path: later, header: Segment.Header(user: "alice", host: "h", generation: "G", sequence: 2))
        try second.store(Segment.StoreRun(store: "Notes.sqlite", pageSize: 4096, observed: 3_000_000))
        for (frame, page) in zip(frames, pages) { try second.frame(frame, page: page) }
        let cursors = ["Notes.sqlite": Segment.StoreCursor(device: 1, inode: 2, wal: nil)]
        try second.finish(first: 2_500_000, last: 4_000_000, cursors: cursors)

        let path = folder.child("merged.seg")
        let writer = try SegmentWriter(
            path: path, header: Segment.Header(user: "alice", host: "h", generation: "G", sequence: 1))
        try SegmentReader.read(earlier) { try writer.copy($0) }
        try SegmentReader.read(later) { try writer.copy($0) }
        try writer.finish(first: 1_000_000, last: 4_000_000, cursors: cursors)

        var runs: [Int64] = []
        var seen: [(UInt32, [UInt8])] = []
        var commits = 0
        var header: Segment.Header?
        let trailer = try SegmentReader.read(path) { record in
            switch record {
            case .header(let h): header = h
            case .store(let run): runs.append(run.observed)
            case .frame(let number, let page): seen.append((number, Array(page)))
            case .commit: commits += 1
            }
        }
        #expect(header?.sequence == 1)
        #expect(runs == [1_000_000, 3_000_000])
        #expect(seen.map(\.0) == frames.map(\.pageNumber) + frames.map(\.pageNumber))
        #expect(seen.map(\.1) == pages + pages)
        #expect(commits == 2 * frames.filter(\.isCommit).count)
        #expect(trailer.commits == commits && trailer.frames == 2 * frames.count)
        #expect(trailer.first == 1_000_000 && trailer.last == 4_000_000)
        #expect(trailer.cursors == cursors)

        // A merge of a damaged segment fails at its end: nothing finished.
        let damaged = folder.child("damaged.seg")
        var bytes = try Array(Data(contentsOf: URL(fileURLWithPath: later)))
        bytes[bytes.count / 2] ^= 0x40
        try Data(bytes).write(to: URL(fileURLWithPath: damaged))
        let refused = folder.child("refused.seg")
        do {
            let writer = try SegmentWriter(
                path: refused, header: Segment.Header(user: "alice", host: "h", generation: "G", sequence: 1))
            #expect(throws: Segment.Failure.self) {
                try SegmentReader.read(earlier) { try writer.copy($0) }
                try SegmentReader.read(damaged) { try writer.copy($0) }
            }
        }
        #expect(!FileManager.default.fileExists(atPath: refused), "an unfinished merge leaves no file")
    }

    @Test(
        "a parcel's rounds merge into the segment its name says: the first header, every run, the last cursors; a part of another generation, a damaged part or another name is refused, leaving no file"
    )
    func shipperMerge() throws {
        let first = folder.child("r1.seg")
        let (frames, pages) = try write(first)
        func round(_ name: String, generation: String = "G", sequence: Int, observed: Int64, cursor: UInt64) throws
            -> String
        {
            let path = folder.child(name)
            let writer = try SegmentWriter(
                path: path, header: Segment.Header(user: "alice", host: "h", generation: generation, sequence: sequence)
            )
            try writer.store(Segment.StoreRun(store: "Notes.sqlite", pageSize: 4096, observed: observed))
            for (frame, page) in zip(frames, pages) { try writer.frame(frame, page: page) }
            try writer.finish(
                first: observed - 500_000, last: observed + 1_000_000,
                cursors: ["Notes.sqlite": Segment.StoreCursor(device: 1, inode: cursor, wal: nil)])
            return path
        }
        let second = try round("r2.seg", sequence: 2, observed: 3_000_000, cursor: 20)
        let third = try round("r3.seg", sequence: 3, observed: 5_000_000, cursor: 30)
        func parcel(_ parts: [String], last: Int64 = 6_000_000) throws -> SegmentShipper.Parcel {
            SegmentShipper.Parcel(
                user: try UserID("alice"), sequence: 1,
                object: "alice/follow/h/G/" + Segment.fileName(sequence: 1, first: 1_000_000, last: last), file: first,
                parts: parts)
        }
        let entries = { (try? FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()) ?? [] }
        let before = entries()

        let path = try SegmentShipper.merged(try parcel([second, third]), compressor: SegmentCompressor())
        var header: Segment.Header?
        var runs: [Int64] = []
        let trailer = try SegmentReader.read(path) { record in
            if case .header(let h) = record { header = h }
            if case .store(let run) = record { runs.append(run.observed) }
        }
        #expect(header == Segment.Header(user: "alice", host: "h", generation: "G", sequence: 1))
        #expect(runs == [1_000_000, 3_000_000, 5_000_000])
        #expect(trailer.first == 1_000_000 && trailer.last == 6_000_000)
        #expect(trailer.commits == 3 * frames.filter(\.isCommit).count && trailer.frames == 3 * frames.count)
        #expect(trailer.cursors["Notes.sqlite"]?.inode == 30, "the last round's cursors")
        unlink(path)
        #expect(entries() == before)

        // Refused, each leaving no file behind: another name, a round of another generation, a
        // damaged round.
        let other = try round("other.seg", generation: "H", sequence: 2, observed: 3_000_000, cursor: 20)
        let damaged = folder.child("damaged.seg")
        var bytes = try Array(Data(contentsOf: URL(fileURLWithPath: third)))
        bytes[bytes.count / 2] ^= 0x40
        try Data(bytes).write(to: URL(fileURLWithPath: damaged))
        let listed = entries()
        for refused in [
            try parcel([second, third], last: 5_999_999), try parcel([other]), try parcel([second, damaged]),
        ] {
            #expect(throws: Segment.Failure.self) {
                try SegmentShipper.merged(refused, compressor: SegmentCompressor())
            }
            #expect(entries() == listed, "\(refused.parts)")
        }
    }

    /// Names a user may give a store or its folders: links' slashes, quotes, backslashes,
    /// control characters, and letters beyond ASCII.
    static let awkward = [
        "Notes.sqlite", "Library/Application Support/App/Store.sqlite", "a\"quoted\".sqlite", "back\\slash",
        "tab\tnew\nline\rcr\u{08}\u{0C}\u{01}\u{1F}", "café/naïve/日本.sqlite", "emoji 🐘.db", "",
    ]

    @Test("the header, store and trailer records are the bytes JSONEncoder gives, and decode to the same values")
    func recordsAsJSONEncoder() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let decoder = JSONDecoder()
        let wal = WALCursor(
            salt1: 0xFFFF_FFFF, salt2: 7, checkpointSequence: 3, pageSize: 65536, bigEndian: true, frame: 12,
            checksum1: 0x8000_0000, checksum2: 0, fileLength: 1 << 40)
        for name in Self.awkward {
            let header = Segment.Header(user: "u-\(name)", host: name, generation: name + ".tar.zst", sequence: 42)
            let run = Segment.StoreRun(store: name, pageSize: 4096, observed: 1_764_000_000_123_456)
            var trailer = Segment.Trailer(first: -5, last: Int64.max)
            trailer.commits = 3
            trailer.frames = 9
            trailer.cursors = [
                name: Segment.StoreCursor(device: .max, inode: 1, wal: wal),
                name + "-2": Segment.StoreCursor(
                    device: 2, inode: 3, wal: nil, main: Segment.StoreMark(changed: 1_764_000_000_000_000_001, size: 0)),
                name + "-3": Segment.StoreCursor(device: 4, inode: 5, wal: nil),
            ]
            #expect(try decoder.decode(Segment.Header.self, from: Data(SegmentJSON.header(header))) == header)
            #expect(try decoder.decode(Segment.StoreRun.self, from: Data(SegmentJSON.store(run))) == run)
            #expect(try decoder.decode(Segment.Trailer.self, from: Data(SegmentJSON.trailer(trailer))) == trailer)
            // Byte for byte what JSONEncoder wrote before (whose order of dictionary keys beyond
            // ASCII need not match: a reader does not care).
            #expect(SegmentJSON.header(header) == Array(try encoder.encode(header)), "\(name)")
            #expect(SegmentJSON.store(run) == Array(try encoder.encode(run)), "\(name)")
            if name.utf8.allSatisfy({ $0 < 0x80 }) {
                #expect(SegmentJSON.trailer(trailer) == Array(try encoder.encode(trailer)), "\(name)")
            }
        }
    }

    @Test("a number in a record is the digits String gives it, at every edge")
    func numbersAsString() {
        func digits(_ value: some BinaryInteger) -> String {
            var out: [UInt8] = [UInt8(ascii: "x")]
            SegmentJSON.number(value, &out)
            return String(decoding: out.dropFirst(), as: UTF8.self)
        }
        var values: [Int64] = [0, 1, -1, 9, 10, -10, 99, 100, Int64.max, Int64.min, Int64.max - 1, Int64.min + 1]
        var power: Int64 = 1
        for _ in 0..<18 {
            power *= 10
            values += [power - 1, power, power + 1, -power]
        }
        for value in values { #expect(digits(value) == String(value)) }
        for value: UInt64 in [0, 7, UInt64(Int64.max), UInt64(Int64.max) + 1, .max] {
            #expect(digits(value) == String(value))
        }
        for value: UInt32 in [0, 0x8000_0000, .max] { #expect(digits(value) == String(value)) }
        #expect(digits(Int32.min) == String(Int32.min))
    }

    @Test("a segment with awkward store names reads back: its store records and trailer as written")
    func awkwardNamesRoundTrip() throws {
        let path = folder.child("awkward.seg")
        let writer = try SegmentWriter(
            path: path, header: Segment.Header(user: "alice", host: "h/ost", generation: "G\"1", sequence: 7))
        let page = [UInt8](repeating: 0xA5, count: 512)
        var cursors: [String: Segment.StoreCursor] = [:]
        for (index, name) in Self.awkward.enumerated() {
            try writer.store(Segment.StoreRun(store: name, pageSize: 512, observed: 1_000_000 + Int64(index)))
            try writer.frame(WALFrame(pageNumber: 1, commitPages: 1, index: 1, salt1: 9), page: page)
            cursors[name] = Segment.StoreCursor(device: 1, inode: UInt64(index), wal: nil)
        }
        try writer.finish(first: 1_000_000, last: 2_000_000, cursors: cursors)
        var header: Segment.Header?
        var stores: [String] = []
        let trailer = try SegmentReader.read(path) { record in
            switch record {
            case .header(let h): header = h
            case .store(let run): stores.append(run.store)
            default: break
            }
        }
        #expect(header == Segment.Header(user: "alice", host: "h/ost", generation: "G\"1", sequence: 7))
        #expect(stores == Self.awkward)
        #expect(trailer.cursors == cursors)
        #expect(trailer.commits == Self.awkward.count && trailer.frames == Self.awkward.count)
    }

    @Test("a changed byte, a cut file or trailing bytes are refused")
    func damaged() throws {
        let changed = folder.child("one.seg")
        do {
            let writer = try SegmentWriter(
                path: changed, header: Segment.Header(user: "alice", host: "h", generation: "G", sequence: 1))
            try writer.store(Segment.StoreRun(store: "Notes.sqlite", pageSize: 4096, observed: 1))
            let page = [UInt8](repeating: 7, count: 4096)
            try page.withUnsafeBytes {
                try writer.frame(WALFrame(pageNumber: 1, commitPages: 1, index: 1, salt1: 1), page: $0)
            }
            try writer.finish(first: 1, last: 1, cursors: [:])
        }
        var raw = [UInt8](try Data(contentsOf: URL(fileURLWithPath: changed)))
        #expect(try SegmentReader.check(changed).1.frames == 1)
        // A cut segment.
        let cut = folder.child("cut.seg")
        try Data(raw.prefix(raw.count / 2)).write(to: URL(fileURLWithPath: cut))
        #expect(throws: Segment.Failure.self) { try SegmentReader.check(cut) }
        // A flipped compressed byte: zstd or the digest refuses it.
        raw[raw.count / 2] ^= 0x40
        let flipped = folder.child("flipped.seg")
        try Data(raw).write(to: URL(fileURLWithPath: flipped))
        #expect(throws: Segment.Failure.self) { try SegmentReader.check(flipped) }
        // Not a segment at all.
        let junk = folder.child("junk.seg")
        try Data(repeating: 1, count: 1000).write(to: URL(fileURLWithPath: junk))
        #expect(throws: Segment.Failure.self) { try SegmentReader.check(junk) }
    }

    @Test("segment names sort by sequence and parse back; other names are not segments")
    func names() throws {
        let name = Segment.fileName(sequence: 12, first: 1_764_400_000_123_456, last: 1_764_400_001_000_001)
        #expect(name.hasPrefix("0000000012-"))
        let parsed = try #require(Segment.parse(fileName: name))
        #expect(parsed.sequence == 12 && parsed.first == 1_764_400_000_123_456 && parsed.last == 1_764_400_001_000_001)
        #expect(Segment.fileName(sequence: 9, first: 1, last: 2) < Segment.fileName(sequence: 10, first: 1, last: 2))
        #expect(Segment.parse(fileName: "12-x-y.seg") == nil)
        #expect(Segment.parse(fileName: name + ".tmp") == nil)
        // Last before first is no segment granary wrote.
        #expect(Segment.parse(fileName: Segment.fileName(sequence: 1, first: 5_000_000, last: 1_000_000)) == nil)
    }
}
