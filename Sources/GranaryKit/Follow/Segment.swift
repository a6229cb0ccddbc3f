import CLinux
import CZstd
import Foundation
import GranaryDigest

#if canImport(Glibc)
    import Glibc
#endif

/// A segment: the committed transactions `follow` read from one user's stores in one round or
/// more, zstd-compressed, its content's SHA-256 at its end. Its records, uncompressed:
///
/// - `GRANARY-SEGMENT 1\n`, then `H` and the header (JSON: user, host, generation, sequence, base)
/// - per store read: `S` and the store (JSON: its member name, page size, the moment granary
///   observed its commits), then per frame `F`, the page number (4 bytes, big-endian) and the
///   page image, and after each commit frame `C` and the commit (JSON: the database's size in
///   pages after it, its frame in the `-wal`)
/// - `E` and the trailer (JSON: counts, the first and last observation, each store's cursor),
///   then the SHA-256 of every byte before it (32 bytes).
///
/// Each JSON record is its tag, a 4-byte big-endian length and the JSON. A segment holds whole
/// commits only.
public enum Segment {
    public static let magic = Array("GRANARY-SEGMENT 1\n".utf8)

    public struct Header: Codable, Sendable, Equatable {
        public var format = 1
        public var user: String
        public var host: String
        /// The generation's name: its base archive's file name.
        public var generation: String
        public var sequence: Int
        public init(user: String, host: String, generation: String, sequence: Int) {
            self.user = user
            self.host = host
            self.generation = generation
            self.sequence = sequence
        }
    }

    public struct StoreRun: Codable, Sendable, Equatable {
        /// The store's member name in the base archive.
        public var store: String
        public var pageSize: Int
        /// When granary had read these commits (microseconds since 1970): each was committed
        /// at or before it.
        public var observed: Int64
        public init(store: String, pageSize: Int, observed: Int64) {
            self.store = store
            self.pageSize = pageSize
            self.observed = observed
        }
    }

    public struct Commit: Codable, Sendable, Equatable {
        public var pages: UInt32
        public var frame: Int
        public var salt1: UInt32
    }

    /// The store's main file as seen while it had no `-wal` (or one without a header): its last
    /// change (`st_ctim`, which no user can set) and its size. While both stay the same, nothing
    /// copied frames into the file (a checkpoint writes it), so no `-wal` can have been restarted
    /// or removed with frames in it: a `-wal` that begins later is whole from its first frame.
    public struct StoreMark: Codable, Sendable, Equatable {
        /// `st_ctim` in nanoseconds since 1970.
        public var changed: Int64
        public var size: Int64
        public init(changed: Int64, size: Int64) {
            self.changed = changed
            self.size = size
        }
    }

    /// Where a store's following stands after a segment.
    public struct StoreCursor: Codable, Sendable, Equatable {
        public var device: UInt64
        public var inode: UInt64
        /// Nil while the store's `-wal` had no header.
        public var wal: WALCursor?
        /// While ``wal`` is nil: the main file when the store was seen without a `-wal` (nil when
        /// that could not be proven; then a `-wal` that begins starts a new generation).
        public var main: StoreMark?
        public init(device: UInt64, inode: UInt64, wal: WALCursor?, main: StoreMark? = nil) {
            self.device = device
            self.inode = inode
            self.wal = wal
            self.main = main
        }
    }

    public struct Trailer: Codable, Sendable, Equatable {
        public var commits = 0
        public var frames = 0
        /// The first and last observation the segment covers (microseconds).
        public var first: Int64
        public var last: Int64
        public var cursors: [String: StoreCursor] = [:]
    }

    /// A segment's object name in the repository: `USER/follow/HOST/GENERATION/SEQ-FIRST-LAST.seg`.
    public static func fileName(sequence: Int, first: Int64, last: Int64) -> String {
        let seq = String(sequence)
        return String(repeating: "0", count: max(0, 10 - seq.count)) + seq + "-"
            + ArchiveName.stamp(micros: first, precise: true) + "-" + ArchiveName.stamp(micros: last, precise: true)
            + ".seg"
    }

