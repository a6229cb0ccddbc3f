import CArchive
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Writes a tar archive, streaming, through one compression filter.
///
/// The format is POSIX pax (restricted: plain ustar headers unless a name needs pax
/// extensions), which GNU tar, bsdtar and busybox read. File contents are copied in
/// fixed-size chunks, so memory stays flat whatever the size of the files.
///
/// ```swift
/// let writer = try ArchiveWriter(fileDescriptor: fd, path: temp, compression: .zstd, level: 3, threads: 2)
/// try writer.addData(member: "MANIFEST.json", bytes: manifestBytes)
/// try writer.addFile(member: "stores/Local.sqlite", from: snapshotPath)
/// try writer.finish()
/// ```
/// See <https://github.com/libarchive/libarchive/wiki/ManPageArchiveWrite3>.
public final class ArchiveWriter {
    private var handle: OpaquePointer?
    /// The path written to, for messages.
    public let path: String
    private let modificationTime: time_t
    /// Where libarchive's output goes (zstd, the file, writeback); kept alive for its callbacks.
    private var output: ArchiveOutput?
    /// Size of the chunks copied from files.
    public static let chunkSize = 1 << 20

    /// Starts an archive on an open file descriptor (the caller keeps ownership of `fd`).
    ///
    /// `threads` is the number of zstd workers; 0 or 1 compresses on the calling thread.
    /// `rawNames` marks every name as bytes: see ``needsRawNames(_:)``.
    public convenience init(
        fileDescriptor fd: Int32, path: String, compression: Compression, level: Int? = nil, threads: Int = 0,
        modificationTime: Date = Date(), rawNames: Bool = false
    ) throws(ArchiveError) {
        let output = try ArchiveOutput(
            fileDescriptor: fd, path: path,
            zstdLevel: compression == .zstd ? level ?? Compression.zstd.defaultLevel : nil,
            threads: threads > 1 ? threads : 0)
        try self.init(
            output: output, compression: compression, level: level, modificationTime: modificationTime,
            rawNames: rawNames)
    }

    /// Whether an archive of `members` must mark its names as bytes (pax `hdrcharset=BINARY`):
    /// when one of them is not text in Unicode normal form C (see FolderName). libarchive reads a
    /// pax name marked UTF-8 back converted to NFC, so `Cafe` + U+0301 would come back as `Café`,
    /// another file's name; a name marked as bytes comes back exactly. (libarchive marks a name
    /// that is not UTF-8 at all by itself; the mark is per archive, set before the first member.)
    /// GNU tar extracts both kinds exactly; versions that do not know the mark say they ignore it.
    public static func needsRawNames(_ members: some Sequence<String>) -> Bool {
        members.contains { !FolderName.isUTF8($0) }
    }

    /// Starts a plain tar stream into `output` (which may already hold the beginning of an
    /// archive: `OverlappedPack` writes a member's data itself and the rest through this).
    /// `finish()` ends `output` too.
    init(
        output: ArchiveOutput, compression: Compression = .none, level: Int? = nil, modificationTime: Date,
        rawNames: Bool = false
    ) throws(ArchiveError) {
        guard let a = archive_write_new() else {
            throw .writeFailed(path: output.path, message: "out of memory", code: ENOMEM)
        }
        self.handle = a
        self.path = output.path
        self.modificationTime = time_t(modificationTime.timeIntervalSince1970)
        self.output = output
        try check(archive_write_set_format_pax_restricted(a))
        if rawNames { try check(archive_write_set_format_option(a, "pax", "hdrcharset", "BINARY")) }
        switch compression {
        // zstd is done after libarchive, in ArchiveOutput: libarchive writes plain tar.
        case .zstd, .none: try check(archive_write_add_filter_none(a))
        case .gzip: try check(archive_write_add_filter_gzip(a))
        case .xz: try check(archive_write_add_filter_xz(a))
        }
        if let level, compression == .gzip || compression == .xz {
            try check(archive_write_set_filter_option(a, nil, "compression-level", String(level)))
        }
        if compression == .gzip {
            // Keep the gzip header free of the time, so equal input gives equal bytes.
            _ = archive_write_set_filter_option(a, "gzip", "timestamp", nil)
        }
        // No 10 KiB tape records: each write goes straight on (1 MiB chunks of file data reach
        // zstd as they are, 5% less time packing), and the archive ends with tar's own trailer.
        try check(archive_write_set_bytes_per_block(a, 0))
        try check(
            archive_write_open2(
                a, Unmanaged.passUnretained(output).toOpaque(), nil,
                { _, client, buffer, length in
                    let output = Unmanaged<ArchiveOutput>.fromOpaque(client!).takeUnretainedValue()
                    guard let buffer else { return 0 }
                    return output.write(buffer, count: length) ? length : -1
                },
                { _, client in
                    let output = Unmanaged<ArchiveOutput>.fromOpaque(client!).takeUnretainedValue()
                    return output.finish() ? ARCHIVE_OK : ARCHIVE_FATAL
                }, nil))
    }

