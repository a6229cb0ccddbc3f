/// The reopen protocol's lines, read and written in one place for both sides
/// (`man 7 granary-reopen`, MESSAGES). Nothing else in this module splits or builds a line.
///
/// A line is at most ``ReopenProtocol/maxLine`` bytes including its line feed; one carriage
/// return right before the line feed is dropped; every other byte is printable ASCII
/// (0x20–0x7E); words are separated by exactly one space (so a leading, trailing or doubled
/// space, or an empty line, is malformed). Numbers are decimal, without sign or leading zero.
/// Which message a line is depends on who sent it: `HELLO granary-reopen 1 4242` is an owner's
/// answer, but from a client it would offer versions 1 and 4242. So a client's lines are
/// ``ReopenRequest``s and an owner's are ``ReopenAnswer``s.
public enum ReopenLine {
    /// The words of a received line (its bytes without the line feed); nil when it is not a
    /// line of the protocol (a byte outside printable ASCII, an empty word).
    public static func words(_ line: [UInt8]) -> [String]? {
        var bytes = line[...]
        if bytes.last == 0x0D { bytes = bytes.dropLast() }
        guard !bytes.isEmpty, bytes.allSatisfy({ $0 >= 0x20 && $0 <= 0x7E }) else { return nil }
        let words = bytes.split(separator: 0x20, omittingEmptySubsequences: false)
        guard !words.contains(where: \.isEmpty) else { return nil }
        return words.map { String(decoding: $0, as: UTF8.self) }
    }

    /// The first word of a line, which decides the refusal a malformed line gets (`man 7
    /// granary-reopen`, MESSAGES): once the one carriage return before the line feed is dropped,
    /// the bytes before the first space, or all of them when there is none. It is compared byte
    /// for byte, so a tab, a control byte or a second carriage return is part of it:
    /// `PAUSE\t100` and `PAUSE\r\r` have no first word `PAUSE` (unknown-command), while
    /// `PAUSE 100\t` has (bad-lease).
    static func firstWord(_ line: [UInt8]) -> [UInt8] {
        var bytes = line[...]
        if bytes.last == 0x0D { bytes = bytes.dropLast() }
        return Array(bytes.prefix { $0 != 0x20 })
    }

    /// A decimal number from 1 to `maximum`, written without sign or leading zero.
    static func number(_ word: String, maximum: Int) -> Int? {
        let digits = Array(word.utf8)
        guard let first = digits.first, first >= 0x31, first <= 0x39, digits.count <= String(maximum).count,
            digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let value = Int(word), value <= maximum
        else { return nil }
        return value
    }

    /// Versions as HELLO and `ERROR unsupported-version` list them: at least one, each at most once.
    static func versions(_ words: ArraySlice<String>) -> [Int]? {
        let versions = words.compactMap { number($0, maximum: ReopenProtocol.maxVersion) }
        guard !versions.isEmpty, versions.count == words.count, Set(versions).count == versions.count else {
            return nil
        }
        return versions
    }

    /// What a peer sent, fit for a message to a person: in double quotes, printable ASCII kept,
    /// `"` and `\` escaped, every other byte as `\xNN` (so no terminal control sequence, no
    /// newline and no invalid UTF-8 ever reaches a terminal or a log), cut after 60 bytes.
    public static func describe(_ line: [UInt8]) -> String {
        var text = "\""
        for byte in line.prefix(60) {
            switch byte {
            case 0x22: text += "\\\""
            case 0x5C: text += "\\\\"
            case 0x20...0x7E: text.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let hex = String(byte, radix: 16)
                text += "\\x" + (hex.count == 1 ? "0" : "") + hex
            }
        }
        text += "\""
        if line.count > 60 { text += "… (\(line.count) bytes)" }
        return text
    }

    /// ``describe(_:)`` of a string's UTF-8 bytes.
    public static func describe(_ text: String) -> String { describe(Array(text.utf8)) }
}

/// Why an owner refuses, the word after `ERROR` (version 1 has exactly these).
public enum ReopenRefusal: Equatable, Hashable, Sendable {
    /// The peer's uid is neither the owner's nor root.
    case permissionDenied
    /// The first line was not a well-formed HELLO.
    case badHello
    /// None of the client's versions; the owner lists the versions it speaks.
    case unsupportedVersion(spoken: [Int])
    /// A PAUSE whose lease is not a number from 1 to 3600000, or malformed.
    case badLease
    /// Running transactions did not finish within the lease (the store is open and running).
    case busy
    /// The application could not close the store, or a descriptor of it stayed open (it was reopened).
    case closeFailed
    /// A line other than RESUME or BYE while paused (the store stays paused).
    case unexpectedWhilePaused
    /// A line that is no message, or a message the owner does not take.
    case unknownCommand

    /// The reason word.
    public var word: String {
        switch self {
        case .permissionDenied: return "permission-denied"
        case .badHello: return "bad-hello"
        case .unsupportedVersion: return "unsupported-version"
        case .badLease: return "bad-lease"
        case .busy: return "busy"
        case .closeFailed: return "close-failed"
        case .unexpectedWhilePaused: return "unexpected-while-paused"
        case .unknownCommand: return "unknown-command"
        }
    }

    /// The ERROR line.
    public var line: String {
        if case .unsupportedVersion(let spoken) = self {
            return "ERROR unsupported-version " + spoken.map(String.init).joined(separator: " ")
        }
        return "ERROR " + word
    }

