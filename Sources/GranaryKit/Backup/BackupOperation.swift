import Foundation
import GranaryDigest

/// Backs up one user: find stores → lock → snapshot → check → pack → publish.
///
/// ```swift
/// let result = try BackupOperation(root: root, repository: repo, options: .init()).run(user)
/// ```
///
/// Snapshots go to a private folder `<repo>/.granary-tmp/.USER.tmp-PID-RAND/` on the repository's
/// filesystem and are always removed. The archive is written to `<repo>/<user>/.NAME.tmp-PID-RAND`,
/// fsynced, renamed without replacing anything, and the folder fsynced. Leftovers of runs that
/// were killed (SIGKILL) are removed by the next run (`StaleTemporaries`). For a remote
/// repository the snapshots and the archive are written to the local work folder, and the
/// finished archive is uploaded (see ``RcloneRepository``).
///
/// Then the new archive is sent to each mirror, from the finished local file: a mirror that
/// fails is reported in the result (``Result/mirrors``), and the archive stays published. Each
/// mirror is looked up (does the repository exist there) as the run starts, while the
/// snapshots are taken: for a remote mirror that is an rclone run and a listing that would
/// otherwise come between the local publish and the upload. The archive's name, known only at
/// the publish, is asked for by the upload itself, which never replaces an object.
public struct BackupOperation: Sendable {
    /// How to back up.
    public struct Options: Sendable {
        public var compression: Compression = .zstd
        public var level: Int?
        public var check: CheckMode = .quick
        public var label: String?
        /// The run's settings (timeouts, content limits, CPU yield, host).
        public var context = RunContext.defaults
        public var lockTimeout: Duration {
            get { context.lockTimeout }
            set { context.lockTimeout = newValue }
        }
        /// How long an owner has to acknowledge a pause, when the backup finishes an interrupted
        /// restore first (`owner_timeout`).
        public var ownerTimeout: Duration {
            get { context.ownerTimeout }
            set { context.ownerTimeout = newValue }
        }
        /// zstd worker threads; 0 = one per core, at most `defaultMaxThreads`.
        public var threads = 0
        /// Two zstd workers at most by default: each keeps about 6 MiB, so a backup stays under
        /// 64 MiB on any machine, and it runs beside the stores' owners, not instead of them.
        public static let defaultMaxThreads = 2
        public var snapshotter = Snapshotter()
        /// The fast path's one setting (FastPath/): whether and when the first store of a
        /// `.tar.zst` is compressed while it is being snapshotted.
        public var overlap = OverlappedPack.Settings()
        /// The most bytes one user's backup copies (`[limits] bytes_per_user`, see `UserBytes`); 0: no cap.
        public var bytesPerUser: Int64 = 0
        /// The mirrors are left to the caller (``BackupRun``, which sends while the next user is
        /// backed up): the result carries the archive's local file (``Result/mirrorFile``).
        public var mirrorsLater = false
        /// Every other regular file of the user's folder goes into the archive too, as a plain
        /// member under `files/` (a final archive, the user's last copy). Links, special files and
        /// other owners' files are passed over here: `retire` refuses them before (``Retirement``).
        public var otherFiles = false
        /// Issue 35 (opt-in, `backup --delta`): page hashes in every archive, and a delta archive
        /// in place of a full when a base fits (``DeltaBackup``); nil: fulls as always.
        public var delta: DeltaPolicy?
        /// `--delta` copies WAL stores without a snapshot file when a delta may follow
        /// (`DeltaAttempt.NoCopy`); true: every store is snapshotted into a file first, as before
        /// (tests compare the two ways).
        public var snapshotEveryStore = false
        /// Issue 51, phase 2 of deltas: where `follow`'s record of the pages that changed comes
        /// from (`FollowedPages.source()`); nil: a delta hashes every page.
        public var followedPages: FollowedPagesSource?
        public init() {}
    }

    /// One store in a finished backup.
    public struct StoreResult: Sendable {
        public let name: String
        public let size: Int64
        public let journalMode: String
        public let integrity: String
    }

    /// Where a backup's time went, in seconds (summed over the user's stores).
    public struct Stages: Sendable, Codable {
        /// SQLite's backup API copying the live stores (and the external data) into scratch files.
        public var snapshot = 0.0
        /// The check and the SHA-256 of the snapshots (on two threads).
        public var checkAndHash = 0.0
        /// Writing the archive: tar and compression (when the first store was compressed while it
        /// was snapshotted, only what was left to do after the snapshots and their checks).
        public var pack = 0.0
        /// fsync of the archive, rename and fsync of its folder.
        public var sync = 0.0
        public init() {}
    }

