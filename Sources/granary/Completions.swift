import ArgumentParser
import Foundation
import GranaryKit

/// Dynamic shell completion: user ids and archive names, read from the folders only.
///
/// Use as `completion: .custom(Completions.users)` on a USER argument and
/// `completion: .custom(Completions.archives)` on an ARCHIVE argument. Each function gets the
/// words on the command line, the index of the word being completed and its prefix. They list
/// one folder (no store scanning, so a root with 1,000 users stays well under 100 ms) and never
/// throw or print: a missing root, repository or bad configuration file completes nothing.
enum Completions {
    /// The user ids under the root (`--root` on the line, else GRANARY_ROOT, else the config file).
    @Sendable static func users(_ words: [String], _ index: Int, _ prefix: String) -> [String] {
        guard let root = settings(words)?.root?.value else { return [] }
        return CompletionCandidates.users(root: root, prefix: prefix)
    }

    /// The archive names of the user named earlier on the line (`--user USER`, else the last
    /// preceding word that is a user folder in the repository), newest first.
    @Sendable static func archives(_ words: [String], _ index: Int, _ prefix: String) -> [String] {
        // A remote repository is not listed on every TAB (each listing is a request).
        guard let repo = settings(words)?.repo?.value, !Repositories.isRemote(repo) else { return [] }
        let before = Array(words.prefix(max(0, min(index, words.count))))
        var user: String?
        if let flag = before.lastIndex(of: "--user"), flag + 1 < before.count { user = before[flag + 1] }
        if user == nil {
            user = before.dropFirst().last { word in
                !word.hasPrefix("-") && (try? UserID(word)) != nil && FileSystem.isDirectory(repo + "/" + word)
            }
        }
        guard let user else { return [] }
        return CompletionCandidates.archives(repository: repo, user: user, prefix: prefix)
    }

    /// The compression names, for `--compression`.
    @Sendable static func compressions(_ words: [String], _ index: Int, _ prefix: String) -> [String] {
        Compression.allCases.map(\.rawValue).filter { $0.hasPrefix(prefix) }
    }

    /// The settings as the command being completed would see them; `nil` when they cannot be read.
    static func settings(_ words: [String]) -> Settings? {
        func option(_ name: String) -> String? {
            var value: String?
            for (offset, word) in words.enumerated() {
                if word == name, offset + 1 < words.count { value = words[offset + 1] }
                if word.hasPrefix(name + "=") { value = String(word.dropFirst(name.count + 1)) }
            }
            return value
        }
        return try? Settings.load(rootFlag: option("--root"), repoFlag: option("--repo"), configFlag: option("--config"))
    }
}
