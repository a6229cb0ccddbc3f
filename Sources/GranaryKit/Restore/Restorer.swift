import Foundation
import GranaryOwner

#if canImport(Glibc)
    import Glibc
#endif

/// How a store's new content is put in place.
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
    /// An archive file name in the user's repository folder, or a path; nil: the newest regular
    /// backup (or per `at`, or with `undo` the newest safety archive).
    public var archive: String?
    /// Called with each staged store (its member name and its staged file) once the archive is
    /// staged and verified, before anything is placed or committed: `restore --at` replays the
    /// followed commits there. A throw stops the restore with nothing changed.
    public var afterStaging: (@Sendable ([(name: String, path: String)]) throws -> Void)?
    /// Said with the report (`restore --at`: which window, or why the archive alone).
    public var notes: [String] = []
    /// The newest regular backup at or before this time.
    public var at: Date?
    /// Put back what the last restore or reset of the user replaced (its safety archive).
    public var undo = false
    /// Restore into this folder instead, touching nothing live.
    public var target: String?
    public var method: RestoreMethod = .auto
    public var dryRun = false
    /// The run's settings (timeouts, content limits, host).
    public var context: RunContext
    public var ownerTimeout: Duration {
        get { context.ownerTimeout }
        set { context.ownerTimeout = newValue }
    }
    /// How long granary asks the owner to stay paused at most.
    public var lease: Duration = .seconds(30)
    public var force = false
    public var safetyArchive = true
    /// The check run on each replaced store as the safety archive is written (the configured `check`).
    public var check: CheckMode = .quick
    public var lockTimeout: Duration {
        get { context.lockTimeout }
        set { context.lockTimeout = newValue }
    }
    /// When the user's folder does not exist: create it (a new host, a user moved from another
    /// server, a retired user brought back). Nil: a missing user is an error (66).
    public var create: CreateFolder?

    /// How to create a missing user's folder.
    public struct CreateFolder: Sendable {
        /// Its owner; nil: the owner the archive's manifest recorded (by name when this host
        /// knows the name, else by number).
        public var uid: uid_t?
        public var gid: gid_t?
        /// Its mode; nil: the mode the manifest recorded, else 0700.
        public var mode: mode_t?
        public init(uid: uid_t? = nil, gid: gid_t? = nil, mode: mode_t? = nil) {
            self.uid = uid
            self.gid = gid
            self.mode = mode
        }
    }

    public init(user: UserID, context: RunContext = .defaults) {
        self.user = user
        self.context = context
    }
}

/// What a restore did (or, with `dryRun`, would do).
public struct RestoreReport: Sendable {
    /// How one store's new content went in.
    public enum Method: String, Sendable, Codable {
        case swap, offline, online
        /// Not live before.
        case new
        /// Into the request's target folder.
        case copy
    }

    /// One store.
    public struct Store: Sendable {
        public var name: String
        public var live: String
        public var method: Method
        public var ownerPID: Int32?
        public var openBy: [Int32]
        public var staged: String
        /// From PAUSE sent to RESUMED received (swap with an owner).
        public var paused: Duration?
        /// How the owner's pause ended (swap with an owner).
        public var pauseEnding: ReopenClient.PauseReport.Ending?
    }
    public var user: String
    public var archive: String?
    public var target: String?
    public var stores: [Store] = []
    public var dryRun: Bool
    public var safetyArchive: String?
    /// Things that went wrong after the restore committed, or were refused on the way and worked
    /// around (an owner that resumed late, a squatter on a reopen socket, files an owner left
    /// beside a store while paused): the restore itself stands.
    public var warnings: [String] = []
    /// Why the safety archive could not be written (the restore stands; see `granary recover`).
    public var safetyArchivePending: String?
    /// Restored stores a paused owner wrote to after the swap and before RESUME (the restore
    /// stands; what it wrote beside the store was moved away, a write into the store itself is
    /// the owner's own, made against the restored content).
    public var writtenWhilePaused: [String] = []
    /// What recovery did first, when a previous run had been interrupted.
    public var recovered: Recovery.Report?
    /// The user's folder was created (`RestoreRequest.create`): its owner and mode.
    public var createdFolder: Manifest.Ownership?
    /// The path of the folder the restore created.
    public var createdPath: String?
    /// Other regular files of the archive (a final archive's `files/`) created in the folder.
    public var plainFiles = 0
}

