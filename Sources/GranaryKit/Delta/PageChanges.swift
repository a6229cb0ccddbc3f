import Foundation
import GranaryDigest

#if canImport(Glibc)
    import Glibc
#endif

/// Writes, reads and applies `stores/NAME.delta` files (the format is in ``PageFiles``).
public enum PageChanges {
    /// Writes to `output` every page of the snapshot `snapshot` whose hash in `current` (its
    /// `.pages` file) differs from the one in `base` (the base's `.pages`), or that the base does
    /// not have. Both hash lists are read as streams: memory stays flat. Returns the number of
    /// pages written.
    public static func write(snapshot: String, current: String, base: String, to output: String) throws -> Int {
        let fd = RawPath.open(snapshot, O_RDONLY | O_CLOEXEC)
        if fd < 0 { throw FileSystemError("open", path: snapshot) }
        defer { close(fd) }
        return try write(current: current, base: base, to: output) { number, _, page in
            try PageFiles.readFully(fd, into: page, at: Int64(number - 1) * Int64(page.count), path: snapshot)
        }
    }

    /// The same, with each changed page's bytes put into the buffer by `page` (its page number,
    /// 1-based, and its hash in `current`): from a snapshot file, or from the change log of a copy
    /// that was not written (``PageRecorder/writeChanges(current:base:to:)``).
    static func write(
        current: String, base: String, to output: String,
        page read: (Int, UnsafeRawBufferPointer, UnsafeMutableRawBufferPointer) throws -> Void
    ) throws -> Int {
        let now = try PagesReader(path: current)
        defer { now.close() }
        let before = try PagesReader(path: base)
        defer { before.close() }
        guard now.pageSize == before.pageSize else {
            throw DeltaError.malformed(path: base, reason: "has pages of \(before.pageSize) bytes, not \(now.pageSize)")
        }
        let pageSize = now.pageSize
        var writer = try BlockWriter(path: output)
        defer { writer.close() }
        try writer.append(
            PageFiles.deltaMagic + BigEndian.u32(UInt32(pageSize)) + BigEndian.u64(UInt64(now.pageCount))
                + BigEndian.u64(0))
        let page = UnsafeMutableRawBufferPointer.allocate(byteCount: pageSize, alignment: 16)
        defer { page.deallocate() }
        // Both lists are read 32,768 hashes (1 MiB) at a time and compared hash by hash in place.
        let perChunk = 32_768
        let current = UnsafeMutableRawBufferPointer.allocate(byteCount: perChunk * 32, alignment: 16)
        defer { current.deallocate() }
        let previous = UnsafeMutableRawBufferPointer.allocate(byteCount: perChunk * 32, alignment: 16)
        defer { previous.deallocate() }
        var changed = 0
        var first = 0  // the page index (from 0) of the chunk's first hash
        while case let count = try now.next(into: current), count > 0 {
            try Interruption.check()
            // The base's hashes of the same pages: fewer, or none, past its end.
            let known = try before.next(into: UnsafeMutableRawBufferPointer(rebasing: previous[0..<count * 32]))
            for index in 0..<count {
                let at = index * 32
                if index < known, memcmp(current.baseAddress! + at, previous.baseAddress! + at, 32) == 0 { continue }
                let number = first + index + 1
                try read(number, UnsafeRawBufferPointer(rebasing: current[at..<at + 32]), page)
                try writer.append(BigEndian.u64(UInt64(number)))
                try writer.append(UnsafeRawBufferPointer(page))
                changed += 1
            }
            first += count
        }
        try writer.patch(BigEndian.u64(UInt64(changed)), at: 20)
        try writer.finish()
        return changed
    }

    /// A `.delta` file's header.
    public struct Header: Sendable, Equatable {
        public var pageSize: Int
        public var pageCount: Int
        public var changed: Int
    }

