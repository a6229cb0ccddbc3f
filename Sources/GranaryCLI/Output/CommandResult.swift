import GranaryKit

/// What one run of a command produced: its JSON document and its text.
///
/// Each command returns one value of its own result type; `Console.emit` prints it, applying
/// `--json` (the value encoded, `"format": 1` added), `--quiet` (no result text) and
/// `--verbose` (passed to `render`). Results go to standard output; `problems` and `notes`
/// are diagnostics and go to standard error.
///
/// The rules every JSON document keeps (also in the README and docs/json/):
/// - keys are camelCase, and every key a type declares is always present: a value that does
///   not apply is `null`, never left out (declare optionals with `@Null`);
/// - times are RFC 3339 UTC strings, sizes are bytes, durations are numbers of seconds;
/// - an error is `{"code": N, "message": "…", "hint": "…" or null}`, at the top level under
///   `"error"` when the whole run failed, or in the item it concerns.
protocol CommandResult: Encodable {
    /// Appends the text shown for this result.
    func render(_ text: inout TextOutput, _ detail: TextDetail)
    /// The exit status of the run.
    var status: ExitStatus { get }
    /// Errors about single items of the run (a user whose backup failed, an archive that is
    /// damaged): printed on standard error as `granary: …` even with `--quiet` and `--json`.
    var problems: [Failure] { get }
    /// Remarks for a person (nothing to do, something skipped): standard error, not with `--quiet`.
    var notes: [String] { get }
    /// The text is what the command was asked for (a listing, a report, a plan), not a
    /// summary of work done: `--quiet` hides chatter, not this.
    var isAnswer: Bool { get }
}

extension CommandResult {
    var status: ExitStatus { problems.isEmpty ? .success : .partialFailure }
    var problems: [Failure] { [] }
    var notes: [String] { [] }
    var isAnswer: Bool { false }
}

/// How much text a result shows.
struct TextDetail: Sendable {
    /// `-v`: everything the result knows.
    var verbose = false
    /// Standard error is a terminal: a person is watching, so commands that are silent under
    /// cron (backup, verify, prune, delete, check, recover) say what they did.
    var interactive = false

    /// Whether a silent-under-cron command prints its summary.
    var summaries: Bool { verbose || interactive }
}

/// An error, as printed and as encoded in JSON: `{"code", "message", "hint"}`.
struct Failure: Codable, Sendable {
    let code: Int32
    let message: String
    @Null var hint: String?
    /// The hint is a command line (printed "Try: …"), not prose ("Hint: …"); see `Hint`. Not in
    /// the JSON document: a failure read back from a backup worker's report prints its hint as prose.
    var hintIsCommand = false

    enum CodingKeys: String, CodingKey { case code, message, hint }

    init(code: ExitStatus, message: String, hint: String? = nil) {
        self.code = code.rawValue
        self.message = message
        let parsed = hint.map(Hint.parse)
        self.hint = parsed?.text
        self.hintIsCommand = parsed?.isCommand ?? false
    }

    init(_ error: any GranaryError) {
        self.init(code: error.exitStatus, message: error.description, hint: error.advice)
    }

    var status: ExitStatus { ExitStatus(rawValue: code) ?? .ioError }
}

/// An optional that is encoded as `null` when it is `nil` (Swift leaves such keys out).
@propertyWrapper
struct Null<Value: Encodable & Sendable>: Encodable, Sendable {
    var wrappedValue: Value?

    init(wrappedValue: Value?) { self.wrappedValue = wrappedValue }

    func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        if let wrappedValue { try container.encode(wrappedValue) } else { try container.encodeNil() }
    }
}

extension Null: Decodable where Value: Decodable {
    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        wrappedValue = container.decodeNil() ? nil : try container.decode(Value.self)
    }
}

/// The top-level JSON document: `"format": 1` and the result's own keys.
struct JSONDocument<Result: Encodable>: Encodable {
    static var format: Int { 1 }
    let result: Result

    enum Keys: String, CodingKey { case format }

    func encode(to encoder: Encoder) throws {
        try result.encode(to: encoder)
        var container = encoder.container(keyedBy: Keys.self)
        try container.encode(Self.format, forKey: .format)
    }
}

/// The document of a run that failed as a whole: `{"format": 1, "error": {…}}`.
struct ErrorDocument: Encodable {
    let error: Failure
}
