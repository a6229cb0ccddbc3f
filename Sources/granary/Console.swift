import Foundation
import GranaryKit

#if canImport(Glibc)
    import Glibc
#endif

/// Where the executable writes: results to standard output, errors to standard error.
///
/// Quiet when standard error is not a terminal (cron); `--quiet` prints errors only;
/// `NO_COLOR` turns colour off.
struct Console: Sendable {
    var quiet = false
    var verbose = false
    let isTerminal: Bool
    let color: Bool

    init(quiet: Bool = false, verbose: Bool = false) {
        self.quiet = quiet
        self.verbose = verbose
        isTerminal = isatty(STDERR_FILENO) == 1
        let noColor = ProcessInfo.processInfo.environment["NO_COLOR"].map { !$0.isEmpty } ?? false
        color = isTerminal && !noColor && isatty(STDOUT_FILENO) == 1
    }

    static let standard = Console()

    /// A result line (suppressed by `--quiet`).
    func out(_ line: String) {
        guard !quiet else { return }
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    /// A JSON document on standard output (always printed: it was asked for).
    func json<T: Encodable>(_ value: T) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        let data = (try? encoder.encode(value)) ?? Data("{}".utf8)
        FileHandle.standardOutput.write(data + Data("\n".utf8))
    }

    /// A note for a person at a terminal (suppressed by `--quiet`).
    func info(_ line: String) {
        guard !quiet else { return }
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }

    /// An error line: `granary: <what>`, then `Try: <hint>` when there is one.
    func error(_ error: GranaryError) {
        var text = "granary: " + error.description + "\n"
        if let hint = error.hint { text += "Try: " + hint + "\n" }
        FileHandle.standardError.write(Data(text.utf8))
    }

    /// Prints `error` and exits with its status.
    func fail(_ error: GranaryError) -> Never {
        self.error(error)
        exit(error.status.rawValue)
    }

    /// Bold text on a colour terminal.
    func bold(_ text: String) -> String { color ? "\u{1B}[1m\(text)\u{1B}[0m" : text }
    /// Dim text on a colour terminal.
    func dim(_ text: String) -> String { color ? "\u{1B}[2m\(text)\u{1B}[0m" : text }
}
