import Foundation
import GranaryOwner

#if canImport(Glibc)
    import Glibc
#endif

/// Finishes or rolls back a restore or reset that did not end, from its journal (``SwapJournal``).
///
/// The journal's commit point decides, for the whole user: without it, nothing live was replaced
/// yet, and every store is rolled back (what was linked in or set aside is removed); with it,
/// every store is rolled forward — a store not switched yet is switched now, pausing its owner
/// again if one serves it (after a crash the owners reopened on their own). So a user's stores
/// end all old or all new. Then the safety archive is written (once: its path is recorded in the
/// journal); if the repository cannot take it, the replaced files move to
/// `<root>/.granary/safety-pending/` and every later recovery of the user tries again, without
/// ever blocking the user's backups.
public enum Recovery {
    /// What recovery did for one user.
    public struct Report: Sendable {
        public var user: String
        /// Stores whose restore had committed: now fully new.
        public var rolledForward: [String] = []
        /// Stores whose restore had not committed: still fully old.
        public var rolledBack: [String] = []
        /// The safety archive written (or already written before the interruption).
        public var safetyArchive: String?
        /// Why a safety archive could not be written yet, and where the replaced files wait.
        public var safetyArchivePending: String?
        /// Files an owner left beside a switched store while paused, moved away (see StoreSwap).
        public var intruders: [String] = []
        /// What the switch had to say (each file moved away, with where it is kept).
        public var warnings: [String] = []
        /// Whether there was anything to recover.
        public var hadJournal: Bool
        /// What was done to a retire that had stopped, if one had.
        public var retire: Retirement.RecoveryOutcome?
        /// The work folder of a restore that died before its plan was written (staged stores,
        /// nothing live touched yet), removed: its path and the bytes it held.
        public var removedStaging: (path: String, bytes: Int64)?
    }

    /// The folder where a user's restores work: `<root>/.granary/restore/<user>`.
    public static func work(root: Root, user: UserID) -> RestoreWork {
        RestoreWork(path: root.stateFolderPath + "/restore/" + user.rawValue)
    }

    /// Where replaced files wait for a repository that can take their safety archive.
    static func pendingFolder(root: Root, user: UserID) -> String {
        root.stateFolderPath + "/safety-pending/" + user.rawValue
    }

    /// Recovers `user` (the caller holds the user's lock). Does nothing when there is no journal,
    /// apart from removing a work folder left by a run that died before its plan was written, and
    /// trying again to write safety archives that are pending.
    public static func recover(
        root: Root, user: UserID, context: RunContext, lease: Duration = .seconds(30)
    ) throws -> Report {
        let ownerTimeout = context.ownerTimeout
        let work = work(root: root, user: user)
        var report = Report(user: user.rawValue, hadJournal: false)
        report.retire = try Retirement.recover(root: root, user: user, context: context)
        guard let (plan, steps) = work.journal.read() else {
            if FileSystem.status(work.path) != nil {
                // Said, with its size: it may be gigabytes the operator wondered about.
                report.removedStaging = (work.path, treeBytes(work.path))
            }
            FileSystem.removeTree(work.path)
            report.safetyArchivePending = flushPending(root: root, user: user, context: context)
            return report
        }
        report.hadJournal = true
        let folder = try root.user(user).folder
        if !steps.contains(.commit) || steps.contains(.withdrawn) {
            for entry in plan.stores where entry.method == .online && steps.contains(.switched(entry.name)) {
                // Copied in before the commit point: its old content goes back the same way.
                let (live, file) = try StoreSwap.live(entry.name, in: folder)
                try OnlineRestore.putBack(
                    aside: work.asideStore(entry.name), into: live, file, busyTimeout: ownerTimeout,
                    limits: context.limits)
            }
            for entry in plan.stores { StoreSwap.rollBack(entry, user: folder, work: work) }
            report.rolledBack = plan.stores.map(\.name)
            try work.journal.remove()
            FileSystem.removeTree(work.path)
            return report
        }
        let mode = try StoreSwap.folderMode(folder)
        for entry in plan.stores {
            switch entry.method {
            case .swap:
                if !StoreSwap.isSwitched(entry, user: folder) {
                    let seen = try switchAgain(
                        entry, user: folder, work: work, ownerTimeout: ownerTimeout, lease: lease)
                    report.intruders += seen.writtenWhilePaused
                    report.warnings += seen.warnings
                }
            case .new:
                // Its external-data files first (linked in unless they are there), then the rename.
                try StoreSwap.prepare(entry, user: folder, work: work, guard: nil)
                try StoreSwap.switchIn(entry, user: folder, work: work, folderMode: mode)
            case .online:
                if !steps.contains(.switched(entry.name)) {
                    let (live, file) = try StoreSwap.live(entry.name, in: folder)
                    try OnlineRestore.restore(
                        staged: work.stagedStore(entry.name), into: live, file, aside: work.asideStore(entry.name),
                        busyTimeout: ownerTimeout, limits: context.limits)
                    try work.journal.record(.switched(entry.name))
                }
            }
            if !steps.contains(.cleaned(entry.name)) {
                try StoreSwap.cleanOldExternal(entry, user: folder, work: work)
                try work.journal.record(.cleaned(entry.name))
            }
            report.rolledForward.append(entry.name)
        }
        if let done = steps.compactMap({ step -> String? in
            if case .safetyArchive(let path) = step { return path } else { return nil }
        }).first {
            report.safetyArchive = done
        } else if let repository = plan.repository,
            plan.stores.contains(where: { FileSystem.isRegularFile(work.asideStore($0.name)) })
        {
            // (A restore that only added stores, into a folder the restore created, replaced nothing.)
            do {
                let path = try writeSafetyArchive(
                    plan: plan, work: work, repository: try repository.open(context: context),
                    user: try? root.existingUser(user))
                try work.journal.record(.safetyArchive(path), durable: true)
                report.safetyArchive = path
            } catch {
                // The restore stands; its replaced files wait for the repository, out of the way of
                // later restores and backups of the user.
                let pending = pendingFolder(root: root, user: user) + "/" + ArchiveName.stamp(Date()) + "-\(getpid())"
                try FileSystem.makeDirectory((pending as NSString).deletingLastPathComponent)
                try FileSystem.rename(work.path, to: pending)
                report.safetyArchivePending =
                    "the safety archive could not be written to \(repository): \((error as? GranaryError)?.description ?? "\(error)"); the replaced files are kept in \(pending)"
                return report
            }
        }
        try work.journal.remove()
        FileSystem.removeTree(work.path)
        report.safetyArchivePending = flushPending(root: root, user: user, context: context)
        return report
    }

