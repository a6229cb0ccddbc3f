import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Phase 2's copy (issue 51): the pages of a live WAL store in the state one read transaction
/// reads, read one by one from the database file and the `-wal` beneath the user's folder, so
/// that a `backup --delta` reads only the pages `follow` saw change instead of copying every page
/// through SQLite's backup API.
///
/// The state is the one of a wal-index header (``init(store:header:pageSize:pageCount:wanted:)``):
/// the caller proves that its read transaction reads that header's state (the same header before
/// the transaction began and once it had, so nothing committed in between). A page's bytes in that
/// state are those of its newest frame among frames 1 to the header's `mxFrame` of the header's
/// chain (its salts), or else the database file's. Frames 1 to `mxFrame` are read once, in order,
/// each one's salts and the checksum chain checked, and the chain must end on the header's own
/// frame checksum: the frames are those SQLite indexed. While the transaction holds its read mark:
/// - no checkpoint writes a page into the database file past the transaction's state (a reader's
///   mark bounds the frames a checkpoint copies, and a reader that ignores the `-wal` stops the
///   copying), so a page without a frame in the state has its bytes in the database file;
/// - the frames of the state are overwritten only after the `-wal` restarts, which needs every
///   frame copied into the database file and a reader that ignores the `-wal`: each frame is read
///   again with its header, and a frame of another chain (other salts) or of another page is
///   refused (``Unusable``), never used.
///
/// Memory: one entry per frame of the state that names a wanted page.
/// Invariant D14 (docs/delta-invariants.md)
final class LivePages {
    let pageSize: Int
    let pageCount: Int
    private let database: Descriptor
    private let wal: Descriptor?
    /// Page index (from 0) to its newest frame (from 1) in the state.
    private var frames: [Int: Frame] = [:]
    /// Whether the chain's checksums are taken big-endian (the `-wal` header's magic).
    private var bigEndian = false

    /// A wanted page's newest frame in the state, with the running checksum before it and its
    /// own (as its header holds it): a frame read again is checked against both, so that a
    /// `-wal` restarted as it is read (possible while the read transaction uses only the
    /// database file, when every frame had been copied into it) is never taken half old, half new.
    struct Frame {
        let number: Int
        let before: (UInt32, UInt32)
        let after: (UInt32, UInt32)
    }
    /// The chain's salts, as the header and each frame hold them (8 bytes).
    private let salts: [UInt8]
    private var frameBuffer: [UInt8]

    /// Why the pages cannot be read this way (the copy then goes through SQLite's backup API).
    struct Unusable: Error, Equatable {
        let reason: String
        init(_ reason: String) { self.reason = reason }
    }

    /// The pages of `store` in the state of the wal-index `header` (96 bytes: both copies, equal),
    /// which holds `pageCount` pages of `pageSize` bytes; frames are indexed for pages `wanted`
    /// says (index from 0).
    init(store: StoreFile, header: [UInt8], pageSize: Int, pageCount: Int, wanted: (Int) -> Bool) throws(Unusable) {
        self.pageSize = pageSize
        self.pageCount = pageCount
        frameBuffer = [UInt8](repeating: 0, count: WALFormat.frameHeader + pageSize)
        guard header.count >= 96, header[0..<48] == header[48..<96] else {
            throw Unusable("the wal-index header is being written")
        }
        let index = WALIndexHeader(header)
        guard index.version == 3_007_000, index.isInit != 0 else { throw Unusable("the wal-index header is not valid") }
        salts = Array(header[32..<40])
        do {
            database = try store.folder.openFile(store.fileName, .read)
            let info = try database.status()
            guard UInt64(info.st_dev) == store.device, UInt64(info.st_ino) == store.inode else {
                throw Unusable("the store was replaced as its pages were read")
            }
        } catch let error as Unusable {
            throw error
        } catch {
            throw Unusable("the store cannot be opened (\(error))")
        }
        guard index.mxFrame > 0 else {
            wal = nil
            return
        }
        guard Int(index.pages) == pageCount else {
            throw Unusable("the wal-index says \(index.pages) pages, the read transaction \(pageCount)")
        }
        do {
            let file = try store.folder.openFile(store.fileName + "-wal", .read)
            guard try file.status().st_uid == store.uid else { throw Unusable("the -wal is not the store owner's") }
            wal = file
        } catch let error as Unusable {
            throw error
        } catch {
            throw Unusable("the -wal cannot be opened (\(error))")
        }
        try indexFrames(
            upTo: Int(index.mxFrame), checksum: (index.frameChecksum1, index.frameChecksum2), wanted: wanted)
    }