    /// The sequence and the observations a segment's file name gives.
    public static func parse(fileName: String) -> (sequence: Int, first: Int64, last: Int64)? {
        guard fileName.hasSuffix(".seg") else { return nil }
        let parts = fileName.dropLast(4).split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0].count == 10, let sequence = Int(parts[0]), sequence > 0,
            let first = ArchiveName.parseMicros(String(parts[1])),
            let last = ArchiveName.parseMicros(String(parts[2])), first <= last
        else { return nil }
        return (sequence, first, last)
    }

    public enum Failure: GranaryError, Equatable {
        case corrupt(path: String, reason: String)
        case io(path: String, reason: String)
        public var description: String {
            switch self {
            case .corrupt(let path, let reason): return "\(path): not a valid segment (\(reason))"
            case .io(let path, let reason): return "\(path): \(reason)"
            }
        }
    }
}

/// The JSON records of a segment written by hand: the bytes JSONEncoder gives them (sorted keys,
/// nil fields left out, `/` written `\/`), without its cost at every segment. What a reader
/// needs is JSON that decodes to the same values (SegmentTests checks both).
enum SegmentJSON {
    static func header(_ header: Segment.Header) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(160)
        out += #"{"format":"#.utf8
        number(header.format, &out)
        out += #","generation":"#.utf8
        string(header.generation, &out)
        out += #","host":"#.utf8
        string(header.host, &out)
        out += #","sequence":"#.utf8
        number(header.sequence, &out)
        out += #","user":"#.utf8
        string(header.user, &out)
        out.append(UInt8(ascii: "}"))
        return out
    }

    static func store(_ run: Segment.StoreRun) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(96)
        out += #"{"observed":"#.utf8
        number(run.observed, &out)
        out += #","pageSize":"#.utf8
        number(run.pageSize, &out)
        out += #","store":"#.utf8
        string(run.store, &out)
        out.append(UInt8(ascii: "}"))
        return out
    }

    static func trailer(_ trailer: Segment.Trailer) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(128 + 320 * trailer.cursors.count)
        out += #"{"commits":"#.utf8
        number(trailer.commits, &out)
        out += #","cursors":{"#.utf8
        for (index, name) in trailer.cursors.keys.sorted().enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            string(name, &out)
            out.append(UInt8(ascii: ":"))
            cursor(trailer.cursors[name]!, &out)
        }
        out += #"},"first":"#.utf8
        number(trailer.first, &out)
        out += #","frames":"#.utf8
        number(trailer.frames, &out)
        out += #","last":"#.utf8
        number(trailer.last, &out)
        out.append(UInt8(ascii: "}"))
        return out
    }

    static func cursor(_ cursor: Segment.StoreCursor, _ out: inout [UInt8]) {
        out += #"{"device":"#.utf8
        number(cursor.device, &out)
        out += #","inode":"#.utf8
        number(cursor.inode, &out)
        if let main = cursor.main {
            out += #","main":{"changed":"#.utf8
            number(main.changed, &out)
            out += #","size":"#.utf8
            number(main.size, &out)
            out.append(UInt8(ascii: "}"))
        }
        if let wal = cursor.wal {
            out += #","wal":{"bigEndian":"#.utf8
            out += (wal.bigEndian ? "true" : "false").utf8
            out += #","checkpointSequence":"#.utf8
            number(wal.checkpointSequence, &out)
            out += #","checksum1":"#.utf8
            number(wal.checksum1, &out)
            out += #","checksum2":"#.utf8
            number(wal.checksum2, &out)
            out += #","fileLength":"#.utf8
            number(wal.fileLength, &out)
            out += #","frame":"#.utf8
            number(wal.frame, &out)
            out += #","pageSize":"#.utf8
            number(wal.pageSize, &out)
            out += #","salt1":"#.utf8
            number(wal.salt1, &out)
            out += #","salt2":"#.utf8
            number(wal.salt2, &out)
            out.append(UInt8(ascii: "}"))
        }
        out.append(UInt8(ascii: "}"))
    }

    static let hex = Array("0123456789abcdef".utf8)

    /// The decimal digits of `value`, as `String(value)` gives them, without making the string
    /// (a trailer holds a dozen numbers a store, one trailer a segment).
    static func number(_ value: some BinaryInteger, _ out: inout [UInt8]) {
        guard let small = Int64(exactly: value) else {
            out += String(value).utf8
            return
        }
        if small < 0 { out.append(UInt8(ascii: "-")) }
        // The magnitude, as unsigned: Int64.min has none as Int64.
        var rest = small.magnitude
        let start = out.count
        repeat {
            out.append(UInt8(ascii: "0") + UInt8(rest % 10))
            rest /= 10
        } while rest > 0
        out[start...].reverse()
    }

    /// A JSON string: `"`, `\` and `/` escaped, the control characters as JSONEncoder writes
    /// them, everything else as its UTF-8.
    static func string(_ value: String, _ out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out += #"\""#.utf8
            case UInt8(ascii: "\\"): out += #"\\"#.utf8
            case UInt8(ascii: "/"): out += #"\/"#.utf8
            case 0x0A: out += #"\n"#.utf8
            case 0x0D: out += #"\r"#.utf8
            case 0x09: out += #"\t"#.utf8
            case 0x08: out += #"\b"#.utf8
            case 0x0C: out += #"\f"#.utf8
            case 0..<0x20:
                out += [
                    UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(byte >> 4)],
                    hex[Int(byte & 15)],
                ]
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}