    /// A published archive.
    public struct Result: Sendable {
        public let user: UserID
        public let archive: String
        public let size: Int64
        public let stores: [StoreResult]
        public let files: Int
        public let seconds: Double
        public let stages: Stages
        /// How the CPU work was scheduled (see `CPUYield`).
        public let priority: CPUYield.Mode
        /// Entries of the user's folder the scan passed over, with why (warnings).
        public let skipped: [UserFolder.Skipped]
        /// What a person should know about the backup that did not stop it (sparse files).
        public var warnings: [String] = []
        /// The archive as published in the repository.
        public let entry: RepositoryEntry
        /// What each mirror made of the new archive, in the order of the mirrors.
        public var mirrors: [MirrorUpload] = []
        /// With ``Options/mirrorsLater``: the archive's local file to send to the mirrors, and
        /// whether it is a copy of the caller's to remove once sent (a remote repository's upload).
        public var mirrorFile: (path: String, removeAfter: Bool)?
        /// Regular files that are not part of a store, archived under `files/` (``Options/otherFiles``).
        public var plainFiles = 0
        /// With ``Options/delta``: whether a delta or a full was written, and why a full.
        public var delta: DeltaOutcome?
        /// Stores copied without a snapshot file (`DeltaAttempt.NoCopy`), and why such a copy was
        /// made again for real, if it was (tests, the bench).
        var discardedCopies = 0
        var copiedAgain: String?
    }

    /// One mirror's copy of a new archive.
    public struct MirrorUpload: Sendable {
        /// The mirror's location.
        public let location: String
        /// Where the archive is on the mirror, when it got there.
        public let archive: String?
        /// Why it did not.
        public let error: (any GranaryError & Sendable)?
        /// Seconds the upload took.
        public let seconds: Double
        /// Issue 35: the links of a delta's chain the mirror lacked, sent before it (oldest first).
        public var sentFirst: [String] = []
    }

    public let root: Root
    public let repository: any Repository
    /// Where each new archive is sent after it is published.
    public let mirrors: [any Repository]
    public let options: Options
    public let progress: (any BackupProgress)?

    /// A backup of users under `root` into `repository`, then to each of `mirrors`.
    public init(
        root: Root, repository: any Repository, mirrors: [any Repository] = [], options: Options,
        progress: (any BackupProgress)? = nil
    ) {
        self.root = root
        self.repository = repository
        self.mirrors = mirrors
        self.options = options
        self.progress = progress
    }

    /// The private folder for snapshots.
    public var workFolder: String { repository.workFolder }

    /// Backs up `user` into a new archive.
    public func run(_ user: UserID) throws -> Result {
        _ = try root.user(user)
        let lock = try UserLock.acquire(root: root, user: user, timeout: options.lockTimeout)
        defer { lock.release() }
        // A restore or reset of this user that was interrupted is finished or rolled back first,
        // so that the snapshot never sees a store half-way through a swap.
        _ = try Recovery.recover(root: root, user: user, context: options.context)
        if let label = options.label, ArchiveName.reservedLabels.contains(label) {
            throw BackupError.reservedLabel(label)
        }
        return try runLocked(user, kind: .backup)
    }

