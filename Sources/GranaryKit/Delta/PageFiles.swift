import Foundation
import GranaryDigest

#if canImport(Glibc)
    import Glibc
#endif

/// The two binary members of delta archives (issue 35), and the state digest.
///
/// **`stores/NAME.pages`** (every full written with `backup --delta`): the SHA-256 of every page
/// of the store's snapshot, so that the next backup can find the pages that changed without
/// reading the base archive's pages. (A delta's list is its base's with its carried pages' hashes
/// put in: ``PageChanges/applyHashes(_:to:)``.)
///
/// ```
/// "GRPAGES1"            8 bytes
/// page size             UInt32, big-endian
/// page count            UInt64, big-endian
/// count × SHA-256       32 bytes each, page 1 first
/// ```
///
/// **`stores/NAME.delta`** (delta archives): the pages that differ from the base, sorted.
///
/// ```
/// "GRDELTA1"            8 bytes
/// page size             UInt32, big-endian
/// page count            UInt64, big-endian: the pages of the resulting database
/// changed               UInt64, big-endian: the records that follow
/// changed × record      page number (UInt64, big-endian, 1-based, increasing) + page-size bytes
/// ```
///
/// A delta is applied by setting the file's length to page count × page size, then writing each
/// record's bytes at (page number − 1) × page size.
///
/// **The state digest** of a database file is SHA-256 over `"granary-state-v1"`, a zero byte, the
/// page size (UInt32, big-endian), the page count (UInt64, big-endian) and the page hashes in
/// order: equal digests mean equal files, so a chain can be checked from manifests alone, and a
/// rebuilt store is checked against it before anything live is touched.
public enum PageFiles {
    public static let pagesMagic = Array("GRPAGES1".utf8)
    public static let deltaMagic = Array("GRDELTA1".utf8)
    /// Bytes before the hashes of a `.pages` file.
    public static let pagesHeader = 20
    /// Bytes before the records of a `.delta` file.
    public static let deltaHeader = 28
    static let statePrefix = Array("granary-state-v1".utf8) + [0]

    /// The member holding a store's page hashes.
    public static func pagesMember(_ store: String) -> String { Manifest.storesFolder + store + ".pages" }
    /// The member holding a store's changed pages.
    public static func deltaMember(_ store: String) -> String { Manifest.storesFolder + store + ".delta" }

    /// A database file's page hashes, summed up.
    public struct Summary: Sendable, Equatable {
        public var pageSize: Int
        public var pageCount: Int
        /// Lower-case hex state digest.
        public var stateDigest: String
    }

    /// Opens the finished file at `path` (granary's own snapshot or staged store) for reading and
    /// counts its pages; the caller closes the descriptor. Throws `DeltaError.notPages` when the
    /// file is not a whole number of `pageSize`-byte pages.
    static func openPages(_ path: String, pageSize: Int) throws -> (fd: Int32, count: Int) {
        let fd = RawPath.open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 { throw FileSystemError("open", path: path) }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            close(fd)
            throw FileSystemError("read", path: path)
        }
        let size = Int64(info.st_size)
        guard pageSize >= 512, pageSize <= 65536, size % Int64(pageSize) == 0 else {
            close(fd)
            throw DeltaError.notPages(path: path, size: size, pageSize: pageSize)
        }
        return (fd, Int(size / Int64(pageSize)))
    }

    /// Hashes every page of the finished file at `path` (read in 1 MiB pieces: memory stays flat)
    /// and, when `output` is given, writes the `.pages` file there. Throws `DeltaError.notPages`
    /// when the file is not a whole number of pages.
    @discardableResult
    public static func hash(file path: String, pageSize: Int, writingTo output: String? = nil) throws -> Summary {
        let (fd, count) = try openPages(path, pageSize: pageSize)
        defer { close(fd) }
        let size = Int64(count) * Int64(pageSize)
        var writer = try output.map { try BlockWriter(path: $0) }
        defer { writer?.close() }
        var state = SHA256()
        // Invariant D9 (docs/delta-invariants.md)
        state.update(data: statePrefix)
        let header = BigEndian.u32(UInt32(pageSize)) + BigEndian.u64(UInt64(count))
        state.update(data: header)
        try writer?.append(pagesMagic + header)
        let chunk = max(pageSize, (1 << 20) / pageSize * pageSize)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk, alignment: 16)
        defer { buffer.deallocate() }
        let hashes = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk / pageSize * 32, alignment: 16)
        defer { hashes.deallocate() }
        var offset: Int64 = 0
        while offset < size {
            let want = Int(min(Int64(chunk), size - offset))
            try readFully(fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]), at: offset, path: path)
            let done = UnsafeRawBufferPointer(rebasing: hashes[0..<want / pageSize * 32])
            PageHash.digests(
                of: UnsafeRawBufferPointer(rebasing: buffer[0..<want]), pageSize: pageSize,
                into: UnsafeMutableRawBufferPointer(mutating: done))
            state.update(bufferPointer: done)
            try writer?.append(done)
            offset += Int64(want)
        }
        try writer?.finish()
        return Summary(pageSize: pageSize, pageCount: count, stateDigest: state.finalize().hex)
    }

    /// The summary a `.pages` file states (its header and the digest of its hashes); throws
    /// `DeltaError.malformed` when it is not one.
    public static func summary(ofPages path: String) throws -> Summary {
        let reader = try PagesReader(path: path)
        defer { reader.close() }
        var state = SHA256()
        state.update(data: statePrefix)
        state.update(data: BigEndian.u32(UInt32(reader.pageSize)) + BigEndian.u64(UInt64(reader.pageCount)))
        // The hashes 32,768 at a time (1 MiB), each piece digested whole: the same digest as hash
        // by hash, without a call per page (a 1 GiB store has 262,144 of them).
        let hashes = UnsafeMutableRawBufferPointer.allocate(byteCount: 32_768 * 32, alignment: 16)
        defer { hashes.deallocate() }
        while case let count = try reader.next(into: hashes), count > 0 {
            state.update(bufferPointer: UnsafeRawBufferPointer(rebasing: hashes[0..<count * 32]))
        }
        return Summary(pageSize: reader.pageSize, pageCount: reader.pageCount, stateDigest: state.finalize().hex)
    }

    static func readFully(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64, path: String)
        throws
    {
        var done = 0
        while done < buffer.count {
            let n = pread(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset) + off_t(done))
            if n < 0 {
                if errno == EINTR { continue }
                throw FileSystemError("read", path: path)
            }
            if n == 0 { throw DeltaError.malformed(path: path, reason: "ends early") }
            done += n
        }
    }

    static func writeFully(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int64, path: String) throws {
        var done = 0
        while done < bytes.count {
            let n = pwrite(
                fd, bytes.baseAddress! + done, min(bytes.count - done, SparseWriter.largestWrite),
                off_t(offset) + off_t(done))
            if n < 0 {
                if errno == EINTR { continue }
                throw FileSystemError("write", path: path)
            }
            done += n
        }
    }
}
