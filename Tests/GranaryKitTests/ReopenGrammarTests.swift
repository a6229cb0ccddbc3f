import GranaryOwner
import Testing

/// Every line of the reopen protocol's grammar (man 7 granary-reopen, MESSAGES), accepted and
/// refused, through the one parser both GranaryOwner and granary's client use.
@Suite("reopen protocol grammar")
struct ReopenGrammarTests {
    /// A line as received (without its line feed) and what an owner must make of it.
    struct RequestCase: CustomTestStringConvertible, Sendable {
        let bytes: [UInt8]
        let expected: Result<ReopenRequest, ReopenRequest.Malformed>
        init(_ line: String, _ expected: Result<ReopenRequest, ReopenRequest.Malformed>) {
            self.bytes = Array(line.utf8)
            self.expected = expected
        }
        init(bytes: [UInt8], _ expected: Result<ReopenRequest, ReopenRequest.Malformed>) {
            self.bytes = bytes
            self.expected = expected
        }
        var testDescription: String { ReopenLine.describe(bytes) }
    }

    static let requests: [RequestCase] = [
        // HELLO: accepted.
        .init("HELLO granary-reopen 1", .success(.hello(versions: [1]))),
        .init("HELLO granary-reopen 2 1", .success(.hello(versions: [2, 1]))),
        .init("HELLO granary-reopen 1 2 3", .success(.hello(versions: [1, 2, 3]))),
        .init("HELLO granary-reopen 999999999", .success(.hello(versions: [999_999_999]))),
        .init("HELLO granary-reopen 1\r", .success(.hello(versions: [1]))),
        // HELLO: refused (bad-hello as a first line, unknown-command later).
        .init("HELLO", .failure(.hello)),
        .init("HELLO granary-reopen", .failure(.hello)),
        .init("HELLO granary-reopen ", .failure(.hello)),
        .init("HELLO  granary-reopen 1", .failure(.hello)),
        .init("HELLO granary-reopen  1", .failure(.hello)),
        .init("HELLO granary-reopen 1 ", .failure(.hello)),
        .init("HELLO granary-reopen 01", .failure(.hello)),
        .init("HELLO granary-reopen +1", .failure(.hello)),
        .init("HELLO granary-reopen -1", .failure(.hello)),
        .init("HELLO granary-reopen 0", .failure(.hello)),
        .init("HELLO granary-reopen x", .failure(.hello)),
        .init("HELLO granary-reopen 1.0", .failure(.hello)),
        .init("HELLO granary-reopen 1 1", .failure(.hello)),
        .init("HELLO granary-reopen 1000000000", .failure(.hello)),
        .init("HELLO granary-reopen 1 x", .failure(.hello)),
        .init("HELLO Granary-reopen 1", .failure(.hello)),
        .init("HELLO granary-reopen\t1", .failure(.hello)),
        .init("HELLO granary-reopen 1\r\r", .failure(.hello)),
        .init(bytes: Array("HELLO granary-reopen 1".utf8) + [0], .failure(.hello)),
        .init(bytes: Array("HELLO granary-reopen 1".utf8) + [0x7F], .failure(.hello)),
        .init("HELLO granary-reopen 1 é", .failure(.hello)),
        .init("hello granary-reopen 1", .failure(.other)),
        .init(" HELLO granary-reopen 1", .failure(.other)),
        // PAUSE: accepted from 1 to 3600000.
        .init("PAUSE 1", .success(.pause(leaseMilliseconds: 1))),
        .init("PAUSE 30000", .success(.pause(leaseMilliseconds: 30000))),
        .init("PAUSE 3600000", .success(.pause(leaseMilliseconds: 3_600_000))),
        .init("PAUSE 30000\r", .success(.pause(leaseMilliseconds: 30000))),
        // PAUSE: refused (bad-lease).
        .init("PAUSE", .failure(.lease)),
        .init("PAUSE ", .failure(.lease)),
        .init("PAUSE  100", .failure(.lease)),
        .init("PAUSE 100 ", .failure(.lease)),
        .init("PAUSE 0", .failure(.lease)),
        .init("PAUSE 00", .failure(.lease)),
        .init("PAUSE 0100", .failure(.lease)),
        .init("PAUSE +5", .failure(.lease)),
        .init("PAUSE -5", .failure(.lease)),
        .init("PAUSE 1.5", .failure(.lease)),
        .init("PAUSE 1e3", .failure(.lease)),
        .init("PAUSE 0x10", .failure(.lease)),
        .init("PAUSE x", .failure(.lease)),
        .init("PAUSE 5 5", .failure(.lease)),
        .init("PAUSE 3600001", .failure(.lease)),
        .init("PAUSE 9999999", .failure(.lease)),
        .init("PAUSE 99999999999999999999", .failure(.lease)),
        .init("PAUSE\t100", .failure(.other)),
        .init(bytes: Array("PAUSE 100".utf8) + [0x1B], .failure(.lease)),
        // The first word: once one CR is dropped, the bytes before the first space, byte for byte.
        .init("PAUSE 100\t", .failure(.lease)),
        .init("PAUSE \t100", .failure(.lease)),
        .init("PAUSE 100\r\r", .failure(.lease)),
        .init("PAUSE\r", .failure(.lease)),
        .init("PAUSE\r\r", .failure(.other)),
        .init("\tPAUSE 100", .failure(.other)),
        .init(bytes: Array("PAUSE".utf8) + [0x00] + Array(" 100".utf8), .failure(.other)),
        .init(bytes: Array("PAUSE".utf8) + [0x0D] + Array(" 100".utf8), .failure(.other)),
        .init("HELLO\tgranary-reopen 1", .failure(.other)),
        .init("pause 100", .failure(.other)),
        // RESUME, BYE: exactly the word.
        .init("RESUME", .success(.resume)),
        .init("RESUME\r", .success(.resume)),
        .init("BYE", .success(.bye)),
        .init("RESUME now", .failure(.other)),
        .init("RESUME ", .failure(.other)),
        .init(" RESUME", .failure(.other)),
        .init("resume", .failure(.other)),
        .init("BYE x", .failure(.other)),
        .init("BYE ", .failure(.other)),
        // ERROR from a client: a reason of version 1, one word (versions after unsupported-version).
        .init("ERROR busy", .success(.error(.busy))),
        .init("ERROR unknown-command", .success(.error(.unknownCommand))),
        .init("ERROR unsupported-version 1", .success(.error(.unsupportedVersion(spoken: [1])))),
        .init("ERROR unsupported-version 1 2", .success(.error(.unsupportedVersion(spoken: [1, 2])))),
        .init("ERROR", .failure(.other)),
        .init("ERROR nonsense", .failure(.other)),
        .init("ERROR busy x", .failure(.other)),
        .init("ERROR unsupported-version", .failure(.other)),
        .init("ERROR unsupported-version 01", .failure(.other)),
        .init("ERROR Busy", .failure(.other)),
        // Owner's words, empty lines and garbage, from a client.
        .init("PAUSED", .failure(.other)),
        .init("RESUMED", .failure(.other)),
        .init("EXPIRED", .failure(.other)),
        .init("", .failure(.other)),
        .init("\r", .failure(.other)),
        .init(" ", .failure(.other)),
        .init("FOO", .failure(.other)),
        .init(bytes: [0x01], .failure(.other)),
        .init(bytes: [0xFF, 0xFE], .failure(.other)),
        .init("RÉSUMÉ", .failure(.other)),
    ]

