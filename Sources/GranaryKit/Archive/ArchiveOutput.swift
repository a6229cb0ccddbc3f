import CLinux
import CZstd
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Where `ArchiveWriter`'s bytes go after libarchive: zstd compression (for `.tar.zst`), then
/// the archive's file descriptor, with the file's dirty pages written back as it grows.
///
/// **zstd is done here, not by libarchive's filter**: in libarchive 3.6 that filter cannot set
/// zstd's job size, and the multithreaded compressor keeps about three jobs per worker in memory
/// (the default job at level 3 is 8 MiB: 50 MiB for two workers). A 4 MiB job gives the same
/// speed and ratio with half the memory. Frames also carry zstd's content checksum (libarchive
/// leaves it off), so a damaged compressed stream is reported by zstd itself as well as by the
/// manifest's SHA-256s. See <https://facebook.github.io/zstd/zstd_manual.html>.
///
/// **Writeback as it goes**: every `writebackStep` bytes, writeback of what was written is
/// started (`sync_file_range(2)`, not waited for). The final `fsync` then has little left to do,
/// and the disk sees a steady stream instead of the whole archive at once, which is what made
/// the owning process's own commits (each an fsync of its `-wal`) stall.
final class ArchiveOutput {
    /// zstd's job size with two or more workers. libzstd's buffers for its workers grow with it:
    /// with 2 MiB jobs a backup of a 1 GiB store peaks at about 51 MiB (a full) and 57 MiB (a full
    /// with page hashes, which packs from a finished file and so keeps every job busy), against
    /// 62 and 71 MiB with 4 MiB jobs, for some 5 % more CPU in the compressor and the same bytes
    /// (docs/performance.md).
    static let zstdJobSize: Int32 = 2 << 20
    /// How much is written between two writeback starts. An owner's fsync waits for the burst
    /// in flight, so smaller bursts mean shorter stalls for the same total (the bytes must reach
    /// the disk); docs/performance.md has the measurements behind 1 MiB.
    static let writebackStep: Int64 = 1 << 20

    private let fd: Int32
    let path: String
    private let compressor: OpaquePointer?
    private let output: UnsafeMutableRawBufferPointer?
    private var written: Int64 = 0
    private var writebackFrom: Int64 = 0
    /// The first failure, kept for `ArchiveWriter` (libarchive only sees "-1").
    private(set) var failure: ArchiveError?
    /// In memory mode (no file): what has been written so far, while `capturing` is true.
    private(set) var captured: [UInt8] = []
    /// In memory mode: false drops what comes next (the padding and trailer of a writer
    /// that is abandoned half-way through a member, see `OverlappedPack`).
    var capturing = true

    /// An output to `fd`; `zstdLevel` compresses with zstd at that level with `threads` workers
    /// (0: compress on the calling thread), `nil` writes the bytes as they come.
    init(fileDescriptor fd: Int32, path: String, zstdLevel: Int?, threads: Int) throws(ArchiveError) {
        self.fd = fd
        self.path = path
        written = max(0, Int64(lseek(fd, 0, SEEK_CUR)))
        writebackFrom = written
        guard let zstdLevel else {
            compressor = nil
            output = nil
            return
        }
        guard let context = ZSTD_createCCtx() else {
            throw .writeFailed(path: path, message: "out of memory for the zstd compressor", code: ENOMEM)
        }
        compressor = context
        output = .allocate(byteCount: ZSTD_CStreamOutSize(), alignment: 16)
        try set(ZSTD_c_compressionLevel, Int32(zstdLevel))
        try set(ZSTD_c_checksumFlag, 1)
        // A libzstd built without threads refuses workers: it then compresses on this thread.
        if threads > 0, ZSTD_isError(ZSTD_CCtx_setParameter(context, ZSTD_c_nbWorkers, Int32(threads))) == 0 {
            try set(ZSTD_c_jobSize, Self.zstdJobSize)
        }
    }

    /// An output to memory: the plain bytes, uncompressed, in `captured`.
    init(capturingFor path: String) {
        fd = -1
        self.path = path
        compressor = nil
        output = nil
    }

    deinit {
        if let compressor { ZSTD_freeCCtx(compressor) }
        output?.deallocate()
    }

    private func set(_ parameter: ZSTD_cParameter, _ value: Int32) throws(ArchiveError) {
        let rc = ZSTD_CCtx_setParameter(compressor, parameter, value)
        if ZSTD_isError(rc) != 0 {
            throw .writeFailed(path: path, message: "zstd: \(String(cString: ZSTD_getErrorName(rc)))", code: EINVAL)
        }
    }

    /// Takes `count` bytes of the stream; false (with `failure` set) when compressing or writing failed.
    func write(_ bytes: UnsafeRawPointer, count: Int) -> Bool {
        guard compressor != nil else { return emit(bytes, count: count) }
        var input = ZSTD_inBuffer(src: bytes, size: count, pos: 0)
        while input.pos < input.size {
            guard compress(&input, ZSTD_e_continue) != nil else { return false }
        }
        return true
    }

    /// Ends the stream (the zstd frame) and writes what is left; false (with `failure` set) on failure.
    func finish() -> Bool {
        guard compressor != nil else { return true }
        var input = ZSTD_inBuffer(src: nil, size: 0, pos: 0)
        while true {
            guard let remaining = compress(&input, ZSTD_e_end) else { return false }
            if remaining == 0 { return true }
        }
    }

    /// One call to the compressor and a write of what it produced; the bytes still buffered
    /// inside zstd, or nil on failure.
    private func compress(_ input: inout ZSTD_inBuffer, _ mode: ZSTD_EndDirective) -> Int? {
        guard let output else { return nil }
        var out = ZSTD_outBuffer(dst: output.baseAddress, size: output.count, pos: 0)
        let rc = ZSTD_compressStream2(compressor, &out, &input, mode)
        if ZSTD_isError(rc) != 0 {
            failure = .writeFailed(path: path, message: "zstd: \(String(cString: ZSTD_getErrorName(rc)))", code: EIO)
            return nil
        }
        return emit(output.baseAddress!, count: out.pos) ? rc : nil
    }

    /// Writes to the file and starts writeback every `writebackStep` bytes.
    private func emit(_ bytes: UnsafeRawPointer, count: Int) -> Bool {
        if fd < 0 {
            if capturing { captured.append(contentsOf: UnsafeRawBufferPointer(start: bytes, count: count)) }
            return true
        }
        var offset = 0
        while offset < count {
            let n = Glibc.write(fd, bytes + offset, count - offset)
            if n < 0 {
                if errno == EINTR { continue }
                failure = .writeFailed(path: path, message: String(cString: strerror(errno)), code: errno)
                return false
            }
            offset += n
        }
        written += Int64(count)
        if written - writebackFrom >= Self.writebackStep {
            // Only a hint: a filesystem without it (EINVAL, ESPIPE on a pipe) just syncs at the end.
            _ = granary_start_writeback(fd, writebackFrom, written - writebackFrom)
            writebackFrom = written
        }
        return true
    }
}
