import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// granary's side of the reopen protocol: finds a store's owner, pauses it under a lease and
/// resumes it. See `man 7 granary-reopen`.
///
/// ```swift
/// if let owner = try ReopenClient.connect(store: path, storeOwnerUID: uid, timeout: .seconds(10)) {
///     try owner.pause(lease: .seconds(60), timeout: .seconds(10))
///     // … swap files, checking owner.leaseRemaining before the commit …
///     try owner.resume(timeout: .seconds(10))
/// }
/// ```
public final class ReopenClient {
    private let channel: ReopenChannel
    /// The store this client talks about.
    public let store: String
    /// The owner's process id, from SO_PEERCRED.
    public let ownerPID: Int32
    /// The owner's uid, from SO_PEERCRED.
    public let ownerUID: UInt32
    /// The instant granary must treat as the end of the lease: measured from before PAUSE was
    /// sent, so it is never later than the owner's own deadline.
    public private(set) var leaseDeadline: ContinuousClock.Instant?

    private init(channel: ReopenChannel, store: String, peer: PeerCredentials) {
        self.channel = channel
        self.store = store
        self.ownerPID = peer.pid
        self.ownerUID = peer.uid
    }

    deinit { channel.close() }

    /// Connects to the owner of `store`, or returns nil when no process listens (no owner, or
    /// the owner died: the kernel freed its name). The owner must run as `storeOwnerUID` or root.
    public static func connect(store: String, storeOwnerUID: UInt32, timeout: Duration) throws(ReopenError) -> ReopenClient? {
        try connect(address: try ReopenAddress(store: store), store: store, storeOwnerUID: storeOwnerUID, timeout: timeout)
    }

    /// Connects to the owner listening at `address` (a caller that knows the store's canonical path
    /// without resolving it by name: ``ReopenAddress/init(canonicalPath:)``); `store` names it in
    /// messages.
    public static func connect(
        address: ReopenAddress, store: String, storeOwnerUID: UInt32, timeout: Duration
    ) throws(ReopenError) -> ReopenClient? {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        if fd < 0 { throw .socket(operation: "create", store: store, code: errno) }
        let rc = address.withSocketAddress { Glibc.connect(fd, $0, $1) }
        if rc != 0 {
            let code = errno
            Glibc.close(fd)
            if code == ECONNREFUSED || code == ENOENT { return nil }
            throw .socket(operation: "connect to", store: store, code: code)
        }
        let channel = ReopenChannel(fd: fd)
        guard let peer = PeerCredentials.of(fd) else {
            throw .socket(operation: "read the credentials of", store: store, code: errno)
        }
        // A process of another user must not be able to pose as the owner and stall or mislead us.
        guard peer.uid == storeOwnerUID || peer.uid == 0 else {
            throw .untrustedPeer(store: store, pid: peer.pid, uid: peer.uid, expected: storeOwnerUID)
        }
        let client = ReopenClient(channel: channel, store: store, peer: peer)
        channel.send("HELLO \(ReopenProtocol.name) \(ReopenProtocol.version)")
        let reply = try client.expect("HELLO", waitingFor: "HELLO", timeout: timeout)
        let words = reply.split(separator: " ")
        guard words.count >= 3, words[1] == Substring(ReopenProtocol.name), words[2] == Substring(String(ReopenProtocol.version)) else {
            throw .protocolViolation(store: store, detail: "unexpected greeting \"\(reply)\"")
        }
        return client
    }

    /// Asks the owner to pause under a lease of `lease`; returns when it has acknowledged
    /// (all its connections to the store are closed). Throws `.timedOut` after `timeout`.
    public func pause(lease: Duration, timeout: Duration) throws(ReopenError) {
        let start = ContinuousClock.now
        channel.send("PAUSE \(max(1, lease.milliseconds))")
        _ = try expect("PAUSED", waitingFor: "PAUSE", timeout: timeout)
        leaseDeadline = start + lease
    }

    /// Time left before the owner may reopen on its own (zero when not paused or past it).
    public var leaseRemaining: Duration {
        guard let leaseDeadline else { return .zero }
        return max(.zero, leaseDeadline - ContinuousClock.now)
    }

    /// Tells the owner to reopen the store; returns when it has.
    public func resume(timeout: Duration) throws(ReopenError) {
        channel.send("RESUME")
        leaseDeadline = nil
        _ = try expect("RESUMED", waitingFor: "RESUME", timeout: timeout)
    }

    /// Ends the conversation. A paused owner resumes on its own when the connection closes.
    public func close() {
        channel.send("BYE")
        channel.close()
    }

    private func expect(_ word: String, waitingFor: String, timeout: Duration) throws(ReopenError) -> String {
        switch channel.readLine(until: .now + timeout) {
        case .line(let line):
            if line == word || line.hasPrefix(word + " ") { return line }
            if line.hasPrefix("ERROR") {
                throw .refused(store: store, reason: String(line.dropFirst(5)).trimmingCharacters(in: .whitespaces))
            }
            throw .protocolViolation(store: store, detail: "expected \(word), got \"\(line)\"")
        case .timedOut:
            channel.close()
            throw .timedOut(store: store, waitingFor: waitingFor, after: timeout)
        case .closed:
            throw .protocolViolation(store: store, detail: "the connection closed while waiting for \(word)")
        }
    }
}
