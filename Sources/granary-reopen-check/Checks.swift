import Foundation
import GranaryOwner

#if canImport(Glibc)
    import Glibc
#endif

/// The checks of `granary-reopen-check`, each a rule of `man 7 granary-reopen` tried against
/// whatever owner serves the stores. Every check opens its own connections and leaves the
/// owner open and idle (a paused owner is resumed, or its connection closed, before returning).
struct Conformance: Sendable {
    /// The stores, by canonical path (the first one is checked; all of them for `several-stores`).
    let stores: [ReopenAddress]
    /// The uid owning the first store's database file.
    let storeUID: UInt32
    /// How long an answer may take.
    let timeout: Duration

    var address: ReopenAddress { stores[0] }
    var store: String { address.canonicalPath }

    /// A check: its name, what it tries, and the trial.
    struct Check: Sendable {
        let name: String
        let summary: String
        let run: @Sendable (Conformance) throws -> String
    }

    static let all: [Check] = [
        Check(
            name: "credentials",
            summary:
                "the owner runs as the store's uid or root; as root: a peer of another uid gets ERROR permission-denied and nothing else",
            run: { try $0.credentials() }),
        Check(
            name: "handshake",
            summary: "HELLO granary-reopen 1 is answered HELLO granary-reopen 1 <pid> (also with CR LF)",
            run: { try $0.handshake() }),
        Check(
            name: "versions",
            summary:
                "version 1 is chosen among others; a HELLO without it gets ERROR unsupported-version 1 and the connection closes",
            run: { try $0.versions() }),
        Check(
            name: "bad-hello", summary: "every malformed first line gets ERROR bad-hello and the connection closes",
            run: { try $0.badHello() }),
        Check(
            name: "unknown-command",
            summary:
                "every malformed line after HELLO (a first word other than PAUSE, byte for byte; a client's ERROR with an unknown reason) gets ERROR unknown-command; the connection and the store stay open",
            run: { try $0.unknownCommand() }),
        Check(
            name: "bad-lease", summary: "every malformed PAUSE gets ERROR bad-lease; the store stays open",
            run: { try $0.badLease() }),
        Check(
            name: "lease-bounds", summary: "PAUSE 3600000 is taken; PAUSE 1 gets PAUSED then EXPIRED, or ERROR busy",
            run: { try $0.leaseBounds() }),
        Check(
            name: "resume-when-open", summary: "RESUME when not paused is answered RESUMED at once, again and again",
            run: { try $0.resumeWhenOpen() }),
        Check(
            name: "restore-conversations",
            summary:
                "granary's conversations: HELLO then BYE; HELLO then PAUSE on one connection; BYE, then at once a new connection that pauses",
            run: { try $0.restoreConversations() }),
        Check(
            name: "pause-resume",
            summary:
                "PAUSE gets PAUSED with no descriptor of the store left open and nothing sent unasked; RESUME gets RESUMED within the timeout (an owner silent after RESUME fails)",
            run: { try $0.pauseResume() }),
        Check(
            name: "paused-untouched",
            summary:
                "while paused the store's database, -wal, -shm and -journal are neither written, created nor removed",
            run: { try $0.pausedUntouched() }),
        Check(
            name: "swap-untouched",
            summary:
                "while paused, a new file renamed onto the store's path (as granary's swap does) is neither opened nor written before RESUME, and RESUME gets RESUMED",
            run: { try $0.swapUntouched() }),
        Check(
            name: "while-paused",
            summary:
                "while paused, every line but RESUME and BYE gets ERROR unexpected-while-paused and the store stays paused",
            run: { try $0.whilePaused() }),
        Check(
            name: "bye", summary: "BYE ends the conversation without a word, open or paused; a paused store reopens",
            run: { try $0.bye() }),
        Check(
            name: "client-error", summary: "an ERROR line from the client ends the conversation like BYE",
            run: { try $0.clientError() }),
        Check(
            name: "peer-gone", summary: "a paused store reopens as soon as the client's connection closes",
            run: { try $0.peerGone() }),
        Check(
            name: "gone-while-pausing",
            summary:
                "a connection closed right after PAUSE, before PAUSED, ends the pause at once: the next conversation pauses",
            run: { try $0.goneWhilePausing() }),
        Check(
            name: "expire", summary: "EXPIRED comes no sooner than the lease after PAUSE, and the connection closes",
            run: { try $0.expire() }),
        Check(
            name: "commit-lock",
            summary:
                "at the lease's end the owner waits for the commit lock (flock of the store's folder) before reopening",
            run: { try $0.commitLock() }),
        Check(
            name: "overlong-line",
            summary: "a 1024-byte line is answered; a longer one closes the connection without an answer",
            run: { try $0.overlongLine() }),
        Check(
            name: "idle-timeout",
            summary:
                "a connection quiet for 10 s with the store open is closed within 12 s, not sooner: before HELLO, and counted from RESUMED after a pause of 13 s, which it survives",
            run: { try $0.idleTimeout() }),
        Check(
            name: "file-owners",
            summary:
                "the store's -wal, -shm and -journal belong to the uid that owns its database file, as granary requires",
            run: { try $0.fileOwners() }),
        Check(
            name: "several-stores",
            summary: "with one store paused, another store of the same owner still answers and pauses",
            run: { try $0.severalStores() }),
    ]

