import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Reads a `.pages` file hash by hash.
final class PagesReader {
    let path: String
    let pageSize: Int
    let pageCount: Int
    private let fd: Int32
    private var buffer: [UInt8] = []
    private var position = 0
    private var offset: Int64 = Int64(PageFiles.pagesHeader)
    private(set) var index = 0

    init(path: String) throws {
        self.path = path
        let fd = RawPath.open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 { throw FileSystemError("open", path: path) }
        self.fd = fd
        var header = [UInt8](repeating: 0, count: PageFiles.pagesHeader)
        var info = stat()
        do {
            guard fstat(fd, &info) == 0 else { throw FileSystemError("read", path: path) }
            guard info.st_size >= PageFiles.pagesHeader else {
                throw DeltaError.malformed(path: path, reason: "is shorter than its header")
            }
            try header.withUnsafeMutableBytes { try PageFiles.readFully(fd, into: $0, at: 0, path: path) }
        } catch {
            Glibc.close(fd)
            throw error
        }
        let size = Int(BigEndian.read(header[8..<12]))
        let count = BigEndian.read(header[12..<20])
        let length = Int64(info.st_size)
        guard Array(header[0..<8]) == PageFiles.pagesMagic, size >= 512, size <= 65536, size & (size - 1) == 0,
            count <= UInt64(Int32.max), length == Int64(PageFiles.pagesHeader) + Int64(count) * 32
        else {
            Glibc.close(fd)
            throw DeltaError.malformed(path: path, reason: "is not a page-hash file (GRPAGES1) of its length")
        }
        pageSize = size
        pageCount = Int(count)
    }

    /// The next page's hash, nil after the last.
    func next() throws -> ArraySlice<UInt8>? {
        guard index < pageCount else { return nil }
        if position >= buffer.count {
            let want = min(1 << 20, (pageCount - index) * 32)
            buffer = [UInt8](repeating: 0, count: want)
            try buffer.withUnsafeMutableBytes { try PageFiles.readFully(fd, into: $0, at: offset, path: path) }
            offset += Int64(want)
            position = 0
        }
        defer {
            position += 32
            index += 1
        }
        return buffer[position..<position + 32]
    }

    /// The next hashes, as many as fit in `into` (32 bytes each) and are left: their count, 0
    /// after the last. Not mixed with ``next()`` (it reads past what that one has buffered).
    func next(into hashes: UnsafeMutableRawBufferPointer) throws -> Int {
        precondition(position >= buffer.count, "next(into:) after next()")
        let count = min(hashes.count / 32, pageCount - index)
        guard count > 0 else { return 0 }
        try PageFiles.readFully(
            fd, into: UnsafeMutableRawBufferPointer(rebasing: hashes[0..<count * 32]), at: offset, path: path)
        offset += Int64(count) * 32
        index += count
        return count
    }

    func close() { Glibc.close(fd) }
}