    deinit {
        if let handle {
            // An unfinished writer: discard without writing the trailer.
            archive_write_free(handle)
        }
    }

    private func check(_ rc: Int32) throws(ArchiveError) {
        guard rc < ARCHIVE_WARN, let handle else { return }
        throw error(from: handle)
    }

    private func error(from a: OpaquePointer) -> ArchiveError {
        // A failure in ArchiveOutput reaches libarchive only as "-1": its own error says more.
        if let failure = output?.failure { return failure }
        let message = archive_error_string(a).map { String(cString: $0) } ?? "unknown libarchive error"
        return .writeFailed(path: path, message: message, code: archive_errno(a))
    }

    private func writeHeader(member: String, type: mode_t, mode: mode_t, size: Int64) throws(ArchiveError) {
        guard let a = handle, let entry = archive_entry_new() else {
            throw .writeFailed(path: path, message: "writer already finished", code: EINVAL)
        }
        defer { archive_entry_free(entry) }
        // Names are bytes on Linux: the member name is set as the bytes of the file's name (granary
        // carries a name that is not UTF-8 in its strings reversibly, see FolderName). libarchive's
        // pax writer stores a non-ASCII name in a pax "path" header, marked hdrcharset=BINARY when
        // it cannot vouch for its charset, so any byte name comes back exactly from GNU tar,
        // bsdtar and granary. (Setting only the UTF-8 form crashed: the writer then asks for the
        // name in the current locale, gets nothing, and takes its length.)
        FolderName.withRaw(member) { archive_entry_copy_pathname(entry, $0) }
        archive_entry_set_filetype(entry, UInt32(type))
        archive_entry_set_perm(entry, mode)
        archive_entry_set_size(entry, size)
        archive_entry_set_mtime(entry, modificationTime, 0)
        archive_entry_set_uname(entry, "granary")
        archive_entry_set_gname(entry, "granary")
        try check(archive_write_header(a, entry))
    }

    /// Adds a folder entry.
    public func addDirectory(member: String, mode: mode_t = 0o700) throws(ArchiveError) {
        try writeHeader(member: member, type: Glibc.S_IFDIR, mode: mode, size: 0)
    }

    /// Adds a regular file whose content is `bytes`.
    public func addData(member: String, bytes: [UInt8], mode: mode_t = 0o600) throws(ArchiveError) {
        try writeHeader(member: member, type: Glibc.S_IFREG, mode: mode, size: Int64(bytes.count))
        try writeBytes(bytes)
    }

    private func writeBytes(_ bytes: [UInt8]) throws(ArchiveError) {
        let failure: ArchiveError? = bytes.withUnsafeBytes { buffer in
            do throws(ArchiveError) { try writeData(buffer) } catch { return error }
            return nil
        }
        if let failure { throw failure }
    }

    /// Adds the archive's head: `MANIFEST.json`, and in format 2 `MANIFEST.files` (see
    /// `Manifest`). Throws `ManifestError.tooLarge` before writing anything when the manifest is
    /// over the limit every reader applies.
    public func addManifest(_ manifest: Manifest) throws {
        let layout = try manifest.layout()
        try addData(member: Manifest.memberName, bytes: layout.manifest)
        guard !layout.listed.isEmpty else { return }
        // Line by line, gathered into chunks: the list is not held in memory a second time.
        try writeHeader(member: Manifest.fileListName, type: Glibc.S_IFREG, mode: 0o600, size: layout.listSize)
        var chunk: [UInt8] = []
        chunk.reserveCapacity(Self.chunkSize)
        var written: Int64 = 0
        for file in layout.listed {
            chunk += Manifest.fileListLine(file)
            if chunk.count >= Self.chunkSize - 4096 {
                try writeBytes(chunk)
                written += Int64(chunk.count)
                chunk.removeAll(keepingCapacity: true)
            }
        }
        try writeBytes(chunk)
        written += Int64(chunk.count)
        guard written == layout.listSize else {
            throw ArchiveError.writeFailed(
                path: path, message: "\(Manifest.fileListName) changed size while it was written", code: EIO)
        }
    }

