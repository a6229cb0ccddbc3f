import Foundation
import GranaryKit
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Standard output and standard error as plain descriptors, written with `write(2)`.
///
/// Foundation's `FileHandle` traps on a failed write, so a closed standard output (`>&-`) or a
/// reader that went away killed granary, sometimes after a restore had finished. Here a failed
/// write is remembered instead: standard output is not written again, the command finishes
/// what it was doing, and the run ends with `granary: write error: …` and exit 74, as GNU
/// tools do. SIGPIPE is ignored, so a closed pipe is such an error rather than a signal.
enum StandardStreams {
    private static let outputError = Atomic<Int32>(0)

    /// Call first thing: ignores SIGPIPE, and puts a read-only `/dev/null` on any of the
    /// descriptors 0, 1 and 2 that is closed. Otherwise the next file granary opens (a lock, a
    /// store, an archive) would get that number, and a result line meant for standard output
    /// would be written into it; a write on the read-only stand-in fails, and is reported.
    static func prepare() {
        signal(SIGPIPE, SIG_IGN)
        for fd: Int32 in 0...2 where fcntl(fd, F_GETFD) == -1 && errno == EBADF {
            let placeholder = open("/dev/null", O_RDONLY)
            if placeholder >= 0 && placeholder != fd {
                dup2(placeholder, fd)
                close(placeholder)
            }
        }
    }

    /// Writes `text` to standard output, unless an earlier write there failed.
    static func output(_ text: String) {
        guard outputError.load(ordering: .relaxed) == 0 else { return }
        if let failure = write(text, to: STDOUT_FILENO) { outputError.store(failure, ordering: .relaxed) }
    }

    /// Writes `text` to standard error; a failure there has nowhere to be reported.
    static func error(_ text: String) {
        _ = write(text, to: STDERR_FILENO)
    }

    /// The `errno` of the first failed write to standard output, or `nil`.
    static var outputFailure: Int32? {
        let value = outputError.load(ordering: .relaxed)
        return value == 0 ? nil : value
    }

    /// The status to exit with: `status`, unless writing standard output failed, which is
    /// reported on standard error and turns a success into 74 (a failure keeps its own code).
    static func finish(_ status: Int32) -> Int32 {
        guard let failure = outputFailure else { return status }
        error("granary: write error: \(String(cString: strerror(failure)))\n")
        return status == 0 ? ExitStatus.ioError.rawValue : status
    }

    /// Writes all of `text` to `fd`; returns the `errno` of a failure, or `nil`.
    private static func write(_ text: String, to fd: Int32) -> Int32? {
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeMutableBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 {
                if errno == EINTR { continue }
                return errno
            }
            offset += n
        }
        bytes.removeAll()
        return nil
    }
}