    private func open(asUID uid: UInt32? = nil) throws -> Probe {
        try Probe.open(address, timeout: timeout, asUID: uid)
    }

    /// A new conversation that pauses and resumes: the store was open and the owner serves.
    private func pausesAndResumes(_ context: String) throws {
        let probe = try open()
        do {
            try probe.hello()
            try probe.expect("PAUSE 30000", .paused)
            try probe.expect("RESUME", .resumed)
            probe.send("BYE")
        } catch let failure as CheckFailure {
            throw CheckFailure("\(context), a new conversation failed: \(failure.detail)")
        }
    }

    /// The owner's descriptors of the store (nil: /proc/<pid>/fd cannot be read here).
    private func descriptors(_ probe: Probe) -> [Int32]? {
        probe.peer.pid > 0 ? StoreDescriptors.open(in: probe.peer.pid, store: store) : nil
    }

    private func ms(_ duration: Duration) -> String {
        String(
            format: "%.1f ms",
            Double(duration.components.attoseconds) / 1e15 + Double(duration.components.seconds) * 1000)
    }

    // MARK: Checks

    func credentials() throws -> String {
        let probe = try open()
        guard probe.peer.uid == storeUID || probe.peer.uid == 0 else {
            throw CheckFailure(
                "the owner (pid \(probe.peer.pid)) runs as uid \(probe.peer.uid), but the store belongs to uid \(storeUID): granary refuses an owner that is neither"
            )
        }
        try probe.hello()
        probe.send("BYE")
        var detail = "the owner runs as uid \(probe.peer.uid) (the store's is \(storeUID))"
        guard geteuid() == 0 else {
            return detail + "; not root, so a peer of another uid was not tried"
        }
        let stranger: UInt32 = [65534, 65533, 65532].first { $0 != probe.peer.uid && $0 != storeUID }!
        let other = try open(asUID: stranger)
        // Everything at once: the owner must act on none of it.
        other.send("HELLO granary-reopen 1")
        other.send("PAUSE 30000")
        try Probe.require(other.read(), .error(.permissionDenied), after: "a connection from uid \(stranger)")
        try other.expectClose(after: "ERROR permission-denied")
        try pausesAndResumes("after refusing uid \(stranger)")
        detail += "; uid \(stranger) got ERROR permission-denied and nothing else"
        return detail
    }

    func handshake() throws -> String {
        let probe = try open()
        let start = ContinuousClock.now
        let pid = try probe.hello()
        let took = ContinuousClock.now - start
        probe.send("BYE")
        let crlf = try open()
        try Self.requireHello(crlf.ask("HELLO granary-reopen 1\r"), after: "HELLO granary-reopen 1 with CR LF")
        crlf.send("BYE")
        var detail = "answered in \(ms(took)): pid \(pid)"
        if pid != probe.peer.pid { detail += " (SO_PEERCRED says \(probe.peer.pid): another pid namespace?)" }
        return detail
    }

    private static func requireHello(_ received: ReopenChannel.Received, after what: String) throws {
        guard case .line(let line) = received, case .hello(1, _)? = ReopenAnswer.parse(line) else {
            throw CheckFailure(
                "\(what) was answered \(Probe.describe(received)); expected \"HELLO granary-reopen 1 <pid>\"")
        }
    }