    /// Adds the regular file at `source`, copying it in chunks. The file must not change
    /// size while it is copied (granary only archives its own snapshot files).
    /// `onChunk` sees each chunk as it is written (for hashing or progress); when it returns
    /// false the copy stops there, the member left short: the caller abandons the archive (an
    /// interrupted backup does, at once, instead of after the rest of a big file).
    ///
    /// `dataLimit` writes the header of the whole file but only its first `dataLimit` bytes
    /// (`OverlappedPack` writes the rest itself); the writer must then be abandoned, not finished.
    ///
    /// `mapped` reads through `MappedReader` (no copy out of the page cache): only for a private
    /// file that nothing writes or truncates any more, such as a snapshot.
    public func addFile(
        member: String, from source: String, mode: mode_t = 0o600, dataLimit: Int64? = nil, mapped: Bool = false,
        onChunk: ((UnsafeRawBufferPointer) -> Bool)? = nil
    ) throws(ArchiveError) {
        let fd = RawPath.open(source, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            throw .writeFailed(
                path: path, message: "cannot open \(source): \(String(cString: strerror(errno)))", code: errno)
        }
        defer { close(fd) }
        var info = stat()
        fstat(fd, &info)
        let size = Int64(info.st_size)
        try writeHeader(member: member, type: Glibc.S_IFREG, mode: mode, size: size)
        if mapped {
            var failure: ArchiveError?
            do throws(FileSystemError) {
                try MappedReader.read(fd, from: 0, to: min(size, dataLimit ?? size), path: source) { chunk in
                    do throws(ArchiveError) { try writeData(chunk) } catch {
                        failure = error
                        return false
                    }
                    return onChunk?(chunk) ?? true
                }
            } catch {
                throw .writeFailed(
                    path: path, message: "cannot read \(source): \(String(cString: strerror(error.code)))",
                    code: error.code)
            }
            if let failure { throw failure }
            return
        }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.chunkSize, alignment: 16)
        defer { buffer.deallocate() }
        var written: Int64 = 0
        let end = min(size, dataLimit ?? size)
        while written < end {
            let n = read(fd, buffer.baseAddress, min(Self.chunkSize, Int(end - written)))
            if n < 0 {
                if errno == EINTR { continue }
                throw .writeFailed(
                    path: path, message: "cannot read \(source): \(String(cString: strerror(errno)))", code: errno)
            }
            if n == 0 {
                throw .writeFailed(path: path, message: "\(source) shrank while it was archived", code: EIO)
            }
            let chunk = UnsafeRawBufferPointer(rebasing: buffer[0..<n])
            try writeData(chunk)
            written += Int64(n)
            if let onChunk, !onChunk(chunk) { return }
        }
    }

    private func writeData(_ buffer: UnsafeRawBufferPointer) throws(ArchiveError) {
        guard let a = handle else { throw .writeFailed(path: path, message: "writer already finished", code: EINVAL) }
        var offset = 0
        while offset < buffer.count {
            let n = archive_write_data(a, buffer.baseAddress! + offset, buffer.count - offset)
            if n < 0 { throw error(from: a) }
            if n == 0 { throw .writeFailed(path: path, message: "short write", code: EIO) }
            offset += n
        }
    }

    /// Writes the tar trailer and flushes the compressor. The caller then fsyncs and publishes the file.
    public func finish() throws(ArchiveError) {
        guard let a = handle else { return }
        let rc = archive_write_close(a)
        let failure: ArchiveError? = rc < ARCHIVE_WARN ? error(from: a) : nil
        archive_write_free(a)
        handle = nil
        if let failure { throw failure }
    }
}
