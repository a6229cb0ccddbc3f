import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// `granary sync`: brings each mirror up to date with the primary repository, user by user.
///
/// For one user on one mirror:
///
/// ```
/// primary, mirror ← the user's archives in each (by file name)
/// for each archive of the primary missing from the mirror:
///     upload it (from its file, or streamed down from a remote primary into the work folder)
/// for each archive in both: copy the primary's verification record when the mirror's differs
///     (re-keyed to the mirror's object: the same bytes, uploaded by granary)
/// for each archive of the mirror missing from the primary and older than the primary's newest:
///     remove it (prune or delete removed it from the primary)
/// ```
///
/// A user the primary has no archive of is left alone on the mirror (a lost or empty primary
/// must never empty its mirrors), and so is an archive newer than the primary's newest. Each
/// user is synced under its lock (when a root is known), so a backup or prune of the user never
/// runs at the same time. Dead uploads are cleaned up on the way.
public enum MirrorSync {
    /// What sync did (or, with `dryRun`, would do) for one user on one mirror.
    public struct UserResult: Sendable {
        public let user: UserID
        /// Archives uploaded to the mirror.
        public var uploaded: [String] = []
        /// Archives whose verification record was copied.
        public var records: [String] = []
        /// Archives removed from the mirror.
        public var removed: [String] = []
        /// Why the user could not be synced (what was done before stands).
        public var error: (any GranaryError & Sendable)?
    }

    /// One mirror's outcome.
    public struct MirrorResult: Sendable {
        public let location: String
        public var users: [UserResult] = []
        /// Temporaries of dead runs removed from the mirror.
        public var cleaned: [String] = []
        /// Why the mirror could not be synced at all.
        public var error: (any GranaryError & Sendable)?
        /// Whether anything failed.
        public var failed: Bool { error != nil || users.contains { $0.error != nil } }
    }

    /// Syncs every mirror with `primary` for `users` (every user of the primary when empty).
    public static func run(
        primary: any Repository, mirrors: [any Repository], users: [UserID], root: Root?, lockTimeout: Duration,
        dryRun: Bool = false
    ) throws -> [MirrorResult] {
        try primary.requireExisting()
        let ids = users.isEmpty ? try primary.users() : users
        var results: [MirrorResult] = []
        for mirror in mirrors {
            try Interruption.check()
            var result = MirrorResult(location: mirror.location)
            do {
                if !dryRun { try mirror.prepare() }
                for user in ids {
                    try Interruption.check()
                    let lock = try root.map { root throws(LockError) in
                        try UserLock.acquire(root: root, user: user, timeout: lockTimeout)
                    }
                    defer { lock?.release() }
                    result.users.append(sync(user, from: primary, to: mirror, dryRun: dryRun))
                }
                if !dryRun {
                    result.cleaned = mirror.removeDeadTemporaries(users: ids)
                    (mirror as? RcloneRepository)?.cleanUpUnfinishedUploads()
                }
            } catch let error as InterruptedError {
                throw error
            } catch let error as any GranaryError & Sendable {
                result.error = error
            }
            results.append(result)
        }
        return results
    }

    /// Syncs one user; a failure is the result's, not thrown.
    static func sync(_ user: UserID, from primary: any Repository, to mirror: any Repository, dryRun: Bool)
        -> UserResult
    {
        var result = UserResult(user: user)
        do {
            let source = try primary.archives(of: user)
            guard let newest = source.last else { return result }
            var target = try mirror.archives(of: user)
            let names = Set(target.map(\.name.fileName))
            for entry in source where !names.contains(entry.name.fileName) {
                try Interruption.check()
                if !dryRun { try upload(entry, from: primary, to: mirror) }
                result.uploaded.append(entry.name.fileName)
            }
            if !result.uploaded.isEmpty && !dryRun { target = try mirror.archives(of: user) }
            let primaryRecords = primary.records(for: source)
            let mirrorRecords = mirror.records(for: target)
            let onMirror = Dictionary(target.map { ($0.name.fileName, $0) }, uniquingKeysWith: { a, _ in a })
            for entry in source {
                guard let record = primaryRecords[entry.path] else { continue }
                guard let copy = onMirror[entry.name.fileName] else {
                    // A dry run uploaded nothing: the record would go with the archive it would send.
                    if dryRun && result.uploaded.contains(entry.name.fileName) {
                        result.records.append(entry.name.fileName)
                    }
                    continue
                }
                let existing = mirrorRecords[copy.path]
                if existing?.verified == record.verified && existing?.result == record.result { continue }
                if !dryRun {
                    var moved = record
                    moved.archiveSize = copy.size
                    moved.archiveModified = copy.modified
                    moved.archive = copy.name.fileName
                    try mirror.writeRecord(moved, for: copy)
                }
                result.records.append(entry.name.fileName)
            }
            let kept = Set(source.map(\.name.fileName))
            let gone = target.filter { !kept.contains($0.name.fileName) && $0.name < newest.name }
            if !gone.isEmpty && !dryRun { try mirror.remove(gone) }
            result.removed = gone.map(\.name.fileName)
        } catch let error as any GranaryError & Sendable {
            result.error = error
        } catch {
            result.error = UnexpectedError(description: "\(user): \(error)")
        }
        return result
    }

    /// Uploads one archive of the primary to the mirror under the same name: from its file when
    /// the primary is local, else streamed down into the mirror's work folder first (never held
    /// in memory).
    static func upload(_ entry: RepositoryEntry, from primary: any Repository, to mirror: any Repository) throws {
        let object = entry.user.rawValue + "/" + entry.name.fileName
        if primary.isLocal {
            guard try mirror.write(object, from: entry.path) else {
                throw MirrorError.nameTaken(mirror: mirror.location, archive: mirror.display(object))
            }
            return
        }
        let folder = try mirror.isLocal ? mirror.stagingFolder(for: entry.user) : mirror.prepareWorkFolder()
        let (fd, file) = try FileSystem.createTemporaryFile(in: folder, for: entry.name.fileName)
        defer {
            close(fd)
            unlink(file)
        }
        try primary.download(entry, into: fd, path: file)
        guard try mirror.write(object, from: file) else {
            throw MirrorError.nameTaken(mirror: mirror.location, archive: mirror.display(object))
        }
    }
}

extension Repository {
    /// Copies `entry` into the open file `fd` (at `path`), synced; the transfer's failure is thrown.
    public func download(_ entry: RepositoryEntry, into fd: Int32, path: String) throws {
        let source = try open(entry)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        switch source {
        case .file(let file):
            let input = RawPath.open(file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
            guard input >= 0 else { throw FileSystemError("open", path: file) }
            defer { close(input) }
            while true {
                let n = Glibc.read(input, buffer.baseAddress, buffer.count)
                if n < 0 && errno == EINTR { continue }
                if n < 0 { throw FileSystemError("read", path: file) }
                if n == 0 { break }
                try FileSystem.writeAll(fd, UnsafeRawBufferPointer(rebasing: buffer[0..<n]), path: path)
            }
        case .stream(let stream):
            while true {
                try Interruption.check()
                let n = stream.read(into: buffer)
                if n <= 0 { break }
                try FileSystem.writeAll(fd, UnsafeRawBufferPointer(rebasing: buffer[0..<n]), path: path)
            }
            if let failure = stream.finish() { throw failure }
        }
        if fsync(fd) != 0 { throw FileSystemError("fsync", path: path) }
    }
}
