import Foundation
import GranaryOwner

#if canImport(Glibc)
    import Glibc
#endif

/// How a store's new content is put in place (PRODUCT.md, "Restore and the reopen protocol").
public enum RestoreMethod: String, Sendable, CaseIterable, Codable {
    /// Per store: `swap` when an owner serves the reopen protocol, `offline` when nobody has it
    /// open, `online` otherwise.
    case auto
    /// Pause the owner, rename the verified file into place, resume the owner.
    case swap
    /// Copy into the live database through the SQLite backup API under SQLite's locking.
    case online
    /// Nobody has the store open: the same journalled rename, without an owner.
    case offline
}

/// What to restore (or reset), and how.
public struct RestoreRequest: Sendable {
    /// `restore` puts an archive back; `reset` empties the stores, keeping their schema.
    public enum Operation: String, Sendable { case restore, reset }
    public var operation: Operation = .restore
    public var user: UserID
    /// An archive file name in the user's repository folder, or a path; nil: the newest (or per `at`).
    public var archive: String?
    /// The newest archive at or before this time.
    public var at: Date?
    /// Restore into this folder instead, touching nothing live.
    public var target: String?
    public var method: RestoreMethod = .auto
    public var dryRun = false
    public var ownerTimeout: Duration = .seconds(10)
    /// How long granary asks the owner to stay paused at most.
    public var lease: Duration = .seconds(30)
    public var force = false
    public var safetyArchive = true
    public var lockTimeout: Duration = .seconds(60)

    public init(user: UserID) { self.user = user }
}

/// What a restore did (or, with `dryRun`, would do).
public struct RestoreReport: Sendable {
    /// One store.
    public struct Store: Sendable {
        public var name: String
        public var live: String
        /// `swap`, `offline`, `online`, or `new` (not live before), or `copy` (`--to`).
        public var method: String
        public var ownerPID: Int32?
        public var openBy: [Int32]
        public var staged: String
    }
    public var user: String
    public var archive: String?
    public var target: String?
    public var stores: [Store] = []
    public var dryRun: Bool
    /// Pause windows of the owners (PAUSED received → RESUMED received).
    public var pauseWindows: [Duration] = []
    public var safetyArchive: String?
    /// What recovery did first, when a previous run had been interrupted.
    public var recovered: Recovery.Report?
}

/// Restores or resets one user's stores: verify into staging, then swap, copy online, or rename.
///
/// Reads top to bottom: lock → recover → choose archive → stage and verify → compare → pick
/// methods → (dry run ends here) → online copies → pause owners → journalled swaps → resume
/// → safety archive → clean up.
public struct Restorer: Sendable {
    public let root: Root
    public let repository: Repository?

    public init(root: Root, repository: Repository?) {
        self.root = root
        self.repository = repository
    }

