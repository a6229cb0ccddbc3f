import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Where a follower stopped in a store's `-wal`: the chain (its salts), the last frame it took
/// (a commit frame) and the cumulative checksum there, so that the next read continues the chain
/// and can prove it does. Formats: <https://www.sqlite.org/fileformat2.html#walformat>.
public struct WALCursor: Codable, Sendable, Equatable, CustomStringConvertible {
    public var salt1: UInt32
    public var salt2: UInt32
    /// The header's checkpoint sequence number (SQLite adds one at each restart).
    public var checkpointSequence: UInt32
    public var pageSize: Int
    /// The header's magic said big-endian checksums (0x377f0683).
    public var bigEndian: Bool
    /// Frames of this chain taken, counted from 1: the last commit frame read (0: none yet).
    public var frame: Int
    /// The cumulative checksum after ``frame`` (the header's own checksum when `frame` is 0).
    public var checksum1: UInt32
    public var checksum2: UInt32
    /// The `-wal`'s length when the cursor was taken: a shorter file later was truncated.
    public var fileLength: Int64

    public var description: String {
        "salts \(salt1)/\(salt2) frame \(frame) page size \(pageSize)"
    }
}

/// One frame's header, as handed to a reader's sink with the frame's page image.
public struct WALFrame: Sendable, Equatable {
    /// The page this frame holds (from 1).
    public let pageNumber: UInt32
    /// For a commit frame, the database's size in pages after the commit; 0 otherwise.
    public let commitPages: UInt32
    /// The frame's place in its chain, from 1.
    public let index: Int
    /// The chain's first salt (tells an old chain's tail from the new chain after a restart).
    public let salt1: UInt32

    public var isCommit: Bool { commitPages != 0 }

    public init(pageNumber: UInt32, commitPages: UInt32, index: Int, salt1: UInt32) {
        self.pageNumber = pageNumber
        self.commitPages = commitPages
        self.index = index
        self.salt1 = salt1
    }
}

/// Why a read cannot prove it continues the previous one: the caller starts a new generation.
public enum WALBreak: Sendable, Equatable, CustomStringConvertible {
    /// The `-wal` is shorter than when the cursor was taken (a TRUNCATE checkpoint, a
    /// journal_size_limit, or the file removed and made again).
    case truncated(was: Int64, now: Int64)
    /// The `-wal` is gone (its last connection closed, or the store left WAL mode).
    case missing
    /// The chain restarted more than once, or with salts SQLite would not write.
    case saltsNotConsecutive(was: UInt32, now: UInt32)
    case pageSizeChanged(was: Int, now: Int)
    /// The new chain has overwritten frames past the cursor before they were read.
    case overwritten(cursor: Int, newFrames: Int)
    /// The old chain's tail does not end where it can be told from a truncated one.
    case tailUnproven(frame: Int)
    /// The cursor's frame no longer checks out in the same chain (the file was rewritten).
    case chainRewritten(frame: Int)
    /// The store itself was replaced (another inode).
    case storeReplaced
    /// A frame that checks out names a page, or a database size, past the cap: SQLite did not
    /// write it within the limits granary keeps.
    case tooLarge(frame: Int, pages: UInt32)

    public var description: String {
        switch self {
        case .truncated(let was, let now): return "the -wal shrank from \(was) to \(now) bytes"
        case .missing: return "the -wal is gone"
        case .saltsNotConsecutive(let was, let now): return "the -wal restarted with salt \(now) after \(was)"
        case .pageSizeChanged(let was, let now): return "the page size changed from \(was) to \(now)"
        case .overwritten(let cursor, let newFrames):
            return "the restarted -wal holds \(newFrames) frames over the \(cursor) already read"
        case .tailUnproven(let frame): return "the old chain's end after frame \(frame) cannot be proven"
        case .chainRewritten(let frame): return "frame \(frame) no longer continues the chain"
        case .storeReplaced: return "the store was replaced"
        case .tooLarge(let frame, let pages): return "frame \(frame) claims \(pages) pages, past the cap"
        }
    }
}