    func versions() throws -> String {
        for offer in ["999999999 1", "1 999999999", "2 1"] {
            let probe = try open()
            try Self.requireHello(probe.ask("HELLO granary-reopen " + offer), after: "HELLO granary-reopen \(offer)")
            probe.send("BYE")
        }
        let probe = try open()
        let received = probe.ask("HELLO granary-reopen 999999999")
        guard case .line(let line) = received, case .error(.unsupportedVersion(let spoken))? = ReopenAnswer.parse(line),
            spoken.contains(1), !spoken.contains(999_999_999)
        else {
            throw CheckFailure(
                "HELLO granary-reopen 999999999 was answered \(Probe.describe(received)); expected \"ERROR unsupported-version 1\""
            )
        }
        try probe.expectClose(after: ReopenLine.describe(line))
        return
            "1 chosen from \"999999999 1\", \"1 999999999\" and \"2 1\"; \(ReopenLine.describe(line)) to 999999999 alone, then closed"
    }

    /// First lines that are no HELLO.
    static let badHellos: [[UInt8]] =
        [
            "", "HELLO", "HELLO granary-reopen", "HELLO granary-reopen ", "HELLO  granary-reopen 1",
            " HELLO granary-reopen 1",
            "HELLO granary-reopen 1 ", "HELLO granary-reopen  1", "hello granary-reopen 1", "HELLO Granary-reopen 1",
            "HELLO other 1", "HELLO granary-reopen 01", "HELLO granary-reopen +1", "HELLO granary-reopen -1",
            "HELLO granary-reopen 0",
            "HELLO granary-reopen x", "HELLO granary-reopen 1.0", "HELLO granary-reopen 1 1",
            "HELLO granary-reopen 1000000000",
            "HELLO granary-reopen\t1", "HELLO granary-reopen 1\r\r", "HELLO granary-reopen 1 é", "PAUSE 30000",
            "RESUME", "BYE",
            "ERROR busy",
        ].map { Array($0.utf8) } + [
            Array("HELLO granary-reopen 1".utf8) + [0], Array("HELLO granary-reopen 1".utf8) + [0x7F],
            [0x1B, 0x5B, 0x32, 0x4A],
        ]

    func badHello() throws -> String {
        for line in Self.badHellos {
            let probe = try open()
            probe.send(bytes: line)
            try Probe.require(probe.read(), .error(.badHello), after: "the first line \(ReopenLine.describe(line))")
            try probe.expectClose(after: "ERROR bad-hello")
        }
        return "\(Self.badHellos.count) malformed first lines refused, each connection closed"
    }

    /// Lines after HELLO that are no message.
    static let unknownCommands: [[UInt8]] =
        [
            "", " ", "RESUME now", "RESUME ", " RESUME", "resume", "BYE x", "BYE ", "bye", "PAUSED", "RESUMED",
            "EXPIRED",
            "HELLO granary-reopen 1", "HELLO", "ERROR", "ERROR nonsense", "ERROR busy x", "FOO", "RESUME\t", "RÉSUMÉ",
            "pause 100",
            // The first word is the bytes before the first space: with a tab or a control byte in
            // it, or a second CR after it, it is not PAUSE.
            "PAUSE\t100", "\tPAUSE 100", "PAUSE\r\r", "PAUSE\u{0} 100", "PAUSE\u{1B} 100",
        ].map { Array($0.utf8) } + [[0x01], [0xFF, 0xFE], Array("RESUME".utf8) + [0x1B]]

    func unknownCommand() throws -> String {
        let probe = try open()
        try probe.hello()
        for line in Self.unknownCommands {
            probe.send(bytes: line)
            try Probe.require(probe.read(), .error(.unknownCommand), after: "the line \(ReopenLine.describe(line))")
        }
        try probe.expect("PAUSE 30000", .paused)
        try probe.expect("RESUME", .resumed)
        probe.send("BYE")
        return "\(Self.unknownCommands.count) lines refused on one connection, which stayed open with the store open"
    }