/// Restores or resets one user's stores: verify into staging, then swap, copy online, or rename.
///
/// Reads top to bottom: lock → recover → choose archive → stage and verify → compare → check
/// room → pick methods → (dry run ends here) → plan → online copies → pause owners → prepare
/// every store → commit point → switch every store → resume → safety archive → clean up.
/// Before the commit point any failure rolls everything back; after it, everything rolls forward
/// (``Recovery``), so a user's stores are one unit: all old or all new.
public struct Restorer: Sendable {
    public let root: Root
    public let repository: (any Repository)?

    public init(root: Root, repository: (any Repository)?) {
        self.root = root
        self.repository = repository
    }

    /// One store to put in place: its staged file and what the archive says of it.
    struct Staged {
        var name: String
        var path: String
        var external: String?
        var owner: Manifest.Ownership?
        /// The modes the archive recorded for the store's external-data files, by name.
        var externalModes: [String: UInt32] = [:]
        /// The modes the archive recorded for folders inside the user's folder, by path.
        var folderModes: [String: UInt32]?
    }

    public func run(_ request: RestoreRequest) throws -> RestoreReport {
        var request = request
        if let lease = CrashPoint.lease { request.lease = lease }
        _ = try root.open()
        let lock = try UserLock.acquire(root: root, user: request.user, timeout: request.lockTimeout)
        defer { lock.release() }
        let recovered = try Recovery.recover(
            root: root, user: request.user, context: request.context, lease: request.lease)

        // The user's folder; a missing one is created after the archive has verified (`create`), or
        // is not needed at all (a target folder).
        let existing = try root.existingUser(request.user)
        if existing == nil && !(request.operation == .restore && (request.create != nil || request.target != nil)) {
            throw RestoreError.noUser(user: request.user.rawValue, root: root.path, create: createSource(request))
        }
        let chosen = request.operation == .restore ? try chooseArchive(request, forNewUser: existing == nil) : nil
        let archive = chosen?.path
        var report = RestoreReport(
            user: request.user.rawValue, archive: archive, target: request.target, dryRun: request.dryRun)
        if recovered.hadJournal || recovered.retire != nil { report.recovered = recovered }
        if let pending = recovered.safetyArchivePending { report.warnings.append(pending) }

        let work = Recovery.work(root: root, user: request.user)
        try FileSystem.makeDirectory(work.staged)
        try FileSystem.makeDirectory(work.aside)
        var finished = false
        defer { if !finished, work.journal.read() == nil { FileSystem.removeTree(work.path) } }
        guard let stagingInfo = FileSystem.status(work.staged),
            let liveInfo = try? (existing?.folder.status() ?? root.open().status())
        else {
            throw FileSystemError("stat", path: work.staged)
        }
        if request.target == nil && UInt64(stagingInfo.st_dev) != liveInfo.device {
            throw RestoreError.differentFilesystem(staging: work.staged, live: existing?.path ?? root.path)
        }

        // Stage and verify.
        let scan = existing?.scan()
        let liveStores = scan?.stores ?? []
        // What the scan passed over is said: a store left out must not be left out in silence.
        for skipped in scan?.skipped ?? [] { report.warnings.append("passed over \(skipped.name): \(skipped.reason)") }
        let (staged, manifest) = try stage(
            request, chosen: chosen, existing: existing, liveStores: liveStores, work: work)
        try request.afterStaging?(staged.map { (name: $0.name, path: $0.path) })
        report.warnings += request.notes

        CrashPoint.reach(.staged)
        if let target = request.target {
            for store in staged {
                report.stores.append(
                    .init(
                        name: store.name, live: target + "/" + store.name, method: .copy, openBy: [], staged: store.path
                    ))
            }
            if !request.dryRun { try place(staged, into: target) }
            finished = true
            FileSystem.removeTree(work.path)
            return report
        }
        if request.safetyArchive && !request.dryRun && existing != nil, let repository {
            try checkRoom(for: liveStores, in: repository, user: request.user)
        }
        // A new user's folder, owned and moded as asked or as the archive recorded.
        var createdHere = false
        let user: UserFolder
        if let existing {
            user = existing
        } else {
            let ownership = try newFolderOwnership(request.create ?? .init(), manifest: manifest, user: request.user)
            report.createdFolder = ownership
            report.createdPath = root.path + "/" + request.user.rawValue
            if request.dryRun {
                report.stores = staged.map {
                    .init(
                        name: $0.name, live: root.path + "/" + request.user.rawValue + "/" + $0.name, method: .new,
                        openBy: [], staged: $0.path)
                }
                return report
            }
            user = try root.createUser(
                request.user, uid: ownership.uid, gid: ownership.gid, mode: mode_t(ownership.mode))
            createdHere = true
        }
        defer { if createdHere && !finished { root.removeEmptyUser(request.user) } }

        // Pick a method per store.
        var owners: [String: ReopenClient] = [:]
        defer { for owner in owners.values { owner.close() } }
        owners = try chooseMethods(staged, user: user.folder, request: request, report: &report)
        if request.dryRun { return report }

        // A folder this restore made (or an empty one it fills) gets the archive's other files too
        // (a final archive's `files/`), before the stores; removed again if the restore is refused.
        var placedFiles = PlainFiles.Placed()
        defer { if !finished, work.journal.read() == nil { PlainFiles.remove(placedFiles, from: user.folder) } }
        if let manifest, !PlainFiles.names(in: manifest).isEmpty {
            if existing == nil || (request.create != nil && liveStores.isEmpty) {
                let placed = try PlainFiles.place(manifest, from: work.staged, into: user.folder)
                placedFiles = placed
                report.plainFiles = placed.created.count
                for name in placed.kept {
                    report.warnings.append("kept \(name) as it is in the folder: the archive's copy was not put back")
                }
            } else {
                let count = PlainFiles.names(in: manifest).count
                report.warnings.append(
                    "the archive holds \(count) other file\(count == 1 ? "" : "s") under files/, which only a restore that creates the folder (--create) puts back"
                )
            }
        }

        // The journal's plan: every store, before anything live is touched.
        var entries: [SwapJournal.Entry] = []
        for (store, plan) in zip(staged, report.stores) {
            entries.append(
                try makeEntry(store, method: plan.method, user: user.folder, work: work, limits: request.context.limits)
            )
        }
        let journal = work.journal
        try journal.begin(
            SwapJournal.Plan(
                user: request.user.rawValue, operation: request.operation.rawValue,
                label: request.operation == .restore ? ArchiveName.preRestoreLabel : ArchiveName.preResetLabel,
                archive: archive,
                repository: request.safetyArchive ? repository.map(RepositoryLocation.init) : nil, stores: entries,
                check: request.check))
        let commit = UserCommit(
            user: user.folder, work: work, journal: journal,
            stores: zip(entries, report.stores).map {
                .init(entry: $0, owner: owners[$0.name], candidates: $1.openBy)
            },
            ownerTimeout: request.ownerTimeout, lease: request.lease)
        try commitAndSwitch(commit, work: work, entries: entries, request: request, report: &report)
        finished = true
        return report
    }