/// What one read did.
public struct WALRead: Sendable, Equatable {
    /// Where the next read starts; nil while the `-wal` has no header.
    public var cursor: WALCursor?
    /// Commits and frames handed to the sink.
    public var commits = 0
    public var frames = 0
    /// Page bytes handed to the sink.
    public var bytes: Int64 = 0
    /// Set when continuity cannot be proven: nothing was handed to the sink.
    public var broken: WALBreak?
    /// The read stopped at the cap with more committed frames to read.
    public var capped = false
}

/// A store's `-wal` read as SQLite's WAL format describes, through a descriptor opened beneath
/// the user's folder: only whole committed transactions, each frame's checksum checked along
/// the chain, from a cursor on. It never reads past the length it counted when it started;
/// `limit` bounds the page bytes one read hands on. Within one ``read(from:limit:maxDatabaseBytes:sink:)``
/// it reads runs of frames with one system call each and keeps them (``ReadAhead``, at most
/// 1 MiB): the checking pass and the handing-on pass look at the same bytes, so what is handed on
/// is exactly what was checked.
public struct WALReader {
    public enum Failure: GranaryError, Equatable {
        /// A frame checked in the first pass no longer checks in the second (overwritten while read).
        case changedWhileRead(path: String, frame: Int)
        case notRegular(path: String)
        case wrongOwner(path: String, uid: uid_t, store: uid_t)
        case read(String)

        public var description: String {
            switch self {
            case .changedWhileRead(let path, let frame): return "\(path): frame \(frame) changed while it was read"
            case .notRegular(let path): return "\(path): not a regular file"
            case .wrongOwner(let path, let uid, let store):
                return "\(path): owned by uid \(uid), not by the store's owner (uid \(store))"
            case .read(let message): return message
            }
        }
    }

    public static let headerSize = 32
    public static let frameHeaderSize = 24
    static let magicLittle: UInt32 = 0x377f_0682
    static let magicBig: UInt32 = 0x377f_0683

    let file: Descriptor
    /// The length counted at open: no read goes past it.
    public let length: Int64
    /// The runs of frames read within the current read.
    let ahead: ReadAhead

    /// Reads `file` (an open `-wal`).
    public init(file: Descriptor) throws(WALReader.Failure) {
        try self.init(file: file, windowCapacity: ReadAhead.defaultWindowCapacity)
    }

    /// Reads `file` through read-ahead windows of `windowCapacity` bytes (smaller in tests).
    init(file: Descriptor, windowCapacity: Int) throws(WALReader.Failure) {
        let info: stat
        do { info = try file.status() } catch { throw .read(error.description) }
        guard info.st_mode & S_IFMT == S_IFREG else { throw .notRegular(path: file.display) }
        self.file = file
        self.length = Int64(info.st_size)
        self.ahead = ReadAhead(windowCapacity: windowCapacity)
    }

    /// Opens `name`-wal beneath `folder` (no links, a regular file, the store's owner's); nil when
    /// there is none.
    public static func open(in folder: Folder<UserOwned>, store name: String, storeOwner: uid_t) throws -> WALReader? {
        let walName = name + "-wal"
        guard folder.entry(walName) != nil else { return nil }
        let file: Descriptor
        do { file = try folder.openFile(walName, .read) } catch {
            if folder.entry(walName) == nil { return nil }  // gone since it was seen
            throw error
        }
        let info = try file.status()
        if info.st_uid != storeOwner {
            throw Failure.wrongOwner(path: file.display, uid: info.st_uid, store: storeOwner)
        }
        return try WALReader(file: file)
    }

    struct Header {
        let bigEndian: Bool
        let pageSize: Int
        let checkpointSequence: UInt32
        let salt1: UInt32
        let salt2: UInt32
        let checksum1: UInt32
        let checksum2: UInt32
    }

