#if canImport(Glibc)
    import Glibc
#endif

/// Reads a file that nothing writes any more through short-lived read-only mappings of at most
/// `window` bytes, instead of `read(2)` into a buffer: the kernel maps the page cache's pages
/// rather than copying them: on a loaded machine those copies are a large share of a backup's
/// CPU time (docs/performance.md, "No copies out of the page cache").
///
/// Each window is mapped with `MAP_POPULATE` (one call maps all its pages) and unmapped before
/// the next, so at most `window` bytes of the file count in the process's resident set. Where a
/// mapping cannot be made (a filesystem without mmap), the window is read with `pread` instead.
///
/// The caller guarantees that `[from, to)` stays within the file while it is read: touching a
/// mapped page beyond the end of a file kills the process (SIGBUS).
enum MappedReader {
    /// Bytes mapped at a time: the 1 MiB a read buffer used to take.
    static let window = 1 << 20

    /// Calls `body` with consecutive pieces of `[from, to)` of `fd`, in order, each at most
    /// `window` bytes; stops early when `body` returns false (a caller whose work can fail keeps
    /// its error and returns false). Throws `FileSystemError` for a failed read (`path` names
    /// the file).
    static func read(
        _ fd: Int32, from: Int64, to: Int64, path: String, window: Int = window,
        _ body: (UnsafeRawBufferPointer) -> Bool
    ) throws(FileSystemError) {
        let pageSize = Int64(sysconf(Int32(_SC_PAGESIZE)))
        var position = from
        var fallback: UnsafeMutableRawBufferPointer?
        defer { fallback?.deallocate() }
        while position < to {
            // Mappings start on a page boundary; the first window may begin inside a page.
            let start = position / pageSize * pageSize
            let length = Int(min(Int64(window), to - start))
            let skip = Int(position - start)
            let mapped = mmap(nil, length, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, off_t(start))
            if let mapped, mapped != MAP_FAILED {
                defer { munmap(mapped, length) }
                let piece = UnsafeRawBufferPointer(start: mapped + skip, count: length - skip)
                position = start + Int64(length)
                if !body(piece) { return }
                continue
            }
            // No mapping: this window through a buffer.
            let buffer = fallback ?? .allocate(byteCount: window, alignment: 16)
            fallback = buffer
            let count = Int(min(Int64(window), to - position))
            let n = pread(fd, buffer.baseAddress, count, off_t(position))
            if n < 0 {
                if errno == EINTR { continue }
                throw FileSystemError("read", path: path)
            }
            if n == 0 { throw FileSystemError("read", path: path, code: EIO) }
            position += Int64(n)
            if !body(UnsafeRawBufferPointer(rebasing: buffer[0..<n])) { return }
        }
    }
}
