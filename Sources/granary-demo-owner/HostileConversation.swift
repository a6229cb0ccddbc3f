import Foundation
@_spi(Conversations) import GranaryOwner

#if canImport(Glibc)
    import Glibc
#endif

/// A rule of `man 7 granary-reopen` that the demo owner breaks on purpose (`--break`), for
/// conformance and hostile-owner tests only. Each names the check of `granary-reopen-check` that
/// must then fail, where there is one. GranaryOwner itself breaks none: ``HostileConversation``
/// says these things through its lower-level ``OwnerSession``.
enum BrokenRule: String, CaseIterable, Sendable {
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
    /// Answers each store's first HELLO correctly and every later one without its pid, so that a
    /// dry run sees a good owner and the restore after it a malformed answer.
    case dryRunDiffers = "dry-run-differs"
    /// Waits `--delay-ms` before every answer.
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

/// The owner's side of a conversation that breaks `rules` (GranaryOwner's own conversation, with
/// each broken rule where it applies): built on the channel and ``OwnerSession``, so that the
/// app's transactions, the pause state and the callbacks are still GranaryOwner's.
struct HostileConversation {
    let session: OwnerSession
    let rules: Set<BrokenRule>
    /// The delay of ``BrokenRule/slowAnswers``.
    let answerDelay: Duration

    /// Held around each conversation when ``BrokenRule/oneThread`` is broken: one for all stores.
    static let oneThread = NSLock()

    /// The owner made of `rules`: GranaryOwner with this conversation (and 64 KiB lines when
    /// ``BrokenRule/longLines`` is broken).
    static func owner(
        rules: Set<BrokenRule>, answerDelay: Duration, onEvent: @escaping @Sendable (GranaryOwner.Event) -> Void
    ) -> GranaryOwner {
        GranaryOwner(
            onEvent: onEvent, idleTimeout: ReopenProtocol.idleTimeout,
            maxLine: rules.contains(.longLines) ? 65536 : ReopenProtocol.maxLine,
            conversation: { session in
                HostileConversation(session: session, rules: rules, answerDelay: answerDelay).run()
            })
    }

    private var channel: ReopenChannel { session.channel }
    private func breaks(_ rule: BrokenRule) -> Bool { rules.contains(rule) }

    func run() {
        if breaks(.oneThread) { Self.oneThread.lock() }
        defer { if breaks(.oneThread) { Self.oneThread.unlock() } }
        converse()
    }

    /// The idle timeout (4 s later when ``BrokenRule/lateIdleClose`` is broken).
    private var idleTimeout: Duration { session.idleTimeout + (breaks(.lateIdleClose) ? .seconds(4) : .zero) }

    /// Sends an answer (after the delay of ``BrokenRule/slowAnswers``, or replaced by a huge line when
    /// ``BrokenRule/hugeAnswer`` is broken).
    @discardableResult
    private func answer(_ answer: ReopenAnswer) -> Bool {
        delay()
        if breaks(.hugeAnswer) { return channel.sendBytes(Array(repeating: UInt8(ascii: "x"), count: 1 << 20)) }
        return channel.send(answer.line)
    }

    private func delay() {
        if breaks(.slowAnswers) { sleep(answerDelay) }
    }

    /// Sends a refusal that ends the conversation, and closes gracefully.
    private func refuse(_ refusal: ReopenRefusal, _ why: String) {
        delay()
        channel.finish(with: refusal.line)
        session.report(.refused, why)
    }