    /// PAUSE lines whose lease is not one number from 1 to 3600000.
    static let badLeases: [String] = [
        "PAUSE", "PAUSE ", "PAUSE  100", "PAUSE 100 ", "PAUSE 0", "PAUSE 00", "PAUSE 0100", "PAUSE +5", "PAUSE -5",
        "PAUSE 1.5",
        "PAUSE 1e3", "PAUSE 0x10", "PAUSE x", "PAUSE 5 5", "PAUSE 3600001", "PAUSE 9999999",
        "PAUSE 99999999999999999999",
        // The first word is PAUSE; what follows is malformed.
        "PAUSE 100\t", "PAUSE 100\r\r", "PAUSE 1\u{0}", "PAUSE \t100",
    ]

    func badLease() throws -> String {
        let probe = try open()
        try probe.hello()
        for line in Self.badLeases {
            let received = probe.ask(line)
            if case .line(let answer) = received, ReopenAnswer.parse(answer) == .paused {
                _ = probe.ask("RESUME")
                throw CheckFailure("\(ReopenLine.describe(line)) paused the store; expected \"ERROR bad-lease\"")
            }
            try Probe.require(received, .error(.badLease), after: ReopenLine.describe(line))
        }
        try probe.expect("PAUSE 30000", .paused)
        try probe.expect("RESUME", .resumed)
        probe.send("BYE")
        return "\(Self.badLeases.count) malformed leases refused; the store stayed open"
    }

    func leaseBounds() throws -> String {
        let probe = try open()
        try probe.hello()
        try probe.expect("PAUSE 3600000", .paused)
        try probe.expect("RESUME", .resumed)
        let received = probe.ask("PAUSE 1")
        guard case .line(let line) = received, let answer = ReopenAnswer.parse(line) else {
            throw CheckFailure(
                "PAUSE 1 was answered \(Probe.describe(received)); expected PAUSED (then EXPIRED) or ERROR busy")
        }
        switch answer {
        case .error(.busy):
            try probe.expect("RESUME", .resumed)
            probe.send("BYE")
            return "PAUSE 3600000 taken; PAUSE 1 refused with ERROR busy (the lease ran out while closing)"
        case .paused:
            try Probe.require(probe.read(), .expired, after: "PAUSED to PAUSE 1")
            try probe.expectClose(after: "EXPIRED")
            try pausesAndResumes("after the 1 ms lease expired")
            return "PAUSE 3600000 taken; PAUSE 1 paused and expired"
        default:
            throw CheckFailure(
                "PAUSE 1 was answered \(ReopenLine.describe(line)); expected PAUSED (then EXPIRED) or ERROR busy")
        }
    }

    func resumeWhenOpen() throws -> String {
        let probe = try open()
        try probe.hello()
        try probe.expect("RESUME", .resumed)
        try probe.expect("RESUME", .resumed)
        try probe.expect("PAUSE 30000", .paused)
        try probe.expect("RESUME", .resumed)
        try probe.expect("RESUME", .resumed)
        probe.send("BYE")
        return "RESUMED to RESUME before a pause, after it, and twice in a row"
    }

    func pauseResume() throws -> String {
        let probe = try open()
        try probe.hello()
        let sent = ContinuousClock.now
        try probe.expect("PAUSE 30000", .paused)
        let paused = ContinuousClock.now
        // Give a misbehaving owner a moment to show itself.
        usleep(200_000)
        if let unasked = probe.unasked() {
            throw CheckFailure("while paused the owner sent \(unasked) before RESUME")
        }
        var checked = "no descriptor of the store open"
        if let open = descriptors(probe) {
            if !open.isEmpty {
                probe.send("RESUME")
                throw CheckFailure(
                    "after PAUSED the owner (pid \(probe.peer.pid)) still has descriptor\(open.count == 1 ? "" : "s") \(open.map(String.init).joined(separator: ", ")) of the store open"
                )
            }
        } else {
            checked = "its descriptors could not be read (/proc/\(probe.peer.pid)/fd)"
        }
        let resumeSent = ContinuousClock.now
        try probe.expect("RESUME", .resumed)
        let resumed = ContinuousClock.now
        probe.send("BYE")
        return "PAUSED after \(ms(paused - sent)) with \(checked); RESUMED \(ms(resumed - resumeSent)) after RESUME"
    }

