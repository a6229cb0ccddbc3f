import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The owner side of the reopen protocol (`man 7 granary-reopen`), for a Swift process that
/// keeps SQLite stores open and wants `granary restore` to replace them under it.
///
/// Register each store with a `close` callback (close every connection the app has to it)
/// and a `reopen` callback (open them again), and run every transaction on the store through
/// ``withStore(_:_:)`` (or ``withStores(_:_:)`` for one that uses several stores). When
/// granary asks to pause, new transactions wait, running ones finish, `close` is called, the
/// owner checks that no descriptor of the store is left open, and granary is told `PAUSED`;
/// on `RESUME`, `BYE`, when granary's connection drops, or when the lease runs out, `reopen`
/// is called and the waiting transactions go on. No transaction runs between `close` and
/// `reopen`, and no transaction waits longer than the lease granary asked for.
///
/// ```swift
/// let owner = GranaryOwner()
/// try owner.register(store: "/srv/users/alice/Local.sqlite",
///                    close: { pool.closeAll() }, reopen: { try pool.open() })
/// try owner.withStore("/srv/users/alice/Local.sqlite") { try pool.writer.insert(item) }
/// ```
/// Threads only: one listening thread per store, so that the stores' conversations never wait
/// for each other (granary keeps one store paused while it pauses the next); callbacks run on it.
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
            /// `reopen` ran because granary ended the conversation while paused (BYE, ERROR, the
            /// connection closed: granary died or gave up); or the connection closed while the
            /// owner was pausing, and the pause was given up (`reopen` ran if `close` had).
            case peerGone = "peer-gone"
            /// A connection was refused (wrong uid, bad version, bad message).
            case refused
            /// A connection was closed after ``ReopenProtocol/idleTimeout`` without a line.
            case idle
            /// A callback failed, or `close` left a descriptor of the store open.
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
    let idleTimeout: Duration
    let maxLine: Int
    let conversation: Conversation

    /// A new owner; `onEvent` sees pauses, resumes and refusals (called on the listening thread).
    public init(onEvent: (@Sendable (Event) -> Void)? = nil) {
        self.onEvent = onEvent
        self.idleTimeout = ReopenProtocol.idleTimeout
        self.maxLine = ReopenProtocol.maxLine
        self.conversation = { ReopenConversation($0).run() }
    }

    /// One connection's conversation, run on the store's listening thread; the connection closes
    /// when it returns. GranaryOwner's own is ``ReopenConversation``, the protocol as
    /// `man 7 granary-reopen` says it.
    @_spi(Conversations)
    public typealias Conversation = @Sendable (OwnerSession) -> Void

    /// An owner with another idle timeout (unit tests shorten it), lines of up to `maxLine` bytes,
    /// and another `conversation`: what a misbehaving owner (`granary-demo-owner --break`) is
    /// built with. The transactions, the pause state and the callbacks stay GranaryOwner's.
    @_spi(Conversations)
    public init(
        onEvent: (@Sendable (Event) -> Void)? = nil, idleTimeout: Duration, maxLine: Int = ReopenProtocol.maxLine,
        conversation: Conversation? = nil
    ) {
        self.onEvent = onEvent
        self.idleTimeout = idleTimeout
        self.maxLine = maxLine
        self.conversation = conversation ?? { ReopenConversation($0).run() }
    }

    deinit { stop() }

    /// Starts serving the reopen protocol for the store at `path` (which must exist).
    /// Throws ``ReopenError/alreadyOwned(store:)`` when another process serves it.
    public func register(store path: String, close: @escaping Callback, reopen: @escaping Callback) throws(ReopenError)
    {
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

    /// Runs `body` as one unit of work on several stores at once: it starts only when none of
    /// them is pausing or paused, and holds them all until it returns. Taking the stores one by
    /// one instead (a `withStore` inside another) can hold the first store while waiting for a
    /// paused second one; granary pauses a user's stores one after another, so that outer store's
    /// pause would then wait for the inner one and end in `ERROR busy`.
    public func withStores<T>(_ paths: [String], _ body: () throws -> T) throws -> T {
        var seen = Set<ObjectIdentifier>()
        let all = paths.compactMap { gate(for: $0) }.filter { seen.insert(ObjectIdentifier($0)).inserted }
            .sorted { $0.address.canonicalPath < $1.address.canonicalPath }
        while true {
            var entered: [Gate] = []
            var blocked: Gate?
            for gate in all {
                guard gate.tryEnter() else {
                    blocked = gate
                    break
                }
                entered.append(gate)
            }
            if let blocked {
                // Hold nothing while waiting, so that no pause waits for us.
                for gate in entered.reversed() { gate.leave() }
                blocked.waitUntilOpen()
                continue
            }
            defer { for gate in entered.reversed() { gate.leave() } }
            return try body()
        }
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

    func report(_ kind: Event.Kind, _ store: String, _ detail: String = "") {
        onEvent?(Event(kind: kind, store: store, detail: detail))
    }
}

/// One registered store: its socket, its pause state and the count of running transactions.
final class Gate: @unchecked Sendable {
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
    /// Conversations served so far (on the listening thread only).
    private var conversations = 0

    init(
        address: ReopenAddress, listener: Int32, close: @escaping GranaryOwner.Callback,
        reopen: @escaping GranaryOwner.Callback, owner: GranaryOwner
    ) {
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

    // MARK: Transactions

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

    /// Enters without waiting; false (nothing entered) when the store is pausing or paused.
    func tryEnter() -> Bool {
        let thread = Thread.current.threadDictionary
        let depth = thread[depthKey] as? Int ?? 0
        if depth == 0 {
            condition.lock()
            defer { condition.unlock() }
            if paused || pausing { return false }
            active += 1
        }
        thread[depthKey] = depth + 1
        return true
    }

    /// Waits until the store is neither pausing nor paused (entering nothing).
    func waitUntilOpen() {
        condition.lock()
        while paused || pausing { condition.wait() }
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

    /// Holds new transactions and waits for running ones, until `deadline`; when `channel` is
    /// given, watches it: a client that closes the connection while the owner is pausing has
    /// given up the pause. Nothing is held unless it returns ``OwnerSession/Drained/drained``.
    func drain(until deadline: ContinuousClock.Instant, watching channel: ReopenChannel?) -> OwnerSession.Drained {
        condition.lock()
        defer { condition.unlock() }
        pausing = true
        while active > 0 {
            if let channel, channel.peerHasClosed {
                pausing = false
                condition.broadcast()
                return .peerGone
            }
            let left = deadline - ContinuousClock.now
            // In slices of 50 ms at most, to look at the connection between them.
            let slice = min(left, .milliseconds(50))
            let waited =
                slice > .zero && condition.wait(until: Date().addingTimeInterval(Double(slice.milliseconds + 1) / 1000))
            if !waited && active > 0 && ContinuousClock.now >= deadline {
                pausing = false
                condition.broadcast()
                return .leaseEnded
            }
        }
        return .drained
    }

    private func setPaused(_ value: Bool) {
        condition.lock()
        paused = value
        pausing = false
        condition.broadcast()
        condition.unlock()
    }

    func report(_ kind: GranaryOwner.Event.Kind, _ detail: String = "") {
        owner?.report(kind, address.canonicalPath, detail)
    }

    // MARK: Connections

    /// The listening loop: one connection at a time per store; each store has its own thread,
    /// so a paused store never keeps another store's conversation waiting.
    func serve() {
        defer { Glibc.close(listener) }
        while !isStopped {
            var pfd = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, 100)
            if ready <= 0 { continue }
            let fd = accept(listener, nil, nil)
            if fd < 0 { continue }
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            // The owner is not held during the conversation: dropping it stops the store at once.
            guard
                let (maxLine, idleTimeout, conversation) = owner.map({ ($0.maxLine, $0.idleTimeout, $0.conversation) })
            else {
                Glibc.close(fd)
                return
            }
            conversations += 1
            let channel = ReopenChannel(fd: fd, maxLine: maxLine)
            conversation(OwnerSession(gate: self, channel: channel, number: conversations, idleTimeout: idleTimeout))
            channel.close()
        }
    }

    /// The store is paused: its connections closed, new transactions held.
    func setPausedLocked() {
        condition.lock()
        paused = true
        pausing = false
        condition.unlock()
    }

    /// Reopens the store and lets the held transactions go, whether `reopen` succeeds or not.
    func reopen(_ why: GranaryOwner.Event.Kind) {
        do {
            try reopenStore()
            if why != .callbackFailed { report(why) }
        } catch {
            report(.callbackFailed, "reopen: \(error)")
        }
        setPaused(false)
    }
}