    /// The backup itself, for a caller that holds the user's lock and has recovered the user
    /// (`retire` takes its final archive this way, with `kind` `.final` and the label `final`).
    func runLocked(_ user: UserID, kind: ArchiveKind) throws -> Result {
        let started = ContinuousClock.now
        // Started before anything yields the CPU, so the lookups (and the rclone they run) do not.
        // (Not when the caller sends to the mirrors later: it looks them up then.)
        let lookups =
            options.mirrorsLater
            ? [] : mirrors.map { mirror in Pending { try options.context.cpu.normal { try mirror.exists() } } }
        let folder = try root.user(user)
        // A user whose app has not written yet has nothing to back up: said before anything is
        // made in the repository (no empty folder of theirs is left there).
        let scanned = folder.scan()
        if kind == .backup && scanned.stores.isEmpty && scanned.unreadable.isEmpty && scanned.skipped.isEmpty {
            throw BackupError.nothingToBackUp(user: user.rawValue, folder: folder.path)
        }
        try repository.checkSeparate(from: root)
        try repository.prepare()
        let workFolder = try repository.prepareWorkFolder()
        // A backup that fails leaves no empty folder of the user in a local repository when it
        // made that folder (an empty folder would stand for a user with archives).
        let madeFolder = repository.localPath.map { $0 + "/" + user.rawValue }.flatMap {
            FileSystem.status($0) == nil ? $0 : nil
        }
        var published = false
        defer { if !published, let madeFolder { rmdir(madeFolder) } }
        let userFolder = try repository.stagingFolder(for: user)
        _ = repository.removeDeadTemporaries(users: [user])
        // This host's archives under legacy names (a host marker beside them) take today's names
        // (Hosts): the first backup of each user converts them, once.
        _ = try repository.convertLegacyArchives(of: user)

        let work = try FileSystem.createTemporaryDirectory(in: workFolder, for: "snapshot")
        defer { FileSystem.removeTree(work) }
        var overlapped: OverlappedPack?
        defer { overlapped?.discard() }
        do {
            // Everything but the snapshots themselves yields the CPU to the owners (CPUYield).
            return try options.context.cpu.yielding {
                var stages = Stages()
                let policy = kind == .backup ? options.delta : nil
                let cache = PageHashCache.folder(of: repository)
                // Issue 35 (delta archives, opt-in): page hashes, and a delta when a base fits. A
                // final archive (retire) is always a plain full, whatever the options say. Whether
                // a delta or a full, and whether the stores are copied twice, is the delta layer's
                // decision (``DeltaAttempt``); copying them is this operation's (``snapshotAll``).
                let attempt = DeltaAttempt(
                    policy: policy, mayDiscard: !options.snapshotEveryStore, user: user, repository: repository,
                    label: options.label, cache: cache)
                let attempted = try attempt.run(in: work) { copies in
                    try snapshotAll(
                        folder, scanned: copies.again == nil ? scanned : nil, into: copies.scratch, stages: &stages,
                        archiveFolder: userFolder,
                        overlapped: &overlapped, builder: self.builder(for: user, kind: kind),
                        delta: copies.discarding ? attempt : nil)
                }
                let taken = attempted.taken, delta = attempted.plan, created = attempted.created
                if delta != nil { CrashPoint.reach(.deltaPlanned) }
                var cached: String?
                // (`--delta` leaves a store's SHA-256 to be taken here, only when the store is packed.)
                let packed = try (delta?.files.map { Packed(source: $0.source, file: $0.file) } ?? taken.files).map {
                    member in
                    guard member.file.kind == .store, member.file.sha256.isEmpty else { return member }
                    var hashed = member
                    hashed.file = try ArchiveBuilder.hash(
                        member.source, member: member.file.path, kind: .store, mappable: member.mappable)
                    return hashed
                }
                let builder = builder(for: user, kind: kind, label: delta?.label ?? options.label)
                var manifest = builder.manifest(
                    created: created, stores: taken.stores, members: packed, folder: taken.folderOwner,
                    folders: taken.folders)
                if let delta { manifest.delta = delta.info }
                let (entry, mirrored) = try pack(
                    manifest, files: packed, into: userFolder, builder: builder, created: created, stages: &stages,
                    overlapped: overlapped,
                    lookups: lookups,
                    // The snapshots are in the archive: free their page cache while the archive syncs.
                    written: {
                        // `--delta`: this backup's page-hash lists are kept for the next one.
                        cached = delta.flatMap {
                            PageHashCache.stage(
                                $0.pageLists, user: user, in: cache)
                        }
                        FileSystem.removeTree(work)
                    })
                if delta != nil { CrashPoint.reach(.deltaPublished) }
                if let cached {
                    PageHashCache.keep(cached, entry: entry, manifest: manifest, base: delta?.baseChain ?? [])
                }
                // The backup checked every snapshot it packed: recorded, so that check counts the
                // archive as fresh without a verify (list still shows it unverified).
                // A phase-2 delta that checked a store by its pages alone says `pages`, never more.
                if var record = VerificationRecord.backup(entry: entry, check: options.check) {
                    if manifest.stores.contains(where: { $0.check == PageCheck.name }) { record.check = PageCheck.name }
                    try? repository.writeRecord(record, for: entry)
                }
                let seconds = Self.seconds(since: started)
                var result = Result(
                    user: user, archive: entry.path, size: entry.size,
                    stores: taken.stores.map {
                        StoreResult(
                            name: $0.name, size: Int64($0.pageSize * $0.pageCount), journalMode: $0.journalMode,
                            integrity: $0.integrity)
                    },
                    files: taken.files.count, seconds: seconds, stages: stages, priority: options.context.cpu.mode,
                    skipped: taken.skipped,
                    entry: entry)
                result.mirrors = mirrored.uploads
                result.mirrorFile = mirrored.file
                result.warnings = taken.warnings
                result.plainFiles = taken.files.lazy.filter { $0.file.kind == .plain }.count
                result.delta = delta?.outcome
                result.discardedCopies = taken.pageHashes.lazy.filter { $0?.discarding == true }.count
                result.copiedAgain = attempted.copiedAgain
                published = true
                return result
            }
        } catch let error as FileSystemError where error.isDiskFull {
            throw BackupError.diskFull(repo: repository.location, user: user.rawValue)
        } catch let error as ArchiveError {
            if case .writeFailed(_, _, let code) = error, code == ENOSPC || code == EFBIG || code == EDQUOT {
                throw BackupError.diskFull(repo: repository.location, user: user.rawValue)
            }
            throw error
        } catch let error as SQLiteError where error.kind == .full || error.isWriteError {
            // The live store is only read, so a failed write is the snapshot's, in the repository
            // (EFBIG from a file-size limit shows up this way).
            throw BackupError.diskFull(repo: repository.location, user: user.rawValue)
        }
    }

    /// A file ready to pack: where it is now and its manifest entry.
    typealias Packed = ArchiveBuilder.Member

    /// The archive builder of a backup of `user` with these options (``ArchiveBuilder``: the one
    /// way every archive is made).
    func builder(for user: UserID, kind: ArchiveKind, label: String? = nil) -> ArchiveBuilder {
        var settings = ArchiveBuilder.Settings()
        settings.kind = kind
        settings.label = label ?? options.label
        settings.compression = options.compression
        settings.level = options.level
        settings.threads = zstdThreads
        settings.check = options.check
        return ArchiveBuilder(repository: repository, user: user, settings: settings)
    }

    private static func seconds(since start: ContinuousClock.Instant) -> Double {
        (ContinuousClock.now - start).timeInterval
    }