    /// The user's commit (``UserCommit``): pause, check, commit record, switch, resume, then the
    /// online copies and what follows (external-data clean-up, the safety archive). A refusal up
    /// to the commit record changes nothing in the user's folder; after it, every store is rolled
    /// forward, by this run or by `granary recover`.
    private func commitAndSwitch(
        _ commit: UserCommit, work: RestoreWork, entries: [SwapJournal.Entry], request: RestoreRequest,
        report: inout RestoreReport
    ) throws {
        let journal = work.journal
        do {
            try Interruption.check()
            try commit.pauseAll()
            // pause() may have reconnected: name the processes that were paused.
            for store in commit.stores {
                if let owner = store.owner, let index = report.stores.firstIndex(where: { $0.name == store.entry.name })
                {
                    report.stores[index].ownerPID = owner.ownerPID
                }
            }
            try commit.checkAll()
            // The last moment a signal stops the restore with nothing changed.
            try Interruption.check()
        } catch {
            let refused = commit.refuse(error)
            _ = try? Recovery.recover(
                root: root, user: request.user, context: request.context, lease: request.lease)
            throw refused
        }

        // From the commit record to the owners' resume, a signal waits: the commit ends with
        // every store switched and every owner resumed, and the run stops after it (below).
        try Interruption.heldBack {
            do {
                try commit.commitRecord()
            } catch {
                let refused = commit.refuse(error)
                _ = try? Recovery.recover(
                    root: root, user: request.user, context: request.context, lease: request.lease)
                throw refused
            }

            // Past the commit point every store ends new: a failure from here on is finished by
            // `granary recover` (or the next command on this user), never rolled back.
            do {
                let seen = try commit.switchAll()
                report.warnings += seen.warnings
                report.writtenWhilePaused += seen.writtenWhilePaused
            } catch {
                commit.abandon()
                ReopenClient.resume(commit.stores.compactMap(\.owner), timeout: request.ownerTimeout)
                throw RestoreError.unfinished(
                    user: request.user.rawValue, reason: (error as? GranaryError)?.description ?? "\(error)")
            }
            report.warnings += commit.resumeAll()
        }
        for (name, ended) in commit.pauses {
            if let index = report.stores.firstIndex(where: { $0.name == name }) {
                report.stores[index].paused = ended.pause
                report.stores[index].pauseEnding = ended.ending
            }
        }

        // Online copies: each one atomic under SQLite's locking, with the content it replaces kept
        // aside in the same instant. When the first change of the whole restore is an online copy
        // that could not take its lock, nothing changed: the commit is withdrawn.
        var changed = entries.contains { $0.method != .online }
        for entry in entries where entry.method == .online {
            do {
                let (folder, file) = try StoreSwap.live(entry.name, in: commit.user)
                try OnlineRestore.restore(
                    staged: work.stagedStore(entry.name), into: folder, file,
                    aside: work.asideStore(entry.name), busyTimeout: request.ownerTimeout,
                    limits: request.context.limits)
            } catch {
                guard !changed else { throw Self.unfinished(request.user, error) }
                try? journal.record(.withdrawn, durable: true)
                _ = try? Recovery.recover(
                    root: root, user: request.user, context: request.context, lease: request.lease)
                throw error
            }
            changed = true
            try journal.record(.switched(entry.name))
        }

        // After the owners run again: external-data clean-up, the safety archive, then clean up.
        // Still past the commit point: a failure here is finished by `granary recover` too.
        CrashPoint.reach(.finishing)
        let done: Recovery.Report
        do {
            done = try Recovery.recover(
                root: root, user: request.user, context: request.context, lease: request.lease)
        } catch {
            throw Self.unfinished(request.user, error)
        }
        report.safetyArchive = done.safetyArchive
        report.safetyArchivePending = done.safetyArchivePending
    }