    /// The header, when the file holds a valid one.
    func header() throws(WALReader.Failure) -> Header? {
        guard length >= Int64(Self.headerSize) else { return nil }
        let bytes = try readBytes(Self.headerSize, at: 0)
        guard bytes.count == Self.headerSize else { return nil }
        let magic = Self.big32(bytes, 0)
        guard magic == Self.magicLittle || magic == Self.magicBig else { return nil }
        let bigEndian = magic == Self.magicBig
        let version = Self.big32(bytes, 4)
        let pageSize = Int(Self.big32(bytes, 8))
        guard version == 3_007_000, pageSize >= 512, pageSize <= 65536, pageSize & (pageSize - 1) == 0 else {
            return nil
        }
        var s1: UInt32 = 0
        var s2: UInt32 = 0
        bytes.withUnsafeBytes { Self.checksum($0[0..<24], bigEndian: bigEndian, &s1, &s2) }
        guard s1 == Self.big32(bytes, 24), s2 == Self.big32(bytes, 28) else { return nil }
        return Header(
            bigEndian: bigEndian, pageSize: pageSize, checkpointSequence: Self.big32(bytes, 12),
            salt1: Self.big32(bytes, 16), salt2: Self.big32(bytes, 20), checksum1: s1, checksum2: s2)
    }

    /// Hands to `sink`, in order, every frame of every whole committed transaction after
    /// `cursor` (from the chain's first frame when nil), at most `limit` page bytes (whole
    /// transactions only; the read says `capped` when it stopped with more to read). The first
    /// transaction is handed on whole whatever its size, up to `maxDatabaseBytes` of frames: a
    /// transaction larger than `limit` would otherwise never be handed on, however often the
    /// `-wal` is read. A frame naming a page, or a commit a size, past `maxDatabaseBytes` breaks
    /// the chain (`tooLarge`): nothing past the cap is ever written from it. When it cannot prove the frames follow the cursor's, it hands on nothing
    /// and says why (`broken`).
    public func read(
        from cursor: WALCursor?, limit: Int64, maxDatabaseBytes: Int64 = .max,
        sink: (WALFrame, UnsafeRawBufferPointer) throws -> Void
    ) throws -> WALRead {
        // Bytes kept from an earlier read may be stale: each read looks at the file afresh.
        ahead.reset()
        defer { ahead.reset() }
        guard let header = try header() else {
            if let cursor, cursor.fileLength > length {
                return WALRead(cursor: cursor, broken: .truncated(was: cursor.fileLength, now: length))
            }
            return WALRead(cursor: cursor)
        }
        let fresh = WALCursor(
            salt1: header.salt1, salt2: header.salt2, checkpointSequence: header.checkpointSequence,
            pageSize: header.pageSize, bigEndian: header.bigEndian, frame: 0, checksum1: header.checksum1,
            checksum2: header.checksum2, fileLength: length)
        guard let cursor else {
            return try readChain(from: fresh, limit: limit, maxDatabaseBytes: maxDatabaseBytes, sink: sink)
        }
        if length < cursor.fileLength {
            return WALRead(cursor: cursor, broken: .truncated(was: cursor.fileLength, now: length))
        }
        if header.salt1 == cursor.salt1 && header.salt2 == cursor.salt2 {
            if header.pageSize != cursor.pageSize || header.bigEndian != cursor.bigEndian {
                return WALRead(cursor: cursor, broken: .chainRewritten(frame: cursor.frame))
            }
            return try readChain(from: cursor, limit: limit, maxDatabaseBytes: maxDatabaseBytes, sink: sink)
        }
        // A restart: the old chain's tail (frames past the new chain's end are still in the
        // file), then the new chain from its first frame.
        if header.salt1 != cursor.salt1 &+ 1 {
            return WALRead(cursor: cursor, broken: .saltsNotConsecutive(was: cursor.salt1, now: header.salt1))
        }
        if header.pageSize != cursor.pageSize {
            return WALRead(cursor: cursor, broken: .pageSizeChanged(was: cursor.pageSize, now: header.pageSize))
        }
        // Every frame of the new chain counted, however large its transactions: the proof below needs them all.
        let newChain = try scan(from: fresh, limit: .max, maxDatabaseBytes: maxDatabaseBytes, firstWhole: false)
        if newChain.validFrames > cursor.frame {
            return WALRead(cursor: cursor, broken: .overwritten(cursor: cursor.frame, newFrames: newChain.validFrames))
        }
        let oldTail = try scan(from: cursor, limit: limit, maxDatabaseBytes: maxDatabaseBytes)
        if let tooLarge = oldTail.tooLarge ?? newChain.tooLarge { return WALRead(cursor: cursor, broken: tooLarge) }
        // A file that ended before the length counted at open was cut while it was read: its
        // end proves nothing of where either chain ends.
        if newChain.cut || oldTail.cut {
            return WALRead(cursor: cursor, broken: .tailUnproven(frame: oldTail.lastFrame))
        }
        if oldTail.capped { return try emit(oldTail, from: cursor, maxDatabaseBytes: maxDatabaseBytes, sink: sink) }
        // The old chain's end is proven when it is a whole frame of neither chain (an older
        // chain's, left in place), or the end of a file that no truncation made: a file cut
        // (TRUNCATE, journal_size_limit) and grown again by the new chain alone ends within one
        // frame past the new chain's last whole frame, or at a length that is no whole number of
        // frames. A frame of the new chain, or an old frame that does not check, proves nothing.
        let frameSize = Int64(Self.frameHeaderSize + cursor.pageSize)
        let endsAtFileEnd =
            oldTail.stop == nil && (length - Int64(Self.headerSize)) % frameSize == 0
            && length >= Int64(Self.headerSize) + Int64(newChain.validFrames + 1) * frameSize
        let endsAtOlderFrame = oldTail.stop.map { $0.salt1 != cursor.salt1 && $0.salt1 != header.salt1 } ?? false
        guard endsAtOlderFrame || endsAtFileEnd else {
            return WALRead(cursor: cursor, broken: .tailUnproven(frame: oldTail.lastFrame))
        }
        var result = try emit(oldTail, from: cursor, maxDatabaseBytes: maxDatabaseBytes, sink: sink)
        let used = result.bytes
        let next = try readChain(
            from: fresh, limit: limit - used, maxDatabaseBytes: maxDatabaseBytes, firstWhole: result.commits == 0,
            sink: sink)
        result.cursor = next.cursor
        result.commits += next.commits
        result.frames += next.frames
        result.bytes += next.bytes
        result.capped = next.capped
        return result
    }

