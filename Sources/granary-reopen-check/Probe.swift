import Foundation
import GranaryOwner

#if canImport(Glibc)
    import Glibc
#endif

/// A check failed: what was sent and what came back, peer text escaped.
struct CheckFailure: Error {
    let detail: String
    init(_ detail: String) { self.detail = detail }
}

/// A check could not be run here (not root, /proc unreadable, one store only).
struct CheckSkipped: Error {
    let reason: String
    init(_ reason: String) { self.reason = reason }
}

/// One connection to the owner, as the checker makes it: raw lines out, strict answers in.
final class Probe {
    let channel: ReopenChannel
    let peer: PeerCredentials
    let timeout: Duration
    /// When the connection was made (the owner's idle clock starts no earlier).
    let opened: ContinuousClock.Instant

    private init(channel: ReopenChannel, peer: PeerCredentials, timeout: Duration) {
        self.channel = channel
        self.peer = peer
        self.timeout = timeout
        self.opened = .now
    }

    deinit { channel.close() }

    /// Connects to the owner at `address`, as `uid` when given (by switching the effective uid
    /// around connect(2), which is what SO_PEERCRED records; root only).
    static func open(_ address: ReopenAddress, timeout: Duration, asUID uid: UInt32? = nil) throws -> Probe {
        if let uid, seteuid(uid) != 0 {
            throw CheckFailure("cannot switch to uid \(uid): \(String(cString: strerror(errno)))")
        }
        defer { if uid != nil { _ = seteuid(0) } }
        let channel: ReopenChannel?
        do {
            channel = try ReopenChannel.connect(to: address)
        } catch {
            throw CheckFailure("\(error)")
        }
        guard let channel else {
            throw CheckFailure("nobody serves the reopen protocol for \(address.canonicalPath) (connection refused)")
        }
        guard let peer = PeerCredentials.of(channel.fd) else {
            throw CheckFailure("cannot read the owner's credentials (SO_PEERCRED)")
        }
        return Probe(channel: channel, peer: peer, timeout: timeout)
    }

    /// Sends a line (a line feed is added); bytes as given.
    func send(_ line: String) { channel.sendBytes(Array(line.utf8) + [0x0A]) }
    func send(bytes: [UInt8]) { channel.sendBytes(bytes + [0x0A]) }

    /// The next line, within `within` (default: the answer timeout).
    func read(within: Duration? = nil) -> ReopenChannel.Received {
        channel.readLine(until: .now + (within ?? timeout))
    }

    /// Sends `line` and reads the answer.
    func ask(_ line: String) -> ReopenChannel.Received {
        send(line)
        return read()
    }

    /// Sends `line` and requires `expected` as the answer.
    func expect(_ line: String, _ expected: ReopenAnswer) throws {
        try Self.require(ask(line), expected, after: ReopenLine.describe(line))
    }

    /// Sends the HELLO of version 1 and requires a well-formed answer choosing it.
    @discardableResult
    func hello() throws -> Int32 {
        let received = ask("HELLO granary-reopen 1")
        guard case .line(let line) = received, case .hello(1, let pid)? = ReopenAnswer.parse(line) else {
            throw CheckFailure(
                "HELLO granary-reopen 1 was answered \(Self.describe(received)); expected \"HELLO granary-reopen 1 <pid>\""
            )
        }
        return pid
    }

    /// Waits for the owner to close the connection, requiring that it sends nothing first.
    /// Returns when the connection closed.
    @discardableResult
    func expectClose(after what: String, within: Duration? = nil) throws -> ContinuousClock.Instant {
        switch read(within: within) {
        case .closed: return .now
        case .timedOut:
            throw CheckFailure(
                "the owner kept the connection open \(Self.milliseconds(within ?? timeout)) ms after \(what); it must close it"
            )
        case let other:
            throw CheckFailure(
                "after \(what) the owner sent \(Self.describe(other)); it must close the connection without a word")
        }
    }

    /// Whether the owner sent anything unasked (or closed), without waiting.
    func unasked() -> String? {
        guard channel.hasInput else { return nil }
        return Self.describe(channel.readLine(until: .now))
    }

    static func require(_ received: ReopenChannel.Received, _ expected: ReopenAnswer, after what: String) throws {
        if case .line(let line) = received, ReopenAnswer.parse(line) == expected { return }
        throw CheckFailure("\(what) was answered \(describe(received)); expected \"\(expected.line)\"")
    }

    static func describe(_ received: ReopenChannel.Received) -> String {
        switch received {
        case .line(let line): return ReopenLine.describe(line)
        case .overlong: return "a line over \(ReopenProtocol.maxLine) bytes"
        case .closed: return "nothing (it closed the connection)"
        case .timedOut: return "nothing (no answer in time)"
        }
    }

    static func milliseconds(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
    }
}