    /// A failure after the commit point: the restore stands and `granary recover` finishes it. A
    /// signal is said as such (exit 130), anything else as the failure it was.
    private static func unfinished(_ user: UserID, _ error: any Error) -> RestoreError {
        if let interrupted = error as? InterruptedError {
            return .interruptedAfterCommit(user: user.rawValue, signal: InterruptedError.name(interrupted.signal))
        }
        return .unfinished(user: user.rawValue, reason: (error as? GranaryError)?.description ?? "\(error)")
    }

    /// Phase "stage": the archive verified into `work.staged` (a restore), or each live store's
    /// empty copy made there (a reset). Nothing live is touched.
    private func stage(
        _ request: RestoreRequest, chosen: (path: String, entry: RepositoryEntry?)?, existing: UserFolder?,
        liveStores: [StoreFile], work: RestoreWork
    ) throws -> (staged: [Staged], manifest: Manifest?) {
        var staged: [Staged] = []
        var manifest: Manifest?
        if let chosen {
            let verified = try stageVerified(
                chosen, into: work.staged, user: request.user, limits: request.context.limits)
            manifest = verified
            // `create` fills a folder that holds no store yet (one an earlier restore created before it was
            // interrupted, or an empty one an admin made) like a new one: every store is new.
            let fillsEmpty = request.create != nil && liveStores.isEmpty
            if fillsEmpty, request.target == nil, let existing {
                // Only a folder of the owner the archive recorded (or the one asked for): in a
                // shared root anyone could have made it, to receive another's data.
                try SafeModes.checkFolderToFill(
                    existing.folder,
                    owner: newFolderOwnership(request.create ?? .init(), manifest: verified, user: request.user).uid)
            }
            if request.target == nil && existing != nil && !fillsEmpty {
                try compare(verified, live: liveStores, force: request.force, limits: request.context.limits)
            }
            staged = verified.stores.map { store in
                let prefix = store.externalDataPath.map { $0.hasSuffix("/") ? $0 : $0 + "/" }
                var modes: [String: UInt32] = [:]
                if let prefix {
                    for file in verified.files where file.path.hasPrefix(prefix) {
                        modes[String(file.path.dropFirst(prefix.count))] = file.mode
                    }
                }
                return Staged(
                    name: store.name, path: work.stagedStore(store.name),
                    external: Staging.stagedExternal(of: store, in: work.staged),
                    owner: store.owner, externalModes: modes, folderModes: verified.folders?.mapValues(\.mode))
            }
        } else {
            guard let existing else {
                throw RestoreError.noUser(user: request.user.rawValue, root: root.path, create: nil)
            }
            guard !liveStores.isEmpty else {
                throw RestoreError.nothingToReset(user: request.user.rawValue, folder: existing.path)
            }
            for store in liveStores {
                let path = work.stagedStore(store.name)
                try FileSystem.makeDirectory((path as NSString).deletingLastPathComponent)
                let source = try Database(
                    try store.sqliteName(), mode: .readOnly, busyTimeout: request.ownerTimeout,
                    limits: request.context.limits)
                try ResetStager.stage(
                    from: source, into: path, keep: EmptyStore.keptTables(besides: request.context.resetKeepTables))
                staged.append(Staged(name: store.name, path: path, external: nil, owner: nil))
            }
        }
        return (staged, manifest)
    }

