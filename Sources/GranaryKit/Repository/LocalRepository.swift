import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A repository in a local folder: `<repo>/<user id>/<archive name>`.
///
/// The folder is granary's alone: created 0700 (archives 0600: they hold users' data) and
/// marked by `.granary-repository`; an existing one must be a real folder owned by granary's uid
/// and writable by nobody else, or granary refuses it (another user could otherwise swap what
/// granary writes there, or read it). It is never inside the root, nor the root inside it.
/// An archive is written to a temporary name in its user's folder, fsynced, linked to its final
/// name (which fails rather than replace anything), and the folder fsynced.
public struct LocalRepository: Repository {
    public let path: String
    public let context: RunContext

    public init(path: String, context: RunContext = .defaults) {
        self.path = path.count > 1 && path.hasSuffix("/") ? String(path.dropLast()) : path
        self.context = context
    }

    /// The file that marks a folder as a repository (it holds the repository's format version).
    public static let markerName = ".granary-repository"
    /// The repository format this granary writes.
    public static let format = 1

    public var location: String { path }
    public var localPath: String? { path }

    /// Where backup snapshots and verify extractions are made, always removed after; a dead
    /// run's leftovers carry its pid (`StaleTemporaries`).
    public var workFolder: String { path + "/.granary-tmp" }

    /// Whether the folder exists and is a repository: it has the marker, or (made by an older
    /// granary) user folders of archives.
    public func exists() -> Bool {
        guard FileSystem.isDirectory(path) else { return false }
        if FileSystem.isRegularFile(path + "/" + Self.markerName) { return true }
        return ((try? users()) ?? []).contains { !((try? archives(of: $0)) ?? []).isEmpty }
    }

    public func requireExisting() throws(RepositoryError) {
        // A link or a file where the folder should be is refused as unsafe (73), not as missing.
        if FileSystem.status(path) != nil && !FileSystem.isDirectory(path) { try checkOwnership() }
        guard exists() else { throw .notARepository(path) }
        try checkOwnership()
    }

    /// The repository must exist and be granary's alone. One an older granary made has its
    /// marker, or (older still) archives and no marker: the marker is written then.
    public func prepare() throws(RepositoryError) {
        try requireExisting()
        try writeMarker()
    }

    /// Creates the repository (mode 0700, with its marker) when its parent folder exists; an
    /// existing repository is checked and left as it is. A folder that exists and holds anything
    /// but `lost+found` (a new file system's) is refused: it is someone's folder, not a repository.
    public func initialize() throws(RepositoryError) -> Bool {
        if exists() {
            try prepare()
            return false
        }
        if FileSystem.status(path) == nil {
            let parent = PathText.parent(path)
            guard FileSystem.isDirectory(parent.isEmpty ? "." : parent) else { throw .parentMissing(path) }
            if mkdir(path, 0o700) != 0 && errno != EEXIST {
                throw .cannotCreate(path, FileSystemError("create folder", path: path))
            }
        } else if FileSystem.isDirectory(path) {
            let others = FileSystem.contents(of: path).filter { $0 != "lost+found" }.sorted()
            if !others.isEmpty { throw .notEmpty(path, others.count, others[0]) }
        }
        try checkOwnership()
        try writeMarker()
        return true
    }

    private func writeMarker() throws(RepositoryError) {
        if !FileSystem.isRegularFile(path + "/" + Self.markerName) {
            do {
                try FileSystem.writeAtomically(
                    Array("granary repository \(Self.format)\n".utf8), to: path + "/" + Self.markerName)
            } catch { throw .cannotCreate(path, error) }
        }
    }

    /// The repository folder must be a real folder, granary's own, closed to everyone else.
    func checkOwnership() throws(RepositoryError) {
        guard let info = FileSystem.status(path) else { throw .notARepository(path) }
        guard (info.st_mode & S_IFMT) == S_IFDIR else {
            throw .unsafe(path, (info.st_mode & S_IFMT) == S_IFLNK ? "is a symbolic link" : "is not a folder")
        }
        guard info.st_uid == geteuid() else {
            throw .unsafe(path, "belongs to uid \(info.st_uid), not to granary's uid \(geteuid())")
        }
        if info.st_mode & 0o022 != 0 {
            throw .unsafe(
                path,
                "is writable by \(info.st_mode & 0o002 != 0 ? "everyone" : "its group") (mode \(String(info.st_mode & 0o7777, radix: 8)))"
            )
        }
        try checkEntries()
    }