    public func run(_ request: RestoreRequest) throws -> RestoreReport {
        let user = try root.user(request.user)
        let lock = try UserLock.acquire(root: root, user: request.user, timeout: request.lockTimeout)
        defer { lock.release() }
        let recovered = try Recovery.recover(root: root, user: request.user)

        let archive = request.operation == .restore ? try chooseArchive(request) : nil
        var report = RestoreReport(user: request.user.rawValue, archive: archive, target: request.target, dryRun: request.dryRun)
        if recovered.hadJournal { report.recovered = recovered }

        let work = Recovery.workFolder(root: root, user: request.user)
        let staging = work + "/staged"
        let asideFolder = work + "/aside"
        try FileSystem.makeDirectory(staging)
        try FileSystem.makeDirectory(asideFolder)
        var finished = false
        defer { if !finished, Recovery.journal(root: root, user: request.user).read() == nil { FileSystem.removeTree(work) } }
        guard let stagingInfo = FileSystem.status(staging), let userInfo = FileSystem.status(user.path) else {
            throw FileSystemError("stat", path: staging)
        }
        if request.target == nil && stagingInfo.st_dev != userInfo.st_dev {
            throw RestoreError.differentFilesystem(staging: staging, live: user.path)
        }

        // Stage and verify.
        let liveStores = user.stores()
        var staged: [(name: String, path: String, external: String?)] = []
        if let archive {
            let manifest = try stageVerified(archive, into: staging, user: request.user)
            try compare(manifest, live: liveStores, staging: staging, force: request.force)
            staged = manifest.stores.map { ($0.name, Staging.stagedPath(of: $0, in: staging), Staging.stagedExternal(of: $0, in: staging)) }
        } else {
            for store in liveStores {
                let path = staging + "/stores/" + store.name
                try ResetStager.stage(live: store, into: path, busyTimeout: request.ownerTimeout)
                staged.append((store.name, path, nil))
            }
        }

        if let target = request.target {
            for store in staged {
                report.stores.append(.init(name: store.name, live: target + "/" + store.name, method: "copy", openBy: [], staged: store.path))
            }
            if !request.dryRun { try place(staged, into: target) }
            finished = true
            FileSystem.removeTree(work)
            return report
        }

        // Pick a method per store.
        var owners: [String: ReopenClient] = [:]
        for store in staged {
            let live = user.path + "/" + store.name
            guard let info = FileSystem.status(live) else {
                report.stores.append(.init(name: store.name, live: live, method: "new", openBy: [], staged: store.path))
                continue
            }
            let owner = request.method == .online
                ? nil : try ReopenClient.connect(store: live, storeOwnerUID: info.st_uid, timeout: request.ownerTimeout)
            let holders = OpenFiles.holders(of: live)
            let method: RestoreMethod
            switch request.method {
            case .auto: method = owner != nil ? .swap : holders.isEmpty ? .offline : .online
            case .swap:
                guard owner != nil else { throw RestoreError.noOwner(store: live) }
                method = .swap
            case .offline:
                guard owner == nil && holders.isEmpty else {
                    throw RestoreError.storeOpen(store: live, pids: holders.isEmpty ? [owner!.ownerPID] : holders)
                }
                method = .offline
            case .online: method = .online
            }
            if method == .swap { owners[store.name] = owner } else { owner?.close() }
            report.stores.append(.init(name: store.name, live: live, method: method.rawValue, ownerPID: owner?.ownerPID, openBy: holders, staged: store.path))
        }
        if request.dryRun {
            for owner in owners.values { owner.close() }
            return report
        }

        // The journal's plan: every store, before anything live is touched.
        var entries: [SwapJournal.Entry] = []
        for (store, plan) in zip(staged, report.stores) where plan.method != "new" {
            entries.append(try makeEntry(store: store, live: plan.live, method: plan.method, asideFolder: asideFolder))
        }
        let label = request.operation == .restore ? "pre-restore" : "pre-reset"
        let journal = Recovery.journal(root: root, user: request.user)
        try journal.begin(SwapJournal.Plan(
            user: request.user.rawValue, operation: request.operation.rawValue, label: label, archive: archive,
            repository: request.safetyArchive ? repository?.path : nil, stores: entries))

        // Swaps: pause every owner, swap, resume. Any failure before a commit rolls back.
        let swaps = entries.filter { $0.method == "swap" }
        var pausedAt: [String: ContinuousClock.Instant] = [:]
        do {
            // Online copies: SQLite's own locking makes each one atomic.
            for entry in entries where entry.method == "online" {
                try OnlineRestore.restore(staged: entry.staged, into: entry.live, aside: entry.aside, busyTimeout: request.ownerTimeout)
                try journal.record("online-commit \(entry.name)", durable: true)
            }
            // Stores that were not live before: a plain rename into place.
            for (store, plan) in zip(staged, report.stores) where plan.method == "new" {
                try FileSystem.makeDirectory((plan.live as NSString).deletingLastPathComponent, mode: 0o755)
                // Owned like the user's folder: granary never leaves root-owned files there.
                if let owner = FileSystem.status(user.path) { chown(store.path, owner.st_uid, owner.st_gid) }
                try FileSystem.renameNoReplace(store.path, to: plan.live)
                try FileSystem.syncParent(of: plan.live)
            }
            for entry in swaps {
                if let owner = owners[entry.name] {
                    try owner.pause(lease: request.lease, timeout: request.ownerTimeout)
                    pausedAt[entry.name] = .now
                }
            }
            // Trust, but check: an owner that acknowledged without closing its connections (or a
            // process outside the protocol) would keep writing to the old inode after the rename.
            for entry in swaps {
                let before = report.stores.first { $0.name == entry.name }?.openBy ?? []
                var holders = OpenFiles.holders(of: entry.live, among: before)
                if holders.isEmpty && OpenFiles.hasWALConnection(entry.live) { holders = OpenFiles.holders(of: entry.live) }
                if !holders.isEmpty || OpenFiles.hasWALConnection(entry.live) {
                    let who = holders.isEmpty ? "of another user" : holders.map(String.init).joined(separator: ", ")
                    throw RestoreError.storeBusy(store: entry.live, detail: "still open by process \(who) after the pause")
                }
            }
            for entry in swaps { try StoreSwap.perform(entry, journal: journal, owner: owners[entry.name]) }
        } catch {
            // Roll back (or forward, for stores already committed) before the owners reopen.
            _ = try? Recovery.recover(root: root, user: request.user)
            for owner in owners.values { try? owner.resume(timeout: request.ownerTimeout); owner.close() }
            throw (error as? ReopenError).map { RestoreError.owner($0) } ?? error
        }
        CrashPoint.reach()
        for entry in swaps {
            guard let owner = owners[entry.name] else { continue }
            try owner.resume(timeout: request.ownerTimeout)
            if let start = pausedAt[entry.name] { report.pauseWindows.append(.now - start) }
            owner.close()
        }
        try journal.record("resumed")

        // After the owners run again: the safety archive, then clean up.
        CrashPoint.reach()
        let done = try Recovery.recover(root: root, user: request.user)
        report.safetyArchive = done.safetyArchive
        finished = true
        return report
    }

