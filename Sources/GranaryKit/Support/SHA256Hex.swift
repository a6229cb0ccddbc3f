import Foundation
import GranaryDigest

#if canImport(Glibc)
    import Glibc
#endif

extension SHA256.Digest {
    /// Lower-case hex, as `sha256sum` prints it.
    public var hex: String {
        var text = ""
        text.reserveCapacity(64)
        for byte in self {
            text.append(Self.digits[Int(byte >> 4)])
            text.append(Self.digits[Int(byte & 0x0F)])
        }
        return text
    }

    private static let digits: [Character] = Array("0123456789abcdef")
}

/// The size and SHA-256 of a file, read in 1 MiB pieces (memory stays flat).
public enum FileDigest {
    /// With `mapped`, for a private file that nothing writes or truncates any more (a snapshot),
    /// the pieces are mappings of the page cache, hashed in place (`MappedReader`); otherwise
    /// they are read into a buffer, which is safe for a file someone else may still change.
    public static func of(_ path: String, mapped: Bool = false) throws(FileSystemError) -> (size: Int64, sha256: String)
    {
        let fd = RawPath.open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 { throw FileSystemError("open", path: path) }
        defer { close(fd) }
        var hasher = SHA256()
        var total: Int64 = 0
        if mapped {
            var info = stat()
            if fstat(fd, &info) != 0 { throw FileSystemError("read", path: path) }
            total = Int64(info.st_size)
            try MappedReader.read(fd, from: 0, to: total, path: path) { piece in
                hasher.update(bufferPointer: piece)
                return true
            }
            return (total, hasher.finalize().hex)
        }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let n = read(fd, buffer.baseAddress, buffer.count)
            if n < 0 {
                if errno == EINTR { continue }
                throw FileSystemError("read", path: path)
            }
            if n == 0 { break }
            hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            total += Int64(n)
        }
        return (total, hasher.finalize().hex)
    }
}

extension FileDigest {
    /// The size and SHA-256 of an open file (a user's, opened beneath their folder).
    ///
    /// With `limit`, at most `limit + 1` bytes are read: the owner may grow the file to terabytes
    /// while it is read, and a size past `limit` is all a caller comparing it with a file of
    /// `limit` bytes needs to know. Every 1 MiB piece checks ``Interruption``.
    /// With `account`, its time is charged and the read stops once it is spent (as ``copy(from:to:limit:account:)``).
    public static func of(_ file: Descriptor, limit: Int64? = nil, account: ContentAccount? = nil) throws -> (
        size: Int64, sha256: String
    ) {
        var hasher = SHA256()
        var total: Int64 = 0
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        var clock = CopyClock(account: account, path: file.display)
        while true {
            try Interruption.check()
            try clock.tick()
            if let limit, total > limit { break }
            let wanted = limit.map { Int(min(Int64(buffer.count), $0 - total + 1)) } ?? buffer.count
            let n = pread(file.raw, buffer.baseAddress, wanted, off_t(total))
            if n < 0 {
                if errno == EINTR { continue }
                throw FileSystemError("read", path: file.display)
            }
            if n == 0 { break }
            hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            total += Int64(n)
        }
        return (total, hasher.finalize().hex)
    }

