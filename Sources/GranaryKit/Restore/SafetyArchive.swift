import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Packs what a restore or reset replaced into a safety archive of the user
/// (`…-pre-restore.tar.zst`, `…-pre-reset.tar.zst`), in the repository's normal format and marked
/// as such in its manifest (`"kind": "safety"`, with the archive that was restored), so that
/// an undo (`RestoreRequest.undo`) can put it back, and so that nothing that means "the user's
/// backups" (the default archive of a restore, a restore as of a time, the latest verified, `check`, the retention rules)
/// ever takes it for one.
///
/// It is complete: every replaced database and every external-data file the old stores had
/// (those removed by the restore and those kept), as they were kept aside by the swap — complete
/// databases (checkpointed before they were set aside), each copied bounded into the
/// repository's scratch folder first, since an owner may still hold the old inode open.
public enum SafetyArchive {
    /// One replaced store.
    public struct Item: Sendable {
        /// The store's name relative to the user's folder.
        public var name: String
        /// The replaced database file.
        public var database: String
        /// The replaced external-data files, if any.
        public var external: String?

        public init(name: String, database: String, external: String?) {
            self.name = name
            self.database = database
            self.external = external
        }
    }

    /// Writes the archive through ``ArchiveBuilder`` (the same members, manifest and check as a
    /// backup's: each store checked with `check`, the configured mode, its problems recorded
    /// rather than refused; the owners of the user's folder and of its store folders, `folder`
    /// and `folders`, recorded) and returns it as the repository shows it. It appears under its
    /// final name only when complete and synced.
    public static func write(
        user: UserID, items: [Item], repository: any Repository, label: String?, kind: ArchiveKind = .safety,
        restoredFrom: String? = nil,
        compression: Compression = .zstd, check: CheckMode = .quick, folder: Manifest.Ownership? = nil,
        folders: [String: Manifest.Ownership] = [:]
    ) throws -> String {
        var settings = ArchiveBuilder.Settings()
        settings.kind = kind
        settings.label = label
        settings.compression = compression
        settings.check = check
        settings.failOnProblems = false
        // The replaced databases are the inodes the user's processes had open: never mapped.
        settings.mapStores = false
        settings.restoredFrom = restoredFrom
        var inputs: [ArchiveBuilder.StoreInput] = []
        // The external-data files kept aside are the user's inodes (linked in by descriptor): a
        // process of theirs that has one open can still grow it to terabytes. Each is opened
        // beneath its folder's descriptor (no link followed), copied into the repository's
        // scratch folder no further than its length when the folder was listed, and the copy is
        // what is hashed and packed; the copies are charged to one time budget of the user's, as a
        // backup's are (``ContentAccount``).
        let scratch = try FileSystem.createTemporaryDirectory(in: try repository.prepareWorkFolder(), for: "safety")
        defer { FileSystem.removeTree(scratch) }
        let account = ContentAccount(
            limits: repository.context.limits,
            storesOfSize: items.reduce(Int64(0)) {
                $0 + (FileSystem.status($1.database).map { Int64($0.st_size) } ?? 0)
            })
        for (itemIndex, item) in items.enumerated() {
            try Interruption.check()
            var external: [ArchiveBuilder.Member] = []
            var externalMember: String?
            if let path = item.external, FileSystem.isDirectory(path) {
                let prefix = Manifest.storesFolder + StoreFile.externalDataName(for: item.name)
                externalMember = prefix
                let kept = try Folder<GranaryOwned>.open(path: path)
                for (index, entry) in try kept.entries().enumerated() where entry.kind == .file {
                    try Interruption.check()
                    let source = try kept.openFile(entry.name)
                    let copy = scratch + "/\(itemIndex)-\(index)"
                    account.allow(copyOf: min(entry.size, entry.allocated))
                    let (size, digest) = try FileDigest.copy(
                        from: source, to: copy, limit: entry.size, account: account)
                    let mode = UInt32(try source.status().st_mode & 0o7777)
                    external.append(
                        ArchiveBuilder.Member(
                            source: copy,
                            file: Manifest.File(
                                path: prefix + "/" + entry.name, size: size, sha256: digest, kind: .external,
                                mode: mode)))
                }
            }
            // The replaced database is the user's inode too (a process that kept it open can
            // still grow it): it is copied the same way, no further than its length when it is
            // opened here, and the copy is what is checked and packed.
            let (database, status) = try copyDatabase(
                item.database, to: scratch + "/\(itemIndex)-store", account: account)
            inputs.append(
                ArchiveBuilder.StoreInput(
                    name: item.name, database: database,
                    owner: .of(uid: status.st_uid, gid: status.st_gid, mode: UInt32(status.st_mode)),
                    externalMember: externalMember, external: external))
        }
        let builder = ArchiveBuilder(repository: repository, user: user, settings: settings)
        if kind == .safety,
            let entry = try delta(
                of: inputs, builder: builder, label: label, scratch: scratch, folder: folder, folders: folders)
        {
            return entry.path
        }
        return try builder.build(stores: inputs, folder: folder, folders: folders).path
    }

