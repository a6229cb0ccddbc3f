import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The folder where archives go: `<repo>/<user id>/<archive name>`.
///
/// The repository is granary's alone: created 0700 (archives 0600: they hold users' data) and
/// marked by `.granary-repository`; an existing one must be a real folder owned by granary's uid
/// and writable by nobody else, or granary refuses it (another user could otherwise swap what
/// granary writes there, or read it). It is never inside the root, nor the root inside it.
public struct Repository: Sendable {
    public let path: String

    public init(path: String) {
        self.path = path.count > 1 && path.hasSuffix("/") ? String(path.dropLast()) : path
    }

    /// The file that marks a folder as a repository (it holds the repository's format version).
    public static let markerName = ".granary-repository"
    /// The repository format this granary writes.
    public static let format = 1

    /// Whether the folder exists and is a repository: it has the marker, or (made by an older
    /// granary) user folders of archives.
    public var exists: Bool {
        guard FileSystem.isDirectory(path) else { return false }
        if FileSystem.isRegularFile(path + "/" + Repository.markerName) { return true }
        return users().contains { !archives(of: $0).isEmpty }
    }

    /// For commands that read: the repository must exist (a typo must not look like an empty repository).
    public func requireExisting() throws(RepositoryError) {
        guard exists else { throw .notARepository(path) }
        try checkOwnership()
    }

    /// For commands that write archives: creates the repository (mode 0700, with its marker) when
    /// its parent folder exists, or checks the existing one.
    public func prepare() throws(RepositoryError) {
        if FileSystem.status(path) == nil {
            let parent = (path as NSString).deletingLastPathComponent
            guard FileSystem.isDirectory(parent.isEmpty ? "." : parent) else { throw .parentMissing(path) }
            if mkdir(path, 0o700) != 0 && errno != EEXIST { throw .cannotCreate(path, FileSystemError("create folder", path: path)) }
        }
        try checkOwnership()
        if !FileSystem.isRegularFile(path + "/" + Repository.markerName) {
            do {
                try FileSystem.writeAtomically(Array("granary repository \(Repository.format)\n".utf8), to: path + "/" + Repository.markerName)
            } catch { throw .cannotCreate(path, error) }
        }
    }

    /// The repository folder must be a real folder, granary's own, closed to everyone else.
    func checkOwnership() throws(RepositoryError) {
        guard let info = FileSystem.status(path) else { throw .notARepository(path) }
        guard (info.st_mode & S_IFMT) == S_IFDIR else {
            throw .unsafe(path, (info.st_mode & S_IFMT) == S_IFLNK ? "is a symbolic link" : "is not a folder")
        }
        guard info.st_uid == geteuid() else { throw .unsafe(path, "belongs to uid \(info.st_uid), not to granary's uid \(geteuid())") }
        if info.st_mode & 0o022 != 0 {
            throw .unsafe(path, "is writable by \(info.st_mode & 0o002 != 0 ? "everyone" : "its group") (mode \(String(info.st_mode & 0o7777, radix: 8)))")
        }
        try checkEntries()
    }

    /// The repositories whose entries this process has checked: once a repository is granary's
    /// alone nobody else can add to it, so once is enough (a `backup --all` over many users does
    /// not list the repository once per user).
    private static let checked = Mutex<Set<String>>([])

    /// What others planted while the repository was open to them (a fresh tmpfs is 1777; the fix
    /// the refusal suggests is a chmod) must not be used: their own `.granary-tmp` or user folder
    /// would let them swap what granary writes there, or plant archives, through descriptors they
    /// kept open. Every entry must be granary's, and no folder in it writable by anyone else.
    func checkEntries() throws(RepositoryError) {
        if Self.checked.withLock({ $0.contains(path) }) { return }
        for name in FileSystem.contents(of: path) {
            let entry = path + "/" + name
            guard let info = FileSystem.status(entry) else { continue }
            let kind = info.st_mode & S_IFMT
            if kind == S_IFLNK { throw .planted(entry, "is a symbolic link") }
            if info.st_uid != geteuid() { throw .planted(entry, "belongs to uid \(info.st_uid), not to granary's uid \(geteuid())") }
            if kind == S_IFDIR && info.st_mode & 0o022 != 0 {
                throw .planted(entry, "is writable by \(info.st_mode & 0o002 != 0 ? "everyone" : "its group") (mode \(String(info.st_mode & 0o7777, radix: 8)))")
            }
        }
        Self.checked.withLock { _ = $0.insert(path) }
    }