    /// What a first pass over a chain found.
    struct Scan {
        /// Frames past the cursor that check out (committed or not).
        var validFrames = 0
        /// The last commit frame within the limit, its checksum, and page bytes to it.
        var lastCommit: Int
        var commitChecksum: (UInt32, UInt32)
        var commitBytes: Int64 = 0
        var commits = 0
        var lastFrame: Int
        /// The first frame past the chain, when a whole frame is there: its salt1.
        var stop: (salt1: UInt32, index: Int)?
        var capped = false
        var tooLarge: WALBreak?
        /// The file ended before the length counted at open (it was cut while it was read).
        var cut = false
    }

    /// With `firstWhole`, the first transaction is taken whatever its size (up to
    /// `maxDatabaseBytes` of frames), so that one larger than `limit` is ever handed on.
    func scan(from cursor: WALCursor, limit: Int64, maxDatabaseBytes: Int64, firstWhole: Bool = true)
        throws(WALReader.Failure) -> Scan
    {
        var scan = Scan(
            lastCommit: cursor.frame, commitChecksum: (cursor.checksum1, cursor.checksum2), lastFrame: cursor.frame)
        var s1 = cursor.checksum1
        var s2 = cursor.checksum2
        var index = cursor.frame + 1
        var bytes: Int64 = 0
        let frameSize = Self.frameHeaderSize + cursor.pageSize
        var buffer = [UInt8](repeating: 0, count: frameSize)
        while true {
            let offset = Int64(Self.headerSize) + Int64(index - 1) * Int64(frameSize)
            guard offset + Int64(frameSize) <= length else { break }
            guard try readInto(&buffer, at: offset) else {
                scan.cut = true
                break
            }
            let salt1 = Self.big32(buffer, 8)
            let salt2 = Self.big32(buffer, 12)
            guard salt1 == cursor.salt1, salt2 == cursor.salt2 else {
                scan.stop = (salt1, index)
                break
            }
            var c1 = s1
            var c2 = s2
            buffer.withUnsafeBytes {
                Self.checksum($0[0..<8], bigEndian: cursor.bigEndian, &c1, &c2)
                Self.checksum($0[Self.frameHeaderSize..<frameSize], bigEndian: cursor.bigEndian, &c1, &c2)
            }
            guard c1 == Self.big32(buffer, 16), c2 == Self.big32(buffer, 20), Self.big32(buffer, 0) != 0 else {
                scan.stop = (salt1, index)
                break
            }
            let pages = max(Self.big32(buffer, 0), Self.big32(buffer, 4))
            if Int64(pages) > maxDatabaseBytes / Int64(cursor.pageSize) {
                scan.tooLarge = .tooLarge(frame: index, pages: pages)
                break
            }
            if bytes + Int64(cursor.pageSize) > (firstWhole && scan.commits == 0 ? maxDatabaseBytes : limit) {
                // This transaction does not end within what the read may take: it waits for the
                // next read (nothing past the limit is scanned, however long an uncommitted tail).
                scan.capped = true
                break
            }
            s1 = c1
            s2 = c2
            bytes += Int64(cursor.pageSize)
            scan.validFrames += 1
            scan.lastFrame = index
            if Self.big32(buffer, 4) != 0 {
                scan.lastCommit = index
                scan.commitChecksum = (s1, s2)
                scan.commitBytes = bytes
                scan.commits += 1
            }
            index += 1
        }
        return scan
    }