    private func chooseArchive(_ request: RestoreRequest) throws -> String {
        if let name = request.archive, name.contains("/") {
            guard FileSystem.isRegularFile(name) else { throw RestoreError.archiveNotFound(user: request.user.rawValue, name: name) }
            return name
        }
        guard let repository else { throw SettingsError.missing("repository", flag: "--repo", variable: "GRANARY_REPO") }
        let archives = repository.archives(of: request.user)
        if let name = request.archive {
            guard let entry = archives.first(where: { $0.name.fileName == name }) else {
                throw RestoreError.archiveNotFound(user: request.user.rawValue, name: name)
            }
            return entry.path
        }
        guard !archives.isEmpty else { throw RestoreError.noArchives(user: request.user.rawValue) }
        if let at = request.at {
            guard let entry = archives.last(where: { $0.name.created <= at }) else {
                throw RestoreError.nothingBefore(user: request.user.rawValue, time: ArchiveName.stamp(at))
            }
            return entry.path
        }
        return archives.last!.path
    }

    /// Stages `archive`; when it does not verify, finds the newest archive of the user that does, for the message.
    private func stageVerified(_ archive: String, into staging: String, user: UserID) throws -> Manifest {
        do {
            return try Staging.extract(archive: archive, into: staging, user: user.rawValue)
        } catch RestoreError.verificationFailed(let path, let reason, _) {
            // The newest archive that verifies, for the hint: `verify`'s records answer for the
            // archives they still match (a full check that passed, or a failure); the others are
            // verified here, into scratch that is not synced.
            var good: String?
            let work = (staging as NSString).deletingLastPathComponent
            for candidate in (repository?.archives(of: user) ?? []).reversed() where candidate.path != archive {
                if let record = VerificationRecord.read(for: candidate.path) {
                    if !record.isGood { continue }
                    if record.check == CheckMode.full.rawValue {
                        good = candidate.path
                        break
                    }
                }
                if (try? ArchiveVerifier.verify(archive: candidate.path, workFolder: work, check: .full, expectedUser: user.rawValue)) != nil {
                    good = candidate.path
                    break
                }
            }
            throw RestoreError.verificationFailed(archive: path, reason: reason, newestGood: good)
        }
    }