    /// Lines that a paused owner must refuse without resuming.
    static let pausedLines = [
        "PAUSE 30000", "PAUSE 100", "PAUSE x", "HELLO granary-reopen 1", "RESUME now", "BYE x", "FOO", "PAUSED", "",
        // A client's ERROR with a reason the protocol does not have is no ERROR: it does not end the pause.
        "ERROR", "ERROR nonsense", "ERROR busy x",
    ]

    func whilePaused() throws -> String {
        let probe = try open()
        try probe.hello()
        try probe.expect("PAUSE 30000", .paused)
        for line in Self.pausedLines {
            try probe.expect(line, .error(.unexpectedWhilePaused))
        }
        if let open = descriptors(probe), !open.isEmpty {
            probe.send("RESUME")
            throw CheckFailure(
                "the store was reopened by a line other than RESUME (descriptors \(open.map(String.init).joined(separator: ", ")))"
            )
        }
        if let unasked = probe.unasked() { throw CheckFailure("while paused the owner sent \(unasked) unasked") }
        try probe.expect("RESUME", .resumed)
        probe.send("BYE")
        return "\(Self.pausedLines.count) lines refused while paused; the store stayed paused until RESUME"
    }

    func bye() throws -> String {
        let open1 = try open()
        try open1.hello()
        open1.send("BYE")
        try open1.expectClose(after: "BYE")
        let paused = try open()
        try paused.hello()
        try paused.expect("PAUSE 30000", .paused)
        paused.send("BYE")
        try paused.expectClose(after: "BYE while paused")
        try pausesAndResumes("after BYE while paused")
        return "closed without a word after BYE, open and paused; the paused store reopened"
    }

    func clientError() throws -> String {
        let open1 = try open()
        try open1.hello()
        open1.send("ERROR busy")
        try open1.expectClose(after: "ERROR busy from the client")
        let paused = try open()
        try paused.hello()
        try paused.expect("PAUSE 30000", .paused)
        paused.send("ERROR unknown-command")
        try paused.expectClose(after: "ERROR unknown-command from the client while paused")
        try pausesAndResumes("after the client's ERROR while paused")
        return "closed without a word, open and paused; the paused store reopened"
    }

    func peerGone() throws -> String {
        let probe = try open()
        try probe.hello()
        // A lease well past the answer timeout: an owner that waits for it fails the check.
        try probe.expect("PAUSE \(max(15000, Probe.milliseconds(timeout * 3)))", .paused)
        probe.channel.close()
        try pausesAndResumes("after the paused connection closed")
        return "the store reopened when the paused connection closed"
    }

    func expire() throws -> String {
        let probe = try open()
        try probe.hello()
        let sent = ContinuousClock.now
        try probe.expect("PAUSE 1000", .paused)
        let received = probe.read(within: .milliseconds(1000) + timeout)
        let at = ContinuousClock.now - sent
        try Probe.require(received, .expired, after: "the lease of 1000 ms")
        if at < .milliseconds(1000) {
            throw CheckFailure("EXPIRED came \(ms(at)) after PAUSE 1000: before the lease ran out")
        }
        try probe.expectClose(after: "EXPIRED")
        try pausesAndResumes("after EXPIRED")
        return "EXPIRED \(ms(at)) after PAUSE 1000, then closed"
    }

    func commitLock() throws -> String {
        let probe = try open()
        try probe.hello()
        let sent = ContinuousClock.now
        try probe.expect("PAUSE 1000", .paused)
        guard let lock = CommitLock(store: store) else {
            throw CheckSkipped("cannot open the store's folder to take the commit lock")
        }
        // Hold it a second past the lease: the owner must not reopen meanwhile.
        let received = probe.channel.readLine(until: sent + .milliseconds(2000))
        let open = descriptors(probe)
        lock.release()
        if received != .timedOut {
            throw CheckFailure(
                "while the commit lock was held past the lease the owner sent \(Probe.describe(received)); it must wait for the lock before reopening"
            )
        }
        if let open, !open.isEmpty {
            throw CheckFailure(
                "the owner reopened the store (descriptors \(open.map(String.init).joined(separator: ", "))) while the commit lock was held"
            )
        }
        try Probe.require(probe.read(), .expired, after: "releasing the commit lock")
        try probe.expectClose(after: "EXPIRED")
        return "no reopening while the lock was held 1 s past the lease; EXPIRED once released"
    }

