import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// granary's side of the reopen protocol: finds a store's owner, pauses it under a lease and
/// resumes it. See `man 7 granary-reopen`.
///
/// ```swift
/// if let owner = try ReopenClient.connect(store: path, storeOwnerUID: uid, timeout: .seconds(10)) {
///     try owner.pause(lease: .seconds(30), timeout: .seconds(10))
///     // … swap files; under the commit lock: owner.leaseRemaining, try owner.confirmPaused(), rename …
///     let pause = try owner.endPause(timeout: .seconds(10))   // .resumed, .late, .expired, .unanswered or .gone
///     owner.close()
/// }
/// ```
///
/// Everything the owner sends is parsed strictly (``ReopenAnswer``); a line that is not the
/// answer the protocol allows is a ``ReopenError/protocolViolation(store:detail:)`` whose
/// detail quotes it escaped (``ReopenLine/describe(_:)``), so no peer text reaches a terminal raw.
public final class ReopenClient {
    private var channel: ReopenChannel
    /// The store this client talks about (for messages).
    public let store: String
    /// Where its owner listens.
    private let address: ReopenAddress
    private let storeOwnerUID: UInt32
    /// The owner's process id, from SO_PEERCRED (in granary's pid namespace).
    public private(set) var ownerPID: Int32
    /// The owner's uid, from SO_PEERCRED.
    public private(set) var ownerUID: UInt32
    /// The pid the owner named in its HELLO answer: informational only (it differs from
    /// ``ownerPID`` when the owner runs in another pid namespace); never trusted.
    public private(set) var announcedPID: Int32
    /// The instant granary must treat as the end of the lease: measured from before PAUSE was
    /// sent, so it is never later than the owner's own deadline.
    public private(set) var leaseDeadline: ContinuousClock.Instant?
    /// When the last line was sent: an owner drops a connection idle for ``ReopenProtocol/idleTimeout``.
    private var lastSent: ContinuousClock.Instant
    private var pauseSent: ContinuousClock.Instant?
    private var pausedReceived: ContinuousClock.Instant?
    /// The last pause, once ended by ``endPause(timeout:)`` (or ``resume(timeout:)``).
    public private(set) var lastPause: PauseReport?

    /// How a pause ended and how long it took, for granary's report.
    public struct PauseReport: Sendable, Equatable {
        public enum Ending: String, Sendable, Equatable {
            /// RESUMED within the owner timeout.
            case resumed
            /// RESUMED after the owner timeout (before granary gave up): the owner reopened, late.
            case late
            /// EXPIRED: the lease had run out before RESUME reached the owner, which reopened by
            /// itself (taking the commit lock first).
            case expired
            /// No answer before granary gave up: it closed the connection, which also makes the
            /// owner reopen (as soon as it can).
            case unanswered
            /// The owner closed the connection without answering, after the commit (while paused,
            /// or after RESUME): it exited or crashed, and nothing serves the store now. Its
            /// pause ended there at the latest.
            case gone
        }
        public let ending: Ending
        /// PAUSE sent.
        public let pauseSent: ContinuousClock.Instant
        /// PAUSED received.
        public let pausedReceived: ContinuousClock.Instant
        /// RESUME sent.
        public let resumeSent: ContinuousClock.Instant
        /// RESUMED or EXPIRED received; when granary gave up for `unanswered`.
        public let ended: ContinuousClock.Instant

        /// The pause: PAUSE sent → RESUMED (or EXPIRED) received. The owner's transactions were
        /// held for no longer than this (they start waiting when PAUSE arrives).
        public var pause: Duration { ended - pauseSent }
        /// PAUSE sent → PAUSED received: how long the owner took to close the store.
        public var acknowledgement: Duration { pausedReceived - pauseSent }
        /// RESUME sent → RESUMED (or EXPIRED) received: how long the owner took to reopen.
        public var reopening: Duration { ended - resumeSent }
    }

    private init(
        channel: ReopenChannel, address: ReopenAddress, store: String, storeOwnerUID: UInt32, peer: PeerCredentials,
        announcedPID: Int32
    ) {
        self.channel = channel
        self.address = address
        self.store = store
        self.storeOwnerUID = storeOwnerUID
        self.ownerPID = peer.pid
        self.ownerUID = peer.uid
        self.announcedPID = announcedPID
        self.lastSent = .now
    }

    deinit { channel.close() }