    /// What ``snapshotAll(_:scanned:into:stages:archiveFolder:overlapped:builder:delta:)`` took.
    struct Taken: DeltaSnapshots {
        var stores: [Manifest.Store]
        var files: [Packed]
        /// Entries of the user's folder passed over, with the reason.
        var skipped: [UserFolder.Skipped]
        /// The owner of the user's folder, and of each folder a member is in.
        var folderOwner: Manifest.Ownership?
        var folders: [String: Manifest.Ownership]
        var warnings: [String]
        /// `--delta`: each store's page recorder (nil without `--delta`).
        var pageHashes: [PageRecorder?]
        /// The live stores' file identities (``StoreFile/fileIdentity``).
        var liveFiles: [String]
        /// What the base told before the copy (the first attempt of a delta), or nil.
        var started: DeltaBackup.Start?
    }

    /// Snapshots every store of the user (and copies the external data). With `delta` (a
    /// `backup --delta`): the base is read first (``DeltaBackup/start(policy:user:repository:storeNames:work:label:created:cache:)``),
    /// and when a delta may follow, each WAL store is copied without its file (``DeltaAttempt/NoCopy``).
    private func snapshotAll(
        _ folder: UserFolder, scanned: UserFolder.Scan? = nil, into work: String, stages: inout Stages,
        archiveFolder: String,
        overlapped: inout OverlappedPack?, builder: ArchiveBuilder,
        delta: DeltaAttempt? = nil
    ) throws -> Taken {
        var stores: [Manifest.Store] = []
        var files: [Packed] = []
        var pageHashes: [PageRecorder?] = []
        // The scan `runLocked` made (a second attempt scans again: the folder may have changed).
        let scan = scanned ?? folder.scan()
        if !scan.unreadable.isEmpty {
            throw BackupError.unreadable(
                user: folder.id.rawValue,
                paths: scan.unreadable.map { $0 == "./" ? folder.path + "/" : folder.path + "/" + $0 })
        }
        guard !scan.stores.isEmpty else { throw BackupError.noStores(user: folder.id.rawValue, folder: folder.path) }
        // Every member name its stores' own, before anything is copied (``MemberNames``).
        if let clash = MemberNames.clash(among: scan.stores.map { ($0.name, $0.hasExternalData) }) {
            throw BackupError.memberClash(
                user: folder.id.rawValue, member: clash.member, first: clash.first, second: clash.second)
        }
        // The stores count before any is copied; external-data files as each is (they are listed
        // after their store's snapshot, so that every file it references is there).
        var bytes = UserBytes(user: folder.id.rawValue, cap: options.bytesPerUser)
        for store in scan.stores {
            try bytes.add(store.name, length: store.claimedLength, allocated: store.allocated)
            if let wal = store.walSize { try bytes.add(store.name + "-wal", length: wal, allocated: wal) }
        }
        try checkRoom(for: scan.stores, user: folder.id, scratch: work)
        let folderInfo = try? folder.folder.status()
        let folders = ArchiveBuilder.folderOwnerships(of: scan.stores, in: folder)
        // `[limits] time` bounds the user's checks across all its stores, not each store's alone.
        let account = ContentAccount(
            limits: options.context.limits, storesOfSize: StoreFile.bytes(of: scan.stores))
        let started = try delta.flatMap { attempt in
            try attempt.policy.map {
                try DeltaBackup.start(
                    policy: $0, user: folder.id, repository: repository, storeNames: scan.stores.map(\.name),
                    work: work, label: attempt.label, created: TestClock.now(), cache: attempt.cache,
                    liveFiles: scan.stores.map(\.fileIdentity))
            }
        }
        // The pages a delta may change, across all the user's stores (the plan's share of their
        // pages, estimated from the files' sizes): a discarded copy gives up past what is left of
        // it, not past a share of its own store's pages, so that a small store that changes much
        // does not make every backup copy it twice.
        var deltaBudget = 0
        // Phase 2 (issue 51): follow's record of what changed since the base's chain, read once.
        var followed: FollowedRecord?
        if case .base(let base)? = started, let source = options.followedPages {
            followed = source.record(folder.id, base.head.chainNames, repository)
        }
        if case .base(let base)? = started {
            let pages = scan.stores.reduce(0) { sum, store in
                let pageSize = Int64(max(base.store(store.name)?.pageSize ?? Int(store.header.pageSize), 512))
                return sum + Int((store.claimedLength + (store.walSize ?? 0)) / pageSize)
            }
            deltaBudget = Int(base.policy.maxChangedShare * Double(pages))
        }
        for (index, store) in scan.stores.enumerated() {
            try Interruption.check()
            let snapshotPath = work + "/\(index).sqlite"
            progress?.update(user: folder.id.rawValue, phase: "snapshot", done: 0, total: store.size)
            let snapshotStarted = ContinuousClock.now
            // (Not with `--delta`, issue 35: its page hashes go before the stores.)
            if index == 0 && options.compression == .zstd && options.overlap.applies(toStoreOf: store.size)
                && options.delta == nil
            {
                let name = ArchiveName(
                    created: Date(), label: options.label, host: repository.context.host,
                    compression: options.compression
                ).fileName
                let pack = try OverlappedPack(
                    folder: archiveFolder, name: name, prefix: options.overlap.prefix, level: options.level,
                    threads: zstdThreads)
                overlapped = pack
                pack.follow(snapshotPath)
            }
            // The snapshot holds SQLite locks on the live store (and the owner's checkpoints wait
            // for it in WAL mode): it runs at normal priority, the follower keeps yielding.
            var described: (Manifest.Store, Packed)?
            var checkSeconds = 0.0
            let (taken, external) = try options.context.cpu.normal {
                // `--delta` (issue 35): the page hashes are taken as the snapshot is written.
                let recorder = try options.delta.map { _ in try PageRecorder(path: work + "/\(index).hashes") }
                pageHashes.append(recorder)
                // A WAL store's copy is one step: the bar follows the copy's size instead (or the
                // recorder's count, when the copy is discarded and its file stays one page long).
                var written: (@Sendable () -> Int64)?
                if let recorder { written = { @Sendable in recorder.written } }
                let watcher = progress.map { progress in
                    CopyWatcher(path: snapshotPath, written: written) {
                        [user = folder.id.rawValue, total = store.size] done in
                        progress.update(user: user, phase: "snapshot", done: min(done, total), total: total)
                    }
                }
                defer { watcher?.stop() }
                // A delta may follow: a WAL store's copy is not written, and its check runs on the
                // live store, on the copied state (beside the copy, on another thread: `described`
                // and `checkSeconds` are read once the snapshot has returned).
                var noCopy: DeltaAttempt.NoCopy?
                if case .base(let base)? = started, let old = base.store(store.name) {
                    noCopy = DeltaAttempt.NoCopy(
                        pageSize: old.pageSize, journalMode: old.journalMode, basePages: old.pages,
                        log: work + "/\(index).changes",
                        maxChanged: max(0, deltaBudget - pageHashes.reduce(0) { $0 + ($1?.changedPages ?? 0) }),
                        account: account
                    ) { db in
                        let checkStarted = ContinuousClock.now
                        described = try builder.store(
                            name: store.name, open: db, source: snapshotPath, journalMode: "wal",
                            owner: .of(uid: store.uid, gid: store.gid, mode: UInt32(store.mode)),
                            externalMember: nil, live: store.path)
                        checkSeconds = Self.seconds(since: checkStarted)
                    }
                    if let followed,
                        let pages = base.head.manifest.delta?.stores.first(where: { $0.name == store.name })
                    {
                        let record: Swift.Result<FollowedRecord.Store, FollowedFallback> =
                            followed.stores[store.name].map { .success($0) }
                            ?? .failure(
                                FollowedFallback(followed.unusable ?? "follow's generation does not hold this store"))
                        noCopy?.followed = FollowedStore(
                            record: record, store: store, basePages: pages.pageCount,
                            crossCheck: FollowedStore.crossCheckWanted)
                        // Phase 2's own check (`check: pages`) in place of the configured one,
                        // when the chain's run allows it; `check = none` checks nothing.
                        if options.check != .none {
                            noCopy?.pagesCheck = base.pagesCheck(of: store.name)
                            noCopy?.checkedByPages = { db, pages in
                                let checkStarted = ContinuousClock.now
                                described = try builder.store(
                                    name: store.name, open: db, source: snapshotPath, journalMode: "wal",
                                    owner: .of(uid: store.uid, gid: store.gid, mode: UInt32(store.mode)),
                                    externalMember: nil, live: store.path, pages: .some(pages.problem))
                                checkSeconds = Self.seconds(since: checkStarted)
                            }
                        }
                    }
                }
                // What the copy will hold, as SQLite reads the store (its -wal applied): charged
                // against the cap and the room left beyond what the files' lengths were charged.
                var charged = store.claimedLength + (store.walSize ?? 0)
                let taken = try options.snapshotter.snapshot(
                    store, to: snapshotPath, track: index == 0 ? overlapped?.track : nil,
                    limits: options.context.limits,
                    pages: recorder, noCopy: noCopy
                ) { size in
                    guard size > charged else { return }
                    try self.chargeGrowth(
                        of: store, from: charged, to: size, user: folder.id, scratch: work, counting: &bytes)
                    charged = size
                }
                if index == 0 { overlapped?.snapshotFinished() }
                // External data is copied right after the snapshot, so that every file it references
                // is still there (Core Data deletes external files of deleted rows).
                return (
                    taken,
                    try copyExternalData(
                        of: store, to: work + "/\(index).external", counting: &bytes, account: account)
                )
            }
            let (externalMember, externalFiles) = external
            stages.snapshot += Self.seconds(since: snapshotStarted) - checkSeconds
            stages.checkAndHash += checkSeconds
            if taken.discarded, let (described, packed) = described {
                var entry = described
                // (The external data is copied after the copy: its member is known only now.)
                entry.externalDataPath = externalMember
                stores.append(entry)
                files.append(packed)
                files += externalFiles
                continue
            }
            let checkStarted = ContinuousClock.now
            // The check and the SHA-256 both read the whole snapshot (from the page cache, it was
            // just written): run them on two threads, so the slower one sets the time, not the sum.
            let (entry, packed) = try builder.store(
                name: store.name, database: snapshotPath, journalMode: taken.journalMode,
                owner: .of(uid: store.uid, gid: store.gid, mode: UInt32(store.mode)), externalMember: externalMember,
                live: store.path, account: account, hashed: options.delta == nil)
            stages.checkAndHash += Self.seconds(since: checkStarted)
            stores.append(entry)
            files.append(packed)
            files += externalFiles
        }
        var allFolders = folders
        if options.otherFiles {
            let plain = try copyOtherFiles(
                of: folder, stores: scan.stores.map(\.name), to: work + "/files", counting: &bytes, account: account)
            files += plain
            for (path, owner) in ArchiveBuilder.folderOwnerships(
                of: plain.map { String($0.file.path.dropFirst(Manifest.plainFilesFolder.count)) }, in: folder)
            where allFolders[path] == nil {
                allFolders[path] = owner
            }
        }
        let folderOwner = folderInfo.map {
            Manifest.Ownership.of(uid: $0.uid, gid: $0.gid, mode: UInt32($0.mode))
        }
        return Taken(
            stores: stores, files: files, skipped: scan.skipped, folderOwner: folderOwner, folders: allFolders,
            warnings: bytes.warnings, pageHashes: pageHashes, liveFiles: scan.stores.map(\.fileIdentity),
            started: started)
    }

