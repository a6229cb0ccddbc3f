import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// An open file descriptor that is closed exactly once: by `close()` or when the value goes away.
///
/// granary runs other threads (zstd workers, the CPU monitor, SQLite's own): a descriptor closed
/// twice can close one another thread has just been given, and if that one is SQLite's, its POSIX
/// locks go with it. Owning each descriptor in one object makes a second close impossible.
public final class Descriptor: @unchecked Sendable {
    private let lock = NSLock()
    private var fd: Int32
    /// What the descriptor was opened as, for messages only.
    public let display: String

    /// Takes ownership of `fd`.
    public init(_ fd: Int32, display: String) {
        self.fd = fd
        self.display = display
    }

    deinit { close() }

    /// The raw descriptor, for system calls; -1 once closed.
    public var raw: Int32 {
        lock.lock()
        defer { lock.unlock() }
        return fd
    }

    /// Closes the descriptor (once; later calls do nothing). Returns close(2)'s error, if any.
    @discardableResult
    public func close() -> Int32 {
        lock.lock()
        let owned = fd
        fd = -1
        lock.unlock()
        guard owned >= 0 else { return 0 }
        return Glibc.close(owned) == 0 ? 0 : errno
    }

    /// `fstat(2)`.
    public func status() throws(FileSystemError) -> stat {
        var info = stat()
        if fstat(raw, &info) != 0 { throw FileSystemError("examine", path: display) }
        return info
    }

    /// `fsync(2)`.
    public func sync() throws(FileSystemError) {
        if fsync(raw) != 0 { throw FileSystemError("fsync", path: display) }
    }

    /// Writes all of `bytes`.
    func write(_ bytes: UnsafeRawBufferPointer) throws(FileSystemError) {
        try FileSystem.writeAll(raw, bytes, path: display)
    }

    /// Reads up to `count` bytes at `offset` (fewer at the end of the file).
    public func read(count: Int, at offset: Int64) throws(FileSystemError) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: count)
        var result: Result<Int, FileSystemError> = .success(0)
        buffer.withUnsafeMutableBytes { target in
            do throws(FileSystemError) { result = .success(try read(into: target, at: offset)) } catch {
                result = .failure(error)
            }
        }
        return Array(buffer[0..<(try result.get())])
    }

    /// Fills `target` from `offset` with as few reads as it takes; the count read (less only
    /// where the file ends).
    func read(into target: UnsafeMutableRawBufferPointer, at offset: Int64) throws(FileSystemError) -> Int {
        var done = 0
        while done < target.count {
            let n = pread(raw, target.baseAddress! + done, target.count - done, off_t(offset) + off_t(done))
            if n < 0 {
                if errno == EINTR { continue }
                throw FileSystemError("read", path: display)
            }
            if n == 0 { break }
            done += n
        }
        return done
    }
}

extension Duration {
    /// The duration in seconds, whole and fractional (`components` splits them: a conversion that
    /// reads only the attoseconds drops every whole second).
    public var timeInterval: TimeInterval {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }

    /// The duration in whole milliseconds, clamped to what an `Int32` holds (SQLite's busy timeout).
    public var clampedMilliseconds: Int32 {
        Int32(
            clamping: components.seconds.multipliedReportingOverflow(by: 1000).overflow
                ? Int64.max
                : components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000)
    }
}