    /// The reason as a client reports it: the word, and for `unsupported-version` the versions
    /// the owner speaks next to the ones this build speaks.
    public var explanation: String {
        if case .unsupportedVersion(let spoken) = self {
            let theirs = spoken.map(String.init).joined(separator: ", ")
            let ours = ReopenProtocol.versions.map(String.init).joined(separator: ", ")
            return
                "unsupported-version (it speaks version\(spoken.count == 1 ? "" : "s") \(theirs) of the reopen protocol, granary \(ours))"
        }
        return word
    }

    /// Whether the owner closes the connection after sending this refusal.
    public var closesConnection: Bool {
        switch self {
        case .permissionDenied, .badHello, .unsupportedVersion: return true
        default: return false
        }
    }

    /// Parses the words of an ERROR line (including `ERROR`); nil when malformed.
    static func parse(_ words: [String]) -> ReopenRefusal? {
        guard words.count >= 2, words[0] == "ERROR" else { return nil }
        if words[1] == "unsupported-version" {
            return ReopenLine.versions(words[2...]).map { .unsupportedVersion(spoken: $0) }
        }
        guard words.count == 2 else { return nil }
        let simple: [ReopenRefusal] = [
            .permissionDenied, .badHello, .badLease, .busy, .closeFailed, .unexpectedWhilePaused, .unknownCommand,
        ]
        return simple.first { $0.word == words[1] }
    }
}

/// A line a client (granary) sends to an owner.
public enum ReopenRequest: Equatable, Sendable {
    /// `HELLO granary-reopen <version>...`: the first line, with the versions the client speaks.
    case hello(versions: [Int])
    /// `PAUSE <lease-ms>`.
    case pause(leaseMilliseconds: Int)
    /// `RESUME`.
    case resume
    /// `BYE`.
    case bye
    /// `ERROR <reason>`: the client gives up; the owner ends the conversation as on BYE.
    case error(ReopenRefusal)

    /// Why a client's line is not a request; the owner's refusal depends on it and on its state.
    public enum Malformed: Error, Equatable, Sendable {
        /// The first word is `HELLO` but the rest is not a HELLO.
        case hello
        /// The first word is `PAUSE` but the rest is not one lease from 1 to 3600000.
        case lease
        /// Anything else.
        case other
    }

    /// The line, without its line feed.
    public var line: String {
        switch self {
        case .hello(let versions):
            return "HELLO \(ReopenProtocol.name) " + versions.map(String.init).joined(separator: " ")
        case .pause(let ms): return "PAUSE \(ms)"
        case .resume: return "RESUME"
        case .bye: return "BYE"
        case .error(let refusal): return refusal.line
        }
    }

    /// Parses a received line (its bytes, without the line feed).
    public static func parse(_ line: [UInt8]) -> Result<ReopenRequest, Malformed> {
        let malformed: Malformed
        switch ReopenLine.firstWord(line) {
        case Array("HELLO".utf8): malformed = .hello
        case Array("PAUSE".utf8): malformed = .lease
        default: malformed = .other
        }
        guard let words = ReopenLine.words(line) else { return .failure(malformed) }
        switch words[0] {
        case "HELLO":
            guard words.count >= 3, words[1] == ReopenProtocol.name, let versions = ReopenLine.versions(words[2...])
            else {
                return .failure(.hello)
            }
            return .success(.hello(versions: versions))
        case "PAUSE":
            guard words.count == 2, let ms = ReopenLine.number(words[1], maximum: ReopenProtocol.maxLeaseMilliseconds)
            else {
                return .failure(.lease)
            }
            return .success(.pause(leaseMilliseconds: ms))
        case "RESUME" where words.count == 1: return .success(.resume)
        case "BYE" where words.count == 1: return .success(.bye)
        case "ERROR":
            return ReopenRefusal.parse(words).map { .success(.error($0)) } ?? .failure(.other)
        default: return .failure(.other)
        }
    }

    /// ``parse(_:)`` of a string's UTF-8 bytes.
    public static func parse(_ line: String) -> Result<ReopenRequest, Malformed> { parse(Array(line.utf8)) }
}

/// A line an owner sends to a client.
public enum ReopenAnswer: Equatable, Sendable {
    /// `HELLO granary-reopen <version> <pid>`: the version chosen and the owner's process id.
    case hello(version: Int, pid: Int32)
    /// `PAUSED`.
    case paused
    /// `RESUMED`.
    case resumed
    /// `EXPIRED`: the lease ran out; the owner reopened and closes the connection.
    case expired
    /// `ERROR <reason>`.
    case error(ReopenRefusal)

    /// The line, without its line feed.
    public var line: String {
        switch self {
        case .hello(let version, let pid): return "HELLO \(ReopenProtocol.name) \(version) \(pid)"
        case .paused: return "PAUSED"
        case .resumed: return "RESUMED"
        case .expired: return "EXPIRED"
        case .error(let refusal): return refusal.line
        }
    }

    /// Parses a received line (its bytes, without the line feed); nil when it is no answer.
    public static func parse(_ line: [UInt8]) -> ReopenAnswer? {
        guard let words = ReopenLine.words(line) else { return nil }
        switch (words[0], words.count) {
        case ("HELLO", 4):
            guard words[1] == ReopenProtocol.name,
                let version = ReopenLine.number(words[2], maximum: ReopenProtocol.maxVersion),
                let pid = ReopenLine.number(words[3], maximum: Int(Int32.max))
            else { return nil }
            return .hello(version: version, pid: Int32(pid))
        case ("PAUSED", 1): return .paused
        case ("RESUMED", 1): return .resumed
        case ("EXPIRED", 1): return .expired
        case ("ERROR", _): return ReopenRefusal.parse(words).map { .error($0) }
        default: return nil
        }
    }

    /// ``parse(_:)`` of a string's UTF-8 bytes.
    public static func parse(_ line: String) -> ReopenAnswer? { parse(Array(line.utf8)) }
}