    /// Refuses a repository that is the root, lies inside it, or holds it: a user's folder must
    /// never become the repository, and the repository must never look like a user.
    public func checkSeparate(from root: Root) throws(RepositoryError) {
        let repo = Self.canonical(path)
        let base = Self.canonical(root.path)
        if repo == base { throw .overlapsRoot(path, root: root.path, "is the root itself") }
        if repo.hasPrefix(base == "/" ? "/" : base + "/") { throw .overlapsRoot(path, root: root.path, "is inside the root") }
        if base.hasPrefix(repo == "/" ? "/" : repo + "/") { throw .overlapsRoot(path, root: root.path, "holds the root") }
    }

    /// The real path of `path` (of its longest existing ancestor, for a path not made yet).
    static func canonical(_ path: String) -> String {
        var missing: [String] = []
        var current = path.isEmpty ? "." : path
        while true {
            if let resolved = realpath(current, nil) {
                defer { free(resolved) }
                var text = String(cString: resolved)
                for part in missing.reversed() { text += (text == "/" ? "" : "/") + part }
                return text
            }
            let parent = (current as NSString).deletingLastPathComponent
            if parent == current || parent.isEmpty { return path }
            missing.append((current as NSString).lastPathComponent)
            current = parent
        }
    }

    /// Where backup snapshots and verify extractions are made, always removed after; a dead
    /// run's leftovers carry its pid (`StaleTemporaries`).
    public var workFolder: String { path + "/.granary-tmp" }

    /// The folder of one user's archives (which may not exist yet).
    public func folder(for user: UserID) -> String { path + "/" + user.rawValue }

    /// One archive in the repository.
    public struct Entry: Sendable, Equatable {
        public let user: UserID
        public let name: ArchiveName
        public let path: String
        public let size: Int64
    }

    /// A user's archives, oldest first. Temporary files and other names are skipped.
    public func archives(of user: UserID) -> [Entry] {
        let folder = folder(for: user)
        return FileSystem.contents(of: folder).compactMap { file -> Entry? in
            guard !file.hasPrefix("."), let name = ArchiveName(fileName: file) else { return nil }
            let full = folder + "/" + file
            guard let info = FileSystem.status(full), (info.st_mode & S_IFMT) == S_IFREG else { return nil }
            return Entry(user: user, name: name, path: full, size: Int64(info.st_size))
        }.sorted { $0.name < $1.name }
    }

    /// The users that have a folder in the repository, sorted.
    public func users() -> [UserID] {
        FileSystem.contents(of: path).compactMap { name in
            guard !name.hasPrefix("."), FileSystem.isDirectory(path + "/" + name) else { return nil }
            return try? UserID(name)
        }
    }
}

/// A repository granary cannot use.
public enum RepositoryError: GranaryError, Sendable {
    case notARepository(String)
    case parentMissing(String)
    case unsafe(String, String)
    /// An entry of the repository that is not granary's alone.
    case planted(String, String)
    case overlapsRoot(String, root: String, String)
    case cannotCreate(String, FileSystemError)

    public var description: String {
        switch self {
        case .notARepository(let path): return "not a granary repository: \(path)"
        case .parentMissing(let path): return "cannot create the repository \(path): its parent folder does not exist"
        case .unsafe(let path, let why): return "refusing the repository \(path): it \(why)"
        case .planted(let path, let why): return "refusing the repository: \(path) \(why); someone else may have made it"
        case .overlapsRoot(let path, let root, let why): return "the repository \(path) \(why) \(root); keep them apart"
        case .cannotCreate(let path, let error): return "cannot create the repository \(path): \(error.description)"
        }
    }

    public var status: ExitStatus {
        switch self {
        case .notARepository: return .notFound
        case .parentMissing, .unsafe, .planted, .cannotCreate: return .cannotCreate
        case .overlapsRoot: return .usage
        }
    }

    public var hint: String? {
        switch self {
        case .notARepository: return "check --repo (or GRANARY_REPO); granary backup creates a repository"
        case .parentMissing(let path): return "create \((path as NSString).deletingLastPathComponent) first, or check --repo for a typo"
        case .unsafe(let path, _): return "chown root \(path) && chmod 0700 \(path), or choose another --repo"
        case .planted(let path, _): return "look at \(path) and remove it (rm -r), or choose another --repo"
        case .overlapsRoot: return "choose a --repo outside the root, for example /var/backups/granary"
        case .cannotCreate(_, let error): return error.hint
        }
    }
}
