import Foundation

/// An archive named on the command line that matches nothing.
public struct ArchiveNotFound: GranaryError, Sendable {
    public let name: String
    /// Close matches, best first.
    public let suggestions: [String]
    /// The host the name says, when it is not the one this run acts on (its archive is that host's).
    public var otherHost: String?

    public init(name: String, suggestions: [String], otherHost: String? = nil) {
        self.name = name
        self.suggestions = suggestions
        self.otherHost = otherHost
    }

    public var description: String {
        if let otherHost { return "no archive \(name) of this host in the repository: its name says host \(otherHost)" }
        return "no archive \(name) in the repository"
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
}

/// An archive named for one user that is another user's (`restore bob alice@example.com/NAME`,
/// or a file whose manifest names alice): never restored into the wrong user.
public struct ArchiveOfAnotherUser: GranaryError, Sendable {
    public let name: String
    /// Whose it is.
    public let owner: String
    /// Whom it was named for.
    public let user: String

    public init(name: String, owner: String, user: String) {
        self.name = name
        self.owner = owner
        self.user = user
    }

    public var description: String { "\(name) belongs to \(owner), not to \(user)" }
}

/// A file named where an archive was expected that is not a granary archive.
public struct NotAnArchive: GranaryError, Sendable {
    public let path: String
    /// Why not, in a phrase.
    public let reason: String

    public var description: String { "\(path) is not a granary archive: \(reason)" }
}

/// A file inside a local repository that is not one of its archives (`USER/NAME` directly in it):
/// granary's temporary files, records, or anything else that lies there.
public struct NotInRepository: GranaryError, Sendable {
    public let path: String
    public let repository: String

    public var description: String { "\(path) lies in the repository \(repository) but is not one of its archives" }
}

/// Finds archives from what a user types: a path, `USER/NAME`, or a `NAME` with a user given
/// separately. A name that matches nothing gets close matches suggested.
public struct ArchiveLocator: Sendable {
    /// The repository whose archives names are looked up in; nil when only files named by
    /// their paths, outside any repository, are to be found.
    public let repository: (any Repository)?

    public init(repository: (any Repository)?) {
        self.repository = repository
    }

    /// The archive `text` names. `user` is used for a bare `NAME`.
    ///
    /// A path to an existing file must be named like an archive (else ``NotAnArchive``). In a
    /// local repository, it must be one of the repository's archives (`USER/NAME` directly in
    /// it), and is then returned as that archive; anything else inside the repository is refused
    /// (``NotInRepository``). A file outside the repository is returned with no ``RepositoryEntry/object``:
    /// it is read where it is, and whose it is comes from `user`, else from its manifest.
    public func locate(_ text: String, user: UserID? = nil) throws -> RepositoryEntry {
        if text.contains("/") || user == nil, FileSystem.isRegularFile(text) {
            let file = PathText.lastComponent(text)
            // What a file is, is read from it, not from its name: a renamed archive is still one
            // (its name then comes from its manifest).
            let name: ArchiveName
            if let named = ArchiveName(fileName: file) {
                name = named
            } else {
                let manifest: Manifest
                do { manifest = try ArchiveHead(file: text).manifest } catch let error as any GranaryError {
                    throw NotAnArchive(path: text, reason: error.description)
                }
                name = ArchiveName(
                    created: manifest.created, label: manifest.label, host: manifest.host,
                    compression: manifest.compression, precise: false)
            }
            if let entry = try repositoryArchive(at: text) { return entry }
            let owner: UserID
            if let user {
                owner = user
            } else {
                let manifest: Manifest
                do { manifest = try ArchiveHead(file: text).manifest } catch let error as any GranaryError {
                    throw NotAnArchive(path: text, reason: error.description)
                }
                do { owner = try UserID(manifest.user) } catch {
                    throw NotAnArchive(path: text, reason: "its manifest names no valid user")
                }
            }
            return RepositoryEntry(user: owner, name: name, path: text, size: FileSystem.size(text))
        }
        guard let repository else { throw ArchiveNotFound(name: text, suggestions: []) }
        var owner = user
        var file = text
        if let slash = text.lastIndex(of: "/") {
            // USER/NAME. Anything else with a slash is a path to no file: it must not match
            // another user's archive of that name.
            guard let id = try? UserID(String(text[..<slash])) else {
                throw ArchiveNotFound(name: text, suggestions: [])
            }
            owner = id
            file = String(text[text.index(after: slash)...])
        }
        let candidates =
            try owner.map { try repository.archives(of: $0) }
            ?? repository.users().flatMap { try repository.archives(of: $0) }
        // `latest` (or `USER/latest`): the user's newest regular backup.
        if file == "latest", owner != nil {
            guard let newest = candidates.last(where: { $0.name.kind == .backup }) else {
                throw ArchiveNotFound(name: text, suggestions: [])
            }
            return newest
        }
        // Exact name, then a name without its extension, then a unique prefix (a bare stamp).
        if let hit = candidates.first(where: { $0.name.isNamed(file) }) { return hit }
        let prefixed = candidates.filter { $0.name.fileName.hasPrefix(file) }
        if prefixed.count == 1, !file.isEmpty { return prefixed[0] }
        if prefixed.count > 1, !file.isEmpty {
            let newestFirst = prefixed.sorted {
                ($0.name.created, $0.user.rawValue) > ($1.name.created, $1.user.rawValue)
            }
            throw AmbiguousArchive(name: text, matches: newestFirst.map { $0.user.rawValue + "/" + $0.name.fileName })
        }
        let label = { (entry: RepositoryEntry) in
            owner == nil ? entry.user.rawValue + "/" + entry.name.fileName : entry.name.fileName
        }
        let ranked = candidates.map { (label($0), Self.distance(file, $0.name.fileName)) }
            .filter { $0.1 <= max(4, file.count / 3) || $0.0.hasPrefix(String(file.prefix(8))) }
            .sorted { $0.1 < $1.1 }
        // Another host's archive, named in full: say whose it is.
        if let named = ArchiveName(fileName: file), let host = named.host, let scope = repository.context.hostScope,
            host != scope, let owner,
            try repository.archives(of: owner, host: host).contains(where: { $0.name.fileName == file })
        {
            throw ArchiveNotFound(name: text, suggestions: [], otherHost: host)
        }
        throw ArchiveNotFound(name: text, suggestions: Array(ranked.prefix(3).map(\.0)))
    }