    /// Reads frames 1 to `last`, checks the chain, and keeps each wanted page's newest frame.
    private func indexFrames(upTo last: Int, checksum: (UInt32, UInt32), wanted: (Int) -> Bool) throws(Unusable) {
        guard let wal else { return }
        var head = [UInt8](repeating: 0, count: WALFormat.header)
        guard read(wal, into: &head, at: 0) else { throw Unusable("the -wal has no header") }
        let magic = WALFormat.big32(head, 0)
        guard magic == 0x377f_0682 || magic == 0x377f_0683 else { throw Unusable("the -wal has no header") }
        let bigEndian = magic == 0x377f_0683
        self.bigEndian = bigEndian
        guard Int(WALFormat.big32(head, 8)) == pageSize else {
            throw Unusable("the -wal has pages of \(WALFormat.big32(head, 8)) bytes, the store \(pageSize)")
        }
        guard Array(head[16..<24]) == salts else { throw Unusable("the -wal is not the wal-index header's chain") }
        var s1: UInt32 = 0
        var s2: UInt32 = 0
        head.withUnsafeBytes { WALFormat.checksum($0[0..<24], bigEndian: bigEndian, &s1, &s2) }
        guard s1 == WALFormat.big32(head, 24), s2 == WALFormat.big32(head, 28) else {
            throw Unusable("the -wal header does not check")
        }
        let frameSize = WALFormat.frameHeader + pageSize
        // 64 frames at a time.
        let batch = 64
        var chunk = [UInt8](repeating: 0, count: batch * frameSize)
        var frame = 1
        while frame <= last {
            let count = min(batch, last - frame + 1)
            if chunk.count != count * frameSize { chunk = [UInt8](repeating: 0, count: count * frameSize) }
            guard read(wal, into: &chunk, at: WALFormat.offset(ofFrame: frame, pageSize: pageSize)) else {
                throw Unusable("the -wal ends before frame \(last)")
            }
            for index in 0..<count {
                let at = index * frameSize
                guard chunk[at + 8..<at + 16].elementsEqual(salts) else {
                    throw Unusable("frame \(frame + index) is not of the wal-index header's chain")
                }
                let before = (s1, s2)
                chunk.withUnsafeBytes {
                    WALFormat.checksum($0[at..<at + 8], bigEndian: bigEndian, &s1, &s2)
                    WALFormat.checksum($0[at + WALFormat.frameHeader..<at + frameSize], bigEndian: bigEndian, &s1, &s2)
                }
                guard s1 == WALFormat.big32(chunk, at + 16), s2 == WALFormat.big32(chunk, at + 20) else {
                    throw Unusable("frame \(frame + index) does not check")
                }
                let page = Int(WALFormat.big32(chunk, at))
                guard page > 0 else { throw Unusable("frame \(frame + index) names page 0") }
                if page <= pageCount && wanted(page - 1) {
                    frames[page - 1] = Frame(number: frame + index, before: before, after: (s1, s2))
                }
            }
            frame += count
        }
        guard s1 == checksum.0, s2 == checksum.1 else {
            throw Unusable("the -wal's frames do not end on the wal-index header's checksum")
        }
    }

