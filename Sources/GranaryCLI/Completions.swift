import ArgumentParser
import Foundation
import GranaryKit

/// Dynamic shell completion: user ids and archive names, read from the folders only.
///
/// Each function gets the words on the command line (as typed, quotes included), the index
/// of the word being completed and its prefix (as typed). They list one or two folders (no
/// store scanning, so a root with 1,000 users stays well under 100 ms) and never throw or
/// print: a missing root, repository or bad configuration file completes nothing.
///
/// Candidates are names that end users influence (a folder named after the e-mail address an
/// app's user registered may hold `$`, quotes, backquotes, parentheses and spaces), so they are
/// data to the shells: the completion scripts never evaluate or split them (see
/// scripts/patch-completions.py), and a candidate that a script could not carry intact (with
/// a newline or a tab) is not offered.
enum Completions {
    /// The user ids under the root (`--root` on the line, else GRANARY_ROOT, else the config file).
    @Sendable static func users(_ words: [String], _ index: Int, _ prefix: String) -> [String] {
        guard let root = settings(words)?.root?.value else { return [] }
        return deliverable(CompletionCandidates.users(root: root, prefix: typed(prefix)))
    }

    /// For restore's USER: the users under the root, then the users a local repository holds
    /// archives of who have no folder (a retired user, a user moved from another host:
    /// `restore --create` brings them here).
    @Sendable static func usersAndArchived(_ words: [String], _ index: Int, _ prefix: String) -> [String] {
        guard let settings = settings(words) else { return [] }
        let live = settings.root.map { CompletionCandidates.users(root: $0.value, prefix: typed(prefix)) } ?? []
        var archived: [String] = []
        if let repo = settings.repo?.value, !Repositories.isRemote(repo) {
            archived = CompletionCandidates.users(root: repo, prefix: typed(prefix)).filter { !live.contains($0) }
        }
        return deliverable(live + archived)
    }

    /// The archive names of the user named earlier on the line (`--user USER`, else the last
    /// preceding word that is a user folder in the repository), newest first.
    @Sendable static func archives(_ words: [String], _ index: Int, _ prefix: String) -> [String] {
        // A remote repository is not listed on every TAB (each listing is a request).
        guard let repo = settings(words)?.repo?.value, !Repositories.isRemote(repo) else { return [] }
        let before = Array(words.prefix(max(0, min(index, words.count)))).map(typed)
        var user: String?
        if let flag = before.lastIndex(of: "--user"), flag + 1 < before.count { user = before[flag + 1] }
        if user == nil {
            user = before.dropFirst().last { word in
                !word.hasPrefix("-") && (try? UserID(word)) != nil && FileSystem.isDirectory(repo + "/" + word)
            }
        }
        guard let user else { return [] }
        return deliverable(CompletionCandidates.archives(repository: repo, user: user, prefix: typed(prefix)))
    }

    /// For ARCHIVE arguments that take `USER/NAME` (verify, delete): with `--user` on the
    /// line, that user's archive names; else `USER/` for each user with archives, and once the
    /// word holds a `/`, that user's archives as `USER/NAME`.
    @Sendable static func archivesOrUsers(_ words: [String], _ index: Int, _ prefix: String) -> [String] {
        if words.prefix(max(0, min(index, words.count))).map(typed).contains("--user") {
            return archives(words, index, prefix)
        }
        guard let repo = settings(words)?.repo?.value, !Repositories.isRemote(repo) else { return [] }
        let word = typed(prefix)
        if let slash = word.firstIndex(of: "/") {
            let user = String(word[..<slash])
            let name = String(word[word.index(after: slash)...])
            return deliverable(
                CompletionCandidates.archives(repository: repo, user: user, prefix: name).map { user + "/" + $0 })
        }
        return deliverable(CompletionCandidates.users(root: repo, prefix: word).map { $0 + "/" })
    }

    /// For inspect's PATH: files, and the repository's archives as `USER/NAME`.
    @Sendable static func filesOrArchives(_ words: [String], _ index: Int, _ prefix: String) -> [String] {
        let word = typed(prefix)
        var candidates = archivesOrUsers(words, index, prefix)
        // Paths: the entries of the folder the word is in.
        let folder = word.contains("/") ? String(word[...word.lastIndex(of: "/")!]) : ""
        let listed = (try? FileManager.default.contentsOfDirectory(atPath: folder.isEmpty ? "." : folder)) ?? []
        for name in listed.sorted()
        where (folder + name).hasPrefix(word) && (!name.hasPrefix(".") || word.hasSuffix("/.") || word.hasPrefix(".")) {
            let path = folder + name
            let candidate = FileSystem.isDirectory(path) ? path + "/" : path
            if !candidates.contains(candidate) { candidates.append(candidate) }
        }
        return deliverable(candidates)
    }

    /// The compression names, for `--compression`.
    @Sendable static func compressions(_ words: [String], _ index: Int, _ prefix: String) -> [String] {
        Compression.allCases.map(\.rawValue).filter { $0.hasPrefix(prefix) }
    }

    /// What a word on the line being completed stands for. bash, zsh and fish 4 hand the words
    /// over as typed (quotes included); fish 3 hands them over already unquoted
    /// (`commandline -o`), and must not be unquoted twice.
    static func typed(_ word: String) -> String {
        let environment = ProcessInfo.processInfo.environment
        if environment["SAP_SHELL"] == "fish",
            let major = environment["SAP_SHELL_VERSION"]?.split(separator: ".").first.flatMap({ Int($0) }),
            major < 4
        {
            return word
        }
        return ShellWord.dequote(word)
    }

    /// Leaves out candidates that no completion script can carry intact (one per line; fish
    /// takes a tab as the start of a description), and escapes what zsh's `_describe` reads
    /// as syntax (a colon separates a description, a backslash escapes).
    static func deliverable(_ candidates: [String]) -> [String] {
        let carried = candidates.filter { !$0.contains("\n") && !$0.contains("\t") && !$0.contains("\r") }
        guard ProcessInfo.processInfo.environment["SAP_SHELL"] == "zsh" else { return carried }
        return carried.map {
            $0.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: ":", with: "\\:")
        }
    }

    /// The settings as the command being completed would see them; `nil` when they cannot be read.
    static func settings(_ words: [String]) -> Settings? {
        let words = words.map(typed)
        func option(_ name: String) -> String? {
            var value: String?
            for (offset, word) in words.enumerated() {
                if word == name, offset + 1 < words.count { value = words[offset + 1] }
                if word.hasPrefix(name + "=") { value = String(word.dropFirst(name.count + 1)) }
            }
            return value
        }
        return try? Settings.load(
            rootFlag: option("--root"), repoFlag: option("--repo"), configFlag: option("--config"))
    }
}
