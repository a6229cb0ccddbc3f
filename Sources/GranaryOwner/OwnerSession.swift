import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// One connection to an owned store, and what the owner's side of a conversation does with the
/// store: hold its transactions, close it, keep it paused, reopen it. GranaryOwner's conversation
/// (``ReopenConversation``) is built on it; so is a misbehaving one (`granary-demo-owner
/// --break`), which keeps GranaryOwner's transactions and callbacks and says other things.
@_spi(Conversations)
public final class OwnerSession {
    /// The connection (closed by GranaryOwner when the conversation returns).
    public let channel: ReopenChannel
    /// Which connection to this store this is, from 1.
    public let number: Int
    /// How long the owner waits for a line with the store open.
    public let idleTimeout: Duration
    let gate: Gate

    init(gate: Gate, channel: ReopenChannel, number: Int, idleTimeout: Duration) {
        self.gate = gate
        self.channel = channel
        self.number = number
        self.idleTimeout = idleTimeout
    }

    /// The store's canonical path.
    public var store: String { gate.address.canonicalPath }

    /// True once the store is no longer served (``GranaryOwner/stop()``): the conversation ends.
    public var stop: () -> Bool { { [weak gate] in gate?.isStopped ?? true } }

    /// How waiting for the running transactions ended.
    public enum Drained: Sendable {
        /// None runs; new ones wait.
        case drained
        /// The lease ran out first (nothing held then).
        case leaseEnded
        /// The client closed the connection first (nothing held then).
        case peerGone
    }

    /// Pausing: holds new transactions and waits for the running ones until `deadline`,
    /// watching the connection unless `watchingPeer` is false.
    public func drain(until deadline: ContinuousClock.Instant, watchingPeer: Bool = true) -> Drained {
        gate.drain(until: deadline, watching: watchingPeer ? channel : nil)
    }

    /// Runs the app's `close` callback.
    public func closeStore() throws { try gate.closeStore() }

    /// Paused: the store closed, transactions held until ``reopen(_:)``.
    public func enterPaused() { gate.setPausedLocked() }

    /// Runs the app's `reopen` callback, reports `why` (a failed reopen as
    /// ``GranaryOwner/Event/Kind/callbackFailed``) and lets the held transactions go.
    public func reopen(_ why: GranaryOwner.Event.Kind) { gate.reopen(why) }

    /// Tells the app's `onEvent`.
    public func report(_ kind: GranaryOwner.Event.Kind, _ detail: String = "") { gate.report(kind, detail) }
}

/// The owner's side of one conversation, as `man 7 granary-reopen` says it: THE CONVERSATION
/// (who may talk, the first line, each line while the store is open, the idle timeout) and THE
/// PAUSE (pausing, paused, the lease's end).
struct ReopenConversation {
    let session: OwnerSession
    private var channel: ReopenChannel { session.channel }

    init(_ session: OwnerSession) { self.session = session }

    func run() {
        guard peerMayTalk(), greet() else { return }
        whileOpen()
    }

    // MARK: THE CONVERSATION

    /// SECURITY: only the store's own uid or root may pause it.
    private func peerMayTalk() -> Bool {
        let peer = PeerCredentials.of(channel.fd)
        if let peer, peer.uid == getuid() || peer.uid == 0 { return true }
        refuse(
            .permissionDenied, "peer uid \(peer.map { String($0.uid) } ?? "unknown") is neither \(getuid()) nor root")
        return false
    }

    /// The first line: a HELLO that lists version 1 is answered with ours; a well-formed one
    /// without it gets `ERROR unsupported-version 1`, anything else `ERROR bad-hello`; both close.
    private func greet() -> Bool {
        guard let first = nextLine(or: "no HELLO within") else { return false }
        guard case .success(.hello(let versions)) = ReopenRequest.parse(first) else {
            refuse(.badHello, "bad greeting \(ReopenLine.describe(first))")
            return false
        }
        guard versions.contains(ReopenProtocol.version) else {
            refuse(
                .unsupportedVersion(spoken: ReopenProtocol.versions),
                "client versions \(ReopenLine.describe(versions.map(String.init).joined(separator: ",")))")
            return false
        }
        channel.send(ReopenAnswer.hello(version: ReopenProtocol.version, pid: getpid()).line)
        return true
    }

