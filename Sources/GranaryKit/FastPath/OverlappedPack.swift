import CZstd
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A `.tar.zst` archive whose first store is compressed while SQLite's backup API is still
/// writing its snapshot, instead of after it.
///
/// **Why**: the manifest comes first in the archive and records each store's SHA-256 and check
/// result, and the snapshot's page 1 is the backup API's last write (the pager stamps the
/// header at commit). Packed in order, nothing could be compressed before the snapshot, its
/// check and its hash were over, and one of two cores idled through the copy.
///
/// **How**: the archive file starts with a reserved region of `prefix` bytes. The snapshot is
/// written through the `granary-tee` VFS (`Snapshotter`), which publishes how far the file is
/// final; a follower thread compresses pages 2…N behind it into the archive from `prefix` on,
/// in the same zstd stream that then takes the other members and tar's trailer. When everything
/// is known, the beginning of the tar stream (the `MANIFEST.json` member, the `stores/` folder,
/// the first store's header and page 1) is compressed as a zstd frame of its own and written at
/// offset 0, and the rest of the reserved region becomes a zstd *skippable frame* (RFC 8878
/// §3.1.2), which every zstd decoder passes over. Decompressed, the archive is byte for byte
/// the tar the in-order path writes, and stock `tar`, `zstd -t` and libarchive read it as ever.
/// If the first frame does not fit the reserved region (a very large manifest), the archive is
/// rewritten without it.
///
/// **When not**: the follower gives up — and the archive is packed in order as before — when
/// the store is not in WAL mode (a rollback-journal copy goes stepwise and restarts), when any
/// write of the copy goes behind what was already published, or when anything else does not
/// add up (sizes, page size). Giving up costs only the work done so far.
public final class OverlappedPack: @unchecked Sendable {
    /// Whether and when a backup takes this path (`BackupOperation.Options.overlap`).
    public struct Settings: Sendable {
        /// Off: every archive is packed in order.
        public var enabled = true
        /// Smaller first stores are packed in order: there is little to win.
        public var minimumSize: Int64 = 64 << 20
        /// The region reserved at the start of an overlapped archive for its first frame.
        public var prefix: Int64 = 256 << 10
        public init() {}

        func applies(toStoreOf size: Int64) -> Bool { enabled && size >= minimumSize }
    }

    /// The temporary archive (it moves if the first frame has to be relocated).
    private(set) var temporary: String
    private(set) var fd: Int32
    /// Bytes reserved at the start for the first frame and the skippable frame's padding.
    let prefix: Int64
    /// Shared with the `granary-tee` VFS during the first store's snapshot.
    let track = SnapshotTrack()
    private let output: ArchiveOutput
    private let level: Int
    private let folder: String
    private let name: String

    private let lock = NSLock()
    private var snapshotPath: String?
    private var snapshotDone = false
    private var cancelled = false
    private var started = false
    private let stopped = DispatchSemaphore(value: 0)
    private var outcome: Outcome?
    private var published = false

    enum Outcome {
        /// Every byte of the snapshot after page 1 is in the stream; `size` is the file's size.
        case complete(size: Int64)
        /// The follower gave up; the archive is to be packed in order.
        case abandoned
        case failed(any Error)
    }

    /// The temporary archive, its compressor and a track; nothing is followed before `follow`.
    init(folder: String, name: String, prefix: Int64, level: Int?, threads: Int) throws {
        let (fd, temporary) = try FileSystem.createTemporaryFile(in: folder, for: name)
        self.fd = fd
        self.temporary = temporary
        self.folder = folder
        self.name = name
        self.prefix = prefix
        self.level = level ?? Compression.zstd.defaultLevel ?? 3
        do {
            if lseek(fd, off_t(prefix), SEEK_SET) < 0 { throw FileSystemError("seek in", path: temporary) }
            output = try ArchiveOutput(
                fileDescriptor: fd, path: temporary, zstdLevel: self.level, threads: threads > 1 ? threads : 0)
        } catch {
            close(fd)
            unlink(temporary)
            throw error
        }
    }

    deinit { discard() }