    /// Switches a store that was not switched when the restore stopped, through the same commit
    /// as the restore (``UserCommit``): its owner (which reopened the old store when granary went
    /// away) is paused again, every check runs again (a process that has it open now makes this
    /// wait for a later recovery, changing nothing), then the old store is checkpointed and kept
    /// aside (so the file kept aside has everything written since), the stale companions removed,
    /// and the staged file renamed in under the commit lock. Returns what the owner left beside
    /// the store while paused, moved away.
    static func switchAgain(
        _ entry: SwapJournal.Entry, user: Folder<UserOwned>, work: RestoreWork, ownerTimeout: Duration, lease: Duration
    ) throws -> UserCommit.Observations {
        let (live, file) = try StoreSwap.live(entry.name, in: user)
        var owner: ReopenClient?
        if let info = live.entry(file) {
            owner = try? Owners.connect(live, file, ownerUID: info.uid, timeout: ownerTimeout)
        }
        defer { owner?.close() }
        let commit = UserCommit(
            user: user, work: work, journal: work.journal,
            stores: [.init(entry: entry, owner: owner, candidates: OpenFiles.holders(of: file, in: live))],
            ownerTimeout: ownerTimeout, lease: lease)
        do {
            try commit.pauseAll()
            try commit.checkAll()
        } catch {
            let refused = commit.refuse(error)
            throw RestoreError.storeBusy(
                store: live.path(file),
                detail:
                    "the restore committed before and will finish when it can (\(UserCommit.reason(refused)))"
            )
        }
        let seen: UserCommit.Observations
        do {
            seen = try commit.switchAll()
        } catch {
            commit.abandon()
            try? owner?.resume(timeout: ownerTimeout)
            throw error
        }
        _ = commit.resumeAll()
        return seen
    }