/// A zstd compression context for segments and its output buffer, kept from one segment to the
/// next: a new context allocates and clears its tables and window (megabytes) for each segment,
/// a kept one reuses them. One writer at a time.
public final class SegmentCompressor {
    let cctx: OpaquePointer
    let output = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 17, alignment: 16)

    /// zstd's level 1: a segment is a few page images of a busy store, compressed once and
    /// shipped within a second. Level 3 made them about 1 % smaller at twice the cost, and
    /// its larger tables left the cache between two segments (docs/follow.md, "Measured").
    public static let defaultLevel: Int32 = 1

    public init(level: Int32 = SegmentCompressor.defaultLevel) {
        cctx = ZSTD_createCCtx()
        ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level)
        ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1)
    }

    deinit {
        ZSTD_freeCCtx(cctx)
        output.deallocate()
    }
}

/// Writes a segment file, streaming: the pages go through zstd as they come.
public final class SegmentWriter {
    let path: String
    /// The file's descriptor: a group's publish syncs the file through it (no second open by
    /// path), with the others of the group at once (``FollowRun/publishGrouped(delay:log:)``).
    let fd: Int32
    /// The caller's (kept from segment to segment), or one of its own.
    let compressor: SegmentCompressor
    var cctx: OpaquePointer { compressor.cctx }
    var hash = SHA256()
    public private(set) var trailer: Segment.Trailer
    var finished = false