    /// The second pass: frames from the cursor to the scan's last commit, each checked again as
    /// the first pass checked it (salts, checksum, page number, size within `maxDatabaseBytes`,
    /// the last one a commit whose checksum is the first pass's). They are mostly the bytes the
    /// first pass read (``ReadAhead``); one read again from the file may have changed since (the
    /// owner may have restarted or rewritten the chain), and the checks then fail the read
    /// (`changedWhileRead`).
    func emit(
        _ scan: Scan, from cursor: WALCursor, maxDatabaseBytes: Int64,
        sink: (WALFrame, UnsafeRawBufferPointer) throws -> Void
    ) throws -> WALRead {
        var result = WALRead(cursor: cursor, capped: scan.capped)
        guard scan.lastCommit > cursor.frame else { return result }
        var s1 = cursor.checksum1
        var s2 = cursor.checksum2
        let frameSize = Self.frameHeaderSize + cursor.pageSize
        var buffer = [UInt8](repeating: 0, count: frameSize)
        for index in (cursor.frame + 1)...scan.lastCommit {
            let offset = Int64(Self.headerSize) + Int64(index - 1) * Int64(frameSize)
            guard try readInto(&buffer, at: offset) else {
                throw Failure.changedWhileRead(path: file.display, frame: index)
            }
            buffer.withUnsafeBytes {
                Self.checksum($0[0..<8], bigEndian: cursor.bigEndian, &s1, &s2)
                Self.checksum($0[Self.frameHeaderSize..<frameSize], bigEndian: cursor.bigEndian, &s1, &s2)
            }
            guard Self.big32(buffer, 8) == cursor.salt1, Self.big32(buffer, 12) == cursor.salt2,
                s1 == Self.big32(buffer, 16), s2 == Self.big32(buffer, 20)
            else { throw Failure.changedWhileRead(path: file.display, frame: index) }
            // What the first pass checked of each frame, checked again: a frame read again from the
            // file may be another one whose checksums are valid (they are no secret).
            let pageNumber = Self.big32(buffer, 0)
            let commitPages = Self.big32(buffer, 4)
            guard pageNumber != 0,
                Int64(max(pageNumber, commitPages)) <= maxDatabaseBytes / Int64(cursor.pageSize),
                index != scan.lastCommit || commitPages != 0
            else { throw Failure.changedWhileRead(path: file.display, frame: index) }
            let frame = WALFrame(pageNumber: pageNumber, commitPages: commitPages, index: index, salt1: cursor.salt1)
            try buffer.withUnsafeBytes {
                try sink(frame, UnsafeRawBufferPointer(rebasing: $0[Self.frameHeaderSize...]))
            }
            result.frames += 1
            result.bytes += Int64(cursor.pageSize)
            if frame.isCommit { result.commits += 1 }
        }
        // The chain handed on ends where the first pass's did.
        guard s1 == scan.commitChecksum.0, s2 == scan.commitChecksum.1 else {
            throw Failure.changedWhileRead(path: file.display, frame: scan.lastCommit)
        }
        var next = cursor
        next.frame = scan.lastCommit
        next.checksum1 = s1
        next.checksum2 = s2
        next.fileLength = length
        result.cursor = next
        return result
    }