    /// Copies every regular file of the user's folder that no store holds (``FolderContents/outside(stores:)``)
    /// into `copyFolder`, each opened beneath the user's folder with the owner's credentials and
    /// never through a link (a file swapped for a link fails the backup), hashed as it is copied:
    /// the files to pack as `files/NAME`, with their owner, group and mode. Each copy is charged to
    /// the user's time (`account`, which each file extends by `time_per_gib` for its blocks).
    private func copyOtherFiles(
        of user: UserFolder, stores: [String], to copyFolder: String, counting bytes: inout UserBytes,
        account: ContentAccount
    ) throws -> [Packed] {
        let others = FolderContents.archivable(
            FolderContents.read(user.folder).outside(stores: stores), owner: user.folder.ownerUID)
        guard !others.isEmpty else { return [] }
        CrashPoint.reach(.retireFilesListed)
        try FileSystem.makeDirectory(copyFolder)
        var files: [Packed] = []
        for (index, item) in others.enumerated() {
            try Interruption.check()
            try bytes.add(item.name, length: item.size, allocated: item.size)
            let (parent, name) = try user.folder.parent(of: item.name)
            let source = try parent.openFile(name)
            let info = try source.status()
            let copy = copyFolder + "/\(index)"
            account.allow(copyOf: min(item.size, Int64(info.st_blocks) * 512))
            let (size, digest) = try FileDigest.copy(from: source, to: copy, limit: item.size, account: account)
            files.append(
                Packed(
                    source: copy,
                    file: Manifest.File(
                        path: Manifest.plainFilesFolder + item.name, size: size, sha256: digest, kind: .plain,
                        mode: UInt32(info.st_mode & 0o7777),
                        owner: .of(uid: info.st_uid, gid: info.st_gid, mode: UInt32(info.st_mode)))))
        }
        return files
    }