    public init(
        path: String, header: Segment.Header, level: Int32 = SegmentCompressor.defaultLevel,
        compressor: SegmentCompressor? = nil
    ) throws {
        self.path = path
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Segment.Failure.io(path: path, reason: String(cString: strerror(errno))) }
        // A given compressor keeps its own level; a stream an earlier writer left unfinished (it
        // failed) is dropped.
        self.compressor = compressor ?? SegmentCompressor(level: level)
        ZSTD_CCtx_reset(self.compressor.cctx, ZSTD_reset_session_only)
        trailer = Segment.Trailer(first: 0, last: 0)
        try put(Segment.magic)
        try record("H", SegmentJSON.header(header))
    }

    deinit {
        close(fd)
        if !finished { unlink(path) }
    }

    public func store(_ run: Segment.StoreRun) throws {
        if trailer.first == 0 { trailer.first = run.observed }
        trailer.first = min(trailer.first, run.observed)
        trailer.last = max(trailer.last, run.observed)
        try record("S", SegmentJSON.store(run))
    }

    public func frame(_ frame: WALFrame, page: some ContiguousBytes) throws {
        var head: [UInt8] = [UInt8(ascii: "F")]
        head += Self.big32(frame.pageNumber)
        try put(head)
        try page.withUnsafeBytes { try put($0) }
        trailer.frames += 1
        if frame.isCommit {
            try commit(frame: frame.index, pages: frame.commitPages, salt1: frame.salt1)
        }
    }

    func commit(frame: Int, pages: UInt32, salt1: UInt32) throws {
        trailer.commits += 1
        // The bytes JSONEncoder (sorted keys) gives a Segment.Commit, without its cost at every
        // commit.
        let json = Array("{\"frame\":\(frame),\"pages\":\(pages),\"salt1\":\(salt1)}".utf8)
        try put([UInt8(ascii: "C")] + Self.big32(UInt32(json.count)) + json)
    }

    /// Copies a record read from another segment of the same generation (``SegmentReader``):
    /// what merging segments writes, the earlier one's records first. The header and the trailer
    /// are this segment's own (its first and last observation reach over every run copied).
    public func copy(_ record: SegmentReader.Record) throws {
        switch record {
        case .header: break
        case .store(let run): try store(run)
        case .frame(let pageNumber, let page):
            try put([UInt8(ascii: "F")] + Self.big32(pageNumber))
            try put(page)
            trailer.frames += 1
        case .commit(let c): try self.commit(frame: c.frame, pages: c.pages, salt1: c.salt1)
        }
    }

    /// Ends the segment (the trailer, the digest) and syncs it; `sync` false leaves the sync to
    /// the caller (a local repository's publish syncs the file it renames).
    public func finish(first: Int64, last: Int64, cursors: [String: Segment.StoreCursor], sync: Bool = true) throws {
        trailer.first = trailer.first == 0 ? first : min(trailer.first, first)
        trailer.last = max(trailer.last, last)
        trailer.cursors = cursors
        try record("E", SegmentJSON.trailer(trailer))
        let digest = Array(hash.finalize())
        try compress(digest.withUnsafeBytes { $0 }, hashing: false, end: false)
        try compress(UnsafeRawBufferPointer(start: nil, count: 0), hashing: false, end: true)
        if sync, fsync(fd) != 0 {
            throw Segment.Failure.io(path: path, reason: "fsync: \(String(cString: strerror(errno)))")
        }
        finished = true
    }

    /// Starts writing the finished file's bytes out without waiting for them
    /// (`sync_file_range(2)`): started for every segment of a pass before the first is synced,
    /// their blocks are allocated together and the first sync commits them all.
    public func startWriteback() {
        _ = granary_start_writeback(fd, 0, 0)
    }

    func record(_ tag: Character, _ json: [UInt8]) throws {
        var bytes: [UInt8] = [UInt8(tag.asciiValue!)]
        bytes.reserveCapacity(5 + json.count)
        bytes += Self.big32(UInt32(json.count))
        bytes += json
        try put(bytes)
    }

    func put(_ bytes: [UInt8]) throws { try bytes.withUnsafeBytes { try put($0) } }

    func put(_ bytes: UnsafeRawBufferPointer) throws { try compress(bytes, hashing: true, end: false) }

    func compress(_ bytes: UnsafeRawBufferPointer, hashing: Bool, end: Bool) throws {
        if hashing { hash.update(bufferPointer: bytes) }
        var input = ZSTD_inBuffer(src: bytes.baseAddress, size: bytes.count, pos: 0)
        while true {
            let out = compressor.output
            var buffer = ZSTD_outBuffer(dst: out.baseAddress, size: out.count, pos: 0)
            let remaining = ZSTD_compressStream2(cctx, &buffer, &input, end ? ZSTD_e_end : ZSTD_e_continue)
            if ZSTD_isError(remaining) != 0 {
                throw Segment.Failure.io(path: path, reason: String(cString: ZSTD_getErrorName(remaining)))
            }
            let produced = buffer.pos
            if produced > 0 {
                do {
                    try FileSystem.writeAll(fd, UnsafeRawBufferPointer(rebasing: out[0..<produced]), path: path)
                } catch {
                    throw Segment.Failure.io(path: path, reason: "\(error)")
                }
            }
            if end ? remaining == 0 : input.pos == input.size { break }
        }
    }

    static func big32(_ value: UInt32) -> [UInt8] {
        [
            UInt8(value >> 24), UInt8(truncatingIfNeeded: value >> 16), UInt8(truncatingIfNeeded: value >> 8),
            UInt8(truncatingIfNeeded: value),
        ]
    }
}