    /// Starts the follower on the snapshot that is about to be written at `path`.
    func follow(_ path: String) {
        lock.withLock {
            snapshotPath = path
            started = true
        }
        let thread = Thread { [self] in
            let result = run(path)
            lock.withLock { outcome = result }
            stopped.signal()
        }
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// The snapshot is complete and its connection closed: the follower reads to its end.
    func snapshotFinished() { lock.withLock { snapshotDone = true } }

    /// Waits for the follower (if any); `cancel` first tells it to stop where it is.
    private func stop(cancel: Bool) -> Outcome {
        let wasStarted = lock.withLock {
            if cancel && outcome == nil { cancelled = true }
            return started
        }
        guard wasStarted else { return .abandoned }
        stopped.wait()
        stopped.signal()  // a second stop() returns at once
        return lock.withLock { outcome ?? .abandoned }
    }

    /// Stops the follower and removes the temporary archive unless it was published.
    func discard() {
        _ = stop(cancel: true)
        lock.withLock {
            if fd >= 0 {
                close(fd)
                fd = -1
                if !published { unlink(temporary) }
            }
        }
    }

    /// The caller has renamed the temporary archive to its final name.
    func markPublished() { lock.withLock { published = true } }

    private var isCancelled: Bool { lock.withLock { cancelled } }
    private var isSnapshotDone: Bool { lock.withLock { snapshotDone } }

    private func run(_ path: String) -> Outcome {
        var input: Int32 = -1
        defer { if input >= 0 { close(input) } }
        var position: Int64 = -1
        while true {
            if isCancelled || Interruption.isRequested { return .abandoned }
            // `done` is read before `high`: once the copy is over, `high` cannot move any more.
            let done = isSnapshotDone
            if track.isBroken { return .abandoned }
            var high = track.high
            if done {
                // The copy's connection is closed: the whole file is final (a region SQLite
                // extended without writing reads as zeros, as it would for tar).
                var info = stat()
                guard stat(path, &info) == 0, Int64(info.st_size) >= high else { return .abandoned }
                high = Int64(info.st_size)
            }
            if position < 0 && high > 0 {
                position = track.pageSize
                input = open(path, O_RDONLY | O_CLOEXEC)
                if input < 0 || position <= 0 { return .abandoned }
            }
            if position >= 0 && position < high {
                // The final part is read through a mapping (no copy out of the page cache); the
                // tee holds back a truncate below `high` until the mapping is gone.
                let end = min(high, position + Int64(MappedReader.window))
                var ok = true
                do {
                    let mapped = try track.whileMapped {
                        try MappedReader.read(input, from: position, to: end, path: path) { piece in
                            ok = output.write(piece.baseAddress!, count: piece.count)
                            return ok
                        }
                    }
                    guard mapped else { return .abandoned }
                } catch {
                    return .failed(error)
                }
                guard ok else {
                    return .failed(
                        output.failure ?? ArchiveError.writeFailed(path: temporary, message: "write failed", code: EIO))
                }
                position = end
                continue
            }
            if done { return position > 0 ? .complete(size: position) : .abandoned }
            usleep(500)
        }
    }

    /// Finishes the archive after the snapshots: waits for the follower, writes the other
    /// members and the trailer, then the first frame. False when the follower gave up (nothing
    /// usable was written: the caller packs in order, and `discard` removes this file).
    func complete(
        manifest: Manifest, files: [BackupOperation.Packed], pageSize: Int, created: Date,
        onChunk: @escaping (UnsafeRawBufferPointer) -> Void
    ) throws -> Bool {
        guard let first = files.first else { return false }
        let size: Int64
        switch stop(cancel: false) {
        case .abandoned: return false
        case .failed(let error): throw error
        case .complete(let followed): size = followed
        }
        guard first.source == lock.withLock({ snapshotPath }), first.file.size == size,
            Int64(pageSize) == track.pageSize, size > Int64(pageSize)
        else { return false }
        try Interruption.check()
        // The rest of the first store's tar member: zeros up to a 512-byte block (none for a
        // page size of 512 or more), then the other members and the trailer, in the same stream.
        let padding = [UInt8](repeating: 0, count: Int((512 - size % 512) % 512))
        if !padding.isEmpty {
            let ok = padding.withUnsafeBytes { output.write($0.baseAddress!, count: $0.count) }
            if !ok {
                throw output.failure ?? ArchiveError.writeFailed(path: temporary, message: "write failed", code: EIO)
            }
        }
        let rest = try ArchiveWriter(
            output: output, modificationTime: created, rawNames: ArchiveWriter.needsRawNames(files.map(\.file.path)))
        for file in files.dropFirst() {
            try Interruption.check()
            var interrupted = false
            try rest.addFile(member: file.file.path, from: file.source, mapped: file.mapped) { chunk in
                onChunk(chunk)
                if Interruption.isRequested { interrupted = true }
                return !interrupted
            }
            if interrupted { try Interruption.check() }
        }
        try rest.finish()
        try writeFirstFrame(try head(manifest: manifest, first: first, pageSize: pageSize, created: created))
        return true
    }

    /// The plain tar bytes before the first store's page 2.
    private func head(manifest: Manifest, first: BackupOperation.Packed, pageSize: Int, created: Date) throws -> [UInt8]
    {
        let capture = ArchiveOutput(capturingFor: temporary)
        let writer = try ArchiveWriter(
            output: capture, modificationTime: created,
            rawNames: ArchiveWriter.needsRawNames(manifest.files.map(\.path)))
        try writer.addManifest(manifest)
        try writer.addDirectory(member: Manifest.storesFolder)
        try writer.addFile(member: first.file.path, from: first.source, dataLimit: Int64(pageSize))
        // The writer is abandoned mid-member: what it writes on the way out (zeros to the end of
        // the member, the trailer) is not ours. It must not be freed before this line.
        return withExtendedLifetime(writer) {
            capture.capturing = false
            return capture.captured
        }
    }

    /// Compresses `head` into one zstd frame and puts it before the followed stream.
    private func writeFirstFrame(_ head: [UInt8]) throws {
        guard let context = ZSTD_createCCtx() else {
            throw ArchiveError.writeFailed(
                path: temporary, message: "out of memory for the zstd compressor", code: ENOMEM)
        }
        defer { ZSTD_freeCCtx(context) }
        ZSTD_CCtx_setParameter(context, ZSTD_c_compressionLevel, Int32(level))
        ZSTD_CCtx_setParameter(context, ZSTD_c_checksumFlag, 1)
        var frame = [UInt8](repeating: 0, count: ZSTD_compressBound(head.count))
        let length = frame.withUnsafeMutableBytes { out in
            head.withUnsafeBytes { ZSTD_compress2(context, out.baseAddress, out.count, $0.baseAddress, $0.count) }
        }
        if ZSTD_isError(length) != 0 {
            throw ArchiveError.writeFailed(
                path: temporary, message: "zstd: \(String(cString: ZSTD_getErrorName(length)))", code: EIO)
        }
        frame.removeSubrange(length...)
        let gap = prefix - Int64(length)
        if gap == 0 || gap >= 8 {
            if gap > 0 {
                // A skippable frame: magic 0x184D2A50 and the length of its content, little-endian.
                // Its content is the reserved region's unwritten bytes (a hole, zeros).
                let content = UInt32(gap - 8)
                frame += [0x50, 0x2A, 0x4D, 0x18]
                frame += [
                    UInt8(content & 0xFF), UInt8(content >> 8 & 0xFF), UInt8(content >> 16 & 0xFF),
                    UInt8(content >> 24),
                ]
            }
            try Self.writeAll(fd, frame, at: 0, path: temporary)
        } else {
            try relocate(frame)
        }
    }

    /// The first frame does not fit: a new temporary archive with the frame, then the stream.
    private func relocate(_ frame: [UInt8]) throws {
        let (target, path) = try FileSystem.createTemporaryFile(in: folder, for: name)
        var moved = false
        defer {
            if !moved {
                close(target)
                unlink(path)
            }
        }
        try Self.writeAll(target, frame, at: 0, path: path)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: ArchiveWriter.chunkSize, alignment: 16)
        defer { buffer.deallocate() }
        var from = prefix
        var to = Int64(frame.count)
        while true {
            let n = pread(fd, buffer.baseAddress, buffer.count, off_t(from))
            if n < 0 {
                if errno == EINTR { continue }
                throw FileSystemError("read", path: temporary)
            }
            if n == 0 { break }
            try Self.writeAll(target, [UInt8](UnsafeRawBufferPointer(rebasing: buffer[0..<n])), at: to, path: path)
            from += Int64(n)
            to += Int64(n)
        }
        close(fd)
        unlink(temporary)
        lock.withLock {
            fd = target
            temporary = path
        }
        moved = true
    }

    private static func writeAll(_ fd: Int32, _ bytes: [UInt8], at offset: Int64, path: String) throws {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes {
                pwrite(fd, $0.baseAddress! + done, $0.count - done, off_t(offset) + off_t(done))
            }
            if n < 0 {
                if errno == EINTR { continue }
                throw FileSystemError("write", path: path)
            }
            done += n
        }
    }
}