    /// Phase "methods": per store, how its new content goes in (swap with its owner, offline,
    /// online, new), appended to `report`; returns the owners of the swapped stores, connected.
    private func chooseMethods(
        _ staged: [Staged], user: Folder<UserOwned>, request: RestoreRequest, report: inout RestoreReport
    ) throws -> [String: ReopenClient] {
        var owners: [String: ReopenClient] = [:]
        var done = false
        defer { if !done { for owner in owners.values { owner.close() } } }
        for store in staged {
            // A store whose folder is gone is new, like one whose file is gone (a link or anything
            // else in the folder's place is refused).
            guard let located = try StoreSwap.liveIfPresent(store.name, in: user),
                let info = located.0.entry(located.1)
            else {
                report.stores.append(
                    .init(
                        name: store.name, live: user.path(store.name), method: .new, openBy: [],
                        staged: store.path))
                continue
            }
            let (folder, file) = located
            var owner: ReopenClient?
            var squatted = false
            if request.method != .online {
                switch Result(catching: { () throws(ReopenError) -> ReopenClient? in
                    try Owners.connect(folder, file, ownerUID: info.uid, timeout: request.ownerTimeout)
                }) {
                case .success(let client): owner = client
                case .failure(let error):
                    // A process of another user holds the store's reopen socket (or one that never
                    // accepts a connection): it is not the owner, and it must not block the restore.
                    switch error {
                    case .untrustedPeer(let path, let pid, let uid, let expected) where request.method != .swap:
                        report.warnings.append(
                            "ignored the reopen socket of \(path): it is held by pid \(pid) of uid \(uid), not by the store's owner (uid \(expected))"
                        )
                    case .unreachable where request.method != .swap:
                        report.warnings.append(
                            "ignored the reopen socket of \(folder.path(file)): \(error.description)")
                    default: throw RestoreError.owner(error)
                    }
                    squatted = true
                }
            }
            let holders = OpenFiles.holders(of: file, in: folder)
            let method: RestoreReport.Method
            switch request.method {
            case .auto:
                // Offline only when nobody has it open, as SQLite's own lock tells too (a process
                // that opens it for each write is between two writes when /proc is looked at).
                method =
                    owner != nil
                    ? .swap : try holders.isEmpty && !squatted && StoreGuard.isFree(folder, file) ? .offline : .online
            case .swap:
                guard owner != nil else { throw RestoreError.noOwner(store: folder.path(file)) }
                method = .swap
            case .offline:
                guard owner == nil && holders.isEmpty else {
                    throw RestoreError.storeOpen(
                        store: folder.path(file), pids: holders.isEmpty ? [owner!.ownerPID] : holders)
                }
                method = .offline
            case .online: method = .online
            }
            if method == .swap { owners[store.name] = owner } else { owner?.close() }
            report.stores.append(
                .init(
                    name: store.name, live: folder.path(file), method: method, ownerPID: owner?.ownerPID,
                    openBy: holders, staged: store.path))
        }
        done = true
        return owners
    }

    /// The archive to restore: the one named, the newest regular backup (at or before `at`), or
    /// with `undo` the newest safety archive. Safety archives are never chosen for a plain
    /// `restore USER`; a final archive (what a retired user left) only for a user whose folder is
    /// gone (`create` brings a retired user back).
    /// A path given (a local file, outside any repository) has no entry.
    private func chooseArchive(_ request: RestoreRequest, forNewUser: Bool = false) throws -> (
        path: String, entry: RepositoryEntry?
    ) {
        if let name = request.archive, name.contains("/"), FileSystem.isRegularFile(name) { return (name, nil) }
        guard let repository else { throw RestoreError.noRepository }
        try repository.requireExisting()
        let archives = try repository.archives(of: request.user)
        if let name = request.archive {
            let entry = try ArchiveLocator(repository: repository).archive(named: name, of: request.user)
            return (entry.path, entry)
        }
        if request.undo {
            guard let entry = archives.last(where: { $0.name.kind == .safety }) else {
                throw RestoreError.nothingToUndo(user: request.user.rawValue)
            }
            return (entry.path, entry)
        }
        let backups = archives.filter { $0.name.kind == .backup || (forNewUser && $0.name.kind == .final) }
        guard !backups.isEmpty else { throw RestoreError.noArchives(user: request.user.rawValue) }
        if let at = request.at {
            // A time to the second covers that second (archive names hold microseconds).
            let limit = ArchiveName.micros(at)
            let end = limit % 1_000_000 == 0 ? limit + 999_999 : limit
            guard let entry = backups.last(where: { $0.name.micros <= end }) else {
                throw RestoreError.nothingBefore(user: request.user.rawValue, time: ArchiveName.stamp(at))
            }
            return (entry.path, entry)
        }
        return (backups.last!.path, backups.last!)
    }

