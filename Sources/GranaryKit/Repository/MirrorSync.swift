import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// `granary sync`: brings each mirror up to date with the primary repository, user by user,
/// for this host's archives (``Hosts``: those its marker names, and unmarked ones).
///
/// For one user on one mirror:
///
/// ```
/// primary, mirror ← the user's archives of this host in each (by file name)
/// for each archive of the primary missing from the mirror, oldest first:
///     a delta: first the links of its chain the mirror lacks, oldest first (DeltaChains);
///         a link in neither place: the delta is not sent (ChainGap), the rest goes on
///     upload it, with its host marker (from its file, or streamed down from a remote primary)
/// for each archive in both: copy the primary's verification record when the mirror's differs
///     (re-keyed to the mirror's object: the same bytes, uploaded by granary)
/// for each archive of the mirror missing from the primary:
///     remove it only when this host's deletion record in the primary names it
///     (a delete or prune on this host removed it), and no delta staying on the mirror is
///     built on it (its chain back to its full stays whole)
/// ```
///
/// So sync never removes from a mirror what the primary never had: a new or emptied primary
/// (the host lost, users restored from the mirror) leaves the mirror's history alone, and two
/// hosts sharing a mirror never remove (or send back) each other's archives. Each user is
/// synced under its lock (when a root is known), so a backup or prune of the user never runs at
/// the same time. Dead uploads are cleaned up on the way.
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
        /// Archives the primary's deletion records name that stay on the mirror: a delta there is
        /// built on them (issue 35).
        public var keptBases: [String] = []
        /// Deltas not sent: a link of their chain is in neither the repository nor the mirror
        /// (the first is the user's ``error``).
        public var notSent: [String] = []
        /// `follow`'s segments sent (`HOST/BASE/SEGMENT`, oldest first per generation).
        public var segments: [String] = []
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
        // Every user of the primary, and those whose last archives a delete or prune removed.
        let ids =
            users.isEmpty
            ? Array(Set(try primary.users() + primary.usersWithDeletions(host: primary.context.host))).sorted {
                $0.rawValue < $1.rawValue
            } : users
        var results: [MirrorResult] = []
        for mirror in mirrors {
            try Interruption.check()
            var result = MirrorResult(location: mirror.location)
            do {
                // A mirror is made by `granary init` only: an unmounted disk is refused, not filled.
                if dryRun { try mirror.requireExisting() } else { try mirror.prepare() }
                for (position, user) in ids.enumerated() {
                    try Interruption.check()
                    let lock = try root.map { root throws(LockError) in
                        try UserLock.acquire(root: root, user: user, timeout: lockTimeout)
                    }
                    defer { lock?.release() }
                    // Under the user's lock: what this host's runs that died left for the user.
                    if !dryRun { result.cleaned += mirror.removeDeadTemporaries(users: [user]) }
                    result.users.append(sync(user, from: primary, to: mirror, dryRun: dryRun))
                    // A remote that does not answer fails every user alike, each after the whole
                    // time bound: the rest of the users are left for the next sync.
                    if case .transport(_, _, _)? = result.users.last?.error as? RepositoryError,
                        position < ids.count - 1
                    {
                        result.error = MirrorAbandoned(
                            mirror: mirror.location, users: ids.count - position - 1,
                            cause: result.users.last!.error!)
                        break
                    }
                }
                if !dryRun { mirror.removeUnfinishedUploads() }
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
            // This host's legacy archives take their names in both places first (a run that
            // stopped before is finished), so that each is compared under one name.
            if !dryRun {
                _ = try primary.convertLegacyArchives(of: user)
                _ = try mirror.convertLegacyArchives(of: user)
            }
            let source = try primary.archives(of: user)
            var target = try mirror.archives(of: user)
            var present = target.answeringNames
            var gaps: [any GranaryError & Sendable] = []
            for entry in source where !present.contains(entry.name.fileName) {
                try Interruption.check()
                // Issue 35: a delta goes only with its chain (the links the mirror lacks first). An
                // archive whose name its manifest contradicts, or a delta built on one, is not sent;
                // the rest is.
                do {
                    let links = try chainLinks(
                        of: entry, user: user, from: primary, archives: source, onMirror: present, mirror: mirror,
                        mirrorArchives: target, sentNow: Set(result.uploaded))
                    for link in links + [entry] where !present.contains(link.name.fileName) {
                        if dryRun {
                            _ = try primary.head(of: link).manifest
                        } else {
                            try upload(link, from: primary, to: mirror)
                        }
                        present.insert(link.name.fileName)
                        result.uploaded.append(link.name.fileName)
                    }
                } catch let gap as ChainGap {
                    gaps.append(gap)
                    result.notSent.append(entry.name.fileName)
                } catch let failure as VerificationFailure {
                    gaps.append(failure)
                    result.notSent.append(entry.name.fileName)
                }
            }
            if !result.uploaded.isEmpty && !dryRun { target = try mirror.archives(of: user) }
            result.segments = try sendSegments(of: user, from: primary, to: mirror, bases: present, dryRun: dryRun)
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
            let deleted = try primary.deletedNames(of: user, host: primary.context.host)
            // (A record written before names held hosts names an archive by its legacy name.)
            var gone = target.filter { entry in
                !kept.contains(entry.name.fileName) && deleted.contains(where: entry.name.isNamed)
            }
            // Never a base a delta staying on the mirror is built on (issue 35).
            // (A dry run sent nothing: the deltas it would send count as there, read from the primary.)
            let bases = DeltaChains.basesStaying(
                target, removing: gone, in: mirror,
                arriving: dryRun ? source.filter { result.uploaded.contains($0.name.fileName) } : [], from: primary)
            gone.removeAll { bases.contains($0.name.fileName) }
            result.keptBases = bases.sorted()
            if !gone.isEmpty && !dryRun { try mirror.remove(gone) }
            result.removed = gone.map(\.name.fileName)
            if let gap = gaps.first { result.error = gap }
            // The user stays red while the mirror's copy of its newest backup does not
            // restore from the mirror (its chain misses a link there, holds a replaced one or one
            // verify found bad), until a new full is written.
            if result.error == nil, !dryRun, let newest = source.last(where: { $0.name.kind == .backup }),
                let copy = target.first(where: { $0.name.fileName == newest.name.fileName })
            {
                let sidecars = mirror.readSidecars(in: user.rawValue)
                var reason = ChainLinks.problem(with: copy, sidecars: sidecars)
                if reason == nil, copy.name.saysDelta,
                    case .failure(let broken) = ChainLinks.walk(copy, repository: mirror, archives: target)
                {
                    reason = "its chain \(broken.description)"
                }
                if let reason {
                    result.error = NewestUnrestorable(
                        user: user, archive: newest.name.fileName, reason: reason, mirror: mirror.location)
                }
            }
        } catch let error as any GranaryError & Sendable {
            result.error = error
        } catch {
            result.error = UnexpectedError(description: "\(user): \(error)")
        }
        return result
    }

    /// `follow`'s segments of `user` (this host's) the mirror lacks, for each generation whose
    /// base the mirror holds (`bases`, by file name): segments are never changed once published,
    /// so a name on the mirror is the segment. Oldest first in each generation, so that a sync
    /// that stops leaves the mirror a shorter window, never a hole. From a remote primary each
    /// segment is streamed down into the work folder first. Nothing is removed here: a
    /// generation goes from a mirror with its base.
    static func sendSegments(
        of user: UserID, from primary: any Repository, to mirror: any Repository, bases: Set<String>, dryRun: Bool
    ) throws -> [String] {
        var sent: [String] = []
        for generation in try FollowedGenerations.list(in: primary, user: user, host: primary.context.host)
        where bases.contains(generation.base) {
            let there = Set(try mirror.objects(in: generation.object).map(\.name))
            for segment in generation.segments where !there.contains(segment.name) {
                try Interruption.check()
                let object = generation.object + "/" + segment.name
                if !dryRun {
                    try FollowedGenerations.withLocalCopy(of: object, size: segment.size, in: primary) { file in
                        try mirror.publishObject(object, from: file)
                    }
                }
                sent.append(generation.host + "/" + generation.base + "/" + segment.name)
            }
        }
        return sent
    }

    /// The links of `entry`'s chain that `mirror` lacks (``DeltaChains/missingLinks``), oldest
    /// first; none for a full. A delta whose manifest cannot be read goes in its place among the
    /// others (oldest first, as every archive), as nothing says what it is built on.
    static func chainLinks(
        of entry: RepositoryEntry, user: UserID, from primary: any Repository, archives: [RepositoryEntry],
        onMirror: Set<String>, mirror: any Repository, mirrorArchives: [RepositoryEntry], sentNow: Set<String>
    ) throws -> [RepositoryEntry] {
        guard entry.name.saysDelta else { return [] }
        let manifest: Manifest
        do {
            manifest = try primary.head(of: entry).manifest
        } catch let error as RepositoryError {
            throw error
        } catch {
            return []
        }
        return try DeltaChains.missingLinks(
            of: entry.name.fileName, manifest: manifest, user: user, in: primary, archives: archives,
            onMirror: onMirror, mirror: mirror.location
        ) { name in
            // Sent by this sync from the repository (whose copy is checked): that copy.
            if sentNow.contains(name), let sent = archives.first(where: { $0.name.isNamed(name) }) {
                return try primary.head(of: sent).sha256
            }
            return try mirrorDigest(in: mirror, archives: mirrorArchives)(name)
        }
    }

    /// The manifest SHA-256 of `mirror`'s archive of a name (among `archives`, its list), nil
    /// when it is not there or cannot be read as an archive; a failure to reach the mirror is thrown.
    static func mirrorDigest(in mirror: any Repository, archives: [RepositoryEntry]) -> (String) throws -> String? {
        { name in
            guard let entry = archives.first(where: { $0.name.isNamed(name) }) else { return nil }
            do {
                return try mirror.head(of: entry).sha256
            } catch let error as RepositoryError {
                throw error
            } catch {
                return nil
            }
        }
    }

    /// Before a new archive (`entry`, whose finished file is `file`) goes to `mirror`: when it is a
    /// delta, the links of its chain the mirror lacks, sent from `primary` oldest first (their
    /// names returned). Throws ``ChainGap`` when a link is in neither place: the delta is not sent.
    public static func sendChain(
        of entry: RepositoryEntry, file: String, from primary: any Repository, to mirror: any Repository
    ) throws -> [String] {
        guard entry.name.saysDelta else { return [] }
        let manifest = try ArchiveHead(file: file).manifest
        guard manifest.isDelta, let base = manifest.delta?.base else { return [] }
        let onMirror = try mirror.archives(of: entry.user)
        let names = onMirror.answeringNames
        let digest = mirrorDigest(in: mirror, archives: onMirror)
        if names.contains(base.name) {
            // The base is there by name: it must be the archive this delta was built on.
            guard try digest(base.name) == base.manifestSHA256 else {
                throw ChainGap(
                    user: entry.user, archive: entry.name.fileName, base: base.name, mirror: mirror.location,
                    reason: .mirrorReplaced)
            }
            return []
        }
        let links = try DeltaChains.missingLinks(
            of: entry.name.fileName, manifest: manifest, user: entry.user, in: primary,
            archives: try primary.archives(of: entry.user), onMirror: names, mirror: mirror.location,
            mirrorDigest: digest)
        for link in links {
            try Interruption.check()
            try upload(link, from: primary, to: mirror)
        }
        return links.map(\.name.fileName)
    }

    /// Uploads one archive of the primary to the mirror under the same name: from its file when
    /// the primary is local, else streamed down into the mirror's work folder first (never held
    /// in memory).
    static func upload(_ entry: RepositoryEntry, from primary: any Repository, to mirror: any Repository) throws {
        let object = entry.user.rawValue + "/" + entry.name.fileName
        // An archive whose name its manifest contradicts is not carried to a mirror under that name.
        _ = try primary.head(of: entry).manifest
        if let local = entry.localFile {
            try mirror.publishObject(object, from: local)
            return
        }
        // Where the mirror takes a new archive from (for a local mirror, its folder: publishing is a rename).
        let folder = try mirror.stagingFolder(for: entry.user)
        let (fd, file) = try FileSystem.createTemporaryFile(in: folder, for: entry.name.fileName)
        defer {
            close(fd)
            unlink(file)
        }
        try primary.download(entry, into: fd, path: file)
        try mirror.publishObject(object, from: file)
    }
}

/// A sync that stopped trying a mirror after a failure to reach it (or the repository).
public struct MirrorAbandoned: GranaryError, Sendable {
    public let mirror: String
    /// The users left for the next sync.
    public let users: Int
    public let cause: any GranaryError & Sendable
    public var description: String {
        "\(mirror): \(users) more user\(users == 1 ? "" : "s") not synced after a failure to reach it (\(cause.description))"
    }
    public var isTemporary: Bool {
        if case .transport(_, _, true)? = cause as? RepositoryError { return true }
        return false
    }
}

extension Repository {
    /// Copies `entry` into the open file `fd` (at `path`), synced; the transfer's failure is thrown.
    public func download(_ entry: RepositoryEntry, into fd: Int32, path: String) throws {
        try copy(from: try open(entry), into: fd, path: path)
    }

    /// Copies the object `object` (of `size` bytes, as listed) into the open file `fd` (at `path`),
    /// synced; the transfer's failure is thrown.
    public func copy(_ object: String, size: Int64, into fd: Int32, path: String) throws {
        try copy(from: try read(object, size: size, head: nil), into: fd, path: path)
    }

    func copy(from source: ArchiveSource, into fd: Int32, path: String) throws {
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
