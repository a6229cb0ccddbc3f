import CArchive
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Bytes read front to back (a download): `read` fills `buffer` and returns the count, 0 at the
/// end, -1 on an error (which the stream keeps for its owner to report).
protocol ArchiveByteStream: AnyObject {
    func read(into buffer: UnsafeMutableRawBufferPointer) -> Int
}

/// One member of an archive, as its header describes it.
public struct ArchiveEntry: Sendable {
    /// What kind of file the header describes.
    public enum Kind: String, Sendable {
        case regular, directory, symlink, hardlink, other
    }

    /// The member's name as stored.
    public let name: String
    public let kind: Kind
    /// The size the header declares (0 for non-files).
    public let size: Int64
    public let mode: mode_t
    /// The target of a symlink or hard link.
    public let linkTarget: String?
}

/// Reads a tar archive, streaming, whatever its compression.
///
/// Only the tar family of formats is accepted (ustar, pax, GNU), so a zip or cpio file
/// is refused as "not an archive" rather than half-understood. Data is read in chunks
/// into a caller-owned buffer: memory stays flat.
///
/// ```swift
/// let reader = try ArchiveReader(path: "alice/20261122T101500Z.tar.zst")
/// while let entry = try reader.next() {
///     if entry.name == "MANIFEST.json" { let bytes = try reader.readAll(limit: 1 << 24) }
/// }
/// ```
/// See <https://github.com/libarchive/libarchive/wiki/ManPageArchiveRead3>.
public final class ArchiveReader {
    private var handle: OpaquePointer?
    /// The archive's path, for messages.
    public let path: String
    private var current: ArchiveEntry?

    /// Opens `path` for reading.
    public init(path: String, blockSize: Int = 1 << 20) throws(ArchiveError) {
        self.path = path
        guard FileSystem.isRegularFile(path) else {
            throw .cannotOpen(
                path: path, message: FileSystem.status(path) == nil ? "no such file" : "not a regular file")
        }
        guard let a = archive_read_new() else { throw .cannotOpen(path: path, message: "out of memory") }
        handle = a
        Self.configure(a)
        if archive_read_open_filename(a, path, blockSize) != ARCHIVE_OK {
            let message = archive_error_string(a).map { String(cString: $0) } ?? "unknown error"
            let code = archive_errno(a)
            archive_read_free(a)
            handle = nil
            // libarchive reads the first block at open to detect the format: a file that opens
            // but is not a tar archive fails here, and that is a data error, not a missing file.
            switch code {
            case EACCES, EPERM, ENOENT, EISDIR, EMFILE, ENFILE: throw .cannotOpen(path: path, message: message)
            default: throw .malformed(path: path, message: message)
            }
        }
    }