    /// Same store names; Core Data stores with the same model version hashes (unless `force`).
    private func compare(_ manifest: Manifest, live: [StoreFile], staging: String, force: Bool) throws {
        let archived = Set(manifest.stores.map(\.name))
        let current = Set(live.map(\.name))
        if archived != current && !force {
            var parts: [String] = []
            let onlyArchive = archived.subtracting(current).sorted()
            let onlyLive = current.subtracting(archived).sorted()
            if !onlyArchive.isEmpty { parts.append("only in the archive: \(onlyArchive.joined(separator: ", "))") }
            if !onlyLive.isEmpty { parts.append("only live: \(onlyLive.joined(separator: ", "))") }
            throw RestoreError.storesDiffer(user: manifest.user, detail: parts.joined(separator: "; "))
        }
        guard !force else { return }
        for store in manifest.stores {
            guard let liveStore = live.first(where: { $0.name == store.name }),
                let archivedModel = store.coreData?.modelVersionHashes, !archivedModel.isEmpty
            else { continue }
            let db = try Database(path: liveStore.path, mode: .readOnly)
            let liveModel = try CoreDataMetadata.read(db)?.modelVersionHashes ?? [:]
            if liveModel != archivedModel {
                let differing = Set(liveModel.keys).union(archivedModel.keys).filter { liveModel[$0] != archivedModel[$0] }.sorted()
                throw RestoreError.modelMismatch(store: liveStore.path, detail: "entities \(differing.joined(separator: ", "))")
            }
        }
    }

    private func makeEntry(store: (name: String, path: String, external: String?), live: String, method: String, asideFolder: String) throws -> SwapJournal.Entry {
        // The new file gets the live file's owner and mode: granary never leaves root-owned files in a user's folder.
        if let info = FileSystem.status(live) {
            chown(store.path, info.st_uid, info.st_gid)
            chmod(store.path, info.st_mode & 0o7777)
        }
        // The restored file keeps the live store's journal mode (WAL or rollback), which the header
        // records and every process opening the store follows; the archive's may differ.
        if method != "online", let liveHeader = StoreHeader.read(live), let stagedHeader = StoreHeader.read(store.path),
            liveHeader.isWAL != stagedHeader.isWAL
        {
            let db = try Database(path: store.path, mode: .readWrite)
            try db.execute(liveHeader.isWAL ? "PRAGMA journal_mode=WAL" : "PRAGMA journal_mode=DELETE")
        }
        try FileSystem.removeFile(store.path + "-wal")
        try FileSystem.removeFile(store.path + "-shm")
        try FileSystem.sync(store.path)
        guard let staged = FileSystem.status(store.path) else { throw FileSystemError("stat", path: store.path) }
        let aside = asideFolder + "/stores/" + store.name
        try FileSystem.makeDirectory((aside as NSString).deletingLastPathComponent)
        let liveExternal = StoreFile.externalDataFolder(for: live)
        let oldFiles = Set(FileSystem.contents(of: liveExternal))
        let newFiles = Set(store.external.map { FileSystem.contents(of: $0) } ?? [])
        // A name in both must be the same file, or the old store would see new bytes before the commit.
        for name in oldFiles.intersection(newFiles) {
            let (_, a) = try SafetyArchive.hash(liveExternal + "/" + name)
            let (_, b) = try SafetyArchive.hash(store.external! + "/" + name)
            if a != b { throw RestoreError.storeBusy(store: live, detail: "external-data file \(name) differs in content with the same name") }
        }
        let hasExternal = !oldFiles.isEmpty || !newFiles.isEmpty
        return SwapJournal.Entry(
            name: store.name, method: method == "online" ? "online" : "swap", live: live, staged: store.path, aside: aside,
            stagedDevice: UInt64(staged.st_dev), stagedInode: UInt64(staged.st_ino),
            liveExternal: hasExternal ? liveExternal : nil, stagedExternal: store.external,
            asideExternal: hasExternal ? StoreFile.externalDataFolder(for: aside) : nil,
            externalAdded: newFiles.subtracting(oldFiles).sorted(), externalRemoved: oldFiles.subtracting(newFiles).sorted())
    }

    /// `--to DIR`: moves the verified stores into `target`, refusing to overwrite anything.
    private func place(_ staged: [(name: String, path: String, external: String?)], into target: String) throws {
        try FileSystem.makeDirectory(target)
        for store in staged {
            let destination = target + "/" + store.name
            if FileSystem.status(destination) != nil { throw RestoreError.targetExists(path: destination) }
        }
        for store in staged {
            let destination = target + "/" + store.name
            try FileSystem.makeDirectory((destination as NSString).deletingLastPathComponent)
            try FileSystem.renameNoReplace(store.path, to: destination)
            if let external = store.external {
                let folder = StoreFile.externalDataFolder(for: destination)
                try FileSystem.makeDirectory((folder as NSString).deletingLastPathComponent)
                try FileSystem.rename(external, to: folder)
            }
            try FileSystem.syncParent(of: destination)
        }
    }
}