    /// Stages `archive`; when it does not verify, finds the newest archive of the user that does, for the message.
    private func stageVerified(
        _ chosen: (path: String, entry: RepositoryEntry?), into staging: String, user: UserID, limits: ContentLimits
    ) throws -> Manifest {
        let archive = chosen.path
        do {
            // Issue 35: a delta is rebuilt from its chain and checked against its state digest.
            if let repository, let entry = chosen.entry {
                do {
                    if let rebuilt = try DeltaRestore.stage(
                        entry, repository: repository, into: staging, user: user, limits: limits,
                        room: { try StagingRoom.check($0, in: staging) })
                    {
                        return rebuilt
                    }
                } catch let failure as VerificationFailure {
                    throw RestoreError.verificationFailed(
                        archive: archive, reason: DeltaRestore.reason(failure, of: entry), newestGood: nil,
                        user: user.rawValue)
                }
            }
            // A remote archive streams through the verifier into staging: no other local copy.
            let source = try chosen.entry.flatMap { try repository?.open($0) } ?? .file(archive)
            return try Staging.extract(
                source: source, name: archive, into: staging, user: user.rawValue, limits: limits)
        } catch RestoreError.verificationFailed(let path, let reason, _, _) {
            // The newest archive that verifies, for the hint: `verify`'s records answer for the
            // archives they still match (a full check that passed, or a failure); the others are
            // verified here, into scratch that is not synced.
            var good: String?
            let work = (staging as NSString).deletingLastPathComponent
            let candidates = ((try? repository?.archives(of: user)) ?? nil) ?? []
            for candidate in candidates.reversed() where candidate.path != archive && candidate.name.kind == .backup {
                // A delta is good only with its whole chain: its own record or check says nothing
                // of its base (which may be the very archive that failed).
                let mayBeDelta = candidate.name.fileName.contains("-delta")
                if let record = repository?.record(for: candidate) {
                    if !record.isGood { continue }
                    if record.check == CheckMode.full.rawValue && !mayBeDelta {
                        good = candidate.path
                        break
                    }
                }
                if let repository, let source = try? repository.open(candidate),
                    let verified = try? ArchiveVerifier.verify(
                        source: source, name: candidate.path, workFolder: work, check: .full,
                        expectedUser: user.rawValue, limits: limits),
                    !verified.manifest.isDelta
                        || (try? DeltaRestore.verifyChain(candidate, repository: repository, work: work)) != nil
                {
                    good = candidate.path
                    break
                }
            }
            throw RestoreError.verificationFailed(archive: path, reason: reason, newestGood: good, user: user.rawValue)
        }
    }