    func overlongLine() throws -> String {
        let probe = try open()
        try probe.hello()
        let longest = [UInt8](repeating: UInt8(ascii: "X"), count: ReopenProtocol.maxLine - 1)
        probe.send(bytes: longest)
        try Probe.require(probe.read(), .error(.unknownCommand), after: "a line of \(ReopenProtocol.maxLine) bytes")
        probe.send(bytes: longest + [UInt8(ascii: "X")])
        try probe.expectClose(after: "a line of \(ReopenProtocol.maxLine + 1) bytes")
        let first = try open()
        first.channel.sendBytes([UInt8](repeating: UInt8(ascii: "H"), count: 2000))
        try first.expectClose(after: "a first line of 2000 bytes")
        try pausesAndResumes("after the overlong lines")
        return
            "a \(ReopenProtocol.maxLine)-byte line answered; \(ReopenProtocol.maxLine + 1) bytes, and 2000 before HELLO, closed the connection"
    }

    func idleTimeout() throws -> String {
        let limit = ReopenProtocol.idleTimeout
        // The page's bound, and half a second for the checker's own scheduling.
        let latest = ReopenProtocol.idleCloseLimit + .milliseconds(500)
        let before = try open()
        let closedBefore = try before.expectClose(
            after: "\(Probe.milliseconds(latest)) ms of silence before HELLO", within: latest)
        if closedBefore - before.opened < limit - .milliseconds(100) {
            throw CheckFailure(
                "the owner closed a silent connection after \(ms(closedBefore - before.opened)): sooner than \(Probe.milliseconds(limit)) ms"
            )
        }
        // A pause longer than the latest an idle connection may be closed (the page's 13 s): the
        // clock does not run while paused, and starts again once RESUME is answered. An owner
        // whose idle clock runs on while paused closes by 12 s and fails here.
        let hold = Self.idlePause
        let lease = hold + .milliseconds(3000)
        let paused = try open()
        try paused.hello()
        let pauseSent = ContinuousClock.now
        try paused.expect("PAUSE \(Probe.milliseconds(lease))", .paused)
        let during = paused.channel.readLine(until: pauseSent + hold)
        if during != .timedOut {
            throw CheckFailure(
                "\(ms(ContinuousClock.now - pauseSent)) into a pause of \(Probe.milliseconds(lease)) ms the owner sent \(Probe.describe(during)); the idle timeout does not run while the store is paused"
            )
        }
        try paused.expect("RESUME", .resumed)
        let resumed = ContinuousClock.now
        let closed = try paused.expectClose(
            after: "RESUMED and \(Probe.milliseconds(latest)) ms of silence", within: latest)
        if closed - resumed < limit - .milliseconds(100) {
            throw CheckFailure(
                "the owner closed the connection \(ms(closed - resumed)) after RESUMED: sooner than \(Probe.milliseconds(limit)) ms"
            )
        }
        return
            "closed \(ms(closedBefore - before.opened)) after connecting; a pause of \(ms(resumed - pauseSent)) survived, then closed \(ms(closed - resumed)) after RESUMED"
    }

    /// How long the idle-timeout check holds a pause: the page's 13 s, a second past the latest an
    /// owner may close an idle connection (``ReopenProtocol/idleCloseLimit``).
    static let idlePause: Duration = ReopenProtocol.idleCloseLimit + .seconds(1)

