import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The owner side of the reopen protocol (`man 7 granary-reopen`), for a Swift process that
/// keeps SQLite stores open and wants `granary restore` to replace them under it.
///
/// Register each store with a `close` callback (close every connection the app has to it)
/// and a `reopen` callback (open them again), and run every transaction on the store through
/// ``withStore(_:_:)``. When granary asks to pause, new transactions wait, running ones
/// finish, `close` is called and granary is told `PAUSED`; on `RESUME`, or when granary's
/// connection drops, or when the lease it asked for runs out, `reopen` is called and the
/// waiting transactions go on. No transaction runs between `close` and `reopen`.
///
/// ```swift
/// let owner = GranaryOwner()
/// try owner.register(store: "/srv/users/alice/Local.sqlite",
///                    close: { pool.closeAll() }, reopen: { try pool.open() })
/// try owner.withStore("/srv/users/alice/Local.sqlite") { try pool.writer.insert(item) }
/// ```
/// Threads only: one listening thread per store; callbacks run on it.
public final class GranaryOwner: @unchecked Sendable {
    /// Something that happened, for the app's log.
    public struct Event: Sendable, CustomStringConvertible {
        public enum Kind: String, Sendable {
            /// `close` ran and granary was told PAUSED.
            case paused
            /// `reopen` ran after RESUME.
            case resumed
            /// `reopen` ran because the lease ran out.
            case leaseExpired = "lease-expired"
            /// `reopen` ran because granary's connection closed while paused (granary died or gave up).
            case peerGone = "peer-gone"
            /// A connection was refused (wrong uid, bad version, bad message).
            case refused
            /// A callback failed.
            case callbackFailed = "callback-failed"
        }
        public let kind: Kind
        /// The canonical store path.
        public let store: String
        public let detail: String
        public var description: String { "\(kind.rawValue) \(store)\(detail.isEmpty ? "" : " " + detail)" }
    }

    /// A callback; throwing from `close` makes the owner refuse the pause (nothing is closed
    /// half-way: the owner calls `reopen` at once); throwing from `reopen` is reported as an event.
    public typealias Callback = @Sendable () throws -> Void

    private let onEvent: (@Sendable (Event) -> Void)?
    private let lock = NSLock()
    private var gates: [String: Gate] = [:]
    private var aliases: [String: String] = [:]

    /// A new owner; `onEvent` sees pauses, resumes and refusals (called on the listening thread).
    public init(onEvent: (@Sendable (Event) -> Void)? = nil) {
        self.onEvent = onEvent
    }

    deinit { stop() }

    /// Starts serving the reopen protocol for the store at `path` (which must exist).
    /// Throws ``ReopenError/alreadyOwned(store:)`` when another process serves it.
    public func register(store path: String, close: @escaping Callback, reopen: @escaping Callback) throws(ReopenError) {
        let address = try ReopenAddress(store: path)
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        if fd < 0 { throw .socket(operation: "create", store: path, code: errno) }
        let bound = address.withSocketAddress { bind(fd, $0, $1) }
        if bound != 0 {
            let code = errno
            Glibc.close(fd)
            if code == EADDRINUSE { throw .alreadyOwned(store: address.canonicalPath) }
            throw .socket(operation: "bind", store: path, code: code)
        }
        if listen(fd, 8) != 0 {
            let code = errno
            Glibc.close(fd)
            throw .socket(operation: "listen", store: path, code: code)
        }
        let gate = Gate(address: address, listener: fd, close: close, reopen: reopen, owner: self)
        lock.lock()
        gates[address.canonicalPath] = gate
        aliases[path] = address.canonicalPath
        lock.unlock()
        let thread = Thread { gate.serve() }
        thread.name = "granary-reopen"
        thread.start()
    }

    /// Runs `body` as one unit of work on the store (a transaction): it waits while the store
    /// is paused, and a pause waits for it to return before closing the store. Nested calls on
    /// the same thread do not wait (the outer call already holds the store open).
    public func withStore<T>(_ path: String, _ body: () throws -> T) throws -> T {
        guard let gate = gate(for: path) else { return try body() }
        gate.enter()
        defer { gate.leave() }
        return try body()
    }

