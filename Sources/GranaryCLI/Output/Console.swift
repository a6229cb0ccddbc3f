import Foundation
import GranaryKit

#if canImport(Glibc)
    import Glibc
#endif

/// Where the executable writes: results to standard output, diagnostics to standard error.
///
/// Text is quiet without a terminal (cron); `--quiet` prints errors only; `--json` prints one
/// document on standard output, errors included; `NO_COLOR` turns colour off and `TERM=dumb`
/// every escape sequence (colour, the progress bar). Every line of text is escaped
/// (`TerminalText`) on its way out.
final class Console: Sendable {
    let json: Bool
    let quiet: Bool
    let verbose: Bool
    /// Standard error is a terminal: someone is watching.
    let interactive: Bool
    /// Bold and dim on standard output.
    let color: Bool
    /// Escape sequences on standard error (the progress bar).
    let escapes: Bool
    /// Standard input and standard error are terminals: a person can be asked (retire's question).
    let canAsk: Bool

    init(
        json: Bool = false, quiet: Bool = false, verbose: Bool = false,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) {
        self.json = json
        self.quiet = quiet
        self.verbose = verbose
        interactive = isatty(STDERR_FILENO) == 1
        canAsk = interactive && isatty(STDIN_FILENO) == 1
        let dumb = environment["TERM"].map { $0 == "dumb" } ?? false
        let noColor = environment["NO_COLOR"].map { !$0.isEmpty } ?? false
        escapes = interactive && !dumb
        color = escapes && !noColor && isatty(STDOUT_FILENO) == 1
    }

    /// The console the global options ask for.
    convenience init(_ options: GlobalOptions) {
        self.init(json: options.json, quiet: options.quiet, verbose: options.verbose)
    }

    var detail: TextDetail { TextDetail(verbose: verbose, interactive: interactive) }

    /// Whether a progress bar may be drawn on standard error.
    var showsProgress: Bool { escapes && !quiet && !json }

    /// Prints `result` (its document under `--json`, else its text unless `--quiet` and the text
    /// is only a summary of work done), then its problems and notes on standard error, and
    /// returns its exit status.
    func emit(_ result: some CommandResult) -> ExitStatus {
        if json {
            StandardStreams.output(Console.encode(JSONDocument(result: result)))
        } else if !quiet || result.isAnswer {
            var text = TextOutput()
            result.render(&text, detail)
            StandardStreams.output(text.lines.map { $0.rendered(color: color) + "\n" }.joined())
        }
        for problem in result.problems { printError(problem) }
        for note in result.notes { self.note(note) }
        return result.status
    }

    /// Prints a failure of the whole run: `granary: …` and `Try: …` on standard error, and
    /// under `--json` also `{"format": 1, "error": {…}}` on standard output.
    func fail(_ failure: Failure) {
        if json { StandardStreams.output(Console.encode(JSONDocument(result: ErrorDocument(error: failure)))) }
        printError(failure)
    }

    /// A remark for a person, on standard error (not with `--quiet`): `granary: …`.
    func note(_ text: String) {
        guard !quiet else { return }
        StandardStreams.error(TextLine(stringLiteral: "granary: " + text).rendered(color: false) + "\n")
    }

    /// Asks a person: `lines` and `prompt` on standard error (escaped, even with `--quiet`: the
    /// question is not a result), then one line read from standard input. Nil at the end of the
    /// input or when a signal interrupts the read.
    func ask(_ lines: [TextLine], prompt: TextLine) -> String? {
        StandardStreams.error(lines.map { $0.rendered(color: false) + "\n" }.joined() + prompt.rendered(color: false))
        var answer: [UInt8] = []
        var byte: UInt8 = 0
        while true {
            let n = read(STDIN_FILENO, &byte, 1)
            if n <= 0 { return nil }
            if byte == 0x0A { break }
            answer.append(byte)
        }
        return String(decoding: answer, as: UTF8.self).trimmingCharacters(in: .whitespaces)
    }

    /// Text drawn on standard error as it is (the progress bar's own escapes).
    func draw(_ text: String) {
        StandardStreams.error(text)
    }

    private func printError(_ failure: Failure) {
        var text = TextLine(stringLiteral: "granary: " + failure.message).rendered(color: false) + "\n"
        if let hint = failure.hint {
            text +=
                TextLine(stringLiteral: (failure.hintIsCommand ? "Try: " : "Hint: ") + hint).rendered(color: false)
                + "\n"
        }
        StandardStreams.error(text)
    }

    /// A value as pretty-printed JSON with sorted keys, and a newline.
    static func encode(_ value: some Encodable) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        encoder.nonConformingFloatEncodingStrategy = .convertToString(
            positiveInfinity: "inf", negativeInfinity: "-inf", nan: "nan")
        do {
            // Names that are not UTF-8 travel in their `…Base64` fields; every string shows their
            // bytes as U+FFFD, never as the private code points GranaryKit carries them in.
            return JSONName.text(String(decoding: try encoder.encode(value), as: UTF8.self)) + "\n"
        } catch {
            return
                "{\"error\": {\"code\": 74, \"hint\": null, \"message\": \"the result could not be encoded as JSON\"}, \"format\": 1}\n"
        }
    }
}