    /// A swap done as granary does it, while paused: a byte-for-byte copy of the database renamed
    /// onto the store's path. The owner must not open or write the new file before RESUME (a
    /// write there is one granary cannot let pass unseen). Skipped when a `-wal` with frames or a
    /// `-journal` is there while paused (the copy would not be the whole store).
    func swapUntouched() throws -> String {
        let probe = try open()
        try probe.hello()
        try probe.expect("PAUSE 30000", .paused)
        var resumed = false
        defer { if !resumed { _ = probe.ask("RESUME"); probe.send("BYE") } }
        var info = stat()
        guard stat(store, &info) == 0 else { throw CheckFailure("cannot stat \(store)") }
        var companion = stat()
        if (stat(store + "-wal", &companion) == 0 && companion.st_size > 0) || stat(store + "-journal", &companion) == 0
        {
            throw CheckSkipped(
                "a -wal with frames or a -journal is there while paused: the store cannot be copied whole")
        }
        let copy = store + ".granary-reopen-check"
        guard FileManager.default.createFile(atPath: copy, contents: FileManager.default.contents(atPath: store)),
            chmod(copy, info.st_mode & 0o7777) == 0
        else {
            unlink(copy)
            throw CheckSkipped("cannot write a copy of the store beside it (\(copy))")
        }
        _ = chown(copy, info.st_uid, info.st_gid)
        guard rename(copy, store) == 0 else {
            unlink(copy)
            throw CheckSkipped("cannot rename a copy onto the store: \(String(cString: strerror(errno)))")
        }
        let first = filesState()
        usleep(1_000_000)
        let second = filesState()
        let holders = descriptors(probe)
        let unasked = probe.unasked()
        let answer = probe.ask("RESUME")
        resumed = true
        probe.send("BYE")
        if first != second {
            let changed = Set(first.keys).union(second.keys).sorted().filter { first[$0] != second[$0] }.map {
                first[$0] == nil ? "\($0) appeared" : second[$0] == nil ? "\($0) was removed" : "\($0) was written"
            }
            throw CheckFailure(
                "after a new file was renamed onto the store while paused, before RESUME, \(changed.joined(separator: ", ")); the owner must not open or write the store until RESUME"
            )
        }
        if let holders, !holders.isEmpty {
            throw CheckFailure(
                "after a new file was renamed onto the store while paused, the owner opened it before RESUME (descriptors \(holders.map(String.init).joined(separator: ", ")))"
            )
        }
        if let unasked { throw CheckFailure("while paused the owner sent \(unasked) unasked") }
        try Probe.require(answer, .resumed, after: "RESUME")
        return "a new file renamed onto the store was left alone for 1 s of pause; RESUME got RESUMED"
    }

    /// The conversations a restore has with an owner (`man 7 granary-reopen`, WHAT GRANARY DOES),
    /// each answered within the timeout.
    func restoreConversations() throws -> String {
        // A dry run, or a store restored without the owner: HELLO, BYE.
        let plan = try open()
        try plan.hello()
        plan.send("BYE")
        try plan.expectClose(after: "HELLO then BYE")
        // A restore that pauses at once: one connection.
        let one = try open()
        try one.hello()
        try one.expect("PAUSE 30000", .paused)
        try one.expect("RESUME", .resumed)
        one.send("BYE")
        try one.expectClose(after: "BYE after RESUMED")
        // A planning connection that went quiet: BYE, and a new connection at once, while the
        // first is still open on the client's side (the owner closes it on BYE).
        let quiet = try open()
        try quiet.hello()
        quiet.send("BYE")
        do {
            let again = try open()
            try again.hello()
            try again.expect("PAUSE 30000", .paused)
            try again.expect("RESUME", .resumed)
            again.send("BYE")
        } catch let failure as CheckFailure {
            throw CheckFailure("after BYE on a planning connection, a new connection at once: \(failure.detail)")
        }
        withExtendedLifetime(quiet) {}
        return "HELLO/BYE, HELLO/PAUSE/RESUME/BYE, and BYE then a new connection that paused at once: all answered"
    }

    /// What the store's files look like: identity, size and times of each that exists.
    private func filesState() -> [String: [Int64]] {
        var state: [String: [Int64]] = [:]
        for suffix in ["", "-wal", "-shm", "-journal"] {
            var info = stat()
            if lstat(store + suffix, &info) == 0 {
                state[suffix.isEmpty ? "database" : suffix] = [
                    Int64(info.st_dev), Int64(info.st_ino), Int64(info.st_size), Int64(info.st_mtim.tv_sec),
                    Int64(info.st_mtim.tv_nsec), Int64(info.st_ctim.tv_sec), Int64(info.st_ctim.tv_nsec),
                ]
            }
        }
        return state
    }