    /// Refuses, before a byte is written, a user whose snapshots could not fit: each store is
    /// copied page by page into the repository's scratch folder, so a store that claims more pages
    /// than it has blocks on disk (a sparse file: a few KiB for its owner, hundreds of GiB for
    /// granary) would fill the repository and fail every other user's backup. The snapshot of a
    /// store needs up to the larger of its size and its header's page count, plus its -wal.
    func checkRoom(for stores: [StoreFile], user: UserID, scratch: String) throws {
        var needed: Int64 = 0
        var largest: StoreFile?
        for store in stores {
            let size = store.claimedLength + (store.walSize ?? 0)
            if largest.map({ size > $0.claimedLength }) ?? true {
                largest = store
            }
            needed += size
        }
        guard let free = FreeSpace.of(scratch)?.bytes, let largest else { return }
        if needed > free {
            let claimed = max(largest.size, Int64(largest.header.pageCount) * Int64(largest.header.pageSize))
            throw BackupError.noRoom(
                user: user.rawValue, repo: repository.location, needed: needed, free: free, store: largest.path,
                sparse: largest.allocated < claimed / 16 ? largest.allocated : nil)
        }
    }

    /// Charges what a store's copy will hold past what its files' lengths were charged (`charged`),
    /// once SQLite has said how many pages it will copy (``Snapshotter``): a `-wal` whose commit
    /// frame claims a size its owner never wrote, or a rollback-journal store lengthened after it
    /// was counted. Past the user's cap, or past the room left in the scratch folder, the copy
    /// never starts (or stops within a step) and the user's backup fails.
    private func chargeGrowth(
        of store: StoreFile, from charged: Int64, to size: Int64, user: UserID, scratch: String,
        counting bytes: inout UserBytes
    ) throws {
        let extra = size - charged
        try bytes.add(
            "\(store.name) (\(ByteCountText.approximate(size)) as SQLite reads it, its -wal applied)", length: extra,
            allocated: extra)
        if let free = FreeSpace.of(scratch)?.bytes, extra > free {
            throw BackupError.claimedPastRoom(
                user: user.rawValue, repo: repository.location, store: store.path, claimed: size, free: free)
        }
    }

