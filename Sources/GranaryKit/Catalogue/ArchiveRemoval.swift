import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A removal that would take away a user's last good archive.
public struct RemovalRefused: GranaryError, Sendable {
    public let archive: String
    /// Issue 35: the delta archive (its name) that is built on it, when that is why.
    public var neededBy: String?

    public init(archive: String, neededBy: String? = nil) {
        self.archive = archive
        self.neededBy = neededBy
    }

    public var description: String {
        if let neededBy {
            return "refusing to delete \(archive): the delta \(neededBy) is built on it and could no longer be restored"
        }
        return "refusing to delete \(archive): it is its user's newest verified archive"
    }
}

/// Removing archives: `delete` and `prune`. A user's newest verified archive is never removed
/// by `prune`, and by `delete` only with `force`: it is the one a restore would fall back to.
public enum ArchiveRemoval {
    /// Why an archive is kept.
    public static let newestVerifiedReason = "newest verified"

    /// One archive in a prune plan.
    public struct Item: Sendable {
        public let entry: RepositoryEntry
        /// The rules that keep it (`last`, `daily`, …, `newest verified`); empty: removed.
        public let keptBy: [String]
        public var keep: Bool { !keptBy.isEmpty }
        /// Issue 35: replaced by an archive prune merges (``DeltaMerge``): what it becomes, e.g.
        /// `a delta on NAME` or `a full`, with the name of the kept delta whose state it takes.
        public var mergedInto: String?
        /// Issue 35: an archive prune wrote by merging: the names of those it replaces.
        public var merged: [String]?

        public init(entry: RepositoryEntry, keptBy: [String], mergedInto: String? = nil, merged: [String]? = nil) {
            self.entry = entry
            self.keptBy = keptBy
            self.mergedInto = mergedInto
            self.merged = merged
        }
    }

    /// Why a safety archive is kept.
    public static let safetyReason = "safety"
    /// Why a final archive is kept.
    public static let finalReason = "final"

    /// What `prune` does to one user's archives, newest first. Regular backups follow the
    /// policy's rules; safety archives (what a restore or reset replaced) and final archives
    /// (what a retired user left) follow their own rule alone, measured from `now`, and never take a
    /// regular backup's place in a `keep-*` count.
    ///
    /// A retired user (no folder under `root`, a final archive their newest) is one unit: once
    /// their final archive is past `finalKeepWithin`, every archive of theirs goes with it, so
    /// that nothing of a user who left stays for ever by accident.
    public static func plan(
        user: UserID, repository: any Repository, policy: RetentionPolicy, now: Date = Date(), root: Root? = nil,
        merge: Bool = true
    ) throws -> [Item] {
        try planned(
            user: user, repository: repository, policy: policy, now: now, root: root, merge: merge,
            followed: FollowedRetention.Followed.read(user: user, repository: repository)
        ).items
    }