    /// Connects to the owner of `store`, or returns nil when no process listens (no owner, or
    /// the owner died: the kernel freed its name). The owner must run as `storeOwnerUID` or root.
    ///
    /// The wait for the HELLO answer is `timeout` plus ``ReopenProtocol/idleCloseLimit``: an owner
    /// serves one conversation per store at a time, and ours may wait in its queue behind one
    /// that it drops only after that long without a line.
    public static func connect(store: String, storeOwnerUID: UInt32, timeout: Duration) throws(ReopenError)
        -> ReopenClient?
    {
        try connect(
            address: try ReopenAddress(store: store), store: store, storeOwnerUID: storeOwnerUID, timeout: timeout)
    }

    /// Connects to the owner listening at `address` (a caller that knows the store's canonical path
    /// without resolving it by name: ``ReopenAddress/init(canonicalPath:)``); `store` names it in
    /// messages.
    public static func connect(
        address: ReopenAddress, store: String, storeOwnerUID: UInt32, timeout: Duration
    ) throws(ReopenError) -> ReopenClient? {
        guard
            let (channel, peer, pid) = try handshake(
                address: address, store: store, storeOwnerUID: storeOwnerUID, timeout: timeout)
        else {
            return nil
        }
        return ReopenClient(
            channel: channel, address: address, store: store, storeOwnerUID: storeOwnerUID, peer: peer,
            announcedPID: pid)
    }

    private static func handshake(address: ReopenAddress, store: String, storeOwnerUID: UInt32, timeout: Duration)
        throws(ReopenError)
        -> (ReopenChannel, PeerCredentials, Int32)?
    {
        guard let channel = try ReopenChannel.connect(to: address, timeout: timeout) else { return nil }
        guard let peer = PeerCredentials.of(channel.fd) else {
            throw .socket(operation: "read the credentials of", store: store, code: errno)
        }
        // A process of another user must not be able to pose as the owner and stall or mislead us.
        guard peer.uid == storeOwnerUID || peer.uid == 0 else {
            throw .untrustedPeer(store: store, pid: peer.pid, uid: peer.uid, expected: storeOwnerUID)
        }
        channel.send(ReopenRequest.hello(versions: [ReopenProtocol.version]).line)
        let answer = try read(
            channel, store: store, waitingFor: "HELLO", until: .now + timeout + ReopenProtocol.idleCloseLimit,
            timeout: timeout + ReopenProtocol.idleCloseLimit)
        switch answer {
        case .hello(let version, let pid) where version == ReopenProtocol.version:
            return (channel, peer, pid)
        case .error(let refusal):
            channel.close()
            throw .refused(store: store, reason: refusal.explanation)
        default:
            channel.close()
            throw .protocolViolation(store: store, detail: "it answered HELLO with \(ReopenLine.describe(answer.line))")
        }
    }

    /// Asks the owner to pause under a lease of `lease`; returns when it has acknowledged
    /// (all its connections to the store are closed). Throws `.timedOut` after `timeout`.
    ///
    /// A connection that has been quiet for half the idle timeout is replaced by a new one
    /// first (HELLO again, with the same checks), since the owner may be dropping it.
    public func pause(lease: Duration, timeout: Duration) throws(ReopenError) {
        if ContinuousClock.now - lastSent >= ReopenProtocol.idleTimeout / 2 {
            try reconnect(timeout: timeout)
        }
        try expectSilence(before: "PAUSE")
        let start = ContinuousClock.now
        send(
            .pause(leaseMilliseconds: Int(min(max(1, lease.milliseconds), Int64(ReopenProtocol.maxLeaseMilliseconds)))))
        pauseSent = start
        switch try Self.read(channel, store: store, waitingFor: "PAUSE", until: .now + timeout, timeout: timeout) {
        case .paused:
            pausedReceived = .now
            leaseDeadline = start + lease
        case .error(let refusal):
            throw .refused(store: store, reason: refusal.word)
        case let other:
            channel.close()
            throw .protocolViolation(store: store, detail: "it answered PAUSE with \(ReopenLine.describe(other.line))")
        }
    }

    /// How long the owner took to answer PAUSE with PAUSED, while it is paused (nil otherwise).
    public var acknowledgement: Duration? {
        guard let pauseSent, let pausedReceived else { return nil }
        return pausedReceived - pauseSent
    }