    private func converse() {
        let peer = PeerCredentials.of(channel.fd)
        guard let peer, peer.uid == getuid() || peer.uid == 0 || breaks(.anyUID) else {
            refuse(
                .permissionDenied,
                "peer uid \(peer.map { String($0.uid) } ?? "unknown") is neither \(getuid()) nor root")
            return
        }
        let first: [UInt8]
        switch channel.readLine(until: .now + idleTimeout, stop: session.stop) {
        case .line(let line): first = line
        case .timedOut:
            session.report(.idle, "no HELLO within \(idleTimeout.milliseconds) ms")
            return
        case .closed, .overlong: return
        }
        let versions: [Int]
        if breaks(.lenientHello) {
            // Whitespace-split, leading zeros and signs taken: what the protocol refuses.
            let words = String(decoding: first, as: UTF8.self).split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard words.count >= 3, words[0] == "HELLO", words[1] == Substring(ReopenProtocol.name) else {
                refuse(.badHello, "bad greeting \(ReopenLine.describe(first))")
                return
            }
            versions = words[2...].compactMap { Int($0) }
        } else {
            guard case .success(.hello(let offered)) = ReopenRequest.parse(first) else {
                refuse(.badHello, "bad greeting \(ReopenLine.describe(first))")
                return
            }
            versions = offered
        }
        var version = ReopenProtocol.version
        if breaks(.anyVersion), let asked = versions.first {
            version = asked
        } else if !versions.contains(ReopenProtocol.version) {
            refuse(
                .unsupportedVersion(spoken: ReopenProtocol.versions),
                "client versions \(ReopenLine.describe(versions.map(String.init).joined(separator: ",")))")
            return
        }
        var greeting = ReopenAnswer.hello(version: version, pid: getpid()).line
        if breaks(.helloWithoutPID) || (breaks(.dryRunDiffers) && session.number > 1) {
            greeting = "HELLO \(ReopenProtocol.name) \(version)"
        }
        delay()
        if breaks(.hugeAnswer) {
            channel.sendBytes(Array(repeating: UInt8(ascii: "x"), count: 1 << 20))
        } else {
            channel.send(greeting)
        }

        while true {
            let idle: ContinuousClock.Instant? = breaks(.noIdleTimeout) ? nil : .now + idleTimeout
            let line: [UInt8]
            switch channel.readLine(until: idle, stop: session.stop) {
            case .line(let received): line = received
            case .timedOut:
                session.report(.idle, "no line for \(idleTimeout.milliseconds) ms")
                return
            case .closed, .overlong: return
            }
            switch ReopenRequest.parse(line) {
            case .success(.pause(let ms)):
                if breaks(.capLease) && ms > 60_000 {
                    answer(.error(.badLease))
                    continue
                }
                if !pause(lease: .milliseconds(ms)) { return }
            case .failure(.lease):
                if breaks(.lenientLease), let ms = Int(ReopenLine.words(line)?.last ?? "x"), ms >= 0 {
                    if !pause(lease: .milliseconds(ms)) { return }
                    continue
                }
                answer(.error(.badLease))
            case .success(.resume):
                answer(breaks(.refuseResumeWhenOpen) ? .error(.unknownCommand) : .resumed)
            case .success(.bye):
                if breaks(.byeLingers) {
                    // Waits for the client to close instead of closing at once.
                    while case .line = channel.readLine(until: nil, stop: session.stop) {}
                }
                return
            case .success(.error):
                if breaks(.ignoreClientError) {
                    answer(.error(.unknownCommand))
                    continue
                }
                return
            case .failure(.other) where breaks(.looseFirstWord) && looseFirstWord(line) == "PAUSE":
                answer(.error(.badLease))
            case .failure(.other) where breaks(.anyErrorEnds) && line.starts(with: Array("ERROR".utf8)):
                return
            case .success(.hello), .failure(.hello), .failure(.other):
                if !breaks(.ignoreUnknown) { answer(.error(.unknownCommand)) }
            }
        }
    }

    /// The first word as ``BrokenRule/looseFirstWord`` takes it: up to any space, tab or control byte.
    private func looseFirstWord(_ line: [UInt8]) -> String {
        String(decoding: line.prefix { $0 > 0x20 && $0 != 0x7F }, as: UTF8.self)
    }