    /// The plan and the merges it makes (issue 35, ``DeltaMerge``): each archive a merge replaces
    /// is in the plan as removed, `mergedInto` saying by what.
    /// `followed`: what `follow` keeps of this user (read once per prune).
    static func planned(
        user: UserID, repository: any Repository, policy: RetentionPolicy, now: Date = Date(), root: Root? = nil,
        merge: Bool = true, followed: FollowedRetention.Followed
    ) throws -> (items: [Item], merges: [DeltaMerge.Merge]) {
        let archives = try repository.archives(of: user)
        if let root, let final = Retirement.finalArchive(of: user, root: root, repository: repository),
            let limit = policy.finalKeepWithin,
            final.name.created <= limit.start(before: now)
        {
            return (archives.map { Item(entry: $0, keptBy: []) }.reversed(), [])
        }
        // Issue 35: what an interrupted merge already replaced counts for no rule.
        let interrupted = DeltaMerge.interrupted(in: archives, repository: repository)
        let backups = archives.filter {
            $0.name.kind == .backup && !interrupted.superseded.contains($0.path)
                && !interrupted.unproven.contains($0.path)
        }
        var kept: [String: [String]] = [:]
        for (entry, decision) in zip(backups, Pruning.plan(backups.map(\.name.created), policy: policy)) {
            kept[entry.path] = decision.keptBy.map(\.rawValue)
        }
        // (As Catalogue.newestVerified, among the archives that count: one an interrupted merge
        // replaced has its state in the merged archive.)
        let records = repository.records(for: backups)
        if let protected = backups.last(where: { records[$0.path]?.isVerified == true })?.path {
            kept[protected, default: []].append(newestVerifiedReason)
        }
        for entry in archives where entry.name.kind != .backup {
            let created = entry.name.created
            switch entry.name.kind {
            case .safety:
                kept[entry.path] = created > policy.safetyKeepWithin.start(before: now) ? [safetyReason] : []
            case .final:
                kept[entry.path] =
                    policy.finalKeepWithin.map { created > $0.start(before: now) } ?? true ? [finalReason] : []
            case .backup: break
            }
        }
        // A followed window within followed_keep_within keeps its base (FollowedRetention).
        FollowedRetention.keepBases(followed, archives: archives, kept: &kept, policy: policy, now: now)
        // Issue 35: a kept delta keeps its whole chain (every base back to its full).
        DeltaChains.keepBases(of: archives, kept: &kept, repository: repository)
        // Issue 35: a run of deltas kept only as bases is merged into one archive.
        let merges = merge ? DeltaMerge.plan(archives: archives, kept: kept, repository: repository) : []
        var mergedInto: [String: String] = [:]
        for merge in merges {
            let into = "a delta on \(merge.base.name.fileName) at \(merge.tip.name.fileName)"
            for entry in merge.replaced {
                kept[entry.path] = []
                mergedInto[entry.path] = into
            }
        }
        let items = archives.map {
            Item(entry: $0, keptBy: kept[$0.path] ?? [], mergedInto: mergedInto[$0.path])
        }
        return (items.reversed(), merges)
    }

    /// Prunes one user's archives under the user's lock (when a root is given): plans with
    /// `policy`, removes what nothing keeps (unless `dryRun`) and returns the plan. Under the
    /// same lock, after the archives, `follow`'s segments get their own step
    /// (``FollowedRetention``): the generations it removes (or would) go to `followed`.
    public static func prune(
        user: UserID, repository: any Repository, policy: RetentionPolicy, root: Root?, lockTimeout: Duration,
        dryRun: Bool = false, merge: Bool = true, followed: (([FollowedRetention.Removal]) -> Void)? = nil
    ) throws -> [Item] {
        // Each manifest the plan, the merges and the plan after them need is read once.
        try HeadMemo.remembering {
            try pruneOnce(
                user: user, repository: repository, policy: policy, root: root, lockTimeout: lockTimeout,
                dryRun: dryRun, merge: merge, followed: followed)
        }
    }