    /// Copies the files of `store`'s external-data folder into `copyFolder` (each opened beneath
    /// the user's folder, hashed as it is copied): its member name in the archive (nil without
    /// such a folder) and the files to pack. Anything in the folder that is not a regular file of
    /// the folder's owner fails the backup: an attachment must not be passed over in silence.
    /// Each copy is charged to the user's time (`account`, extended by `time_per_gib` for each
    /// GiB of the file's blocks): past it the user fails (``CopyTimeError``).
    private func copyExternalData(
        of store: StoreFile, to copyFolder: String, counting bytes: inout UserBytes, account: ContentAccount
    ) throws
        -> (String?, [Packed])
    {
        guard let external = try store.externalDataFolder() else { return (nil, []) }
        let member = Manifest.storesFolder + store.externalDataName
        try FileSystem.makeDirectory(copyFolder)
        var files: [Packed] = []
        for (index, entry) in try external.entries().enumerated() {
            try Interruption.check()
            guard entry.kind == .file else {
                throw FolderError.notRegular(path: external.path(entry.name), kind: entry.kind)
            }
            try bytes.add(store.externalDataName + "/" + entry.name, length: entry.size, allocated: entry.allocated)
            let source = try external.openFile(entry.name)
            let copy = copyFolder + "/\(index)"
            account.allow(copyOf: min(entry.size, entry.allocated))
            let (size, digest) = try FileDigest.copy(from: source, to: copy, limit: entry.size, account: account)
            let mode = UInt32(try source.status().st_mode & 0o7777)
            files.append(
                Packed(
                    source: copy,
                    file: Manifest.File(
                        path: member + "/" + entry.name, size: size, sha256: digest, kind: .external, mode: mode)))
        }
        return (member, files)
    }

    /// Runs the check on a snapshot; throws `BackupError.checkFailed` with the first problem.
    /// `live` is the store's own path, for the hint.
    /// `account`: the user's time across stores (`ContentAccount`), charged too.
    static func check(
        _ path: String, mode: CheckMode, user: String, store: String, live: String? = nil,
        account: ContentAccount? = nil
    ) throws -> String {
        try ArchiveBuilder.check(path, mode: mode, user: user, store: store, live: live, account: account)
    }

    /// zstd workers: `threads`, or one per core up to `defaultMaxThreads`.
    private var zstdThreads: Int {
        options.threads > 0
            ? options.threads : min(ProcessInfo.processInfo.activeProcessorCount, Options.defaultMaxThreads)
    }

    /// A written temporary archive, not yet synced or published.
    private struct Written {
        let fd: Int32
        let temporary: String
        /// Called once the temporary file has its final name.
        let onRenamed: () -> Void
    }

    /// Writes the archive to a temporary file, syncs it, publishes it under a new name and sends
    /// it to the mirrors.
    ///
    /// The archive is written one of two ways, chosen here once: finished by the follower that
    /// compressed the first store during its snapshot (the fast path, `OverlappedPack`), or, when
    /// there was none or it gave up, in order (`packInOrder`: the manifest, then each file). Both
    /// give the same tar stream (OverlappedPackTests compares them).
    private func pack(
        _ manifest: Manifest, files: [Packed], into folder: String, builder: ArchiveBuilder, created: Date,
        stages: inout Stages,
        overlapped: OverlappedPack?, lookups: [Pending<Bool>], written: () -> Void
    ) throws -> (RepositoryEntry, Mirrored) {
        let packStarted = ContinuousClock.now
        let total = files.reduce(Int64(0)) { $0 + $1.file.size }
        let archive: Written
        // The follower's file is closed (and removed unless published) by its `discard()`.
        let inOrder: Bool
        if let overlapped,
            let followed = try finishOverlapped(
                overlapped, manifest: manifest, files: files, created: created, total: total)
        {
            archive = followed
            inOrder = false
        } else {
            overlapped?.discard()
            let user = manifest.user
            let inOrderWritten = try builder.write(manifest, members: files, into: folder, created: created) { done in
                progress?.update(user: user, phase: "pack", done: done, total: total)
            }
            archive = Written(fd: inOrderWritten.fd, temporary: inOrderWritten.temporary, onRenamed: {})
            inOrder = true
        }
        var published = false
        defer {
            if inOrder {
                close(archive.fd)
                if !published { unlink(archive.temporary) }
            }
        }
        stages.pack = Self.seconds(since: packStarted)
        if manifest.delta != nil { CrashPoint.reach(.deltaWritten) }
        written()
        return try publish(
            archive.fd, temporary: archive.temporary, builder: builder, created: created, stages: &stages,
            lookups: lookups
        ) {
            published = true
            archive.onRenamed()
        }
    }