    func pausedUntouched() throws -> String {
        let probe = try open()
        try probe.hello()
        try probe.expect("PAUSE 30000", .paused)
        let first = filesState()
        usleep(1_000_000)
        let second = filesState()
        let unasked = probe.unasked()
        let resumed = probe.ask("RESUME")
        probe.send("BYE")
        if first != second {
            let changed = Set(first.keys).union(second.keys).sorted().filter { first[$0] != second[$0] }.map {
                first[$0] == nil ? "\($0) appeared" : second[$0] == nil ? "\($0) was removed" : "\($0) was written"
            }
            throw CheckFailure(
                "while the store was paused (1 s after PAUSED) \(changed.joined(separator: ", ")); the owner must not open or write the store while paused"
            )
        }
        if let unasked { throw CheckFailure("while paused the owner sent \(unasked) unasked") }
        try Probe.require(resumed, .resumed, after: "RESUME")
        return "nothing changed in 1 s of pause: \(first.keys.sorted().joined(separator: ", "))"
    }

    func goneWhilePausing() throws -> String {
        // PAUSE and the end of the connection together: the owner is pausing when it sees the end.
        let lease = max(15000, Probe.milliseconds(timeout * 3))
        // Time for the owner to reach its pause before the next conversation begins: on a loaded
        // machine it may not have read PAUSE yet, and a conversation begun before would pause
        // and resume whatever the owner then does with the closed one.
        let settle = min(Probe.milliseconds(timeout) / 2, 1000)
        var proven = 0
        var tries = 0
        while proven < 2 && tries < 6 {
            tries += 1
            let probe = try open()
            try probe.hello()
            probe.channel.sendBytes(Array("PAUSE \(lease)\n".utf8))
            // An owner that answered before the connection ended was not pausing when it ended:
            // that try proves nothing of this rule (the next one may).
            var ready = pollfd(fd: probe.channel.fd, events: Int16(POLLIN), revents: 0)
            let answered = poll(&ready, 1, 0) > 0
            probe.channel.close()
            usleep(UInt32(max(settle, 1)) * 1000)
            try pausesAndResumes("after a connection closed right after PAUSE \(lease)")
            if !answered { proven += 1 }
        }
        guard proven > 0 else {
            throw CheckSkipped(
                "in \(tries) tries the owner answered PAUSED before the connection could end; the rule could not be tried"
            )
        }
        return
            "the next conversation paused and resumed at once (the lease of \(lease) ms was given up), \(proven) time\(proven == 1 ? "" : "s")"
    }

    func fileOwners() throws -> String {
        var info = stat()
        guard stat(store, &info) == 0 else { throw CheckFailure("cannot stat \(store)") }
        // A pause and a resume first, so that the files are the ones the owner makes on reopening.
        try pausesAndResumes("before looking at the files")
        usleep(500_000)
        var seen: [String] = []
        for suffix in ["-wal", "-shm", "-journal"] {
            var companion = stat()
            guard lstat(store + suffix, &companion) == 0 else { continue }
            seen.append(suffix)
            if companion.st_uid != info.st_uid {
                throw CheckFailure(
                    "\(store + suffix) belongs to uid \(companion.st_uid), but the database to uid \(info.st_uid): granary refuses a store whose companions another uid owns (exit 65); an owner running as root must give them the database's owner (fchown)"
                )
            }
        }
        if seen.isEmpty { return "no -wal, -shm or -journal beside the store just now; nothing to compare" }
        return "\(seen.joined(separator: ", ")) belong to uid \(info.st_uid), like the database"
    }

    func severalStores() throws -> String {
        guard stores.count >= 2 else {
            throw CheckSkipped(
                "give two or more stores of the owner to check that a paused one does not hold up another")
        }
        let first = try open()
        try first.hello()
        try first.expect("PAUSE 30000", .paused)
        for other in stores.dropFirst() {
            do {
                let probe = try Probe.open(other, timeout: timeout)
                try probe.hello()
                try probe.expect("PAUSE 30000", .paused)
                try probe.expect("RESUME", .resumed)
                probe.send("BYE")
            } catch let failure as CheckFailure {
                _ = first.ask("RESUME")
                throw CheckFailure("with \(store) paused, \(other.canonicalPath): \(failure.detail)")
            }
        }
        try first.expect("RESUME", .resumed)
        first.send("BYE")
        return
            "with the first store paused, \(stores.count - 1) other store\(stores.count == 2 ? "" : "s") answered, paused and resumed"
    }
}
