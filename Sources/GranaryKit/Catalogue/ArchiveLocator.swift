import Foundation

/// An archive named on the command line that matches nothing.
public struct ArchiveNotFound: GranaryError, Sendable {
    public let name: String
    /// Close matches, best first.
    public let suggestions: [String]

    public var description: String { "no archive \(name) in the repository" }
    public var status: ExitStatus { .notFound }
    public var hint: String? {
        suggestions.isEmpty ? "granary list shows the archives" : "did you mean " + suggestions.joined(separator: " or ") + "?"
    }
}

/// An archive named by a prefix that more than one archive starts with.
public struct AmbiguousArchive: GranaryError, Sendable {
    public let name: String
    /// The archives it matches (`USER/NAME`), newest first.
    public let matches: [String]

    public var description: String {
        let shown = matches.prefix(5).joined(separator: ", ")
        return "ambiguous: \(name) matches \(matches.count > 5 ? "\(matches.count) archives, among them " : "")\(shown)"
    }
    public var status: ExitStatus { .usage }
    public var hint: String? { "name one archive in full, as USER/NAME" }
}

/// Finds archives from what a user types: a path, `USER/NAME`, or a `NAME` with a user given
/// separately. A name that matches nothing gets close matches suggested.
public struct ArchiveLocator: Sendable {
    public let repository: any Repository

    public init(repository: any Repository) {
        self.repository = repository
    }

    /// The archive `text` names. `user` is used for a bare `NAME`.
    public func locate(_ text: String, user: UserID? = nil) throws -> RepositoryEntry {
        // A path to an existing file: the user is the folder it is in.
        if text.contains("/") || user == nil, FileSystem.isRegularFile(text) {
            let folder = ((text as NSString).deletingLastPathComponent as NSString).lastPathComponent
            let file = (text as NSString).lastPathComponent
            guard let name = ArchiveName(fileName: file) else {
                throw VerificationFailure(
                    archive: text, reason: "is not named like a granary archive (YYYYMMDDTHHMMSSZ[-label].tar.zst)")
            }
            let owner = (try? UserID(folder)) ?? user
            guard let owner else { throw ArchiveNotFound(name: text, suggestions: []) }
            return RepositoryEntry(user: owner, name: name, path: text, size: FileSystem.size(text))
        }
        var owner = user
        var file = text
        if let slash = text.lastIndex(of: "/") {
            owner = try? UserID(String(text[..<slash]))
            file = String(text[text.index(after: slash)...])
        }
        let candidates = try owner.map { try repository.archives(of: $0) } ?? repository.users().flatMap { try repository.archives(of: $0) }
        // Exact name, then a name without its extension, then a unique prefix (a bare stamp).
        if let hit = candidates.first(where: { $0.name.fileName == file }) { return hit }
        let prefixed = candidates.filter { $0.name.fileName.hasPrefix(file) }
        if prefixed.count == 1, !file.isEmpty { return prefixed[0] }
        if prefixed.count > 1, !file.isEmpty {
            let newestFirst = prefixed.sorted { ($0.name.created, $0.user.rawValue) > ($1.name.created, $1.user.rawValue) }
            throw AmbiguousArchive(name: text, matches: newestFirst.map { $0.user.rawValue + "/" + $0.name.fileName })
        }
        let label = { (entry: RepositoryEntry) in owner == nil ? entry.user.rawValue + "/" + entry.name.fileName : entry.name.fileName }
        let ranked = candidates.map { (label($0), Self.distance(file, $0.name.fileName)) }
            .filter { $0.1 <= max(4, file.count / 3) || $0.0.hasPrefix(String(file.prefix(8))) }
            .sorted { $0.1 < $1.1 }
        throw ArchiveNotFound(name: text, suggestions: Array(ranked.prefix(3).map(\.0)))
    }

    /// Levenshtein distance, for suggestions.
    static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a.utf8), b = Array(b.utf8)
        if a.isEmpty { return b.count }
        var previous = Array(0...b.count)
        for i in 1...a.count {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in 1...max(1, b.count) where !b.isEmpty {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
    }
}
