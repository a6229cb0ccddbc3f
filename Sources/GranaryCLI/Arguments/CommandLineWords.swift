import GranaryKit

/// The command line as words, looked at before ArgumentParser parses it: which command it
/// names, and the mistakes ArgumentParser would report badly.
///
/// ArgumentParser takes a mistyped command for an argument of the root command and complains
/// about whatever comes next (`granary bakup --all`: "Unknown option '--all'"), prints help
/// and exits 0 for a bare `granary` and for `granary help nonsense`. `check()` catches these
/// first: an unknown command (with the closest name), no command, an unknown help topic.
struct CommandLineWords {
    let arguments: [String]

    init(_ arguments: [String]) { self.arguments = arguments }

    /// A mistake found by `check()`.
    struct Problem: Error {
        let failure: Failure
        /// Whether the help text goes before the message (no command at all).
        var showsHelp = false
    }

    /// Whether any of `flags` is on the line (before a `--`).
    func has(_ flags: String...) -> Bool {
        arguments.prefix { $0 != "--" }.contains { flags.contains($0) }
    }

    /// The first word that is neither a global option nor its value: the command, if the line is right.
    var firstWord: String? {
        var index = 0
        while index < arguments.count {
            let word = arguments[index]
            let name = word.split(separator: "=", maxSplits: 1).first.map(String.init) ?? word
            if let takesValue = GlobalOptions.names[name] {
                index += takesValue && !word.contains("=") ? 2 : 1
                continue
            }
            return word
        }
        return nil
    }

    /// The command named on the line, when it is one.
    var command: String? {
        firstWord.flatMap { Granary.commandNames.contains($0) ? $0 : nil }
    }

    /// Requests ArgumentParser answers itself: help, version, completion scripts and candidates.
    private var isBuiltInRequest: Bool {
        arguments.first == "---completion"
            || arguments.prefix { $0 != "--" }.contains {
                ["-h", "--help", "--version", "--experimental-dump-help"].contains($0)
                    || $0.hasPrefix("--generate-completion-script")
            }
    }

    /// Throws a `Problem` for a line without a command, with an unknown command, or asking
    /// for help on an unknown topic.
    func check() throws(Problem) {
        if isBuiltInRequest {
            // `granary bakup --help` is a mistyped command (64), not a request for granary's own help.
            let asksHelp = arguments.prefix { $0 != "--" }.contains { $0 == "-h" || $0 == "--help" }
            if asksHelp, arguments.first != "---completion", let word = firstWord, !word.hasPrefix("-"), word != "help",
                !Granary.commandNames.contains(word)
            {
                throw unknown(word)
            }
            return
        }
        guard let word = firstWord else {
            throw Problem(
                failure: Failure(code: .usage, message: "no command given", hint: "granary help COMMAND"),
                showsHelp: true)
        }
        if word.hasPrefix("-") { return }  // an option ArgumentParser will name
        if word == "help" {
            let topics = Self.plainWords(Array(arguments.drop { $0 != "help" }.dropFirst()))
            for topic in topics.prefix(1) where !Granary.commandNames.contains(topic) && topic != "help" {
                throw unknown(topic)
            }
            if topics.count > 1 {
                throw Problem(
                    failure: Failure(code: .usage, message: "help takes one command", hint: "granary help COMMAND"))
            }
            return
        }
        if !Granary.commandNames.contains(word) { throw unknown(word) }
    }

    /// The words that are neither options nor the values of global options.
    static func plainWords(_ words: [String]) -> [String] {
        var plain: [String] = []
        var index = 0
        while index < words.count {
            let word = words[index]
            index += 1
            if word.hasPrefix("-") {
                if GlobalOptions.names[word] == true { index += 1 }
                continue
            }
            plain.append(word)
        }
        return plain
    }

    /// restic's and borg's verbs, and granary's command that does that.
    static let otherTools: [String: String] = [
        "snapshots": "list", "forget": "prune", "create": "backup",
        "extract": "restore --to DIR", "mount": "restore --to DIR", "ls": "list", "info": "inspect", "stats": "list",
        "unlock": "recover", "rm": "delete", "remove": "delete", "find": "list", "compact": "prune",
        "break-lock": "recover", "rlist": "list",
    ]

    private func unknown(_ word: String) -> Problem {
        var message = "unknown command '\(word)'"
        if let other = Self.otherTools[word.lowercased()] {
            message += " (restic's or borg's \(word.lowercased()) is granary \(other))"
        } else if let close = Self.closest(to: word, in: Granary.commandNames + ["help"]) {
            message += " (did you mean \(close)?)"
        }
        return Problem(failure: Failure(code: .usage, message: message, hint: Hint.command("granary", "--help")))
    }

    /// The candidate within a couple of edits of `word`, if one is clearly closest.
    static func closest(to word: String, in candidates: [String]) -> String? {
        let ranked = candidates.map { ($0, distance(word.lowercased(), $0)) }.sorted { $0.1 < $1.1 }
        guard let best = ranked.first, best.1 <= (word.count >= 4 ? 2 : 1) || best.0.hasPrefix(word) && word.count >= 2,
            ranked.dropFirst().first?.1 != best.1
        else { return nil }
        return best.0
    }

    /// Levenshtein distance over bytes.
    static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a.utf8), b = Array(b.utf8)
        guard !a.isEmpty else { return b.count }
        guard !b.isEmpty else { return a.count }
        // Edits are an insertion, a deletion, a substitution, or two neighbours swapped (`lsit`
        // is one edit from `list`, two from `init`): the optimal string alignment distance.
        var beforePrevious = Array(0...b.count)
        var previous = Array(0...b.count)
        for i in 1...a.count {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in 1...b.count {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    current[j] = min(current[j], beforePrevious[j - 2] + 1)
                }
            }
            beforePrevious = previous
            previous = current
        }
        return previous[b.count]
    }

    /// ArgumentParser's message as one of granary's: first letter lower case, no final period.
    static func sentence(_ message: String) -> String {
        var text = message.split(separator: "\n").first.map(String.init) ?? message
        if text.hasSuffix(".") { text.removeLast() }
        guard let first = text.first, first.isUppercase, !(text.dropFirst().first?.isUppercase ?? false) else {
            return text
        }
        return first.lowercased() + text.dropFirst()
    }
}