    func readChain(
        from cursor: WALCursor, limit: Int64, maxDatabaseBytes: Int64, firstWhole: Bool = true,
        sink: (WALFrame, UnsafeRawBufferPointer) throws -> Void
    )
        throws -> WALRead
    {
        // The cursor's frame must still be where it was: the chain did not restart with the same
        // salts (which SQLite never does), nor was the file rewritten.
        if cursor.frame > 0 {
            let frameSize = Self.frameHeaderSize + cursor.pageSize
            let offset = Int64(Self.headerSize) + Int64(cursor.frame - 1) * Int64(frameSize)
            var head = [UInt8](repeating: 0, count: Self.frameHeaderSize)
            guard offset + Int64(frameSize) <= length, try readInto(&head, at: offset),
                Self.big32(head, 8) == cursor.salt1, Self.big32(head, 12) == cursor.salt2,
                Self.big32(head, 16) == cursor.checksum1, Self.big32(head, 20) == cursor.checksum2
            else { return WALRead(cursor: cursor, broken: .chainRewritten(frame: cursor.frame)) }
        }
        let scan = try scan(from: cursor, limit: limit, maxDatabaseBytes: maxDatabaseBytes, firstWhole: firstWhole)
        if let tooLarge = scan.tooLarge { return WALRead(cursor: cursor, broken: tooLarge) }
        var result = try emit(scan, from: cursor, maxDatabaseBytes: maxDatabaseBytes, sink: sink)
        result.cursor?.fileLength = length
        return result
    }

    // MARK: Bytes

    func readBytes(_ count: Int, at offset: Int64) throws(WALReader.Failure) -> [UInt8] {
        do { return try file.read(count: count, at: offset) } catch { throw .read(error.description) }
    }

    /// Fills `buffer` from `offset` (through ``ReadAhead``); false when the file ends first.
    func readInto(_ buffer: inout [UInt8], at offset: Int64) throws(WALReader.Failure) -> Bool {
        guard offset + Int64(buffer.count) <= length else { return false }
        var result: Result<Bool, WALReader.Failure> = .success(false)
        buffer.withUnsafeMutableBytes { target in
            do throws(WALReader.Failure) {
                result = .success(try ahead.read(into: target, at: offset, from: self))
            } catch { result = .failure(error) }
        }
        return try result.get()
    }

    /// Reads up to `target.count` bytes at `offset` (``Descriptor/read(into:at:)``); the count
    /// read (less only where the file ends).
    func readDirect(_ target: UnsafeMutableRawBufferPointer, at offset: Int64) throws(WALReader.Failure) -> Int {
        do { return try file.read(into: target, at: offset) } catch { throw .read(error.description) }
    }

    /// What one read of a `-wal` has read of it, kept in two windows (a chain's frames from its
    /// start, and an old chain's tail further on, after a restart): each window is filled by
    /// reads that double in size as a run goes on (a short run costs one read, a long one a few)
    /// and never past the length counted at open. A read larger than a window, or one that finds
    /// both windows full elsewhere, goes to the file directly. Bytes are kept only within one
    /// ``WALReader/read(from:limit:maxDatabaseBytes:sink:)``: they are what the file held when
    /// they were read, and the checks run on them as on any other read.
    final class ReadAhead {
        static let defaultWindowCapacity = 512 * 1024
        /// The first read of a window: a few frames of the common page sizes.
        static let firstRead = 16 * 1024
        /// Each window's size (smaller in tests).
        let windowCapacity: Int

        init(windowCapacity: Int = ReadAhead.defaultWindowCapacity) {
            self.windowCapacity = windowCapacity
        }

        final class Window {
            var memory: UnsafeMutableRawBufferPointer?
            var start: Int64 = 0
            var count = 0
            var lastUse = 0
            var end: Int64 { start + Int64(count) }
            deinit { memory?.deallocate() }
        }