    private static func pruneOnce(
        user: UserID, repository: any Repository, policy: RetentionPolicy, root: Root?, lockTimeout: Duration,
        dryRun: Bool, merge: Bool, followed: (([FollowedRetention.Removal]) -> Void)?
    ) throws -> [Item] {
        let lock = try root.map { root throws(LockError) in
            try UserLock.acquire(root: root, user: user, timeout: lockTimeout)
        }
        defer { lock?.release() }
        let follow = try FollowedRetention.Followed.read(user: user, repository: repository)
        var (items, merges) = try planned(
            user: user, repository: repository, policy: policy, root: root, merge: merge, followed: follow)
        if !dryRun {
            // Issue 35: every merged archive is written, published and proven before anything
            // is removed; a merge that fails leaves what it would replace in place.
            // What a killed merge left (its scratch folder, its temporary archive) goes first.
            _ = repository.removeDeadTemporaries(users: [user])
            var made: [(merge: DeltaMerge.Merge, entry: RepositoryEntry)] = []
            for merge in merges {
                try Interruption.check()
                made.append((merge, try DeltaMerge.build(merge, repository: repository, user: user)))
            }
            // What keeps each merged archive, from one plan after all merges (not one per merge).
            let replanned =
                made.isEmpty
                ? []
                : try planned(
                    user: user, repository: repository, policy: policy, root: root, merge: false, followed: follow
                ).items
            for (merge, entry) in made {
                let tipIndex = items.firstIndex { $0.entry == merge.tip } ?? 0
                let reasons = replanned.first { $0.entry == entry }?.keptBy
                items.insert(
                    Item(
                        entry: entry, keptBy: reasons ?? ["merged"], merged: merge.replaced.map(\.name.fileName)),
                    at: tipIndex)
            }
            // Newest first: every chain that stays is whole after each removal.
            let removed = items.filter { !$0.keep }.map(\.entry).sorted { $0.name > $1.name }
            // Every name goes into this host's deletion record at once (before any is removed,
            // as `delete` records what it removes), then each archive is removed in turn.
            let recorded = removed.filter { $0.object != nil }.map(\.name.fileName)
            if !recorded.isEmpty {
                try repository.recordDeletion(of: recorded, user: user, host: repository.context.host)
            }
            let replaced = Set(merges.flatMap { $0.replaced.map(\.path) })
            for entry in removed {
                if replaced.contains(entry.path) { CrashPoint.reach(.mergeRemoving) }
                try repository.remove([entry])
            }
            // A retired user whose last archive went leaves no folder behind (a remote repository has
            // no folders of its own): the repository no longer names them.
            if !items.isEmpty, !items.contains(where: \.keep), let local = repository.localPath {
                RawPath.rmdir(local + "/" + user.rawValue)
            }
        }
        // follow's segments: what the archives that stay no longer carry, or what is past the span.
        let remaining = Set(items.filter(\.keep).map(\.entry.name.fileName))
        let removals = FollowedRetention.plan(follow, remaining: remaining, policy: policy)
        if !dryRun { try FollowedRetention.remove(removals, repository: repository) }
        followed?(removals)
        return items
    }

    /// Refuses when any of `entries` is its user's newest verified archive (unless `force`).
    public static func checkDeletable(_ entries: [RepositoryEntry], repository: any Repository, force: Bool) throws {
        guard !force else { return }
        let catalogue = Catalogue(repository: repository)
        for entry in entries where try catalogue.newestVerified(of: entry.user)?.path == entry.path {
            throw RemovalRefused(archive: entry.path)
        }
        // Issue 35: nor a base of a delta that stays.
        let deleting = Set(entries.map(\.path))
        for user in Set(entries.filter { $0.object != nil }.map(\.user)) {
            let archives = try repository.archives(of: user)
            guard archives.contains(where: { $0.name.saysDelta && !deleting.contains($0.path) }) else { continue }
            var kept = Dictionary(
                archives.filter { !deleting.contains($0.path) }.map { ($0.path, ["stays"]) },
                uniquingKeysWith: { first, _ in first })
            DeltaChains.keepBases(of: archives, kept: &kept, repository: repository)
            for entry in entries where entry.user == user {
                if let reason = kept[entry.path]?.first(where: { $0.hasPrefix(DeltaChains.baseReason(of: "")) }) {
                    throw RemovalRefused(
                        archive: entry.path, neededBy: String(reason.dropFirst(DeltaChains.baseReason(of: "").count)))
                }
            }
        }
    }

    /// Removes each archive and its verification record from `repository` (a local folder is
    /// synced after each removal).
    public static func remove(_ entries: [RepositoryEntry], from repository: any Repository) throws {
        try repository.removeRecorded(entries)
    }

    /// `delete`: removes `entries` under the locks of their users (when a root is given), taken
    /// in the order of the users' ids and held until every archive is gone, as `prune` holds
    /// one user's. The caller has checked them (``checkDeletable(_:repository:force:)``).
    public static func delete(
        _ entries: [RepositoryEntry], from repository: any Repository, root: Root?, lockTimeout: Duration
    ) throws {
        var locks: [UserLock] = []
        defer { for lock in locks { lock.release() } }
        if let root {
            for user in Set(entries.map(\.user)).sorted(by: { $0.rawValue < $1.rawValue }) {
                locks.append(try UserLock.acquire(root: root, user: user, timeout: lockTimeout))
            }
        }
        try remove(entries, from: repository)
    }
}
