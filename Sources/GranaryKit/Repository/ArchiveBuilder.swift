import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The one way granary makes an archive: backups (``BackupOperation``), final archives (`retire`,
/// a backup of kind `final`), safety archives (what a restore or reset replaced,
/// ``SafetyArchive``), and whatever kind comes next (a page delta) all go through it, so that
/// every archive has the same members, the same manifest and the same checks.
///
/// An archive is made in four steps, each a method, in this order:
///
/// 1. ``store(name:database:journalMode:owner:externalMember:live:account:)`` for each store: the
///    finished database file (a snapshot, or a store kept aside) checked with the configured
///    ``Settings/check`` while it is hashed, and described (page size and count, SQLite version,
///    Core Data metadata, its owner and mode);
/// 2. ``manifest(created:stores:members:folder:folders:)``: `MANIFEST.json` with the kind, the
///    label, the folder's and its folders' owners;
/// 3. ``write(_:members:into:created:progress:)``: a temporary archive in the repository's staging
///    folder: the manifest, the `stores/` folder, then every member in order (the fast path,
///    `OverlappedPack`, writes the same tar stream its own way);
/// 4. ``publish(_:created:moved:)``: the repository writes, syncs, names it atomically (never over
///    another archive: a second one in the same second gets `_2`) and syncs its folder.
///
/// ``build(stores:members:folder:folders:)`` runs all four for a caller whose members are
/// already finished files on this machine (a safety archive; a delta archive) and is the entry
/// point to use for a new kind of archive.
public struct ArchiveBuilder: Sendable {
    /// What every archive of one run shares.
    public struct Settings: Sendable {
        public var kind: ArchiveKind = .backup
        public var label: String?
        public var compression: Compression = .zstd
        /// zstd level (nil: the default).
        public var level: Int?
        /// zstd worker threads (0: libarchive's default).
        public var threads = 0
        /// The check run on each store before it is packed (the configured `check`).
        public var check: CheckMode = .quick
        /// What a failed check does: refuse the archive (a backup: the snapshot would be a bad
        /// copy), or record the problems in the manifest (a safety archive keeps a replaced store
        /// as it was, damaged or not: it may be the very reason for the restore).
        public var failOnProblems = true
        /// For a safety archive: the archive the restore put in place.
        public var restoredFrom: String?
        /// Whether a store's database may be read through mappings (`MappedReader`): a backup's
        /// snapshot is granary's own, finished file; a safety archive's database is the very inode
        /// the user's processes had open (kept aside by a link), which one of them could still
        /// truncate under a mapping (SIGBUS): it is read with read(2).
        public var mapStores = true

        public init() {}
    }

    /// A finished file to pack: where it is on this machine, and its manifest entry.
    public struct Member: Sendable {
        public var source: String
        public var file: Manifest.File
        /// False for a source a user's process may still have open (``Settings/mapStores``).
        public var mappable: Bool

        public init(source: String, file: Manifest.File, mappable: Bool = true) {
            self.source = source
            self.file = file
            self.mappable = mappable
        }

        /// Whether the source is read through mappings (`MappedReader`). A snapshot is private to
        /// the run and finished; other files may be links to the user's own, which their owner
        /// could still truncate under a mapping (SIGBUS), so they are read with read(2).
        public var mapped: Bool { mappable && Self.mapped(kind: file.kind) }
        public static func mapped(kind: Manifest.File.Kind) -> Bool { kind == .store }
    }

    /// A store whose database file is finished, to be checked and packed by ``build(stores:members:folder:folders:)``.
    public struct StoreInput: Sendable {
        public var name: String
        public var database: String
        public var journalMode: String?
        public var owner: Manifest.Ownership?
        /// Its external-data files, ready to pack, and their member folder.
        public var externalMember: String?
        public var external: [Member]

        public init(
            name: String, database: String, journalMode: String? = nil, owner: Manifest.Ownership?,
            externalMember: String? = nil, external: [Member] = []
        ) {
            self.name = name
            self.database = database
            self.journalMode = journalMode
            self.owner = owner
            self.externalMember = externalMember
            self.external = external
        }
    }

    /// A written temporary archive, not yet published.
    public struct Written {
        public let fd: Int32
        public let temporary: String
    }

    public let repository: any Repository
    public let user: UserID
    public let settings: Settings

    public init(repository: any Repository, user: UserID, settings: Settings) {
        self.repository = repository
        self.user = user
        self.settings = settings
    }

    // MARK: The whole

    /// Checks, writes and publishes an archive of `stores` (each followed by its external-data
    /// files) and `members` (plain files), with the folder owners given. Returns it as published.
    public func build(
        stores inputs: [StoreInput], members extra: [Member] = [], folder: Manifest.Ownership? = nil,
        folders: [String: Manifest.Ownership] = [:]
    ) throws -> RepositoryEntry {
        try repository.prepare()
        var stores: [Manifest.Store] = []
        var members: [Member] = []
        for input in inputs {
            try Interruption.check()
            let (store, member) = try store(
                name: input.name, database: input.database, journalMode: input.journalMode, owner: input.owner,
                externalMember: input.externalMember)
            stores.append(store)
            members.append(member)
            members += input.external
        }
        members += extra
        let created = try repository.nextStamp(for: user)
        let manifest = manifest(created: created, stores: stores, members: members, folder: folder, folders: folders)
        let written = try write(
            manifest, members: members, into: try repository.stagingFolder(for: user), created: created)
        var moved = false
        defer {
            close(written.fd)
            if !moved { unlink(written.temporary) }
        }
        return try publish(written, created: created) { moved = true }
    }

    // MARK: The steps

    /// Checks the finished database `database` (the store `name` of the user's folder) with the
    /// configured check while it is hashed (two threads: the slower sets the time), and describes
    /// it. `live` is the store's own path, for a hint; `account` the user's time across stores.
    /// Without `hashed` (`backup --delta`, issue 35: a delta does not pack the store) only the check
    /// runs, and the member's SHA-256 is left empty for the caller to take if it packs the store.
    public func store(
        name: String, database: String, journalMode: String?, owner: Manifest.Ownership?, externalMember: String?,
        live: String? = nil, account: ContentAccount? = nil, hashed: Bool = true
    ) throws -> (Manifest.Store, Member) {
        let member = Manifest.storesFolder + name
        let mode = settings.check, user = user.rawValue, fail = settings.failOnProblems
        // Without a user's account (a safety archive), the run's limits for this store alone.
        let account =
            account ?? ContentAccount(limits: repository.context.limits, storesOfSize: FileSystem.size(database))
        let (integrity, storeFile) = try Parallel.both(
            { [mappable = settings.mapStores] in
                try Self.check(
                    database, mode: mode, user: user, store: name, live: live, account: account, fail: fail,
                    mapped: mappable)
            },
            { [mappable = settings.mapStores] in
                guard hashed else {
                    return Manifest.File(path: member, size: FileSystem.size(database), sha256: "", kind: .store)
                }
                return try Self.hash(database, member: member, kind: .store, mappable: mappable)
            })
        let db = try Database(path: database, mode: .readOnly, account: account)
        var store = Manifest.Store(
            name: name, path: member, pageSize: try db.pageSize(), pageCount: try db.pageCount(),
            journalMode: try journalMode ?? db.journalMode(), sqliteVersion: Database.libraryVersion,
            check: settings.check.rawValue, integrity: integrity, externalDataPath: externalMember,
            coreData: try CoreDataMetadata.read(db))
        store.owner = owner
        return (store, Member(source: database, file: storeFile, mappable: settings.mapStores))
    }

    /// The same for a store whose copy was not written (`backup --delta` of a WAL store, issue 35):
    /// the check runs on `db`, the live store's read-only connection, inside the read transaction
    /// the copy was made in (the same state, the same `account` and budget as a snapshot's check),
    /// and the store is described from it. The member has no file (`source`, which is gone): a
    /// delta does not pack the store; a full copies it again.
    ///
    /// With `pages` (a phase-2 delta, issue 51), the pages it read were checked alone, and this is
    /// the first problem found, or nil: no SQLite check runs; the store's `check` is `pages`
    /// (``CheckMode/pagesCheck``), its integrity `ok` or the problem, which fails the backup as a
    /// failing quick_check does.
    func store(
        name: String, open db: Database, source: String, journalMode: String, owner: Manifest.Ownership?,
        externalMember: String?, live: String? = nil, pages: String?? = nil
    ) throws -> (Manifest.Store, Member) {
        let member = Manifest.storesFolder + name
        let pageSize = try db.pageSize(), pageCount = try db.pageCount()
        // The budget of a snapshot of this size (the live file may be smaller than its state).
        db.budget.setTime(forStoreOfSize: Int64(pageSize) * Int64(pageCount))
        let integrity: String
        if let pages {
            if let problem = pages {
                guard !settings.failOnProblems else {
                    throw BackupError.checkFailed(user: user.rawValue, store: name, problem: problem, path: live)
                }
                integrity = problem
            } else {
                integrity = Database.sound
            }
        } else {
            integrity = try Self.check(
                db, mode: settings.check, user: user.rawValue, store: name, live: live, fail: settings.failOnProblems)
        }
        var store = Manifest.Store(
            name: name, path: member, pageSize: pageSize, pageCount: pageCount, journalMode: journalMode,
            sqliteVersion: Database.libraryVersion,
            check: pages == nil ? settings.check.rawValue : CheckMode.pagesCheck,
            integrity: integrity,
            externalDataPath: externalMember, coreData: try CoreDataMetadata.read(db))
        store.owner = owner
        let file = Manifest.File(path: member, size: Int64(pageSize) * Int64(pageCount), sha256: "", kind: .store)
        return (store, Member(source: source, file: file, mappable: false))
    }

    /// The manifest of an archive of `stores` holding `members` (in order), made at `created`.
    public func manifest(
        created: Date, stores: [Manifest.Store], members: [Member], folder: Manifest.Ownership?,
        folders: [String: Manifest.Ownership]
    ) -> Manifest {
        var manifest = Manifest(
            user: user.rawValue, host: repository.context.host, created: created, label: settings.label,
            compression: settings.compression, stores: stores, files: members.map(\.file))
        manifest.kind = settings.kind
        manifest.restoredFrom = settings.restoredFrom
        manifest.folder = folder
        manifest.folders = folders.isEmpty ? nil : folders
        return manifest
    }

    /// Writes the archive to a new temporary file in `folder`: the manifest, the `stores/` folder,
    /// then each member. `progress` is told the bytes packed so far and may stop the writing
    /// (false: an interruption, thrown as such). The caller closes it (and removes it unless published).
    public func write(
        _ manifest: Manifest, members: [Member], into folder: String, created: Date,
        progress: ((Int64) -> Void)? = nil
    ) throws -> Written {
        // An archive with a member twice is one `verify` and `restore` refuse: never written.
        if let twice = MemberNames.duplicate(in: members.map(\.file.path)) {
            throw ArchiveError.unsafeMember(
                path: folder, member: twice,
                reason: MemberNames.explain(twice, in: manifest).map { "\($0)" } ?? "it would be in the archive twice")
        }
        let (fd, temporary) = try FileSystem.createTemporaryFile(in: folder, for: name(created: created).fileName)
        do {
            let writer = try ArchiveWriter(
                fileDescriptor: fd, path: temporary, compression: settings.compression, level: settings.level,
                threads: settings.compression == .zstd ? settings.threads : 0, modificationTime: created,
                rawNames: ArchiveWriter.needsRawNames(members.map(\.file.path)))
            try writer.addManifest(manifest)
            try writer.addDirectory(member: Manifest.storesFolder)
            var done: Int64 = 0
            for member in members {
                try Interruption.check()
                var interrupted = false
                try writer.addFile(member: member.file.path, from: member.source, mapped: member.mapped) { chunk in
                    done += Int64(chunk.count)
                    progress?(done)
                    if Interruption.isRequested { interrupted = true }
                    return !interrupted
                }
                if interrupted { try Interruption.check() }
            }
            try writer.finish()
        } catch {
            close(fd)
            unlink(temporary)
            throw error
        }
        return Written(fd: fd, temporary: temporary)
    }

    /// The name of the archive taken at `created` (``Repository/nextStamp(for:at:)``), by this
    /// host; `sequence` 2 and up only for an archive that takes another's place (a merge).
    public func name(created: Date, sequence: Int = 1) -> ArchiveName {
        ArchiveName(
            created: created, sequence: sequence, label: settings.label, host: repository.context.host,
            compression: settings.compression)
    }

    /// Publishes a written archive under its name (``name(created:sequence:)``;
    /// ``Repository/publish(_:user:name:moved:)``: written, synced, named atomically, its folder
    /// synced, on every backend, never over another object). `moved` is called when the temporary
    /// file itself became the archive; otherwise it stays the caller's to remove.
    public func publish(_ written: Written, created: Date, sequence: Int = 1, moved: () -> Void = {}) throws
        -> RepositoryEntry
    {
        fchmod(written.fd, 0o600)
        try Interruption.check()
        return try repository.publish(
            written.temporary, user: user, name: name(created: created, sequence: sequence), moved: moved)
    }

    // MARK: Pieces

    /// Runs `mode`'s check on a finished database: `ok` (`unchecked` for `.none`), or, with
    /// `fail`, ``BackupError/checkFailed(user:store:problem:path:)`` with the first problem;
    /// without, the problems joined. `live` is the store's own path, for the hint.
    public static func check(
        _ path: String, mode: CheckMode, user: String, store: String, live: String? = nil,
        account: ContentAccount? = nil, fail: Bool = true, mapped: Bool = true
    ) throws -> String {
        guard mode != .none else { return "unchecked" }
        let db: Database
        do {
            // A finished file of granary's own is read through the tee's mappings; one a user's
            // process may still have open (``Settings/mapStores``) with plain reads.
            db =
                mapped
                ? try Database.openFinished(path: path, account: account)
                : try Database(path: path, mode: .readOnly, account: account)
        } catch {
            guard fail else { return error.message }
            throw BackupError.checkFailed(user: user, store: store, problem: error.message, path: live)
        }
        return try check(db, mode: mode, user: user, store: store, live: live, fail: fail)
    }

    /// Runs `mode`'s check on the open connection `db` (as above).
    static func check(
        _ db: Database, mode: CheckMode, user: String, store: String, live: String? = nil, fail: Bool = true
    ) throws -> String {
        guard mode != .none else { return "unchecked" }
        let problems = db.integrityCheck(full: mode == .full)
        guard problems == [Database.sound] else {
            guard fail else { return problems.joined(separator: "; ") }
            throw BackupError.checkFailed(
                user: user, store: store, problem: problems.first ?? "unknown problem", path: live)
        }
        return Database.sound
    }

    /// Size and SHA-256 of a finished file, read in chunks, as the member `member`.
    public static func hash(
        _ path: String, member: String, kind: Manifest.File.Kind, mode: UInt32? = nil, mappable: Bool = true
    ) throws -> Manifest.File {
        let digest = try FileDigest.of(path, mapped: mappable && Member.mapped(kind: kind))
        return Manifest.File(path: member, size: digest.size, sha256: digest.sha256, kind: kind, mode: mode)
    }
}

// MARK: Folder owners

extension ArchiveBuilder {
    /// The owner and mode of every folder that holds a store or its external data, by path
    /// relative to the user's folder (a restore that makes them makes them alike).
    static func folderOwnerships(of stores: [StoreFile], in user: UserFolder) -> [String: Manifest.Ownership] {
        folderOwnerships(ofStores: stores.map { ($0.name, $0.hasExternalData) }, in: user)
    }

    /// The same, for stores given by name (relative to the user's folder) and whether each has
    /// external data (a safety archive's stores, kept aside).
    static func folderOwnerships(ofStores stores: [(name: String, hasExternalData: Bool)], in user: UserFolder)
        -> [String: Manifest.Ownership]
    {
        var result = folderOwnerships(of: stores.map(\.name), in: user)
        func record(_ path: String) {
            guard result[path] == nil, let info = try? user.folder.folder(path).status() else { return }
            result[path] = .of(uid: info.uid, gid: info.gid, mode: UInt32(info.mode))
        }
        for store in stores where store.hasExternalData {
            let parent = PathText.parent(store.name)
            let support =
                (parent.isEmpty ? "" : parent + "/")
                + StoreFile.supportFolderName(for: PathText.lastComponent(store.name))
            record(support)
            record(support + "/" + StoreFile.externalDataFolderName)
        }
        return result
    }

    /// The owner and mode of every folder above each of `files` (paths relative to the user's folder).
    static func folderOwnerships(of files: [String], in user: UserFolder) -> [String: Manifest.Ownership] {
        var result: [String: Manifest.Ownership] = [:]
        for file in files {
            var path = ""
            for part in PathText.parent(file).split(separator: "/") {
                path += (path.isEmpty ? "" : "/") + part
                guard result[path] == nil, let folder = try? user.folder.folder(path),
                    let info = try? folder.status()
                else { continue }
                result[path] = .of(uid: info.uid, gid: info.gid, mode: UInt32(info.mode))
            }
        }
        return result
    }
}