    /// The repositories whose entries this process has checked: once a repository is granary's
    /// alone nobody else can add to it, so once is enough (a backup of all users does
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
            if info.st_uid != geteuid() {
                throw .planted(entry, "belongs to uid \(info.st_uid), not to granary's uid \(geteuid())")
            }
            if kind == S_IFDIR && info.st_mode & 0o022 != 0 {
                throw .planted(
                    entry,
                    "is writable by \(info.st_mode & 0o002 != 0 ? "everyone" : "its group") (mode \(String(info.st_mode & 0o7777, radix: 8)))"
                )
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
        if repo.hasPrefix(base == "/" ? "/" : base + "/") {
            throw .overlapsRoot(path, root: root.path, "is inside the root")
        }
        if base.hasPrefix(repo == "/" ? "/" : repo + "/") {
            throw .overlapsRoot(path, root: root.path, "holds the root")
        }
    }

    /// The real path of `path` (links resolved; for a path not made yet, its longest existing
    /// ancestor's, with the rest as written).
    public static func resolvedPath(_ path: String) -> String { canonical(path) }

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
            let parent = PathText.parent(current)
            if parent == current || current == "." { return path }
            missing.append(PathText.lastComponent(current))
            current = parent.isEmpty ? "." : parent
        }
    }

    public func prepareWorkFolder() throws(RepositoryError) -> String {
        do { try FileSystem.makeDirectory(workFolder) } catch { throw .local(error) }
        return workFolder
    }

    /// The folder of one user's archives (which may not exist yet).
    public func folder(for user: UserID) -> String { path + "/" + user.rawValue }

    public func folders() -> [String] {
        FileSystem.contents(of: path).filter { !$0.hasPrefix(".") && FileSystem.isDirectory(path + "/" + $0) }.sorted()
    }

    /// The regular files in `folder`.
    public func objects(in folder: String) -> [RepositoryObject] {
        let base = path + "/" + folder
        return FileSystem.contents(of: base).compactMap { name in
            guard let info = FileSystem.status(base + "/" + name), (info.st_mode & S_IFMT) == S_IFREG else {
                return nil
            }
            return RepositoryObject(
                name: name, size: Int64(info.st_size), modified: VerificationRecord.modified(info),
                identity: VerificationRecord.identity(info))
        }
    }

    /// The regular files beneath `folder`, through its real folders (a link is neither followed
    /// nor listed): the repository is granary's own, and names here are only hints for reads that
    /// check what they open.
    public func objects(under folder: String) -> [RepositoryObject] {
        var result: [RepositoryObject] = []
        func walk(_ relative: String, depth: Int) {
            let base = path + "/" + folder + (relative.isEmpty ? "" : "/" + relative)
            for name in FileSystem.contents(of: base) {
                guard let info = FileSystem.status(base + "/" + name) else { continue }
                let child = relative.isEmpty ? name : relative + "/" + name
                switch info.st_mode & S_IFMT {
                case S_IFREG:
                    result.append(
                        RepositoryObject(
                            name: child, size: Int64(info.st_size), modified: VerificationRecord.modified(info),
                            identity: VerificationRecord.identity(info)))
                case S_IFDIR where depth < 8: walk(child, depth: depth + 1)
                default: break
                }
            }
        }
        walk("", depth: 0)
        return result
    }

    public func read(_ object: String, size: Int64, head: Int64?) -> ArchiveSource {
        .file(path + "/" + object)
    }

    /// Moves `file` to `object` without replacing anything: synced and renamed when `file` is
    /// already in the object's folder (a backup writes its temporary archive there), else copied to
    /// a synced temporary name beside it first; the folder is synced after.
    public func write(_ object: String, from file: String) throws(RepositoryError) -> Bool {
        let target = path + "/" + object
        let folder = PathText.parent(target)
        do throws(FileSystemError) {
            try FileSystem.makeDirectory(folder)
            var source = file
            if PathText.parent(file) != folder {
                source = try Self.copy(file, into: folder)
            } else {
                try Self.sync(file)
            }
            do {
                try FileSystem.renameNoReplace(source, to: target)
            } catch {
                if source != file { unlink(source) }
                if error.code == EEXIST { return false }
                throw error
            }
            try FileSystem.syncParent(of: target)
            return true
        } catch {
            throw .local(error)
        }
    }

    /// Flushes `file`'s bytes to stable storage.
    static func sync(_ file: String) throws(FileSystemError) {
        let fd = RawPath.open(file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { throw FileSystemError("open", path: file) }
        defer { close(fd) }
        if fsync(fd) != 0 { throw FileSystemError("sync", path: file) }
    }

    /// Copies `file` to a synced temporary file (0600) in `folder`; its path.
    static func copy(_ file: String, into folder: String) throws(FileSystemError) -> String {
        let input = RawPath.open(file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard input >= 0 else { throw FileSystemError("open", path: file) }
        defer { close(input) }
        let (fd, temporary) = try FileSystem.createTemporaryFile(in: folder, for: PathText.lastComponent(file))
        defer { close(fd) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        do throws(FileSystemError) {
            while true {
                let n = Glibc.read(input, buffer.baseAddress, buffer.count)
                if n < 0 && errno == EINTR { continue }
                if n < 0 { throw FileSystemError("read", path: file) }
                if n == 0 { break }
                try FileSystem.writeAll(fd, UnsafeRawBufferPointer(rebasing: buffer[0..<n]), path: temporary)
            }
            if fsync(fd) != 0 { throw FileSystemError("fsync", path: temporary) }
        } catch {
            unlink(temporary)
            throw error
        }
        return temporary
    }

    public func delete(_ object: String) throws(RepositoryError) {
        let target = path + "/" + object
        do {
            try FileSystem.removeFile(target)
            VerificationRecord.remove(for: target)
            try FileSystem.syncParent(of: target)
        } catch { throw .local(error) }
    }

    public func rename(_ object: String, to target: String) throws(RepositoryError) -> Bool {
        do {
            try FileSystem.renameNoReplace(path + "/" + object, to: path + "/" + target)
        } catch {
            if error.code == EEXIST { return false }
            throw .local(error)
        }
        do { try FileSystem.syncParent(of: path + "/" + target) } catch { throw .local(error) }
        return true
    }

    public func readSidecar(of object: String) -> [UInt8]? {
        let file = VerificationRecord.path(for: path + "/" + object)
        guard FileSystem.isRegularFile(file), let data = FileManager.default.contents(atPath: file),
            data.count < 1 << 16
        else { return nil }
        return Array(data)
    }

    public func readSidecars(in folder: String) -> [String: [UInt8]] {
        var result: [String: [UInt8]] = [:]
        for object in objects(in: folder) where !object.name.hasPrefix(".") {
            if let bytes = readSidecar(of: folder + "/" + object.name) { result[object.name] = bytes }
        }
        return result
    }

    public func writeSidecar(_ bytes: [UInt8], of object: String) throws(RepositoryError) {
        do { try FileSystem.writeAtomically(bytes, to: VerificationRecord.path(for: path + "/" + object)) } catch {
            throw .local(error)
        }
    }

    public func readSmall(_ object: String) throws(RepositoryError) -> [UInt8]? {
        let file = path + "/" + object
        guard FileSystem.status(file) != nil else { return nil }
        guard FileSystem.isRegularFile(file), let data = FileManager.default.contents(atPath: file) else {
            throw .local(FileSystemError("read", path: file))
        }
        return Array(data)
    }

    public func writeSmall(_ bytes: [UInt8], to object: String) throws(RepositoryError) {
        let file = path + "/" + object
        do {
            try FileSystem.makeDirectory((file as NSString).deletingLastPathComponent)
            try FileSystem.writeAtomically(bytes, to: file)
        } catch { throw .local(error) }
    }

    public func deleteSmall(_ object: String) throws(RepositoryError) {
        let file = path + "/" + object
        guard FileSystem.status(file) != nil else { return }
        do { try FileSystem.removeFile(file) } catch { throw .local(error) }
    }

    public func stagingFolder(for user: UserID) throws -> String {
        let folder = folder(for: user)
        try FileSystem.makeDirectory(folder)
        return folder
    }

    /// Writable (a probe file is created and removed in the user's folder) and with room for
    /// `bytes` more.
    public func checkRoom(for user: UserID, bytes: Int64) throws(RepositoryError) {
        try prepare()
        let folder = folder(for: user)
        do {
            try FileSystem.makeDirectory(folder)
            let (fd, probe) = try FileSystem.createTemporaryFile(in: folder, for: "probe")
            close(fd)
            unlink(probe)
        } catch {
            throw .cannotCreate(path, error)
        }
        if let free = FreeSpace.of(folder)?.bytes, bytes > free - FreeSpace.spare {
            throw .noRoom(path, free: free, needed: bytes)
        }
    }

    public func removeDeadTemporaries(users: [UserID]) -> [String] {
        var removed = StaleTemporaries.clean(workFolder)
        for user in users.isEmpty ? ((try? self.users()) ?? []) : users {
            removed += StaleTemporaries.clean(folder(for: user))
            for archive in orphanedArchives(of: user) {
                let marker = Hosts.marker(of: user.rawValue + "/" + archive, host: context.host)
                if (try? deleteSmall(marker)) != nil { removed.append(display(marker)) }
            }
        }
        return removed
    }

    public func display(_ object: String) -> String { path + "/" + object }
}