    /// Stops serving one store: its socket closes (a pause in progress ends with `reopen`), and
    /// ``withStore(_:_:)`` no longer waits for it. For an app that closes the store for good.
    public func unregister(store path: String) {
        lock.lock()
        let canonical = aliases[path] ?? path
        let gate = gates.removeValue(forKey: canonical)
        aliases = aliases.filter { $0.value != canonical }
        lock.unlock()
        gate?.stop()
    }

    /// Whether the store is paused right now (its connections closed).
    public func isPaused(_ path: String) -> Bool {
        gate(for: path)?.isPaused ?? false
    }

    /// Stops serving every store (the sockets close; a pause in progress ends with `reopen`).
    public func stop() {
        lock.lock()
        let all = Array(gates.values)
        gates.removeAll()
        aliases.removeAll()
        lock.unlock()
        for gate in all { gate.stop() }
    }

    private func gate(for path: String) -> Gate? {
        lock.lock()
        defer { lock.unlock() }
        if let canonical = aliases[path] { return gates[canonical] }
        return gates[path]
    }

    fileprivate func report(_ kind: Event.Kind, _ store: String, _ detail: String = "") {
        onEvent?(Event(kind: kind, store: store, detail: detail))
    }
}

/// One registered store: its socket, its pause state and the count of running transactions.
private final class Gate: @unchecked Sendable {
    let address: ReopenAddress
    let listener: Int32
    let closeStore: GranaryOwner.Callback
    let reopenStore: GranaryOwner.Callback
    weak var owner: GranaryOwner?
    private let condition = NSCondition()
    private var paused = false
    private var pausing = false
    private var active = 0
    private var stopped = false

    init(address: ReopenAddress, listener: Int32, close: @escaping GranaryOwner.Callback,
         reopen: @escaping GranaryOwner.Callback, owner: GranaryOwner) {
        self.address = address
        self.listener = listener
        self.closeStore = close
        self.reopenStore = reopen
        self.owner = owner
    }

    var isPaused: Bool {
        condition.lock()
        defer { condition.unlock() }
        return paused
    }

    var isStopped: Bool {
        condition.lock()
        defer { condition.unlock() }
        return stopped
    }

    /// Per-thread nesting depth, so that a nested `withStore` does not wait for a pause that
    /// waits for the outer one (a deadlock).
    private var depthKey: String { "granary-owner-depth-\(ObjectIdentifier(self).hashValue)" }

    func enter() {
        let thread = Thread.current.threadDictionary
        let depth = thread[depthKey] as? Int ?? 0
        thread[depthKey] = depth + 1
        if depth > 0 { return }
        condition.lock()
        while paused || pausing { condition.wait() }
        active += 1
        condition.unlock()
    }

    func leave() {
        let thread = Thread.current.threadDictionary
        let depth = (thread[depthKey] as? Int ?? 1) - 1
        thread[depthKey] = depth == 0 ? nil : depth
        if depth > 0 { return }
        condition.lock()
        active -= 1
        condition.broadcast()
        condition.unlock()
    }

    func stop() {
        condition.lock()
        stopped = true
        condition.unlock()
    }