    /// Packs the work folder's `aside/` into the safety archive.
    /// `user` is the user's folder, when it is there: the archive records its owner and those of
    /// the store folders, as a backup does.
    static func writeSafetyArchive(
        plan: SwapJournal.Plan, work: RestoreWork, repository: any Repository, user folder: UserFolder?
    ) throws -> String {
        if CrashPoint.failSafetyArchive { throw FileSystemError("write", path: repository.location, code: EROFS) }
        let user = try UserID(plan.user)
        let items = plan.stores.compactMap { entry -> SafetyArchive.Item? in
            guard FileSystem.isRegularFile(work.asideStore(entry.name)) else { return nil }
            return SafetyArchive.Item(
                name: entry.name, database: work.asideStore(entry.name), external: work.asideExternal(entry.name))
        }
        guard !items.isEmpty else { throw RestoreError.storeBusy(store: work.aside, detail: "nothing was kept aside") }
        let owner = (try? folder?.folder.status())?.map {
            Manifest.Ownership.of(uid: $0.uid, gid: $0.gid, mode: UInt32($0.mode))
        }
        let stores = items.map { ($0.name, $0.external.map(FileSystem.isDirectory) ?? false) }
        let folders = folder.map { ArchiveBuilder.folderOwnerships(ofStores: stores, in: $0) } ?? [:]
        return try SafetyArchive.write(
            user: user, items: items, repository: repository, label: plan.label, kind: .safety,
            restoredFrom: plan.archive.map { ($0 as NSString).lastPathComponent }, check: plan.check ?? .quick,
            folder: owner, folders: folders)
    }

    /// Tries again to write the safety archives of `user` that are pending; the reason the first
    /// one still cannot be written, or nil when none is left.
    static func flushPending(root: Root, user: UserID, context: RunContext) -> String? {
        let folder = pendingFolder(root: root, user: user)
        for name in FileSystem.contents(of: folder) {
            let work = RestoreWork(path: folder + "/" + name)
            guard let (plan, steps) = work.journal.read() else {
                FileSystem.removeTree(work.path)
                continue
            }
            if !steps.contains(where: { if case .safetyArchive = $0 { return true } else { return false } }),
                let repository = plan.repository,
                plan.stores.contains(where: { FileSystem.isRegularFile(work.asideStore($0.name)) })
            {
                do {
                    _ = try writeSafetyArchive(
                        plan: plan, work: work, repository: try repository.open(context: context),
                        user: try? root.existingUser(user))
                } catch {
                    return
                        "the safety archive of an earlier restore could not be written to \(repository): \((error as? GranaryError)?.description ?? "\(error)"); its files are kept in \(work.path)"
                }
            }
            FileSystem.removeTree(work.path)
        }
        // Nothing is pending any more: the user's folder goes too (it stays only while it holds
        // something; a run killed between making it and moving the files in left it empty).
        _ = rmdir(folder)
        return nil
    }

    /// The bytes of the regular files under `path` (granary's own work folder: no links followed).
    static func treeBytes(_ path: String) -> Int64 {
        guard let info = FileSystem.status(path) else { return 0 }
        if info.st_mode & S_IFMT == S_IFREG { return Int64(info.st_size) }
        guard info.st_mode & S_IFMT == S_IFDIR else { return 0 }
        return FileSystem.contents(of: path).reduce(0) { $0 + treeBytes(path + "/" + $1) }
    }

    /// What `granary recover` did.
    public struct Run: Sendable {
        public var reports: [Report] = []
        /// Temporaries of dead backups and verifications removed from the repository.
        public var removedTemporaries: [String] = []
        /// Whether there was anything at all to do.
        public var nothing: Bool {
            !reports.contains {
                $0.hadJournal || $0.safetyArchivePending != nil || $0.retire != nil || $0.removedStaging != nil
            }
                && removedTemporaries.isEmpty
        }
    }

    /// The users with an unfinished restore or a pending safety archive.
    public static func unfinishedUsers(root: Root) -> [UserID] {
        let names =
            FileSystem.contents(of: root.stateFolderPath + "/restore")
            + FileSystem.contents(of: root.stateFolderPath + "/safety-pending")
            + FileSystem.contents(of: root.stateFolderPath + "/retire")
        return Set(names.compactMap { try? UserID($0) }).sorted()
    }

    /// Recovers `users` (every user with something unfinished when empty), each under its lock,
    /// then removes the temporaries dead runs left in `repository`.
    public static func run(
        root: Root, users: [UserID], repository: (any Repository)?, context: RunContext
    ) throws -> Run {
        var run = Run()
        for id in users.isEmpty ? unfinishedUsers(root: root) : users {
            let lock = try UserLock.acquire(root: root, user: id, timeout: context.lockTimeout)
            defer { lock.release() }
            run.reports.append(try recover(root: root, user: id, context: context))
        }
        // A backup or verify killed half-way leaves temporaries named after its dead pid; the next
        // backup would remove them, recover does it now.
        if let repository { run.removedTemporaries = repository.removeDeadTemporaries(users: users) }
        return run
    }

    /// Removes the temporaries that backups and verifications which died left in `repository`
    /// (its work folder, and the folders of `users`, every user when empty). Returns their paths.
    public static func removeDeadTemporaries(in repository: any Repository, users: [UserID] = []) -> [String] {
        repository.removeDeadTemporaries(users: users)
    }
}
