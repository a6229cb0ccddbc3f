import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The protocol's constants (`man 7 granary-reopen`).
public enum ReopenProtocol {
    /// The protocol name in `HELLO`.
    public static let name = "granary-reopen"
    /// The protocol version this build speaks.
    public static let version = 1
    /// The versions this build speaks, as an owner lists them in `ERROR unsupported-version`.
    public static let versions = [1]
    /// The longest line either side accepts, line feed (and carriage return) included.
    public static let maxLine = 1024
    /// The longest lease an owner grants, in milliseconds (one hour).
    public static let maxLeaseMilliseconds = 3_600_000
    /// The largest version number a line may carry (nine digits).
    public static let maxVersion = 999_999_999
    /// An owner closes a connection on which nothing arrived for this long while the store is
    /// not paused (the first line included), so that a stuck or idle client cannot keep a
    /// store's one conversation, and every restore, waiting.
    public static let idleTimeout: Duration = .seconds(10)
    /// The latest an owner closes such a connection: 2 s after ``idleTimeout``. granary waits
    /// this much longer for the answer to HELLO, since its connection may wait in the owner's
    /// listen queue behind an idle one.
    public static let idleCloseLimit: Duration = .seconds(12)
}

/// The credentials of the process at the other end of a Unix socket (`SO_PEERCRED`).
public struct PeerCredentials: Sendable, Equatable {
    public let pid: Int32
    public let uid: UInt32
    public let gid: UInt32

    /// Reads `SO_PEERCRED` of a connected Unix socket. The kernel records them at
    /// `connect(2)`/`listen(2)` time (the effective uid then), so the peer cannot forge them.
    /// The pid is in this process's pid namespace (0 when the peer's is not visible from it).
    public static func of(_ fd: Int32) -> PeerCredentials? {
        // `struct ucred { pid_t pid; uid_t uid; gid_t gid; }` — Glibc's module hides it behind
        // _GNU_SOURCE, so read the three 32-bit fields directly.
        var credentials: (Int32, UInt32, UInt32) = (0, 0, 0)
        var length = socklen_t(MemoryLayout<(Int32, UInt32, UInt32)>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0, length == 12 else { return nil }
        return PeerCredentials(pid: credentials.0, uid: credentials.1, gid: credentials.2)
    }
}

/// A connected stream socket read and written one line at a time, with deadlines (poll(2)),
/// so that neither side can hang the other. It frames lines and nothing more: what a line
/// means is ``ReopenRequest`` and ``ReopenAnswer``'s business. Public for conformance tools
/// such as `granary-reopen-check`, which must also send what the protocol forbids.
public final class ReopenChannel {
    public let fd: Int32
    /// The longest line accepted, line feed included.
    let maxLine: Int
    private var buffer: [UInt8] = []
    public private(set) var isClosed = false

    /// Wraps a connected socket; the channel closes it.
    public init(fd: Int32, maxLine: Int = ReopenProtocol.maxLine) {
        self.fd = fd
        self.maxLine = maxLine
    }