    /// Time left before the owner may reopen on its own (zero when not paused or past it).
    public var leaseRemaining: Duration {
        guard let leaseDeadline else { return .zero }
        return max(.zero, leaseDeadline - ContinuousClock.now)
    }

    /// Throws unless the owner is still paused as far as the connection tells, without waiting:
    /// it sent nothing since PAUSED (no RESUMED before RESUME, no EXPIRED) and did not close the
    /// connection. Call it under the commit lock, right before the `rename(2)` that commits.
    public func confirmPaused() throws(ReopenError) {
        guard pausedReceived != nil else {
            throw .protocolViolation(store: store, detail: "it was never paused on this connection")
        }
        try expectSilence(before: "the commit")
    }

    /// Tells the owner to reopen the store and waits for RESUMED: for `timeout` on time, then
    /// as late until ``lateLimit(resumeSent:leaseDeadline:timeout:)``, past the end of the lease
    /// by `timeout`, so that a conforming owner's EXPIRED arrives. The store is open again (or
    /// reopening) whatever this returns. Throws when the owner refuses or breaks the protocol: it
    /// sent RESUMED before RESUME, EXPIRED before the lease ran out, closed the connection, or
    /// answered something else.
    public func endPause(timeout: Duration) throws(ReopenError) -> PauseReport {
        try Self.endPauses([self], timeout: timeout)[0].get()
    }

    /// Ends the pause of every client at once: RESUME is sent to each first, then their answers
    /// are awaited together, so that one owner that is slow or silent after RESUME keeps no other
    /// store paused. Each report measures its own store's pause (its answer's arrival). The
    /// results are in the order of `clients`; see ``endPause(timeout:)``.
    public static func endPauses(_ clients: [ReopenClient], timeout: Duration) -> [Result<PauseReport, ReopenError>] {
        finishPauses(clients, timeout: timeout, latePatience: true)
    }

    /// Tells every client's owner to reopen (``resume(timeout:)``), the paused ones together:
    /// RESUME to each first, then the answers awaited for `timeout` at most. For a commit that
    /// did not happen: nothing changed, so no answer is awaited past the owner timeout.
    public static func resume(_ clients: [ReopenClient], timeout: Duration) {
        let paused = clients.filter { $0.pausedReceived != nil }
        _ = finishPauses(paused, timeout: timeout, latePatience: false)
        for client in clients where !paused.contains(where: { $0 === client }) { try? client.resume(timeout: timeout) }
    }

    /// How long granary waits for the answer to RESUME before it reports the owner as silent:
    /// two owner timeouts after RESUME, and at least one owner timeout past the end of the lease
    /// (`leaseDeadline`, counted from before PAUSE was sent), within which an owner whose lease
    /// ran out takes the commit lock, reopens and sends EXPIRED (`man 7 granary-reopen`, THE
    /// LEASE).
    public static func lateLimit(
        resumeSent: ContinuousClock.Instant, leaseDeadline: ContinuousClock.Instant?, timeout: Duration
    ) -> ContinuousClock.Instant {
        max(resumeSent + timeout * 2, (leaseDeadline ?? resumeSent) + timeout)
    }

    /// Tells the owner to reopen the store; returns when it has (RESUMED, or EXPIRED when the
    /// lease ran out first). Throws `.timedOut` when it does not answer within `timeout`.
    /// On a connection that was not paused, the owner answers RESUMED at once.
    public func resume(timeout: Duration) throws(ReopenError) {
        if pausedReceived != nil {
            if try Self.finishPauses([self], timeout: timeout, latePatience: false)[0].get().ending == .unanswered {
                throw .timedOut(store: store, waitingFor: "RESUME", after: timeout)
            }
            return
        }
        leaseDeadline = nil
        try expectSilence(before: "RESUME")
        send(.resume)
        switch try Self.read(channel, store: store, waitingFor: "RESUME", until: .now + timeout, timeout: timeout) {
        case .resumed: return
        case .error(let refusal): throw .refused(store: store, reason: refusal.word)
        case let other:
            channel.close()
            throw .protocolViolation(store: store, detail: "it answered RESUME with \(ReopenLine.describe(other.line))")
        }
    }

    /// A RESUME sent, its answer awaited.
    private struct AwaitedResume {
        let pauseSent: ContinuousClock.Instant
        let pausedReceived: ContinuousClock.Instant
        let resumeSent: ContinuousClock.Instant
        /// An answer by then is on time.
        let onTime: ContinuousClock.Instant
        /// No answer by then is `unanswered`.
        let giveUp: ContinuousClock.Instant
    }