    /// The store open: each line read gets its answer, until the conversation ends.
    private func whileOpen() {
        while let line = nextLine(or: "no line for") {
            switch ReopenRequest.parse(line) {
            case .success(.pause(let ms)):
                guard pause(lease: .milliseconds(ms)) else { return }
            case .failure(.lease):
                channel.send(ReopenAnswer.error(.badLease).line)
            case .success(.resume):
                // Not paused: nothing to do; the answer is the same so that a retry is harmless.
                channel.send(ReopenAnswer.resumed.line)
            case .success(.bye), .success(.error):
                return
            case .success(.hello), .failure(.hello), .failure(.other):
                channel.send(ReopenAnswer.error(.unknownCommand).line)
            }
        }
    }

    /// The next line, within the idle timeout (its clock starts when the connection is accepted
    /// and again once each line is answered: a slow answer never eats the client's turn); nil
    /// when the conversation is over (`silence` says what did not come, for the event).
    private func nextLine(or silence: String) -> [UInt8]? {
        switch channel.readLine(until: .now + session.idleTimeout, stop: session.stop) {
        case .line(let line): return line
        case .timedOut:
            session.report(.idle, "\(silence) \(session.idleTimeout.milliseconds) ms")
            return nil
        case .closed, .overlong: return nil
        }
    }

    /// Sends a refusal that ends the conversation, and closes gracefully.
    private func refuse(_ refusal: ReopenRefusal, _ why: String) {
        channel.finish(with: refusal.line)
        session.report(.refused, why)
    }

    // MARK: THE PAUSE

    /// Pausing, then paused. The lease counts from the moment PAUSE was read: finishing the
    /// running transactions and being paused share it, so no transaction of the app waits longer
    /// than the lease. False when the conversation is over.
    private func pause(lease: Duration) -> Bool {
        let leaseEnd = ContinuousClock.now + lease
        switch session.drain(until: leaseEnd) {
        case .drained: break
        case .leaseEnded:
            channel.send(ReopenAnswer.error(.busy).line)
            return true
        case .peerGone:
            // Nobody waits for PAUSED any more: the waiting transactions go at once, not at the lease's end.
            session.report(.peerGone, "the connection closed while pausing; the pause was given up")
            return false
        }
        do {
            try session.closeStore()
        } catch {
            session.report(.callbackFailed, "close: \(error)")
            return refusePause(.closeFailed)
        }
        // Some SQLite bindings keep the file open after a close; a descriptor kept across the
        // swap would read and write the replaced file, so it is a failed close.
        if let left = StoreDescriptors.open(store: session.store), !left.isEmpty {
            session.report(
                .callbackFailed,
                "close left descriptor\(left.count == 1 ? "" : "s") \(left.map(String.init).joined(separator: ", ")) of the store open"
            )
            return refusePause(.closeFailed)
        }
        if ContinuousClock.now >= leaseEnd {
            // Closing took the whole lease: the pause came too late to be of use.
            session.report(.refused, "closing the store took the whole lease of \(lease.milliseconds) ms")
            return refusePause(.busy)
        }
        if channel.peerHasClosed {
            // Closed while the store was closing: nobody would end this pause but the lease.
            session.reopen(.peerGone)
            return false
        }
        session.enterPaused()
        guard channel.send(ReopenAnswer.paused.line) else {
            session.reopen(.peerGone)
            return false
        }
        session.report(.paused, "lease \(lease.milliseconds) ms")
        return whilePaused(until: leaseEnd)
    }

    /// A pause that cannot be given: reopen, then the ERROR; the conversation goes on.
    private func refusePause(_ reason: ReopenRefusal) -> Bool {
        session.reopen(.callbackFailed)
        channel.send(ReopenAnswer.error(reason).line)
        return true
    }

    /// Paused: RESUME reopens and is answered; BYE, a client's ERROR, an overlong line or the
    /// connection closing reopen and end the conversation; the lease's end reopens under the
    /// commit lock and is answered EXPIRED. Any other line is answered and the pause goes on.
    private func whilePaused(until leaseEnd: ContinuousClock.Instant) -> Bool {
        while true {
            switch channel.readLine(until: leaseEnd, stop: session.stop) {
            case .line(let line):
                switch ReopenRequest.parse(line) {
                case .success(.resume):
                    session.reopen(.resumed)
                    channel.send(ReopenAnswer.resumed.line)
                    return true
                case .success(.bye), .success(.error):
                    session.reopen(.peerGone)
                    return false
                default:
                    channel.send(ReopenAnswer.error(.unexpectedWhilePaused).line)
                }
            case .timedOut:
                // granary may be committing right now: wait for its commit lock, so that we open
                // either the old file before the rename or the new one after it.
                let lock = CommitLock(store: session.store)
                session.reopen(.leaseExpired)
                lock?.release()
                channel.send(ReopenAnswer.expired.line)
                return false
            case .closed, .overlong:
                session.reopen(.peerGone)
                return false
            }
        }
    }
}
