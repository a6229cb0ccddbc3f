import CZstd
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The zstd stage of `ArchiveWriter`: libarchive hands it the plain tar stream, it compresses
/// with libzstd and writes to the archive's file descriptor.
///
/// Why not libarchive's own zstd filter: in libarchive 3.6 it cannot set zstd's job size, and
/// the multithreaded compressor's memory is about three jobs per worker (the default job at
/// level 3 is 8 MiB: 50 MiB for two workers). A 4 MiB job gives the same speed and ratio with
/// half the memory. Frames also carry zstd's content checksum here (libarchive leaves it off),
/// so a damaged compressed stream is reported by zstd itself as well as by the manifest.
/// See <https://facebook.github.io/zstd/zstd_manual.html>.
final class ZstdOutput {
    /// The job size for two or more workers.
    static let jobSize: Int32 = 4 << 20

    private let fd: Int32
    private let path: String
    private let context: OpaquePointer
    private let output: UnsafeMutableRawBufferPointer
    /// The first failure, kept for `ArchiveWriter` (libarchive only sees "-1").
    private(set) var failure: ArchiveError?

    /// A compressor at `level` with `threads` workers (0: compress on the calling thread).
    init(fileDescriptor fd: Int32, path: String, level: Int, threads: Int) throws(ArchiveError) {
        guard let context = ZSTD_createCCtx() else {
            throw .writeFailed(path: path, message: "out of memory for the zstd compressor", code: ENOMEM)
        }
        self.fd = fd
        self.path = path
        self.context = context
        self.output = .allocate(byteCount: ZSTD_CStreamOutSize(), alignment: 16)
        try set(ZSTD_c_compressionLevel, Int32(level))
        try set(ZSTD_c_checksumFlag, 1)
        if threads > 0 {
            try set(ZSTD_c_nbWorkers, Int32(threads))
            try set(ZSTD_c_jobSize, Self.jobSize)
        }
    }

    deinit {
        ZSTD_freeCCtx(context)
        output.deallocate()
    }

    private func set(_ parameter: ZSTD_cParameter, _ value: Int32) throws(ArchiveError) {
        let rc = ZSTD_CCtx_setParameter(context, parameter, value)
        if ZSTD_isError(rc) != 0 {
            throw .writeFailed(path: path, message: "zstd: \(String(cString: ZSTD_getErrorName(rc)))", code: EINVAL)
        }
    }

    /// Compresses `count` bytes; false (with `failure` set) when compressing or writing failed.
    func write(_ bytes: UnsafeRawPointer, count: Int) -> Bool {
        var input = ZSTD_inBuffer(src: bytes, size: count, pos: 0)
        while input.pos < input.size {
            guard step(&input, ZSTD_e_continue) != nil else { return false }
        }
        return true
    }

    /// Ends the frame and writes what is left; false (with `failure` set) on failure.
    func finish() -> Bool {
        var input = ZSTD_inBuffer(src: nil, size: 0, pos: 0)
        while true {
            guard let remaining = step(&input, ZSTD_e_end) else { return false }
            if remaining == 0 { return true }
        }
    }

    /// One call to the compressor and a write of what it produced; the bytes still buffered
    /// inside zstd, or nil on failure.
    private func step(_ input: inout ZSTD_inBuffer, _ mode: ZSTD_EndDirective) -> Int? {
        var out = ZSTD_outBuffer(dst: output.baseAddress, size: output.count, pos: 0)
        let rc = ZSTD_compressStream2(context, &out, &input, mode)
        if ZSTD_isError(rc) != 0 {
            failure = .writeFailed(path: path, message: "zstd: \(String(cString: ZSTD_getErrorName(rc)))", code: EIO)
            return nil
        }
        var offset = 0
        while offset < out.pos {
            let n = Glibc.write(fd, output.baseAddress! + offset, out.pos - offset)
            if n < 0 {
                if errno == EINTR { continue }
                failure = .writeFailed(path: path, message: String(cString: strerror(errno)), code: errno)
                return nil
            }
            offset += n
        }
        return rc
    }
}
