import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Finishes or rolls back a swap that did not end, from its journal (``SwapJournal``).
///
/// Per store, the filesystem says what happened: if the live path names the staged inode the
/// commit happened and the swap is rolled forward (the old external-data files are moved aside,
/// the old database is kept for the safety archive); otherwise it is rolled back (the aside
/// link and the added external files are removed). Neither direction ever writes to a live
/// database file, so it is safe while an owner has already resumed on it. Then the safety
/// archive is written (once: its path is recorded in the journal) and the work folder removed.
public enum Recovery {
    /// What recovery did for one user.
    public struct Report: Sendable {
        public var user: String
        /// Stores whose swap had committed: now fully new.
        public var rolledForward: [String] = []
        /// Stores whose swap had not committed: still fully old.
        public var rolledBack: [String] = []
        /// The safety archive written (or already written before the interruption).
        public var safetyArchive: String?
        /// Whether there was anything to recover.
        public var hadJournal: Bool
    }

    /// The folder where a user's restores stage their files: `<root>/.granary/restore/<user>`.
    public static func workFolder(root: Root, user: UserID) -> String {
        root.stateFolder + "/restore/" + user.rawValue
    }

    /// The journal of a user's swap in progress.
    public static func journal(root: Root, user: UserID) -> SwapJournal {
        SwapJournal(path: workFolder(root: root, user: user) + "/journal")
    }

    /// Recovers `user` (the caller holds the user's lock). Does nothing when there is no journal,
    /// apart from removing a staging folder left by a run that died before its plan was written.
    public static func recover(root: Root, user: UserID) throws -> Report {
        let journal = journal(root: root, user: user)
        let folder = workFolder(root: root, user: user)
        guard let (plan, steps) = journal.read() else {
            FileSystem.removeTree(folder)
            return Report(user: user.rawValue, hadJournal: false)
        }
        var report = Report(user: user.rawValue, hadJournal: true)
        var replaced: [SafetyArchive.Item] = []
        for entry in plan.stores {
            if entry.method == "online" {
                if steps.contains("online-commit \(entry.name)") {
                    report.rolledForward.append(entry.name)
                    replaced.append(SafetyArchive.Item(name: entry.name, database: entry.aside, external: nil))
                } else {
                    report.rolledBack.append(entry.name)
                }
                continue
            }
            if StoreSwap.isCommitted(entry) {
                try StoreSwap.removeOldExternal(entry)
                report.rolledForward.append(entry.name)
                if FileSystem.isRegularFile(entry.aside) {
                    let external = entry.asideExternal.flatMap { FileSystem.isDirectory($0) ? $0 : nil }
                    replaced.append(SafetyArchive.Item(name: entry.name, database: entry.aside, external: external))
                }
            } else {
                // Not committed: the live path still names the old database. Undo what was added.
                if let liveExternal = entry.liveExternal, let staged = entry.stagedExternal {
                    for name in entry.externalAdded {
                        let live = FileSystem.status(liveExternal + "/" + name)
                        let new = FileSystem.status(staged + "/" + name)
                        if let live, let new, live.st_ino == new.st_ino { try FileSystem.removeFile(liveExternal + "/" + name) }
                    }
                }
                try FileSystem.removeFile(entry.aside)
                report.rolledBack.append(entry.name)
            }
        }
        if let done = steps.first(where: { $0.hasPrefix("safety-archive ") }) {
            report.safetyArchive = String(done.dropFirst("safety-archive ".count))
        } else if let repository = plan.repository, !replaced.isEmpty {
            let path = try SafetyArchive.write(
                user: user, items: replaced, repository: Repository(path: repository), label: plan.label)
            try journal.record("safety-archive \(path)", durable: true)
            report.safetyArchive = path
        }
        try journal.remove()
        FileSystem.removeTree(folder)
        return report
    }

    /// Removes the temporaries that backups and verifications which died left in `repository`
    /// (its work folder, and the folders of `users`, every user when empty). Returns their paths.
    public static func removeDeadTemporaries(in repository: Repository, users: [UserID] = []) -> [String] {
        var removed = StaleTemporaries.clean(repository.workFolder)
        for user in users.isEmpty ? repository.users() : users { removed += StaleTemporaries.clean(repository.folder(for: user)) }
        return removed
    }
}
