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
    let breaking: Set<ReopenRuleBreak>
    let answerDelay: Duration
    let idleTimeout: Duration
    /// Held around each conversation when ``ReopenRuleBreak/oneThread`` is broken.
    let conversationLock = NSLock()

    /// A new owner; `onEvent` sees pauses, resumes and refusals (called on the listening thread).
    public init(onEvent: (@Sendable (Event) -> Void)? = nil) {
        self.onEvent = onEvent
        self.breaking = []
        self.answerDelay = .zero
        self.idleTimeout = ReopenProtocol.idleTimeout
    }

    /// An owner that breaks rules of the protocol on purpose, for conformance and hostile-owner
    /// tests only (`granary-demo-owner --break`). `answerDelay` is the delay of
    /// ``ReopenRuleBreak/slowAnswers``; `idleTimeout` shortens the idle timeout for unit tests.
    @_spi(RuleBreaking)
    public init(
        onEvent: (@Sendable (Event) -> Void)? = nil, breaking: Set<ReopenRuleBreak>,
        answerDelay: Duration = .seconds(3),
        idleTimeout: Duration = ReopenProtocol.idleTimeout
    ) {
        self.onEvent = onEvent
        self.breaking = breaking
        self.answerDelay = answerDelay
        self.idleTimeout = idleTimeout
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

    fileprivate func report(_ kind: Event.Kind, _ store: String, _ detail: String = "") {
        onEvent?(Event(kind: kind, store: store, detail: detail))
    }

    fileprivate func breaks(_ rule: ReopenRuleBreak) -> Bool { breaking.contains(rule) }
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

    private func breaks(_ rule: ReopenRuleBreak) -> Bool { owner?.breaks(rule) ?? false }

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

    /// How waiting for the running transactions ended.
    private enum Drained {
        /// None runs; new ones wait.
        case drained
        /// The lease ran out first (nothing held then).
        case leaseEnded
        /// The client closed the connection first (nothing held then).
        case peerGone
    }

    /// Holds new transactions and waits for running ones, until `deadline`, watching `channel`:
    /// a client that closes the connection while the owner is pausing has given up the pause.
    private func drain(until deadline: ContinuousClock.Instant, watching channel: ReopenChannel) -> Drained {
        condition.lock()
        defer { condition.unlock() }
        pausing = true
        let watch = !breaks(.ignoreGoneWhilePausing)
        while active > 0 {
            if watch && channel.peerHasClosed {
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

    private func report(_ kind: GranaryOwner.Event.Kind, _ detail: String = "") {
        owner?.report(kind, address.canonicalPath, detail)
    }

    // MARK: The conversation

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
            let long = breaks(.longLines)
            let channel = ReopenChannel(fd: fd, maxLine: long ? 65536 : ReopenProtocol.maxLine)
            let oneThread = breaks(.oneThread)
            if oneThread { owner?.conversationLock.lock() }
            handle(channel)
            if oneThread { owner?.conversationLock.unlock() }
            channel.close()
        }
    }

    /// Sends an answer (after the delay of ``ReopenRuleBreak/slowAnswers``, or replaced by a
    /// huge line when ``ReopenRuleBreak/hugeAnswer`` is broken).
    @discardableResult
    private func answer(_ channel: ReopenChannel, _ answer: ReopenAnswer) -> Bool {
        if breaks(.slowAnswers), let delay = owner?.answerDelay {
            Thread.sleep(forTimeInterval: Double(delay.milliseconds) / 1000)
        }
        if breaks(.hugeAnswer) { return channel.sendBytes(Array(repeating: UInt8(ascii: "x"), count: 1 << 20)) }
        return channel.send(answer.line)
    }

    /// Sends a refusal that ends the conversation, and closes gracefully.
    private func refuse(_ channel: ReopenChannel, _ refusal: ReopenRefusal, _ why: String) {
        if breaks(.slowAnswers), let delay = owner?.answerDelay {
            Thread.sleep(forTimeInterval: Double(delay.milliseconds) / 1000)
        }
        channel.finish(with: refusal.line)
        report(.refused, why)
    }

    /// The idle timeout (4 s later when ``ReopenRuleBreak/lateIdleClose`` is broken).
    private var idleTimeout: Duration {
        (owner?.idleTimeout ?? ReopenProtocol.idleTimeout) + (breaks(.lateIdleClose) ? .seconds(4) : .zero)
    }

    private func handle(_ channel: ReopenChannel) {
        // Only our own uid or root may pause us.
        let peer = PeerCredentials.of(channel.fd)
        guard let peer, peer.uid == getuid() || peer.uid == 0 || breaks(.anyUID) else {
            refuse(
                channel, .permissionDenied,
                "peer uid \(peer.map { String($0.uid) } ?? "unknown") is neither \(getuid()) nor root")
            return
        }
        conversations += 1
        let stop: () -> Bool = { [weak self] in self?.isStopped ?? true }
        // The first line, within the idle timeout.
        let first: [UInt8]
        switch channel.readLine(until: .now + idleTimeout, stop: stop) {
        case .line(let line): first = line
        case .timedOut:
            report(.idle, "no HELLO within \(idleTimeout.milliseconds) ms")
            return
        case .closed, .overlong: return
        }
        let versions: [Int]
        if breaks(.lenientHello) {
            // Whitespace-split, leading zeros and signs taken: what the protocol refuses.
            let words = String(decoding: first, as: UTF8.self).split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard words.count >= 3, words[0] == "HELLO", words[1] == Substring(ReopenProtocol.name) else {
                refuse(channel, .badHello, "bad greeting \(ReopenLine.describe(first))")
                return
            }
            versions = words[2...].compactMap { Int($0) }
        } else {
            guard case .success(.hello(let offered)) = ReopenRequest.parse(first) else {
                refuse(channel, .badHello, "bad greeting \(ReopenLine.describe(first))")
                return
            }
            versions = offered
        }
        var version = ReopenProtocol.version
        if breaks(.anyVersion), let asked = versions.first {
            version = asked
        } else if !versions.contains(ReopenProtocol.version) {
            refuse(
                channel, .unsupportedVersion(spoken: ReopenProtocol.versions),
                "client versions \(ReopenLine.describe(versions.map(String.init).joined(separator: ",")))")
            return
        }
        var greeting = ReopenAnswer.hello(version: version, pid: getpid()).line
        if breaks(.helloWithoutPID) || (breaks(.dryRunDiffers) && conversations > 1) {
            greeting = "HELLO \(ReopenProtocol.name) \(version)"
        }
        if breaks(.slowAnswers), let delay = owner?.answerDelay {
            Thread.sleep(forTimeInterval: Double(delay.milliseconds) / 1000)
        }
        if breaks(.hugeAnswer) {
            channel.sendBytes(Array(repeating: UInt8(ascii: "x"), count: 1 << 20))
        } else {
            channel.send(greeting)
        }

        // The idle clock runs only while waiting for a line with the store open: it starts once the
        // connection is accepted and again once each line is answered (an ERROR busy that took the
        // whole lease, a pause that ended, included), so a slow answer never eats the client's turn.
        while true {
            let idle: ContinuousClock.Instant? = breaks(.noIdleTimeout) ? nil : .now + idleTimeout
            let line: [UInt8]
            switch channel.readLine(until: idle, stop: stop) {
            case .line(let received): line = received
            case .timedOut:
                report(.idle, "no line for \(idleTimeout.milliseconds) ms")
                return
            case .closed, .overlong: return
            }
            switch ReopenRequest.parse(line) {
            case .success(.pause(let ms)):
                if breaks(.capLease) && ms > 60_000 {
                    answer(channel, .error(.badLease))
                    continue
                }
                if !pause(channel, lease: .milliseconds(ms), stop: stop) { return }
            case .failure(.lease):
                if breaks(.lenientLease), let ms = Int(ReopenLine.words(line)?.last ?? "x"), ms >= 0 {
                    if !pause(channel, lease: .milliseconds(ms), stop: stop) { return }
                    continue
                }
                answer(channel, .error(.badLease))
            case .success(.resume):
                // Not paused: nothing to do; the answer is the same so that a retry is harmless.
                answer(channel, breaks(.refuseResumeWhenOpen) ? .error(.unknownCommand) : .resumed)
            case .success(.bye):
                if breaks(.byeLingers) {
                    // Waits for the client to close instead of closing at once.
                    while case .line = channel.readLine(until: nil, stop: stop) {}
                }
                return
            case .success(.error):
                if breaks(.ignoreClientError) {
                    answer(channel, .error(.unknownCommand))
                    continue
                }
                return
            case .failure(.other) where breaks(.looseFirstWord) && looseFirstWord(line) == "PAUSE":
                answer(channel, .error(.badLease))
            case .failure(.other) where breaks(.anyErrorEnds) && line.starts(with: Array("ERROR".utf8)):
                return
            case .success(.hello), .failure(.hello), .failure(.other):
                if !breaks(.ignoreUnknown) { answer(channel, .error(.unknownCommand)) }
            }
        }
    }

    /// The first word as ``ReopenRuleBreak/looseFirstWord`` takes it: up to any space, tab or control byte.
    private func looseFirstWord(_ line: [UInt8]) -> String {
        String(decoding: line.prefix { $0 > 0x20 && $0 != 0x7F }, as: UTF8.self)
    }

    /// One pause. Returns false when the conversation is over.
    private func pause(_ channel: ReopenChannel, lease: Duration, stop: @escaping () -> Bool) -> Bool {
        // The lease counts from the moment PAUSE was read: finishing the running transactions
        // and being paused share it, so no transaction of the app waits longer than the lease.
        let leaseEnd = ContinuousClock.now + (breaks(.earlyExpiry) ? lease / 2 : lease)
        switch drain(until: leaseEnd, watching: channel) {
        case .drained: break
        case .leaseEnded:
            answer(channel, .error(.busy))
            return true
        case .peerGone:
            // Nobody waits for PAUSED any more: the waiting transactions go at once, not at the lease's end.
            report(.peerGone, "the connection closed while pausing; the pause was given up")
            return false
        }
        do {
            try closeStore()
        } catch {
            report(.callbackFailed, "close: \(error)")
            reopen(.callbackFailed)
            answer(channel, .error(.closeFailed))
            return true
        }
        // Some SQLite bindings keep the file open after a close; a descriptor kept across the
        // swap would read and write the replaced file, so it is a failed close.
        if !breaks(.skipDescriptorCheck), let left = StoreDescriptors.open(store: address.canonicalPath), !left.isEmpty
        {
            report(
                .callbackFailed,
                "close left descriptor\(left.count == 1 ? "" : "s") \(left.map(String.init).joined(separator: ", ")) of the store open"
            )
            reopen(.callbackFailed)
            answer(channel, .error(.closeFailed))
            return true
        }
        if ContinuousClock.now >= leaseEnd {
            // Closing took the whole lease: the pause came too late to be of use.
            report(.refused, "closing the store took the whole lease of \(lease.milliseconds) ms")
            reopen(.callbackFailed)
            answer(channel, .error(.busy))
            return true
        }
        if !breaks(.ignoreGoneWhilePausing) && channel.peerHasClosed {
            // Closed while the store was closing: nobody would end this pause but the lease.
            reopen(.peerGone)
            return false
        }
        setPausedLocked()
        guard answer(channel, .paused) else {
            if breaks(.ignoreGoneWhilePausing) {
                let left = leaseEnd - ContinuousClock.now
                if left > .zero { Thread.sleep(forTimeInterval: Double(left.milliseconds) / 1000) }
            }
            reopen(.peerGone)
            return false
        }
        report(.paused, "lease \(lease.milliseconds) ms")
        if breaks(.earlyResumed) {
            Thread.sleep(forTimeInterval: 0.05)
            reopen(.resumed)
            channel.send(ReopenAnswer.resumed.line)
            return true
        }
        if breaks(.earlyExpired) {
            Thread.sleep(forTimeInterval: 0.05)
            reopen(.leaseExpired)
            channel.send(ReopenAnswer.expired.line)
            return false
        }
        if breaks(.hangUpAfterPaused) {
            // The connection is closed first, then the store reopened: granary learns of it as late
            // as it can.
            shutdown(channel.fd, Int32(SHUT_RDWR))
            reopen(.peerGone)
            return false
        }
        while true {
            // Broken on purpose (idle-while-paused): the idle clock goes on running during the pause.
            let idleEnd = breaks(.idleWhilePaused) ? min(leaseEnd, .now + idleTimeout) : leaseEnd
            switch channel.readLine(until: idleEnd, stop: stop) {
            case .timedOut where ContinuousClock.now < leaseEnd:
                report(.idle, "no line for \(idleTimeout.milliseconds) ms while paused")
                reopen(.peerGone)
                return false
            case .line(let line):
                switch ReopenRequest.parse(line) {
                case .success(.resume):
                    reopen(.resumed)
                    answer(channel, .resumed)
                    return true
                case .success(.bye) where !breaks(.stayPausedOnBye), .success(.error) where !breaks(.ignoreClientError):
                    // The end of the conversation, as when the connection closes.
                    reopen(.peerGone)
                    return false
                default:
                    answer(channel, .error(.unexpectedWhilePaused))
                    if breaks(.anyLineEndsPause) {
                        reopen(.resumed)
                        return true
                    }
                }
            case .timedOut:
                // granary may be committing right now: wait for its commit lock, so that we open
                // either the old file before the rename or the new one after it.
                let lock = breaks(.noCommitLock) ? nil : CommitLock(store: address.canonicalPath)
                reopen(.leaseExpired)
                lock?.release()
                answer(channel, .expired)
                return false
            case .closed, .overlong:
                if breaks(.stayPausedWhenGone) {
                    let left = leaseEnd - ContinuousClock.now
                    if left > .zero { Thread.sleep(forTimeInterval: Double(left.milliseconds) / 1000) }
                }
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

/// A rule of `man 7 granary-reopen` that an owner can be told to break, for conformance and
/// hostile-owner tests only (`granary-demo-owner --break`). Each names the check of
/// `granary-reopen-check` that must then fail, where there is one.
@_spi(RuleBreaking)
public enum ReopenRuleBreak: String, CaseIterable, Sendable {
    /// Answers HELLO without its pid (check `handshake`).
    case helloWithoutPID = "hello-without-pid"
    /// Answers HELLO with the client's first version, spoken or not (check `versions`).
    case anyVersion = "any-version"
    /// Takes a HELLO with doubled spaces, tabs, leading zeros or signs (check `bad-hello`).
    case lenientHello = "lenient-hello"
    /// Answers nothing to an unknown or malformed line (check `unknown-command`).
    case ignoreUnknown = "ignore-unknown"
    /// Takes a lease of 0, `+5`, `05` or over an hour (check `bad-lease`).
    case lenientLease = "lenient-lease"
    /// Refuses leases over a minute (check `lease-bounds`).
    case capLease = "cap-lease"
    /// Answers RESUME with an error when the store is open (check `resume-when-open`).
    case refuseResumeWhenOpen = "refuse-resume-when-open"
    /// Reopens on any line while paused (check `while-paused`).
    case anyLineEndsPause = "any-line-ends-pause"
    /// Stays paused after BYE (check `bye`).
    case stayPausedOnBye = "stay-paused-on-bye"
    /// Stays paused until the lease ends when the connection closes (check `peer-gone`).
    case stayPausedWhenGone = "stay-paused-when-gone"
    /// Answers a client's ERROR instead of ending the conversation (check `client-error`).
    case ignoreClientError = "ignore-client-error"
    /// Expires at half the lease (check `expire`).
    case earlyExpiry = "early-expiry"
    /// Reopens at the lease's end without the commit lock (check `commit-lock`).
    case noCommitLock = "no-commit-lock"
    /// Never closes an idle connection (check `idle-timeout`).
    case noIdleTimeout = "no-idle-timeout"
    /// Takes lines of up to 64 KiB (check `overlong-line`).
    case longLines = "long-lines"
    /// Talks to a peer of any uid (check `credentials`, as root).
    case anyUID = "any-uid"
    /// Serves one conversation at a time over all its stores (check `several-stores`).
    case oneThread = "one-thread"
    /// Sends RESUMED 50 ms after PAUSED, unasked, and reopens (check `pause-resume`).
    case earlyResumed = "early-resumed"
    /// Sends EXPIRED 50 ms after PAUSED, unasked (the lease still running), and reopens.
    case earlyExpired = "early-expired"
    /// Closes the connection right after PAUSED and reopens (granary's hostile-owner and ledger
    /// tests).
    case hangUpAfterPaused = "hang-up-after-paused"
    /// Answers PAUSED without checking that its close left no descriptor of the store open.
    case skipDescriptorCheck = "skip-descriptor-check"
    /// Answers the first conversation's HELLO correctly and every later one without its pid,
    /// so that a dry run sees a good owner and the restore after it a malformed answer.
    case dryRunDiffers = "dry-run-differs"
    /// Waits `answerDelay` before every answer.
    case slowAnswers = "slow-answers"
    /// Takes a line's first word up to any space, tab or control byte, so that `PAUSE\t100` gets
    /// ERROR bad-lease (check `unknown-command`).
    case looseFirstWord = "loose-first-word"
    /// Ends the conversation on any line that starts with ERROR, reason known or not (check `unknown-command`).
    case anyErrorEnds = "any-error-ends"
    /// Does not watch the connection while pausing, answers PAUSED into a closed one and stays
    /// paused until the lease ends (check `gone-while-pausing`).
    case ignoreGoneWhilePausing = "ignore-gone-while-pausing"
    /// Lets the idle clock run while paused: closes the connection (and reopens) 10 s into a
    /// pause (check `idle-timeout`).
    case idleWhilePaused = "idle-while-paused"
    /// Closes an idle connection after 14 s instead of 10 to 12 (check `idle-timeout`).
    case lateIdleClose = "late-idle-close"
    /// After BYE with the store open, waits for the client to close the connection instead of
    /// closing it (check `restore-conversations`).
    case byeLingers = "bye-lingers"
    /// Answers everything with 1 MiB of `x` and no line feed.
    case hugeAnswer = "huge-answer"
}