    /// The archive of `user` that `text` names, the way every command names archives: a file
    /// name, a unique prefix of one (a bare stamp), `USER/NAME` (the user's own: another user's
    /// is ``ArchiveOfAnotherUser``), or `latest` (the newest regular backup). Restore's lookup.
    public func archive(named text: String, of user: UserID) throws -> RepositoryEntry {
        if let slash = text.lastIndex(of: "/"), let owner = try? UserID(String(text[..<slash])), owner != user {
            throw ArchiveOfAnotherUser(name: text, owner: owner.rawValue, user: user.rawValue)
        }
        let entry = try locate(text, user: user)
        if entry.user != user {
            throw ArchiveOfAnotherUser(name: text, owner: entry.user.rawValue, user: user.rawValue)
        }
        return entry
    }

    /// The archive of a local repository that the file at `path` is, or nil when the file lies
    /// outside the repository (a remote repository has no local files). A file inside the
    /// repository that is not one of its archives is refused.
    func repositoryArchive(at path: String) throws -> RepositoryEntry? {
        guard let repository, let base = repository.localPath, FileSystem.isDirectory(base) else { return nil }
        let folder = LocalRepository.canonical(base)
        let file = LocalRepository.canonical(path)
        guard file.hasPrefix(folder == "/" ? "/" : folder + "/") else { return nil }
        let parts = file.dropFirst(folder == "/" ? 1 : folder.count + 1).split(
            separator: "/", omittingEmptySubsequences: false
        ).map(String.init)
        if parts.count == 2, let owner = try? UserID(parts[0]), !parts[0].hasPrefix("."),
            let entry = try repository.archives(of: owner).first(where: { $0.name.isNamed(parts[1]) })
        {
            return entry
        }
        throw NotInRepository(path: path, repository: repository.location)
    }

    /// The local repository an archive file lies in, found from its path alone when no
    /// repository is configured: the folder above the file's user folder, when that folder
    /// holds the repository's marker. Nil when it does not: the file lies outside any repository.
    public static func enclosingRepository(ofFile path: String, context: RunContext = .defaults) -> LocalRepository? {
        let candidate = LocalRepository(path: folders(ofFile: path).repository, context: context)
        return FileSystem.isRegularFile(candidate.path + "/" + LocalRepository.markerName) ? candidate : nil
    }

    /// The user an archive file must belong to by where it lies: the name of its folder, when
    /// the folder above that is this locator's repository (links resolved in both paths). Nil
    /// outside the repository, or without one.
    public func folderUser(ofFile path: String) -> String? {
        guard let repository else { return nil }
        let place = Self.folders(ofFile: PathText.normalized(Self.absolute(path)))
        return place.repository == PathText.normalized(repository.location) ? place.user : nil
    }

    /// `path` made absolute by its text alone (relative to the working directory).
    static func absolute(_ path: String) -> String {
        path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
    }

    /// The folders a file named by `path` lies in, by the path's text: its own folder's name
    /// (a user's, in a repository) and the folder above that (the repository's).
    static func folders(ofFile path: String) -> (user: String, repository: String) {
        let folder = PathText.parent(absolute(path))
        return (PathText.lastComponent(folder), PathText.parent(folder))
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
