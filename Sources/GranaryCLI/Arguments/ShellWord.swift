import GranaryKit

/// Words as a POSIX shell reads them: quoting a name for a hint, and reading back a word
/// as typed on a command line being completed.
enum ShellWord {
    /// `word` as one shell word: as it is when it holds only safe characters, else in single
    /// quotes (a single quote inside as `'\''`).
    static func quote(_ word: String) -> String { ShellQuote.word(word) }

    /// The text a word typed on a shell command line stands for: backslash escapes, single
    /// quotes and double quotes removed as the shell would (nothing is expanded: `$x` stays
    /// `$x`). An unfinished quote runs to the end, as it does while a word is being typed.
    static func dequote(_ word: String) -> String {
        var out = ""
        var iterator = word.makeIterator()
        var quote: Character?
        while let character = iterator.next() {
            switch (quote, character) {
            case (nil, "\\"):
                if let next = iterator.next() { out.append(next) }
            case (nil, "'"), (nil, "\""):
                quote = character
            case ("'", "'"), ("\"", "\""):
                quote = nil
            case ("\"", "\\"):
                guard let next = iterator.next() else { break }
                if !"$`\"\\".contains(next) { out.append("\\") }
                out.append(next)
            default:
                out.append(character)
            }
        }
        return out
    }
}