    /// Holds new transactions and waits for running ones, until `deadline`. False on timeout (nothing held then).
    private func drain(until deadline: Date) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        pausing = true
        while active > 0 {
            if !condition.wait(until: deadline) && active > 0 {
                pausing = false
                condition.broadcast()
                return false
            }
        }
        return true
    }

    private func setPaused(_ value: Bool) {
        condition.lock()
        paused = value
        pausing = false
        condition.broadcast()
        condition.unlock()
    }

    private func report(_ kind: GranaryOwner.Event.Kind, _ detail: String = "") {
        owner?.report(kind, address.canonicalPath, detail)
    }

    /// The listening loop: one connection at a time (granary holds a per-user lock, so a
    /// second client only ever waits behind the first).
    func serve() {
        defer { Glibc.close(listener) }
        while !isStopped {
            var pfd = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, 100)
            if ready <= 0 { continue }
            let fd = accept(listener, nil, nil)
            if fd < 0 { continue }
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            let channel = ReopenChannel(fd: fd)
            handle(channel)
            channel.close()
        }
    }

    private func handle(_ channel: ReopenChannel) {
        // Only our own uid or root may pause us.
        guard let peer = PeerCredentials.of(channel.fd), peer.uid == getuid() || peer.uid == 0 else {
            let uid = PeerCredentials.of(channel.fd).map { String($0.uid) } ?? "unknown"
            channel.finish(with: "ERROR permission-denied")
            report(.refused, "peer uid \(uid) is neither \(getuid()) nor root")
            return
        }
        let stop: () -> Bool = { [weak self] in self?.isStopped ?? true }
        guard case .line(let hello) = channel.readLine(until: .now + .seconds(10), stop: stop) else { return }
        let words = hello.split(separator: " ").map(String.init)
        guard words.count >= 3, words[0] == "HELLO", words[1] == ReopenProtocol.name else {
            channel.finish(with: "ERROR bad-hello")
            report(.refused, "bad greeting")
            return
        }
        guard words[2...].contains(String(ReopenProtocol.version)) else {
            channel.finish(with: "ERROR unsupported-version \(ReopenProtocol.version)")
            report(.refused, "client versions \(words[2...].joined(separator: ","))")
            return
        }
        channel.send("HELLO \(ReopenProtocol.name) \(ReopenProtocol.version) \(getpid())")
        while true {
            guard case .line(let line) = channel.readLine(until: nil, stop: stop) else { return }
            let parts = line.split(separator: " ").map(String.init)
            switch parts.first {
            case "PAUSE":
                guard parts.count == 2, let ms = Int(parts[1]), ms > 0, ms <= ReopenProtocol.maxLeaseMilliseconds else {
                    channel.send("ERROR bad-lease")
                    continue
                }
                if !pause(channel, lease: .milliseconds(ms), stop: stop) { return }
            case "RESUME":
                // Not paused: nothing to do; the answer is the same so that a retry is harmless.
                channel.send("RESUMED")
            case "BYE":
                return
            default:
                channel.send("ERROR unknown-command")
            }
        }
    }

    /// One pause. Returns false when the connection is over.
    private func pause(_ channel: ReopenChannel, lease: Duration, stop: @escaping () -> Bool) -> Bool {
        // Running transactions get the lease to finish; past that, we refuse rather than stall the app.
        let drainDeadline = Date().addingTimeInterval(Double(lease.milliseconds) / 1000)
        guard drain(until: drainDeadline) else {
            channel.send("ERROR busy")
            return true
        }
        do {
            try closeStore()
        } catch {
            report(.callbackFailed, "close: \(error)")
            reopen(.callbackFailed)
            channel.send("ERROR close-failed")
            return true
        }
        setPausedLocked()
        // The lease starts when PAUSED is sent; granary counts from before it sent PAUSE, so its
        // own estimate of the deadline is always the earlier one.
        let deadline = ContinuousClock.now + lease
        guard channel.send("PAUSED") else {
            reopen(.peerGone)
            return false
        }
        report(.paused, "lease \(lease.milliseconds) ms")
        while true {
            switch channel.readLine(until: deadline, stop: stop) {
            case .line(let line) where line == "RESUME":
                reopen(.resumed)
                channel.send("RESUMED")
                return true
            case .line:
                channel.send("ERROR unexpected-while-paused")
            case .timedOut:
                // granary may be committing right now: wait for its commit lock, so that we open
                // either the old file before the rename or the new one after it.
                let lock = CommitLock(store: address.canonicalPath)
                reopen(.leaseExpired)
                lock?.release()
                channel.send("EXPIRED")
                return false
            case .closed:
                reopen(.peerGone)
                return false
            }
        }
    }

    private func setPausedLocked() {
        condition.lock()
        paused = true
        pausing = false
        condition.unlock()
    }

    private func reopen(_ why: GranaryOwner.Event.Kind) {
        do {
            try reopenStore()
            if why != .callbackFailed { report(why) }
        } catch {
            report(.callbackFailed, "reopen: \(error)")
        }
        setPaused(false)
    }
}