/// Reads a segment file, streaming, checking its digest: ``read(_:)`` hands each record to a
/// visitor and throws at the end when the digest does not match (so a caller that must apply
/// only checked bytes reads twice: ``check(_:)`` first).
public struct SegmentReader {
    public enum Record {
        case header(Segment.Header)
        case store(Segment.StoreRun)
        case frame(pageNumber: UInt32, page: UnsafeRawBufferPointer)
        case commit(Segment.Commit)
    }

    /// The most a JSON record may hold (a trailer lists every store's cursor).
    static let maxRecord = 16 << 20

    /// Checks the segment's digest and returns its header and trailer.
    public static func check(_ path: String) throws -> (Segment.Header, Segment.Trailer) {
        var header: Segment.Header?
        let trailer = try read(path) { record in
            if case .header(let h) = record { header = h }
        }
        guard let header else { throw Segment.Failure.corrupt(path: path, reason: "no header") }
        return (header, trailer)
    }

    /// Reads every record; returns the trailer once the digest checked out.
    @discardableResult
    public static func read(_ path: String, visit: (Record) throws -> Void) throws -> Segment.Trailer {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw Segment.Failure.io(path: path, reason: String(cString: strerror(errno))) }
        defer { close(fd) }
        var stream = Decompressed(fd: fd, path: path)
        defer { stream.free() }
        var hash = SHA256()
        func take(_ count: Int) throws -> [UInt8] {
            let bytes = try stream.take(count)
            hash.update(data: bytes)
            return bytes
        }
        guard try take(Segment.magic.count) == Segment.magic else {
            throw Segment.Failure.corrupt(path: path, reason: "no segment magic")
        }
        var pageSize = 0
        var sawHeader = false
        let decoder = JSONDecoder()
        while true {
            let tag = try take(1)[0]
            switch tag {
            case UInt8(ascii: "F"):
                guard pageSize > 0 else {
                    throw Segment.Failure.corrupt(path: path, reason: "a frame before its store")
                }
                let number = try take(4)
                let page = try take(pageSize)
                let pageNumber =
                    UInt32(number[0]) << 24 | UInt32(number[1]) << 16 | UInt32(number[2]) << 8 | UInt32(number[3])
                try page.withUnsafeBytes { try visit(.frame(pageNumber: pageNumber, page: $0)) }
            case UInt8(ascii: "H"), UInt8(ascii: "S"), UInt8(ascii: "C"), UInt8(ascii: "E"):
                let length = try take(4)
                let count = Int(length[0]) << 24 | Int(length[1]) << 16 | Int(length[2]) << 8 | Int(length[3])
                guard count <= maxRecord else { throw Segment.Failure.corrupt(path: path, reason: "a record too long") }
                let json = Data(try take(count))
                do {
                    switch tag {
                    case UInt8(ascii: "H"):
                        sawHeader = true
                        try visit(.header(try decoder.decode(Segment.Header.self, from: json)))
                    case UInt8(ascii: "S"):
                        guard sawHeader else { throw Segment.Failure.corrupt(path: path, reason: "no header") }
                        let run = try decoder.decode(Segment.StoreRun.self, from: json)
                        guard run.pageSize >= 512, run.pageSize <= 65536, run.pageSize & (run.pageSize - 1) == 0 else {
                            throw Segment.Failure.corrupt(path: path, reason: "page size \(run.pageSize)")
                        }
                        pageSize = run.pageSize
                        try visit(.store(run))
                    case UInt8(ascii: "C"):
                        try visit(.commit(try decoder.decode(Segment.Commit.self, from: json)))
                    default:
                        let trailer = try decoder.decode(Segment.Trailer.self, from: json)
                        let want = Array(hash.finalize())
                        let got = try stream.take(32)
                        guard got == want else {
                            throw Segment.Failure.corrupt(path: path, reason: "its SHA-256 does not match")
                        }
                        guard try stream.atEnd() else {
                            throw Segment.Failure.corrupt(path: path, reason: "bytes after its end")
                        }
                        return trailer
                    }
                } catch let error as DecodingError {
                    throw Segment.Failure.corrupt(path: path, reason: "a record does not decode: \(error)")
                }
            default:
                throw Segment.Failure.corrupt(path: path, reason: "unknown record \(tag)")
            }
        }
    }

    /// zstd's output, taken a few bytes at a time.
    struct Decompressed {
        let fd: Int32
        let path: String
        let dctx = ZSTD_createDCtx()
        var input = [UInt8](repeating: 0, count: 1 << 17)
        var inputPos = 0
        var inputSize = 0
        var output = [UInt8](repeating: 0, count: 1 << 17)
        var outputPos = 0
        var outputSize = 0
        var inputEnded = false
        var frameEnded = true

        mutating func free() { ZSTD_freeDCtx(dctx) }

        mutating func fill() throws -> Bool {
            while outputPos == outputSize {
                if inputPos == inputSize && !inputEnded {
                    let n = input.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
                    if n < 0 {
                        if errno == EINTR { continue }
                        throw Segment.Failure.io(path: path, reason: String(cString: strerror(errno)))
                    }
                    if n == 0 { inputEnded = true } else { inputPos = 0; inputSize = n }
                }
                if inputPos == inputSize && inputEnded { return false }
                var inBuffer = ZSTD_inBuffer(src: nil, size: inputSize, pos: inputPos)
                var produced = 0
                let rc = input.withUnsafeBytes { inBytes in
                    output.withUnsafeMutableBytes { outBytes in
                        inBuffer.src = inBytes.baseAddress
                        var outBuffer = ZSTD_outBuffer(dst: outBytes.baseAddress, size: outBytes.count, pos: 0)
                        let rc = ZSTD_decompressStream(dctx, &outBuffer, &inBuffer)
                        produced = outBuffer.pos
                        return rc
                    }
                }
                if ZSTD_isError(rc) != 0 {
                    throw Segment.Failure.corrupt(path: path, reason: String(cString: ZSTD_getErrorName(rc)))
                }
                frameEnded = rc == 0
                inputPos = inBuffer.pos
                outputPos = 0
                outputSize = produced
            }
            return true
        }

        mutating func take(_ count: Int) throws -> [UInt8] {
            var result: [UInt8] = []
            result.reserveCapacity(count)
            while result.count < count {
                guard try fill() else { throw Segment.Failure.corrupt(path: path, reason: "it ends early") }
                let n = min(count - result.count, outputSize - outputPos)
                result += output[outputPos..<(outputPos + n)]
                outputPos += n
            }
            return result
        }

        mutating func atEnd() throws -> Bool { try !fill() && frameEnded }
    }
}