    /// Reads the `.delta` file at `path` record by record, checking its structure: the header,
    /// page numbers increasing and within the page count, the length exact (``DeltaParser``).
    /// `body` gets each page's number and bytes.
    @discardableResult
    static func read(_ path: String, _ body: (Int, UnsafeRawBufferPointer) throws -> Void) throws -> Header {
        let fd = RawPath.open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 { throw FileSystemError("open", path: path) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw FileSystemError("read", path: path) }
        var parser = DeltaParser(name: path)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        var offset: Int64 = 0
        let size = Int64(info.st_size)
        while offset < size {
            let want = Int(min(Int64(buffer.count), size - offset))
            let piece = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want])
            try PageFiles.readFully(fd, into: piece, at: offset, path: path)
            try parser.feed(
                UnsafeRawBufferPointer(piece),
                header: { header in
                    // The length is known here: a file cut short or too long is refused before
                    // any page is handed on.
                    let expected = Int64(PageFiles.deltaHeader) + Int64(header.changed) * Int64(8 + header.pageSize)
                    guard size == expected else {
                        throw DeltaError.malformed(path: path, reason: "has \(size) bytes for \(header.changed) pages")
                    }
                }, page: body)
            offset += Int64(want)
        }
        return try parser.finish()
    }

    /// Applies the `.delta` file at `path` to the database file `target`: its length set to the
    /// delta's page count, then each page written in place. `pageSize` must be the target's.
    public static func apply(_ path: String, to target: String, pageSize: Int) throws -> Header {
        let fd = RawPath.open(target, O_RDWR | O_CLOEXEC)
        if fd < 0 { throw FileSystemError("open", path: target) }
        defer { close(fd) }
        let header = try read(path) { _, _ in }
        guard header.pageSize == pageSize else {
            throw DeltaError.malformed(path: path, reason: "has pages of \(header.pageSize) bytes, not \(pageSize)")
        }
        if ftruncate(fd, off_t(header.pageCount) * off_t(pageSize)) != 0 {
            throw FileSystemError("truncate", path: target)
        }
        try read(path) { number, bytes in
            try PageFiles.writeFully(fd, bytes, at: Int64(number - 1) * Int64(pageSize), path: target)
        }
        if fsync(fd) != 0 { throw FileSystemError("sync", path: target) }
        return header
    }

    /// Puts the SHA-256 of each page of the `.delta` file at `path` into the `.pages` file
    /// `pages` (the base's list becoming the delta's): its count set to the delta's page count,
    /// each carried page's hash written in place.
    public static func applyHashes(_ path: String, to pages: String) throws {
        let fd = RawPath.open(pages, O_RDWR | O_CLOEXEC)
        if fd < 0 { throw FileSystemError("open", path: pages) }
        defer { close(fd) }
        let header = try read(path) { number, bytes in
            let digest = Array(SHA256.hash(data: bytes))
            try digest.withUnsafeBytes {
                try PageFiles.writeFully(fd, $0, at: Int64(PageFiles.pagesHeader) + Int64(number - 1) * 32, path: pages)
            }
        }
        if ftruncate(fd, off_t(PageFiles.pagesHeader) + off_t(header.pageCount) * 32) != 0 {
            throw FileSystemError("truncate", path: pages)
        }
        let counts = BigEndian.u32(UInt32(header.pageSize)) + BigEndian.u64(UInt64(header.pageCount))
        try counts.withUnsafeBytes { try PageFiles.writeFully(fd, $0, at: 8, path: pages) }
    }

    /// Checks a `.delta` file against the `.pages` file of the same archive: every page it
    /// carries has the hash listed for it, and both state the same page size and count.
    public static func check(_ path: String, against pages: String) throws -> Header {
        let hashes = try PagesReader(path: pages)
        defer { hashes.close() }
        let header = try read(path) { number, bytes in
            var hash: ArraySlice<UInt8>?
            while hashes.index < number { hash = try hashes.next() }
            guard let hash, SHA256.hash(data: bytes).elementsEqual(hash) else {
                throw DeltaError.malformed(
                    path: path, reason: "carries page \(number) with another hash than its .pages lists")
            }
        }
        guard header.pageSize == hashes.pageSize, header.pageCount == hashes.pageCount else {
            throw DeltaError.malformed(
                path: path,
                reason:
                    "states \(header.pageCount) pages of \(header.pageSize) bytes, its .pages \(hashes.pageCount) of \(hashes.pageSize)"
            )
        }
        return header
    }
}