    @Test("every client line of the grammar is accepted or refused as the page says", arguments: requests)
    func request(_ test: RequestCase) {
        #expect(ReopenRequest.parse(test.bytes) == test.expected)
    }

    /// A line as received from an owner and the answer it is (nil: granary refuses it).
    struct AnswerCase: CustomTestStringConvertible, Sendable {
        let bytes: [UInt8]
        let expected: ReopenAnswer?
        init(_ line: String, _ expected: ReopenAnswer?) {
            self.bytes = Array(line.utf8)
            self.expected = expected
        }
        init(bytes: [UInt8], _ expected: ReopenAnswer?) {
            self.bytes = bytes
            self.expected = expected
        }
        var testDescription: String { ReopenLine.describe(bytes) }
    }

    static let answers: [AnswerCase] = [
        .init("HELLO granary-reopen 1 4242", .hello(version: 1, pid: 4242)),
        .init("HELLO granary-reopen 1 1", .hello(version: 1, pid: 1)),
        .init("HELLO granary-reopen 1 2147483647", .hello(version: 1, pid: Int32.max)),
        .init("HELLO granary-reopen 1 4242\r", .hello(version: 1, pid: 4242)),
        .init("HELLO granary-reopen 1", nil),
        .init("HELLO granary-reopen 1 4242 restored", nil),
        .init("HELLO granary-reopen 1 0", nil),
        .init("HELLO granary-reopen 1 04242", nil),
        .init("HELLO granary-reopen 1 -1", nil),
        .init("HELLO granary-reopen 1 2147483648", nil),
        .init("HELLO granary-reopen 01 4242", nil),
        .init("HELLO other 1 4242", nil),
        .init("HELLO  granary-reopen 1 4242", nil),
        .init("HELLO granary-reopen 1 4242 ", nil),
        .init("PAUSED", .paused),
        .init("RESUMED", .resumed),
        .init("EXPIRED", .expired),
        .init("PAUSED\r", .paused),
        .init("PAUSED now", nil),
        .init("paused", nil),
        .init(" PAUSED", nil),
        .init("RESUMED ", nil),
        .init("ERROR permission-denied", .error(.permissionDenied)),
        .init("ERROR bad-hello", .error(.badHello)),
        .init("ERROR unsupported-version 1", .error(.unsupportedVersion(spoken: [1]))),
        .init("ERROR unsupported-version 2 3", .error(.unsupportedVersion(spoken: [2, 3]))),
        .init("ERROR bad-lease", .error(.badLease)),
        .init("ERROR busy", .error(.busy)),
        .init("ERROR close-failed", .error(.closeFailed)),
        .init("ERROR unexpected-while-paused", .error(.unexpectedWhilePaused)),
        .init("ERROR unknown-command", .error(.unknownCommand)),
        .init("ERROR", nil),
        .init("ERROR busy now", nil),
        .init("ERROR restored", nil),
        .init("ERROR unsupported-version", nil),
        .init("ERROR unsupported-version 1 1", nil),
        .init("ERROR  busy", nil),
        .init(bytes: Array("ERROR \u{1B}[2Jrestored".utf8), nil),
        .init(bytes: Array("ERROR busy".utf8) + [0x0D, 0x0D], nil),
        .init("PAUSE 100", nil),
        .init("RESUME", nil),
        .init("BYE", nil),
        .init("", nil),
    ]