        var windows = [Window(), Window()]
        var uses = 0
        /// Reads served from kept bytes, and reads of the file made (for tests).
        var served = 0
        var fileReads = 0

        func reset() {
            for window in windows { window.count = 0 }
        }

        func read(into target: UnsafeMutableRawBufferPointer, at offset: Int64, from reader: WALReader)
            throws(WALReader.Failure) -> Bool
        {
            let want = target.count
            uses += 1
            if want > windowCapacity {
                fileReads += 1
                return try reader.readDirect(target, at: offset) == want
            }
            let end = offset + Int64(want)
            if let window = windows.first(where: { $0.count > 0 && $0.start <= offset && end <= $0.end }) {
                return copy(from: window, into: target, at: offset)
            }
            // A run going on past a window's end: the window grows (doubling), while it has room.
            if let window = windows.first(where: {
                $0.count > 0 && $0.start <= offset && offset <= $0.end && end - $0.start <= Int64(windowCapacity)
            }) {
                let room = windowCapacity - window.count
                let grow = min(room, max(Int(end - window.end), window.count), Int(reader.length - window.end))
                return try fill(window, adding: grow, from: reader, thenCopy: target, at: offset)
            }
            // A new run: the window unused for longest starts again here.
            let window = windows.min { ($0.count > 0 ? 1 : 0, $0.lastUse) < ($1.count > 0 ? 1 : 0, $1.lastUse) }!
            window.start = offset
            window.count = 0
            let first = min(windowCapacity, max(want, Self.firstRead), Int(reader.length - offset))
            return try fill(window, adding: first, from: reader, thenCopy: target, at: offset)
        }

        /// Reads `count` more bytes into `window`, then copies `target`'s bytes from it: false when
        /// the file ended before them.
        func fill(
            _ window: Window, adding count: Int, from reader: WALReader, thenCopy target: UnsafeMutableRawBufferPointer,
            at offset: Int64
        ) throws(WALReader.Failure) -> Bool {
            if count > 0 {
                if window.memory == nil {
                    window.memory = .allocate(byteCount: windowCapacity, alignment: 16)
                }
                let slice = UnsafeMutableRawBufferPointer(
                    rebasing: window.memory![window.count..<(window.count + count)])
                fileReads += 1
                window.count += try reader.readDirect(slice, at: window.end)
            }
            guard offset + Int64(target.count) <= window.end else { return false }
            return copy(from: window, into: target, at: offset)
        }

        func copy(from window: Window, into target: UnsafeMutableRawBufferPointer, at offset: Int64) -> Bool {
            window.lastUse = uses
            served += 1
            let from = Int(offset - window.start)
            target.copyMemory(from: UnsafeRawBufferPointer(rebasing: window.memory![from..<(from + target.count)]))
            return true
        }
    }

    static func big32(_ bytes: [UInt8], _ at: Int) -> UInt32 {
        UInt32(bytes[at]) << 24 | UInt32(bytes[at + 1]) << 16 | UInt32(bytes[at + 2]) << 8 | UInt32(bytes[at + 3])
    }

    /// SQLite's WAL checksum over `data` (a multiple of 8 bytes), continuing from (s1, s2).
    static func checksum(_ data: Slice<UnsafeRawBufferPointer>, bigEndian: Bool, _ s1: inout UInt32, _ s2: inout UInt32)
    {
        var a = s1
        var b = s2
        var i = data.startIndex
        let end = data.endIndex
        let base = data.base
        while i + 8 <= end {
            let x0 = base.loadUnaligned(fromByteOffset: i, as: UInt32.self)
            let x1 = base.loadUnaligned(fromByteOffset: i + 4, as: UInt32.self)
            let w0 = bigEndian ? UInt32(bigEndian: x0) : UInt32(littleEndian: x0)
            let w1 = bigEndian ? UInt32(bigEndian: x1) : UInt32(littleEndian: x1)
            a = a &+ w0 &+ b
            b = b &+ w1 &+ a
            i += 8
        }
        s1 = a
        s2 = b
    }
}