/// Parses the bytes of a `.delta` file (or archive member) as they come, in pieces of any size,
/// checking its structure as it goes: the magic and header (a page size SQLite allows, no more
/// pages changed than the page count), page numbers strictly increasing and within the page count,
/// exactly as many records as the header states and nothing after them. Memory stays at one
/// record at most (the one a piece's end cuts in two); a whole record inside a piece is handed on
/// in place.
public struct DeltaParser {
    /// What names the bytes in messages (a file's path, or an archive's member).
    public let name: String
    /// The header, once its bytes have been read.
    public private(set) var header: PageChanges.Header?
    /// The records handed on so far.
    public private(set) var records = 0
    private var pending: [UInt8] = []
    private var last: UInt64 = 0

    public init(name: String) { self.name = name }

    /// Parses `bytes`: `header` is called once, when the header is complete and sound (before any
    /// page); `page` with each record's page number (1-based) and bytes. Throws
    /// `DeltaError.malformed` at the first fault.
    public mutating func feed(
        _ bytes: UnsafeRawBufferPointer, header onHeader: (PageChanges.Header) throws -> Void,
        page: (Int, UnsafeRawBufferPointer) throws -> Void
    ) throws {
        var input = bytes
        while !input.isEmpty {
            guard let header else {
                let take = min(PageFiles.deltaHeader - pending.count, input.count)
                pending.append(contentsOf: UnsafeRawBufferPointer(rebasing: input[0..<take]))
                input = UnsafeRawBufferPointer(rebasing: input[take...])
                if pending.count == PageFiles.deltaHeader {
                    let parsed = try parseHeader(pending)
                    pending.removeAll(keepingCapacity: true)
                    self.header = parsed
                    try onHeader(parsed)
                }
                continue
            }
            guard records < header.changed else {
                throw DeltaError.malformed(path: name, reason: "has bytes after its \(header.changed) pages")
            }
            let record = 8 + header.pageSize
            if pending.isEmpty && input.count >= record {
                last = try take(UnsafeRawBufferPointer(rebasing: input[0..<record]), after: last, header, page)
                records += 1
                input = UnsafeRawBufferPointer(rebasing: input[record...])
            } else {
                let want = min(record - pending.count, input.count)
                pending.append(contentsOf: UnsafeRawBufferPointer(rebasing: input[0..<want]))
                input = UnsafeRawBufferPointer(rebasing: input[want...])
                if pending.count == record {
                    let after = last
                    last = try pending.withUnsafeBytes { try take($0, after: after, header, page) }
                    records += 1
                    pending.removeAll(keepingCapacity: true)
                }
            }
        }
    }

    /// The end of the bytes: throws `DeltaError.malformed` when the header or a record is
    /// incomplete, or records are missing. Returns the header.
    public func finish() throws -> PageChanges.Header {
        guard let header else { throw DeltaError.malformed(path: name, reason: "is shorter than its header") }
        guard records == header.changed, pending.isEmpty else {
            throw DeltaError.malformed(
                path: name, reason: "ends after \(records) of the \(header.changed) pages its header states")
        }
        return header
    }

    private func parseHeader(_ head: [UInt8]) throws -> PageChanges.Header {
        let pageSize = Int(BigEndian.read(head[8..<12]))
        let count = BigEndian.read(head[12..<20])
        let changed = BigEndian.read(head[20..<28])
        guard Array(head[0..<8]) == PageFiles.deltaMagic, pageSize >= 512, pageSize <= 65536,
            pageSize & (pageSize - 1) == 0, count <= UInt64(Int32.max), changed <= count
        else { throw DeltaError.malformed(path: name, reason: "is not a page-delta file (GRDELTA1)") }
        return PageChanges.Header(pageSize: pageSize, pageCount: Int(count), changed: Int(changed))
    }

    /// Checks one record (its page number after `last`, within the count) and hands it on;
    /// returns its page number.
    private func take(
        _ record: UnsafeRawBufferPointer, after last: UInt64, _ header: PageChanges.Header,
        _ page: (Int, UnsafeRawBufferPointer) throws -> Void
    ) throws -> UInt64 {
        var number: UInt64 = 0
        for byte in record[0..<8] { number = number << 8 | UInt64(byte) }
        guard number > last, number <= UInt64(header.pageCount) else {
            throw DeltaError.malformed(
                path: name, reason: "has page \(number) after page \(last) (of \(header.pageCount))")
        }
        try page(Int(number), UnsafeRawBufferPointer(rebasing: record[8...]))
        return number
    }
}