    /// One pause. Returns false when the conversation is over.
    private func pause(lease: Duration) -> Bool {
        let leaseEnd = ContinuousClock.now + (breaks(.earlyExpiry) ? lease / 2 : lease)
        switch session.drain(until: leaseEnd, watchingPeer: !breaks(.ignoreGoneWhilePausing)) {
        case .drained: break
        case .leaseEnded:
            answer(.error(.busy))
            return true
        case .peerGone:
            session.report(.peerGone, "the connection closed while pausing; the pause was given up")
            return false
        }
        do {
            try session.closeStore()
        } catch {
            session.report(.callbackFailed, "close: \(error)")
            session.reopen(.callbackFailed)
            answer(.error(.closeFailed))
            return true
        }
        if !breaks(.skipDescriptorCheck), let left = StoreDescriptors.open(store: session.store), !left.isEmpty {
            session.report(
                .callbackFailed,
                "close left descriptor\(left.count == 1 ? "" : "s") \(left.map(String.init).joined(separator: ", ")) of the store open"
            )
            session.reopen(.callbackFailed)
            answer(.error(.closeFailed))
            return true
        }
        if ContinuousClock.now >= leaseEnd {
            session.report(.refused, "closing the store took the whole lease of \(lease.milliseconds) ms")
            session.reopen(.callbackFailed)
            answer(.error(.busy))
            return true
        }
        if !breaks(.ignoreGoneWhilePausing) && channel.peerHasClosed {
            session.reopen(.peerGone)
            return false
        }
        session.enterPaused()
        guard answer(.paused) else {
            if breaks(.ignoreGoneWhilePausing) { sleep(until: leaseEnd) }
            session.reopen(.peerGone)
            return false
        }
        session.report(.paused, "lease \(lease.milliseconds) ms")
        if breaks(.earlyResumed) {
            sleep(.milliseconds(50))
            session.reopen(.resumed)
            channel.send(ReopenAnswer.resumed.line)
            return true
        }
        if breaks(.earlyExpired) {
            sleep(.milliseconds(50))
            session.reopen(.leaseExpired)
            channel.send(ReopenAnswer.expired.line)
            return false
        }
        if breaks(.hangUpAfterPaused) {
            // The connection is closed first, then the store reopened: granary learns of it as late
            // as it can.
            shutdown(channel.fd, Int32(SHUT_RDWR))
            session.reopen(.peerGone)
            return false
        }
        while true {
            // The idle clock goes on running during the pause when idle-while-paused is broken.
            let idleEnd = breaks(.idleWhilePaused) ? min(leaseEnd, .now + idleTimeout) : leaseEnd
            switch channel.readLine(until: idleEnd, stop: session.stop) {
            case .timedOut where ContinuousClock.now < leaseEnd:
                session.report(.idle, "no line for \(idleTimeout.milliseconds) ms while paused")
                session.reopen(.peerGone)
                return false
            case .line(let line):
                switch ReopenRequest.parse(line) {
                case .success(.resume):
                    session.reopen(.resumed)
                    answer(.resumed)
                    return true
                case .success(.bye) where !breaks(.stayPausedOnBye),
                    .success(.error) where !breaks(.ignoreClientError):
                    session.reopen(.peerGone)
                    return false
                default:
                    answer(.error(.unexpectedWhilePaused))
                    if breaks(.anyLineEndsPause) {
                        session.reopen(.resumed)
                        return true
                    }
                }
            case .timedOut:
                let lock = breaks(.noCommitLock) ? nil : CommitLock(store: session.store)
                session.reopen(.leaseExpired)
                lock?.release()
                answer(.expired)
                return false
            case .closed, .overlong:
                if breaks(.stayPausedWhenGone) { sleep(until: leaseEnd) }
                session.reopen(.peerGone)
                return false
            }
        }
    }

    private func sleep(_ duration: Duration) {
        Thread.sleep(forTimeInterval: Double(duration.milliseconds) / 1000)
    }

    private func sleep(until instant: ContinuousClock.Instant) {
        let left = instant - ContinuousClock.now
        if left > .zero { sleep(left) }
    }
}

extension Duration {
    /// Whole milliseconds, rounded down.
    var milliseconds: Int64 {
        components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
    }
}