    /// Reads an archive from `stream` (a download from a remote repository), front to back:
    /// `name` names it in messages. The stream is read through a buffer of `blockSize`
    /// bytes; memory stays flat whatever the archive's size.
    init(stream: any ArchiveByteStream, name: String, blockSize: Int = 1 << 20) throws(ArchiveError) {
        self.path = name
        guard let a = archive_read_new() else { throw .cannotOpen(path: name, message: "out of memory") }
        handle = a
        Self.configure(a)
        let box = StreamBox(stream: stream, blockSize: blockSize)
        streamBox = box
        let read:
            @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, UnsafeMutablePointer<UnsafeRawPointer?>?) -> Int =
                {
                    _, client, buffer in
                    let box = Unmanaged<StreamBox>.fromOpaque(client!).takeUnretainedValue()
                    let n = box.stream.read(into: box.buffer)
                    buffer?.pointee = UnsafeRawPointer(box.buffer.baseAddress)
                    return n
                }
        if archive_read_open(a, Unmanaged.passUnretained(box).toOpaque(), nil, read, nil) != ARCHIVE_OK {
            let message = archive_error_string(a).map { String(cString: $0) } ?? "unknown error"
            archive_read_free(a)
            handle = nil
            throw .malformed(path: name, message: message)
        }
    }

    /// Reads tar with every filter granary writes. A name marked as bytes (`hdrcharset=BINARY`,
    /// or a plain ustar name) comes back exactly; libarchive converts a pax name marked UTF-8 to
    /// NFC, which is why granary marks the names of an archive holding a name not in NFC as bytes
    /// (``ArchiveWriter/needsRawNames(_:)``).
    private static func configure(_ a: OpaquePointer) {
        archive_read_support_filter_all(a)
        archive_read_support_format_tar(a)
    }

    /// The stream and the buffer libarchive reads it into (kept alive as long as the reader).
    private final class StreamBox {
        let stream: any ArchiveByteStream
        let buffer: UnsafeMutableRawBufferPointer
        init(stream: any ArchiveByteStream, blockSize: Int) {
            self.stream = stream
            buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: blockSize, alignment: 16)
        }
        deinit { buffer.deallocate() }
    }
    private var streamBox: StreamBox?

    deinit {
        if let handle { archive_read_free(handle) }
    }

    private func malformed(_ a: OpaquePointer) -> ArchiveError {
        .malformed(path: path, message: archive_error_string(a).map { String(cString: $0) } ?? "unexpected end of data")
    }

    /// The compression filter libarchive detected (`zstd`, `gzip`, `xz`, `none`, …), valid after the first `next()`.
    public var filterName: String {
        guard let a = handle, archive_filter_count(a) > 1 else { return "none" }
        return archive_filter_name(a, 0).map { String(cString: $0) } ?? "unknown"
    }

    /// The next member's header, or `nil` at the end of the archive.
    public func next() throws(ArchiveError) -> ArchiveEntry? {
        guard let a = handle else { return nil }
        var entry: OpaquePointer?
        let rc = archive_read_next_header(a, &entry)
        if rc == ARCHIVE_EOF { current = nil; return nil }
        guard rc >= ARCHIVE_WARN, let entry else { throw malformed(a) }
        // The name's bytes, as stored (a pax header marked hdrcharset=BINARY, or plain ustar bytes),
        // carried reversibly in a string (FolderName); a UTF-8 pax name when the bytes are not to be had.
        let name: String
        if let raw = archive_entry_pathname(entry) {
            name = FolderName.decode(
                Array(
                    UnsafeBufferPointer(
                        start: UnsafeRawPointer(raw).assumingMemoryBound(to: UInt8.self), count: strlen(raw))))
        } else if let utf8 = archive_entry_pathname_utf8(entry) {
            name = String(cString: utf8)
        } else {
            name = ""
        }
        let type = mode_t(archive_entry_filetype(entry))
        let hardlink = archive_entry_hardlink(entry).map { String(cString: $0) }
        let symlink = archive_entry_symlink(entry).map { String(cString: $0) }
        let kind: ArchiveEntry.Kind
        if hardlink != nil {
            kind = .hardlink
        } else {
            switch type {
            case mode_t(Glibc.S_IFREG): kind = .regular
            case mode_t(Glibc.S_IFDIR): kind = .directory
            case mode_t(Glibc.S_IFLNK): kind = .symlink
            default: kind = .other
            }
        }
        let result = ArchiveEntry(
            name: name, kind: kind,
            size: archive_entry_size_is_set(entry) != 0 ? archive_entry_size(entry) : 0,
            mode: archive_entry_perm(entry),
            linkTarget: hardlink ?? symlink)
        current = result
        return result
    }

    /// Reads the next chunk of the current member's data into `buffer`; 0 at its end.
    func read(into buffer: UnsafeMutableRawBufferPointer) throws(ArchiveError) -> Int {
        guard let a = handle else { return 0 }
        while true {
            let n = archive_read_data(a, buffer.baseAddress, buffer.count)
            if n >= 0 { return n }
            if n == Int(ARCHIVE_RETRY) { continue }
            throw malformed(a)
        }
    }

    /// Reads the whole current member, refusing more than `limit` bytes.
    public func readAll(limit: Int) throws(ArchiveError) -> [UInt8] {
        var result: [UInt8] = []
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let n = try read(into: buffer)
            if n == 0 { return result }
            if result.count + n > limit {
                throw .tooLarge(path: path, member: current?.name ?? "?", limit: Int64(limit))
            }
            result.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
        }
    }

    /// Streams the current member to `body` chunk by chunk, refusing more than `limit` bytes.
    /// Returns the number of bytes read.
    @discardableResult
    public func stream(
        limit: Int64, chunkSize: Int = 1 << 20, _ body: (UnsafeRawBufferPointer) throws -> Void
    ) throws -> Int64 {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunkSize, alignment: 16)
        defer { buffer.deallocate() }
        var total: Int64 = 0
        while true {
            // A signal stops a long member within one chunk (verify, a restore's staging).
            try Interruption.check()
            let n = try read(into: buffer)
            if n == 0 { return total }
            total += Int64(n)
            if total > limit {
                throw ArchiveError.tooLarge(path: path, member: current?.name ?? "?", limit: limit)
            }
            try body(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
        }
    }

    /// Skips the rest of the current member.
    public func skip() throws(ArchiveError) {
        guard let a = handle else { return }
        if archive_read_data_skip(a) < ARCHIVE_WARN { throw malformed(a) }
    }
}
