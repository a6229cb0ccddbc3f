import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Appends to a new private file through a 1 MiB buffer.
struct BlockWriter {
    let path: String
    let fd: Int32
    private var buffer: [UInt8] = []
    private(set) var written: Int64 = 0

    init(path: String) throws {
        self.path = path
        fd = RawPath.open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        if fd < 0 { throw FileSystemError("create", path: path) }
        buffer.reserveCapacity(1 << 20)
    }

    mutating func append(_ bytes: some Collection<UInt8>) throws {
        buffer.append(contentsOf: bytes)
        if buffer.count >= 1 << 20 { try flush() }
    }

    mutating func append(_ bytes: UnsafeRawBufferPointer) throws {
        buffer.append(contentsOf: bytes)
        if buffer.count >= 1 << 20 { try flush() }
    }

    mutating func flush() throws {
        guard !buffer.isEmpty else { return }
        try buffer.withUnsafeBytes { try PageFiles.writeFully(fd, $0, at: written, path: path) }
        written += Int64(buffer.count)
        buffer.removeAll(keepingCapacity: true)
    }

    /// Writes `bytes` at `offset` (after flushing), for a header filled in last.
    mutating func patch(_ bytes: [UInt8], at offset: Int64) throws {
        try flush()
        try bytes.withUnsafeBytes { try PageFiles.writeFully(fd, $0, at: offset, path: path) }
    }

    mutating func finish() throws { try flush() }

    func close() { _ = Glibc.close(fd) }
}