    /// The safety archive as a delta on the user's newest backup, when that backup is a sound base
    /// (the test `backup --delta` makes, ``DeltaBackup/start(policy:user:repository:storeNames:work:label:created:cache:liveFiles:)``:
    /// page hashes, its whole chain present and not found bad, the same stores; then the page size
    /// and journal mode of each store, and the share of pages changed), so that a restore costs
    /// what it replaced rather than a whole copy of the user's stores. Nil when there is no sound
    /// base (no backup, one without page hashes, a broken chain, a safety archive newer than it):
    /// the caller writes the plain full. When the plan decides a full after the stores are checked
    /// (too many pages changed, another page size), the full it describes (with page hashes) is
    /// written here, so the stores are not checked twice. The chain's length and age, which bound
    /// how often a backup writes a full, do not apply: a safety archive starts no chain.
    static func delta(
        of inputs: [ArchiveBuilder.StoreInput], builder: ArchiveBuilder, label: String?, scratch: String,
        folder: Manifest.Ownership?, folders: [String: Manifest.Ownership]
    ) throws -> RepositoryEntry? {
        let repository = builder.repository, user = builder.user
        var policy = DeltaPolicy()
        policy.maxChain = DeltaRestore.chainLimit - 1
        policy.maxAge = .infinity
        let work = scratch + "/delta"
        try FileSystem.makeDirectory(work)
        try repository.prepare()
        let created = try repository.nextStamp(for: user)
        // The page-hash lists a `backup --delta` kept of the newest backup (read, never written).
        _ = try repository.prepareWorkFolder()
        let cache = PageHashCache.folder(of: repository)
        let started = try DeltaBackup.start(
            policy: policy, user: user, repository: repository, storeNames: inputs.map(\.name), work: work,
            label: label, created: created, cache: cache)
        guard case .base = started else { return nil }
        var stores: [Manifest.Store] = []
        var files: [DeltaBackup.File] = []
        for input in inputs {
            try Interruption.check()
            let (store, member) = try builder.store(
                name: input.name, database: input.database, journalMode: input.journalMode, owner: input.owner,
                externalMember: input.externalMember)
            stores.append(store)
            files.append(DeltaBackup.File(source: member.source, file: member.file))
            files += input.external.map { DeltaBackup.File(source: $0.source, file: $0.file) }
        }
        let plan = try DeltaBackup.plan(
            policy: policy, user: user, repository: repository, stores: stores, files: files, work: work,
            label: label, created: created, started: started)
        var settings = builder.settings
        settings.label = plan.label
        let packer = ArchiveBuilder(repository: repository, user: user, settings: settings)
        let members = plan.files.map { ArchiveBuilder.Member(source: $0.source, file: $0.file, mappable: false) }
        var manifest = packer.manifest(
            created: created, stores: stores, members: members, folder: folder, folders: folders)
        manifest.delta = plan.info
        let written = try packer.write(
            manifest, members: members, into: try repository.stagingFolder(for: user), created: created)
        var moved = false
        defer {
            close(written.fd)
            if !moved { unlink(written.temporary) }
        }
        return try packer.publish(written, created: created) { moved = true }
    }

    /// Copies the replaced database at `path` (opened beneath its folder's descriptor, no link
    /// followed) to `copy`, bounded by its length when opened and charged to `account`; returns
    /// the copy and the replaced file's status.
    static func copyDatabase(_ path: String, to copy: String, account: ContentAccount) throws -> (String, stat) {
        let parent = PathText.parent(path)
        let folder = try Folder<GranaryOwned>.open(path: parent.isEmpty ? "." : parent)
        let source = try folder.openFile((path as NSString).lastPathComponent)
        let status = try source.status()
        let size = Int64(status.st_size)
        account.allow(copyOf: min(size, Int64(status.st_blocks) * 512))
        _ = try FileDigest.copy(from: source, to: copy, limit: size, account: account)
        return (copy, status)
    }

    static func hash(_ path: String) throws -> (Int64, String) {
        let digest = try FileDigest.of(path)
        return (digest.size, digest.sha256)
    }
}