    /// Connects to the owner at `address`: nil when nobody listens there (`ECONNREFUSED`:
    /// no owner, or its process died and the kernel freed the name).
    ///
    /// A listener that never accepts (anyone can bind the name first, and fill its backlog on
    /// purpose) would keep a blocking connect(2) waiting for ever; the connect is made without
    /// blocking, retried while the backlog is full, and given up after `timeout`
    /// (`ReopenError.unreachable`).
    public static func connect(to address: ReopenAddress, timeout: Duration = .seconds(10)) throws(ReopenError)
        -> ReopenChannel?
    {
        let fd = socket(
            AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        if fd < 0 { throw .socket(operation: "create", store: address.canonicalPath, code: errno) }
        let deadline = ContinuousClock.now + timeout
        while address.withSocketAddress({ Glibc.connect(fd, $0, $1) }) != 0 {
            let code = errno
            if (code == EAGAIN || code == EINTR) && ContinuousClock.now < deadline {
                usleep(10_000)
                continue
            }
            Glibc.close(fd)
            if code == ECONNREFUSED || code == ENOENT { return nil }
            if code == EAGAIN { throw .unreachable(store: address.canonicalPath, after: timeout) }
            throw .socket(operation: "connect to", store: address.canonicalPath, code: code)
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        return ReopenChannel(fd: fd)
    }

    deinit { close() }

    public func close() {
        if !isClosed {
            isClosed = true
            Glibc.close(fd)
        }
    }

    /// The outcome of waiting for a line.
    public enum Received: Equatable, Sendable {
        /// A line's bytes, without its line feed.
        case line([UInt8])
        /// More than `maxLine` bytes came without a line feed: the conversation is over.
        case overlong
        /// The peer closed the connection (or reset it).
        case closed
        case timedOut
    }

    /// Waits until `deadline` (nil: forever, checking `stop` every 100 ms) for one line.
    /// A deadline in the past still returns a line that has already arrived.
    public func readLine(until deadline: ContinuousClock.Instant?, stop: (() -> Bool)? = nil) -> Received {
        while true {
            if let newline = buffer.firstIndex(of: 0x0A) {
                if newline + 1 > maxLine { return .overlong }
                let line = Array(buffer[..<newline])
                buffer.removeSubrange(...newline)
                return .line(line)
            }
            if buffer.count >= maxLine { return .overlong }
            if isClosed { return .closed }
            var wait: Int32 = 100
            if let deadline {
                let left = deadline - ContinuousClock.now
                let ms = max(
                    0, left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000 + 1)
                wait = Int32(clamping: min(ms, 100))
                if left <= .zero { wait = 0 }
            }
            if stop?() == true { return .closed }
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, wait)
            if ready < 0 {
                if errno == EINTR { continue }
                return .closed
            }
            if ready == 0 {
                if let deadline, ContinuousClock.now >= deadline { return .timedOut }
                continue
            }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, 4096, 0) }
            if n < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                return .closed
            }
            if n == 0 { return .closed }
            buffer += chunk[0..<n]
        }
    }

    /// Whether a line (or the end of the connection) is waiting to be read, without waiting.
    public var hasInput: Bool {
        if !buffer.isEmpty || isClosed { return true }
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        return poll(&pfd, 1, 0) > 0
    }

    /// Whether the peer has closed the connection (or shut down its sending side) or it failed,
    /// without reading and without waiting: lines the peer sent before stay to be read. An
    /// owner that is pausing watches for it, since it answers nothing until PAUSED.
    public var peerHasClosed: Bool {
        if isClosed { return true }
        // POLLRDHUP (Linux): the peer shut down writing, even with unread lines before the end.
        let readHangUp: Int16 = 0x2000
        var pfd = pollfd(fd: fd, events: Int16(POLLIN) | readHangUp, revents: 0)
        guard poll(&pfd, 1, 0) > 0 else { return false }
        return pfd.revents & (readHangUp | Int16(POLLHUP) | Int16(POLLERR)) != 0
    }

    /// Sends a last line and closes gracefully: closing a Unix socket with unread input makes
    /// the peer's read fail with ECONNRESET before it sees our line, so our side stops writing,
    /// then reads and discards what the peer still sends (for at most half a second).
    public func finish(with line: String) {
        send(line)
        shutdown(fd, Int32(SHUT_WR))
        let deadline = ContinuousClock.now + .milliseconds(500)
        while case .line = readLine(until: deadline) {}
        close()
    }

    /// Sends one line (a line feed is added). Returns false when the peer is gone.
    @discardableResult
    public func send(_ line: String) -> Bool {
        sendBytes(Array((line + "\n").utf8))
    }

    /// Sends bytes as they are (a conformance checker sends what the protocol forbids).
    @discardableResult
    public func sendBytes(_ bytes: [UInt8]) -> Bool {
        if isClosed { return false }
        var offset = 0
        while offset < bytes.count {
            // MSG_NOSIGNAL: a peer that went away must not kill us with SIGPIPE.
            let n = bytes.withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            }
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