    @Test("every owner line of the grammar is accepted or refused as the page says", arguments: answers)
    func answer(_ test: AnswerCase) {
        #expect(ReopenAnswer.parse(test.bytes) == test.expected)
    }

    @Test("every message written by one side reads back as itself on the other")
    func roundTrip() {
        let requests: [ReopenRequest] = [
            .hello(versions: [1]), .hello(versions: [2, 1]), .pause(leaseMilliseconds: 1),
            .pause(leaseMilliseconds: 3_600_000),
            .resume, .bye, .error(.busy), .error(.unsupportedVersion(spoken: [1])),
        ]
        for request in requests { #expect(ReopenRequest.parse(request.line) == .success(request), "\(request.line)") }
        let refusals: [ReopenRefusal] = [
            .permissionDenied, .badHello, .unsupportedVersion(spoken: [1]), .badLease, .busy, .closeFailed,
            .unexpectedWhilePaused, .unknownCommand,
        ]
        let answers: [ReopenAnswer] =
            [.hello(version: 1, pid: 77), .paused, .resumed, .expired] + refusals.map { .error($0) }
        for answer in answers { #expect(ReopenAnswer.parse(answer.line) == answer, "\(answer.line)") }
        // Which refusals end the conversation.
        #expect(
            refusals.filter(\.closesConnection) == [.permissionDenied, .badHello, .unsupportedVersion(spoken: [1])])
    }

    @Test("an unsupported-version refusal is explained with the versions each side speaks")
    func unsupportedVersionExplained() {
        #expect(
            ReopenRefusal.unsupportedVersion(spoken: [2, 3]).explanation
                == "unsupported-version (it speaks versions 2, 3 of the reopen protocol, granary 1)")
        #expect(
            ReopenRefusal.unsupportedVersion(spoken: [7]).explanation
                == "unsupported-version (it speaks version 7 of the reopen protocol, granary 1)")
        #expect(ReopenRefusal.busy.explanation == "busy")
    }

    @Test("peer text is quoted with every byte outside printable ASCII escaped, and cut after 60 bytes")
    func describe() {
        #expect(ReopenLine.describe(Array("ERROR \u{1B}[2Jrestored\n".utf8)) == #""ERROR \x1b[2Jrestored\x0a""#)
        #expect(ReopenLine.describe([0x22, 0x5C, 0x00, 0xFF]) == #""\"\\\x00\xff""#)
        let long = ReopenLine.describe(Array(repeating: UInt8(ascii: "a"), count: 1000))
        #expect(long == "\"" + String(repeating: "a", count: 60) + "\"… (1000 bytes)")
    }
}