    /// Page `page` (index from 0) into `buffer` (`pageSize` bytes): its frame's bytes, read again
    /// with the frame's header (of the same chain and page), or the database file's (zeros past
    /// its end, as SQLite reads them).
    func read(page: Int, into buffer: UnsafeMutableRawBufferPointer) throws(Unusable) {
        if let frame = frames[page], let wal {
            var s1 = frame.before.0
            var s2 = frame.before.1
            let read = read(wal, into: &frameBuffer, at: WALFormat.offset(ofFrame: frame.number, pageSize: pageSize))
            if read {
                frameBuffer.withUnsafeBytes {
                    WALFormat.checksum($0[0..<8], bigEndian: bigEndian, &s1, &s2)
                    WALFormat.checksum($0[WALFormat.frameHeader...], bigEndian: bigEndian, &s1, &s2)
                }
            }
            // The same chain, page and checksums as when it was indexed: header and data both the
            // frame's (a frame rewritten after a restart, even in part, fails the checksum).
            guard read, frameBuffer[8..<16].elementsEqual(salts), Int(WALFormat.big32(frameBuffer, 0)) == page + 1,
                s1 == frame.after.0, s2 == frame.after.1, WALFormat.big32(frameBuffer, 16) == s1,
                WALFormat.big32(frameBuffer, 20) == s2
            else { throw Unusable("frame \(frame.number) changed as it was read (the -wal restarted)") }
            frameBuffer.withUnsafeBytes {
                buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[WALFormat.frameHeader...]))
            }
            return
        }
        var done = 0
        while done < pageSize {
            let n = pread(
                database.raw, buffer.baseAddress! + done, pageSize - done, off_t(page) * off_t(pageSize) + off_t(done))
            if n < 0 {
                if errno == EINTR { continue }
                throw Unusable("\(database.display): read: \(String(cString: strerror(errno)))")
            }
            if n == 0 { break }
            done += n
        }
        if done < pageSize {
            (buffer.baseAddress! + done).initializeMemory(as: UInt8.self, repeating: 0, count: pageSize - done)
        }
    }

    /// How many of the wanted pages have a frame in the state (tests).
    var framedPages: Int { frames.count }

    private func read(_ file: Descriptor, into buffer: inout [UInt8], at offset: Int64) -> Bool {
        let count = buffer.count
        var done = 0
        while done < count {
            let n = buffer.withUnsafeMutableBytes {
                pread(file.raw, $0.baseAddress! + done, count - done, off_t(offset) + off_t(done))
            }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return false }
            done += n
        }
        return true
    }

    /// Page 1 as SQLite's backup API leaves it in a new copy (`DiscardedCopy`): the store's page 1
    /// with the copy's own file change counter and version-valid-for number (1: the copy's first
    /// commit), the page count it copied, a schema cookie of 1 (the new file's 0, plus one) and
    /// the library's version number. The cross-check of `DeltaPhase2Tests` compares it with the
    /// page SQLite writes.
    static func backupPageOne(_ page: UnsafeMutableRawBufferPointer, pageCount: Int, libraryVersion: Int32) {
        func put(_ value: UInt32, at offset: Int) {
            page[offset] = UInt8(truncatingIfNeeded: value >> 24)
            page[offset + 1] = UInt8(truncatingIfNeeded: value >> 16)
            page[offset + 2] = UInt8(truncatingIfNeeded: value >> 8)
            page[offset + 3] = UInt8(truncatingIfNeeded: value)
        }
        put(1, at: 24)
        put(UInt32(truncatingIfNeeded: pageCount), at: 28)
        put(1, at: 40)
        put(1, at: 92)
        put(UInt32(bitPattern: libraryVersion), at: 96)
    }
}

/// The fields of a wal-index header (<https://www.sqlite.org/walformat.html>, "The WAL-Index
/// Header"): SQLite writes them in the machine's byte order.
struct WALIndexHeader {
    let version: UInt32
    let isInit: UInt8
    let mxFrame: UInt32
    let pages: UInt32
    let frameChecksum1: UInt32
    let frameChecksum2: UInt32

    init(_ bytes: [UInt8]) {
        func native(_ at: Int) -> UInt32 {
            bytes.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: at, as: UInt32.self) }
        }
        version = native(0)
        isInit = bytes[12]
        mxFrame = native(16)
        pages = native(20)
        frameChecksum1 = native(24)
        frameChecksum2 = native(28)
    }
}

/// The `-wal` file's layout and checksum (<https://www.sqlite.org/fileformat2.html#walformat>).
enum WALFormat {
    static let header = 32
    static let frameHeader = 24

    static func offset(ofFrame frame: Int, pageSize: Int) -> Int64 {
        Int64(header) + Int64(frame - 1) * Int64(frameHeader + pageSize)
    }

    static func big32(_ bytes: [UInt8], _ at: Int) -> UInt32 {
        UInt32(bytes[at]) << 24 | UInt32(bytes[at + 1]) << 16 | UInt32(bytes[at + 2]) << 8 | UInt32(bytes[at + 3])
    }

    /// SQLite's WAL checksum over `data` (a multiple of 8 bytes), continuing `s1`, `s2`: 32-bit
    /// words in big-endian order when the magic says so, else little-endian.
    static func checksum(_ data: Slice<UnsafeRawBufferPointer>, bigEndian: Bool, _ s1: inout UInt32, _ s2: inout UInt32)
    {
        let base = UnsafeRawBufferPointer(rebasing: data)
        var at = 0
        var a = s1
        var b = s2
        while at + 8 <= base.count {
            var x = base.loadUnaligned(fromByteOffset: at, as: UInt32.self)
            var y = base.loadUnaligned(fromByteOffset: at + 4, as: UInt32.self)
            if bigEndian {
                x = UInt32(bigEndian: x)
                y = UInt32(bigEndian: y)
            } else {
                x = UInt32(littleEndian: x)
                y = UInt32(littleEndian: y)
            }
            a = a &+ x &+ b
            b = b &+ y &+ a
            at += 8
        }
        s1 = a
        s2 = b
    }
}