    private enum ResumeStart {
        case ended(PauseReport)
        case awaiting(AwaitedResume)
    }

    /// RESUME sent to every client first, then every answer awaited together (one poll(2) over
    /// their connections), each report stamped when its own answer arrived.
    private static func finishPauses(_ clients: [ReopenClient], timeout: Duration, latePatience: Bool)
        -> [Result<PauseReport, ReopenError>]
    {
        var results = [Result<PauseReport, ReopenError>?](repeating: nil, count: clients.count)
        var awaiting: [Int: AwaitedResume] = [:]
        for (index, client) in clients.enumerated() {
            do throws(ReopenError) {
                switch try client.sendResume(timeout: timeout, latePatience: latePatience) {
                case .ended(let report): results[index] = .success(report)
                case .awaiting(let awaited): awaiting[index] = awaited
                }
            } catch {
                results[index] = .failure(error)
            }
        }
        while !awaiting.isEmpty {
            let now = ContinuousClock.now
            for (index, awaited) in awaiting where clients[index].channel.hasInput || now >= awaited.giveUp {
                do throws(ReopenError) {
                    if let report = try clients[index].receiveResumed(awaited) {
                        results[index] = .success(report)
                        awaiting[index] = nil
                    }
                } catch {
                    results[index] = .failure(error)
                    awaiting[index] = nil
                }
            }
            guard let next = awaiting.values.map(\.giveUp).min() else { break }
            var fds = awaiting.keys.map { pollfd(fd: clients[$0].channel.fd, events: Int16(POLLIN), revents: 0) }
            let left = next - .now
            // At most 50 ms at a time: a line may arrive in pieces (the part read stays buffered).
            let wait = max(0, min(50, left.milliseconds + 1))
            _ = poll(&fds, nfds_t(fds.count), Int32(wait))
        }
        return results.map { $0! }
    }

    /// Sends RESUME, after reading anything the owner sent while paused (so that an unasked
    /// RESUMED cannot pass for the answer; an EXPIRED then ends the pause at once).
    private func sendResume(timeout: Duration, latePatience: Bool) throws(ReopenError) -> ResumeStart {
        guard let pauseSent, let pausedReceived else {
            throw .protocolViolation(store: store, detail: "it was never paused on this connection")
        }
        let deadline = leaseDeadline
        self.pauseSent = nil
        self.pausedReceived = nil
        leaseDeadline = nil
        if channel.hasInput {
            switch channel.readLine(until: .now) {
            case .line(let line) where ReopenAnswer.parse(line) == .expired:
                channel.close()
                if let deadline, ContinuousClock.now < deadline {
                    throw .protocolViolation(
                        store: store,
                        detail:
                            "it sent EXPIRED \((deadline - .now).milliseconds) ms before the lease it was given ran out"
                    )
                }
                let now = ContinuousClock.now
                let report = PauseReport(
                    ending: .expired, pauseSent: pauseSent, pausedReceived: pausedReceived, resumeSent: now, ended: now)
                lastPause = report
                return .ended(report)
            case .line(let line):
                channel.close()
                throw .protocolViolation(
                    store: store, detail: "it sent \(ReopenLine.describe(line)) while paused, before RESUME")
            case .overlong:
                channel.close()
                throw .protocolViolation(
                    store: store, detail: "it sent a line over \(ReopenProtocol.maxLine) bytes while paused")
            case .closed:
                // The owner went away while paused (it exited or crashed): no answer will come.
                channel.close()
                let now = ContinuousClock.now
                let report = PauseReport(
                    ending: .gone, pauseSent: pauseSent, pausedReceived: pausedReceived, resumeSent: now, ended: now)
                lastPause = report
                return .ended(report)
            case .timedOut:
                channel.close()
                throw .protocolViolation(store: store, detail: "it closed the connection while paused, before RESUME")
            }
        }
        let resumeSent = ContinuousClock.now
        send(.resume)
        let onTime = resumeSent + timeout
        return .awaiting(
            AwaitedResume(
                pauseSent: pauseSent, pausedReceived: pausedReceived, resumeSent: resumeSent, onTime: onTime,
                giveUp: latePatience
                    ? Self.lateLimit(resumeSent: resumeSent, leaseDeadline: deadline, timeout: timeout) : onTime))
    }