    /// The fast path's archive, finished; nil when the follower gave up.
    private func finishOverlapped(
        _ overlapped: OverlappedPack, manifest: Manifest, files: [Packed], created: Date, total: Int64
    ) throws -> Written? {
        guard let firstStore = manifest.stores.first else { return nil }
        var done = files.first?.file.size ?? 0
        let completed = try overlapped.complete(
            manifest: manifest, files: files, pageSize: firstStore.pageSize, created: created
        ) { chunk in
            done += Int64(chunk.count)
            progress?.update(user: manifest.user, phase: "pack", done: done, total: total)
        }
        return completed
            ? Written(fd: overlapped.fd, temporary: overlapped.temporary, onRenamed: overlapped.markPublished) : nil
    }

    /// Syncs a written temporary archive and publishes it under a new name (a local repository:
    /// renamed in its folder, calling `onRenamed` right after, and the folder synced; a remote
    /// one: uploaded, the temporary file then removed by the caller); then sends it to each mirror
    /// (`lookups`: each mirror's lookup, started with the run).
    /// What became of the mirrors: their uploads, or the file to send them later.
    struct Mirrored {
        var uploads: [MirrorUpload] = []
        var file: (path: String, removeAfter: Bool)?
    }

    private func publish(
        _ fd: Int32, temporary: String, builder: ArchiveBuilder, created: Date, stages: inout Stages,
        lookups: [Pending<Bool>],
        onRenamed: () -> Void
    ) throws -> (RepositoryEntry, Mirrored) {
        let syncStarted = ContinuousClock.now
        // The repository syncs, names and publishes it, whatever its backend. A remote
        // repository's publish is an upload: at the caller's priority, as for mirrors below.
        let entry = try options.context.cpu.normal {
            try builder.publish(
                ArchiveBuilder.Written(fd: fd, temporary: temporary), created: created, moved: onRenamed)
        }
        stages.sync = Self.seconds(since: syncStarted)
        // The finished archive, still on this machine: the published file, or the temporary one
        // that was uploaded.
        let local = entry.localFile ?? temporary
        if options.mirrorsLater && !mirrors.isEmpty {
            if entry.localFile != nil { return (entry, Mirrored(file: (local, false))) }
            // The uploaded temporary file is removed by the caller: a second name keeps it for the mirrors.
            let kept = (temporary as NSString).deletingLastPathComponent + "/" + FileSystem.temporaryName(for: "mirror")
            if link(temporary, kept) == 0 { return (entry, Mirrored(file: (kept, true))) }
        }
        // An upload waits on the network and on rclone, not on granary's own CPU work: it runs at
        // the caller's priority (rclone started from a SCHED_IDLE thread would inherit it and stall
        // behind any busy program, holding the user's lock).
        let uploads = options.context.cpu.normal {
            zip(mirrors, lookups).map { mirror, lookup in
                Self.send(local, as: entry, to: mirror, from: repository, lookup: lookup)
            }
        }
        return (entry, Mirrored(uploads: uploads))
    }

    /// Sends the archive in the local file `file` (published as `entry`) to `mirror`, under
    /// the same name; a failure is the upload's outcome, not thrown. `lookup` is the mirror's
    /// `exists()` started earlier: what it threw is this mirror's failure; once it found the
    /// repository, `prepare()` has nothing left to ask of a remote one. A delta (issue 35) goes
    /// only after the links of its chain the mirror lacks, sent from `primary` oldest first
    /// (``MirrorSync/sendChain(of:file:from:to:)``): a mirror never holds a delta without its chain.
    static func send(
        _ file: String, as entry: RepositoryEntry, to mirror: any Repository, from primary: any Repository,
        lookup: Pending<Bool>? = nil
    ) -> MirrorUpload {
        let started = ContinuousClock.now
        do {
            let object = entry.user.rawValue + "/" + entry.name.fileName
            _ = try lookup?.wait()
            try mirror.prepare()
            let sentFirst = try MirrorSync.sendChain(of: entry, file: file, from: primary, to: mirror)
            do { try mirror.publishObject(object, from: file) } catch RepositoryError.nameTaken {
                // Another archive under this one's name: this archive's failure, not the mirror's.
                throw MirrorError.nameTaken(mirror: mirror.location, archive: mirror.display(object))
            }
            var upload = MirrorUpload(
                location: mirror.location, archive: mirror.display(object), error: nil, seconds: seconds(since: started)
            )
            upload.sentFirst = sentFirst
            return upload
        } catch let error as any GranaryError & Sendable {
            return MirrorUpload(location: mirror.location, archive: nil, error: error, seconds: seconds(since: started))
        } catch {
            return MirrorUpload(
                location: mirror.location, archive: nil,
                error: UnexpectedError(description: "\(mirror.location): \(error)"),
                seconds: seconds(since: started))
        }
    }
}

/// A mirror that cannot take an archive.
public enum MirrorError: GranaryError, Sendable {
    /// The mirror has another archive under the new archive's name.
    case nameTaken(mirror: String, archive: String)

    public var description: String {
        switch self {
        case .nameTaken(_, let archive):
            return
                "\(archive) already exists and holds other bytes than this archive; nothing was overwritten. Another machine writes as this host: give each machine its own host name (--host, host =)"
        }
    }
}
