import GranaryKit

/// A hint is either a command line or prose, and says which.
///
/// A command line is printed `Try: …` and is one bash runs as shown: every word is quoted for the
/// shell (``ShellQuoting/word(_:)``), so a name holding `$(…)`, quotes, a line break or a leading
/// dash pasted back is one word, the very name, and runs nothing. It is built with
/// ``command(_:)`` (or ``commands(_:)`` for `A && B`), which marks it. Every other hint is prose,
/// printed `Hint: …`: names in it are quoted too, but it is not meant to be pasted.
enum Hint {
    /// What marks a hint as a command line (stripped before it is shown or encoded).
    static let marker = "\u{1}"

    /// A command line of `words`, each quoted for the shell.
    static func command(_ words: String...) -> String { commands([words]) }

    /// Commands joined by `&&`, each word quoted.
    static func commands(_ lines: [[String]]) -> String {
        marker + lines.map { $0.map(ShellQuoting.word).joined(separator: " ") }.joined(separator: " && ")
    }

    /// A command line of words already quoted (a command line read back as typed).
    static func quotedCommand(_ words: [String]) -> String { marker + words.joined(separator: " ") }

    /// Whether `hint` is a command line, and its text.
    static func parse(_ hint: String) -> (isCommand: Bool, text: String) {
        hint.hasPrefix(marker) ? (true, String(hint.dropFirst(marker.count))) : (false, hint)
    }

    /// The text of a hint, without its mark.
    static func text(_ hint: String) -> String { parse(hint).text }

    /// The label a hint is printed with: `Try:` for a command line, `Hint:` for prose.
    static func label(_ hint: String) -> String { parse(hint).isCommand ? "Try: " : "Hint: " }

    /// A name quoted for prose (as for the shell: the same name, one word, nothing hidden).
    static func name(_ text: String) -> String { ShellQuoting.word(text) }
}