    /// Copies an open file (a user's, opened beneath their folder) into a new private file at
    /// `destination`, hashing the bytes as they pass: the archive gets exactly the bytes that were
    /// hashed, whatever the owner does to their file meanwhile. Reads in 1 MiB pieces; a block of
    /// zeros is not written but left a hole (`SparseWriter`), so a sparse file (a few KiB on disk,
    /// gigabytes long) costs the repository no more than it costs its owner.
    ///
    /// Bounded by `limit`, the length that was counted against the user's cap (``UserBytes``):
    /// the owner may `ftruncate` the file to 16 TiB once granary has opened it, and a copy that
    /// read until `read(2)` returned 0 would read zeros for a day, the users after them waiting.
    /// The copy stops at `limit`; a byte past it throws ``GrownFileError`` naming the file (a file
    /// that shrank is copied as it is now, and its hash says so). Every piece checks
    /// ``Interruption``, so SIGINT or SIGTERM stops it within a piece.
    ///
    /// With `account` (the user's time, ``ContentAccount``) the copy's time is charged to it,
    /// piece by piece, and the copy stops once it is spent (``CopyTimeError``, naming the file):
    /// a file can be slow to read however long it is counted, and the users after this one wait.
    public static func copy(
        from source: Descriptor, to destination: String, limit: Int64, account: ContentAccount? = nil
    ) throws -> (
        size: Int64, sha256: String
    ) {
        let fd = RawPath.open(destination, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        if fd < 0 { throw FileSystemError("create", path: destination) }
        let output = Descriptor(fd, display: destination)
        var writer = SparseWriter(fd: fd, path: destination)
        var hasher = SHA256()
        var total: Int64 = 0
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        var clock = CopyClock(account: account, path: source.display)
        while true {
            try Interruption.check()
            try clock.tick()
            // One byte past the limit is read too: it is how a file that grew is told from one
            // that ended where it was counted.
            let wanted = Int(min(Int64(buffer.count), max(0, limit - total) + 1))
            let n = pread(source.raw, buffer.baseAddress, wanted, off_t(total))
            if n < 0 {
                if errno == EINTR { continue }
                throw FileSystemError("read", path: source.display)
            }
            if n == 0 { break }
            if total + Int64(n) > limit {
                throw GrownFileError(path: source.display, counted: limit)
            }
            let piece = UnsafeRawBufferPointer(rebasing: buffer[0..<n])
            hasher.update(bufferPointer: piece)
            try writer.write(piece)
            total += Int64(n)
        }
        try clock.tick()
        try writer.finish()
        let code = output.close()
        if code != 0 { throw FileSystemError("close", path: destination, code: code) }
        return (total, hasher.finalize().hex)
    }
}

/// The time of one copy or read of a user's file, charged to the user's ``ContentAccount`` as it
/// goes (each piece, a 1 MiB read at most).
struct CopyClock {
    let account: ContentAccount?
    let path: String
    private var last = ContinuousClock.now

    init(account: ContentAccount?, path: String) {
        self.account = account
        self.path = path
    }

    /// Charges the time since the last tick; throws ``CopyTimeError`` once the account is spent.
    mutating func tick() throws {
        guard let account else { return }
        let now = ContinuousClock.now
        account.charge(now - last)
        last = now
        if account.isSpent { throw CopyTimeError(path: path, budget: account.limit) }
    }
}

/// A copy of a user's file that ran past the user's time budget (``ContentAccount``): the
/// copy stopped there and that user's backup fails; the users after them do not wait for it.
public struct CopyTimeError: GranaryError, Sendable {
    /// The file, as shown to the administrator.
    public let path: String
    /// The user's time budget, as it was when the copy stopped.
    public let budget: Duration

    public var description: String {
        "\(path) was still being read when the user's time budget of \(DurationText.format(Self.shown(budget))) ran out ([limits] time, time_per_gib: SQLite's checks and the copies of the user's files together); it was not archived, and no archive was written"
    }

    /// Whole seconds from 10 s on, as ``ContentLimit`` shows a budget.
    static func shown(_ budget: Duration) -> Duration {
        budget >= .seconds(10)
            ? .seconds(budget.components.seconds + (budget.components.attoseconds >= 500_000_000_000_000_000 ? 1 : 0))
            : budget
    }
}

/// A user's file that grew past the length counted against their cap while granary copied it
/// (``FileDigest/copy(from:to:limit:account:)``): the copy stopped there and that user's backup fails.
public struct GrownFileError: GranaryError, Sendable {
    /// The file, as shown to the administrator.
    public let path: String
    /// The length that was counted when the folder was listed.
    public let counted: Int64

    public var description: String {
        "\(path) grew past the \(ByteCountText.approximate(counted)) counted when its folder was listed, while it was copied; it was not archived, and no archive was written"
    }
}
