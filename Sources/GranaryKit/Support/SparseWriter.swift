import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Writes a new file front to back, leaving a hole wherever a whole block of it is zeros.
///
/// A user can make a file that is long but almost all holes (`truncate -s 8G`): a few KiB of their
/// quota. Copied byte for byte, it would cost its full length wherever granary writes it (the
/// repository's scratch folder, a verification's folder, a restore's staging in the users'
/// filesystem). Written through this, the copy costs what the original does. Holes read back as
/// zeros, so the content is the same; the caller hashes what it reads, not what it writes.
///
/// The file must be new and empty (holes are what was never written), and `finish()` sets its
/// length, which a last hole leaves short.
struct SparseWriter {
    let fd: Int32
    let path: String
    /// Bytes given so far: the file's length once `finish()` has run.
    private(set) var length: Int64 = 0

    /// The unit of holes: a block of the usual filesystems.
    static let block = 4096

    /// The most one `pwrite` of a new file writes. Linux (6.x, ext4 with large folios) keeps what
    /// one write brings into the page cache as folios of about its size, and allocating those of
    /// 512 KiB and more costs far more than the copy: a new 1 GiB file written 1 MiB at a time
    /// took several times as long as in pieces of 256 KiB (docs/performance.md, "Large folios").
    static let largestWrite = 256 << 10

    init(fd: Int32, path: String) {
        self.fd = fd
        self.path = path
    }

    /// Appends `bytes`: each run of blocks that are not all zeros is written with one `pwrite`,
    /// zero blocks are skipped.
    mutating func write(_ bytes: UnsafeRawBufferPointer) throws(FileSystemError) {
        var run: Int?
        var position = 0
        while position < bytes.count {
            let offset = length + Int64(position)
            let piece = min(bytes.count - position, Self.block - Int(offset % Int64(Self.block)))
            if Self.isZero(UnsafeRawBufferPointer(rebasing: bytes[position..<position + piece])) {
                if let start = run { try put(bytes, from: start, to: position) }
                run = nil
            } else if run == nil {
                run = position
            }
            position += piece
        }
        if let start = run { try put(bytes, from: start, to: bytes.count) }
        length += Int64(bytes.count)
    }

    /// Sets the file's length to every byte given (a file ending in zeros ends in a hole).
    func finish() throws(FileSystemError) {
        if ftruncate(fd, off_t(length)) != 0 { throw FileSystemError("write", path: path) }
    }

    private func put(_ bytes: UnsafeRawBufferPointer, from start: Int, to end: Int) throws(FileSystemError) {
        var done = start
        while done < end {
            let n = pwrite(
                fd, bytes.baseAddress! + done, min(end - done, Self.largestWrite), off_t(length + Int64(done)))
            if n < 0 {
                if errno == EINTR { continue }
                throw FileSystemError("write", path: path)
            }
            done += n
        }
    }

    /// Whether every byte is zero, read eight at a time (the first non-zero word ends it: data
    /// that is not zeros costs next to nothing to look at).
    static func isZero(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var offset = 0
        while offset + 8 <= bytes.count {
            if bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self) != 0 { return false }
            offset += 8
        }
        while offset < bytes.count {
            if bytes[offset] != 0 { return false }
            offset += 1
        }
        return true
    }
}