    /// Same store names; Core Data stores with the same model version hashes (unless `force`).
    private func compare(_ manifest: Manifest, live: [StoreFile], force: Bool, limits: ContentLimits) throws {
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
            let db = try Database(try liveStore.sqliteName(), mode: .readOnly, limits: limits)
            let liveModel = try CoreDataMetadata.read(db)?.modelVersionHashes ?? [:]
            if liveModel != archivedModel {
                let differing = Set(liveModel.keys).union(archivedModel.keys).filter {
                    liveModel[$0] != archivedModel[$0]
                }.sorted()
                throw RestoreError.modelMismatch(
                    store: liveStore.path, detail: "entities \(differing.joined(separator: ", "))")
            }
        }
    }

    /// Whether the missing user could be created from an archive (`RestoreRequest.create`), and
    /// with which owner the archive recorded (as this host names it), for the message.
    private func createSource(_ request: RestoreRequest) -> CreateSource? {
        guard let chosen = (try? chooseArchive(request, forNewUser: true)),
            let manifest = try? chosen.entry.flatMap({ try repository?.head(of: $0).manifest })
                ?? ArchiveHead(file: chosen.path).manifest
        else {
            return nil
        }
        var owner: String?
        if let recorded = manifest.folder {
            let uid = AccountNames.hostUID(recorded), gid = AccountNames.hostGID(recorded)
            owner = (AccountNames.user(uid) ?? String(uid)) + ":" + (AccountNames.group(gid) ?? String(gid))
        }
        return CreateSource(archive: chosen.entry?.name.fileName ?? chosen.path, owner: owner)
    }

    /// Who owns a folder created for a missing user: as asked (a user alone: with that
    /// user's primary group), else as the manifest recorded (the names when this host knows them,
    /// the numbers otherwise). An archive that recorded no owner (made before granary recorded
    /// one) needs an owner given: a folder root owned would be one the app cannot use.
    private func newFolderOwnership(
        _ create: RestoreRequest.CreateFolder, manifest: Manifest?, user: UserID
    ) throws -> Manifest.Ownership {
        let recorded = manifest?.folder
        let uid: UInt32, gid: UInt32
        if let given = create.uid {
            uid = given
            gid = create.gid ?? AccountNames.primaryGroup(of: given) ?? (recorded.map(AccountNames.hostGID) ?? given)
        } else if let recorded {
            uid = AccountNames.hostUID(recorded)
            gid = create.gid ?? AccountNames.hostGID(recorded)
        } else {
            throw RestoreError.ownerUnknown(user: user.rawValue)
        }
        let mode = create.mode ?? recorded.map { mode_t($0.mode & 0o7777) } ?? 0o700
        // A group from the archive only when the owner is in it (SafeModes); one given is the admin's.
        let safe = SafeModes.restorable(
            mode: mode, uid: uid, gid: gid, folderGID: create.gid ?? AccountNames.primaryGroup(of: uid) ?? gid,
            isFolder: true)
        return .of(uid: uid, gid: safe.gid, mode: UInt32(safe.mode))
    }

    /// Refuses before anything live is touched when the repository cannot take the safety archive:
    /// it must be writable, and have room for the live stores (an upper bound of what it holds).
    private func checkRoom(for stores: [StoreFile], in repository: any Repository, user: UserID) throws {
        var needed: Int64 = 0
        for store in stores {
            needed += store.bytes
            if let external = try? store.externalDataFolder() {
                needed += ((try? external.entries()) ?? []).reduce(0) { $0 + $1.size }
            }
        }
        do { try repository.checkRoom(for: user, bytes: needed) } catch {
            throw RestoreError.repositoryUnusable(repository: repository.location, reason: error.description)
        }
    }

    /// The journal entry of one store: the staged file given the live file's owner and mode (or,
    /// for a new store, the folder owner's uid and gid and the mode the archive recorded) and the
    /// live store's journal mode, and which external-data files come, go and stay.
    private func makeEntry(
        _ store: Staged, method: RestoreReport.Method, user: Folder<UserOwned>, work: RestoreWork,
        limits: ContentLimits
    ) throws
        -> SwapJournal.Entry
    {
        // A new store's folder may not exist yet (the switch makes it): nothing live is read then.
        let (folder, file) =
            method == .new
            ? (user, (store.name as NSString).lastPathComponent) : try StoreSwap.live(store.name, in: user)
        let live = method == .new ? nil : folder.entry(file)
        let stagedFile = Descriptor(RawPath.open(store.path, O_RDWR | O_CLOEXEC | O_NOFOLLOW), display: store.path)
        guard stagedFile.raw >= 0 else { throw FileSystemError("open", path: store.path) }
        // granary never leaves root-owned files in a user's folder.
        let folderGID = try user.status().gid
        let uid = live?.uid ?? user.ownerUID ?? geteuid()
        // A new store gets the group the archive recorded for it when its owner is in that group
        // (a change the owner could make with chgrp), else the user folder's.
        let recordedGID = store.owner.map(AccountNames.hostGID).flatMap {
            AccountNames.isMember(uid: uid, of: $0) ? $0 : nil
        }
        // No setuid/setgid bit, and no group the owner could not have set (SafeModes).
        let (mode, gid) = SafeModes.restorable(
            mode: live?.mode ?? mode_t(store.owner?.mode ?? 0o600), uid: uid,
            gid: live?.gid ?? recordedGID ?? folderGID,
            folderGID: folderGID)
        if geteuid() == 0 && fchown(stagedFile.raw, uid, gid) != 0 { throw FileSystemError("chown", path: store.path) }
        if fchmod(stagedFile.raw, mode & 0o7777) != 0 { throw FileSystemError("chmod", path: store.path) }
        // The restored file keeps the live store's journal mode (WAL or rollback), which the header
        // records and every process opening the store follows; the archive's may differ.
        if method != .online, let live, live.kind == .file, let liveFile = try? folder.openFile(file),
            let liveHeader = StoreHeader((try? liveFile.read(count: 100, at: 0)) ?? []),
            let stagedHeader = StoreHeader.read(store.path),
            liveHeader.isWAL != stagedHeader.isWAL
        {
            let db = try Database(path: store.path, mode: .readWrite, limits: limits)
            try db.execute(liveHeader.isWAL ? "PRAGMA journal_mode=WAL" : "PRAGMA journal_mode=DELETE")
        }
        try FileSystem.removeFile(store.path + "-wal")
        try FileSystem.removeFile(store.path + "-shm")
        try stagedFile.sync()
        let staged = try stagedFile.status()

        // External data: the live folder's files against the staged ones (same name, same bytes).
        let liveExternal = method == .new ? nil : try StoreFile.externalDataFolder(of: file, in: folder)
        var oldFiles: Set<String> = []
        for entry in (try liveExternal?.entries()) ?? [] {
            guard entry.kind == .file else {
                throw FolderError.notRegular(path: liveExternal!.path(entry.name), kind: entry.kind)
            }
            oldFiles.insert(entry.name)
        }
        let newFiles = Set(store.external.map { FileSystem.contents(of: $0) } ?? [])
        for name in newFiles {
            // Added files go into the user's folder: the owner's, with the mode the archive recorded.
            let path = store.external! + "/" + name
            let fd = Descriptor(RawPath.open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), display: path)
            guard fd.raw >= 0 else { throw FileSystemError("open", path: path) }
            if geteuid() == 0 && fchown(fd.raw, uid, gid) != 0 { throw FileSystemError("chown", path: path) }
            _ = fchmod(fd.raw, SafeModes.restorable(mode: mode_t(store.externalModes[name] ?? 0o600), isFolder: false))
        }
        for name in oldFiles.intersection(newFiles) {
            // A name in both must be the same file, or the old store would see new bytes before the commit.
            // The new file first: the old one (its owner's, which may grow while it is read) is
            // read no further than one byte past the new one's length.
            let (newSize, new) = try SafetyArchive.hash(store.external! + "/" + name)
            let old = try FileDigest.of(try liveExternal!.openFile(name), limit: newSize).sha256
            if old != new {
                throw RestoreError.externalDataChanged(store: folder.path(file), file: liveExternal!.path(name))
            }
        }
        return SwapJournal.Entry(
            name: store.name, method: method == .new ? .new : method == .online ? .online : .swap,
            stagedDevice: UInt64(staged.st_dev), stagedInode: UInt64(staged.st_ino),
            externalAdded: newFiles.subtracting(oldFiles).sorted(),
            externalRemoved: oldFiles.subtracting(newFiles).sorted(),
            externalKept: oldFiles.intersection(newFiles).sorted(), folderModes: store.folderModes)
    }

    /// A target folder: moves the verified stores into `target`, refusing to overwrite anything.
    private func place(_ staged: [Staged], into target: String) throws {
        try FileSystem.makeDirectory(target)
        let destination = try Folder<GranaryOwned>.open(path: target)
        for store in staged
        where destination.entry(store.name.split(separator: "/").first.map(String.init) ?? store.name) != nil {
            if (try? destination.parent(of: store.name))?.0.entry((store.name as NSString).lastPathComponent) != nil {
                throw RestoreError.targetExists(path: destination.path(store.name))
            }
        }
        for store in staged {
            let parentName = (store.name as NSString).deletingLastPathComponent
            let folder = parentName.isEmpty ? destination : try destination.makeFolders(parentName)
            let (staging, stagedName) = try RestoreWork.parent(of: store.path)
            try staging.renameAsGranary(
                stagedName, to: folder, as: (store.name as NSString).lastPathComponent, .noReplace)
            if let external = store.external, FileSystem.isDirectory(external) {
                let support = try folder.makeFolder(
                    StoreFile.supportFolderName(for: (store.name as NSString).lastPathComponent))
                let (from, name) = try RestoreWork.parent(of: external)
                try from.renameAsGranary(name, to: support, as: StoreFile.externalDataFolderName, .noReplace)
                try support.sync()
            }
            try folder.sync()
        }
    }
}