    /// The answer to RESUME if it has arrived (nil: not yet, and there is time left), or
    /// `unanswered` once `giveUp` has passed (the connection is closed then, which makes the
    /// owner reopen).
    private func receiveResumed(_ awaited: AwaitedResume) throws(ReopenError) -> PauseReport? {
        func report(_ ending: PauseReport.Ending) -> PauseReport {
            let report = PauseReport(
                ending: ending, pauseSent: awaited.pauseSent, pausedReceived: awaited.pausedReceived,
                resumeSent: awaited.resumeSent, ended: .now)
            lastPause = report
            return report
        }
        switch channel.readLine(until: .now) {
        case .timedOut:
            guard ContinuousClock.now >= awaited.giveUp else { return nil }
            channel.close()
            return report(.unanswered)
        case .line(let line):
            guard let answer = ReopenAnswer.parse(line) else {
                channel.close()
                throw .protocolViolation(
                    store: store,
                    detail: "it answered RESUME with \(ReopenLine.describe(line)), which is no answer of the protocol")
            }
            switch answer {
            case .resumed:
                return report(ContinuousClock.now <= awaited.onTime ? .resumed : .late)
            case .expired:
                // The lease ran out as RESUME travelled, or before it: the owner reopened by itself.
                channel.close()
                return report(.expired)
            case .error(let refusal):
                throw .refused(store: store, reason: refusal.word)
            case let other:
                channel.close()
                throw .protocolViolation(
                    store: store, detail: "it answered RESUME with \(ReopenLine.describe(other.line))")
            }
        case .overlong:
            channel.close()
            throw .protocolViolation(
                store: store, detail: "it answered RESUME with a line over \(ReopenProtocol.maxLine) bytes")
        case .closed:
            // The owner went away instead of answering (it exited or crashed while reopening).
            channel.close()
            return report(.gone)
        }
    }

    /// Ends the conversation. A paused owner resumes on its own when the connection closes.
    public func close() {
        if !channel.isClosed { send(.bye) }
        channel.close()
    }

    // MARK: Lines

    private func send(_ request: ReopenRequest) {
        channel.send(request.line)
        lastSent = .now
    }

    /// A new connection, HELLO again, with the same checks; the owner may have changed.
    private func reconnect(timeout: Duration) throws(ReopenError) {
        close()
        guard
            let (channel, peer, pid) = try Self.handshake(
                address: address, store: store, storeOwnerUID: storeOwnerUID, timeout: timeout)
        else {
            throw .protocolViolation(
                store: store, detail: "it stopped serving the store (nobody listens on its socket any more)")
        }
        self.channel = channel
        ownerPID = peer.pid
        ownerUID = peer.uid
        announcedPID = pid
        lastSent = .now
    }

    /// Throws when the owner sent something unasked, or closed the connection.
    private func expectSilence(before what: String) throws(ReopenError) {
        guard channel.hasInput else { return }
        let detail: String
        switch channel.readLine(until: .now) {
        case .line(let line): detail = "it sent \(ReopenLine.describe(line)) unasked, before \(what)"
        case .overlong: detail = "it sent a line over \(ReopenProtocol.maxLine) bytes unasked, before \(what)"
        case .closed, .timedOut: detail = "it closed the connection before \(what)"
        }
        channel.close()
        throw .protocolViolation(store: store, detail: detail)
    }

    /// Reads one answer, strictly.
    private static func read(
        _ channel: ReopenChannel, store: String, waitingFor: String, until deadline: ContinuousClock.Instant,
        timeout: Duration
    ) throws(ReopenError) -> ReopenAnswer {
        switch channel.readLine(until: deadline) {
        case .line(let line):
            guard let answer = ReopenAnswer.parse(line) else {
                channel.close()
                throw .protocolViolation(
                    store: store,
                    detail:
                        "it answered \(waitingFor) with \(ReopenLine.describe(line)), which is no answer of the protocol"
                )
            }
            return answer
        case .overlong:
            channel.close()
            throw .protocolViolation(
                store: store, detail: "it answered \(waitingFor) with a line over \(ReopenProtocol.maxLine) bytes")
        case .timedOut:
            channel.close()
            throw .timedOut(store: store, waitingFor: waitingFor, after: timeout)
        case .closed:
            channel.close()
            throw .protocolViolation(
                store: store, detail: "it closed the connection instead of answering \(waitingFor)")
        }
    }
}
