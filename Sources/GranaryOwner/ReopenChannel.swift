import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The protocol's constants.
public enum ReopenProtocol {
    /// The protocol name in `HELLO`.
    public static let name = "granary-reopen"
    /// The protocol version this build speaks.
    public static let version = 1
    /// The longest line either side accepts, newline included.
    public static let maxLine = 1024
    /// The longest lease an owner grants, in milliseconds (one hour).
    public static let maxLeaseMilliseconds = 3_600_000
}

/// The credentials of the process at the other end of a Unix socket (`SO_PEERCRED`).
public struct PeerCredentials: Sendable, Equatable {
    public let pid: Int32
    public let uid: UInt32
    public let gid: UInt32

    /// Reads `SO_PEERCRED` of a connected Unix socket. The kernel records them at
    /// `connect(2)`/`listen(2)` time, so they cannot be forged by the peer.
    static func of(_ fd: Int32) -> PeerCredentials? {
        // `struct ucred { pid_t pid; uid_t uid; gid_t gid; }` — Glibc's module hides it behind
        // _GNU_SOURCE, so read the three 32-bit fields directly.
        var credentials: (Int32, UInt32, UInt32) = (0, 0, 0)
        var length = socklen_t(MemoryLayout<(Int32, UInt32, UInt32)>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0, length == 12 else { return nil }
        return PeerCredentials(pid: credentials.0, uid: credentials.1, gid: credentials.2)
    }
}

/// A connected stream socket read and written one `\n`-terminated ASCII line at a time,
/// with deadlines (poll(2)), so that neither side can hang the other.
final class ReopenChannel {
    let fd: Int32
    private var buffer: [UInt8] = []
    private(set) var isClosed = false

    init(fd: Int32) { self.fd = fd }

    deinit { close() }

    func close() {
        if !isClosed {
            isClosed = true
            Glibc.close(fd)
        }
    }

    /// The outcome of waiting for a line.
    enum Received: Equatable {
        case line(String)
        /// The peer closed the connection (or reset it, or sent garbage).
        case closed
        case timedOut
    }

    /// Waits until `deadline` (nil: forever, checking `stop` every 100 ms) for one line.
    func readLine(until deadline: ContinuousClock.Instant?, stop: (() -> Bool)? = nil) -> Received {
        while true {
            if let newline = buffer.firstIndex(of: 0x0A) {
                var line = Array(buffer[..<newline])
                buffer.removeSubrange(...newline)
                if line.last == 0x0D { line.removeLast() }
                return .line(String(decoding: line, as: UTF8.self))
            }
            if buffer.count >= ReopenProtocol.maxLine { return .closed }
            var wait: Int32 = 100
            if let deadline {
                let left = deadline - ContinuousClock.now
                if left <= .zero { return .timedOut }
                let ms = left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000 + 1
                wait = Int32(clamping: min(ms, 100))
            }
            if stop?() == true { return .closed }
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, wait)
            if ready < 0 {
                if errno == EINTR { continue }
                return .closed
            }
            if ready == 0 { continue }
            var chunk = [UInt8](repeating: 0, count: 512)
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, 512, 0) }
            if n < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                return .closed
            }
            if n == 0 { return .closed }
            buffer += chunk[0..<n]
        }
    }

    /// Sends a last line and closes gracefully: closing a Unix socket with unread input makes
    /// the peer's read fail with ECONNRESET before it sees our line, so our side stops writing,
    /// then reads and discards what the peer still sends (for at most half a second).
    func finish(with line: String) {
        send(line)
        shutdown(fd, Int32(SHUT_WR))
        let deadline = ContinuousClock.now + .milliseconds(500)
        while case .line = readLine(until: deadline) {}
        close()
    }

    /// Sends one line (a `\n` is added). Returns false when the peer is gone.
    @discardableResult
    func send(_ line: String) -> Bool {
        let bytes = Array((line + "\n").utf8)
        var offset = 0
        while offset < bytes.count {
            // MSG_NOSIGNAL: a peer that went away must not kill us with SIGPIPE.
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL)) }
            if n < 0 {
                if errno == EINTR { continue }
                return false
            }
            offset += n
        }
        return true
    }
}

extension Duration {
    /// Whole milliseconds, rounded down.
    var milliseconds: Int64 {
        components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
    }
}

/// The commit lock: an exclusive `flock(2)` on the folder that holds a store. granary holds it
/// across its last lease check and the `rename(2)` that commits a swap; an owner whose lease ran
/// out takes it before reopening, so it can never open the old file in the instant before the
/// rename (and then write into a file that is no longer the store). The kernel drops the lock
/// when its holder dies.
public final class CommitLock {
    private var fd: Int32

    /// Takes the lock of the folder holding `store` (blocking). Nil when the folder cannot be opened.
    public init?(store: String) {
        let folder = (store as NSString).deletingLastPathComponent
        fd = open(folder.isEmpty ? "." : folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if fd < 0 { return nil }
        while flock(fd, LOCK_EX) != 0 {
            if errno != EINTR {
                Glibc.close(fd)
                return nil
            }
        }
    }

    deinit { release() }

    /// Releases the lock.
    public func release() {
        if fd >= 0 {
            Glibc.close(fd)
            fd = -1
        }
    }
}
