import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The end of a user's life on this host: `granary retire USER`.
///
/// Reads top to bottom: lock → recover → refuse while anything has a store open or serves one →
/// fingerprint the folder → final archive (a backup with the label `final`, `"kind": "final"` in
/// its manifest, checked with `integrity_check`, then verified in full and its verification
/// record written; sent to each mirror) → journal → the user's folder renamed into granary's
/// state folder, `<root>/.granary/retire/<user>/folder` (one atomic rename: from here on the
/// user is gone from the root) → checked again there: nobody has a store open and the
/// fingerprint is unchanged, else it is renamed back and nothing is removed → journal says
/// "deleting" → its content removed, without following a link and with the owner's
/// permissions → journal removed.
///
/// A crash at any step is finished or undone by ``recover(root:user:)`` (every command on the
/// user runs it first): a folder not moved yet stays where it is; a folder moved but not checked
/// yet is checked as above, then removed or put back; a folder being deleted is deleted. The
/// journal is written only after the final archive verified, so a folder is never removed
/// without it. The final archive is kept out of the regular retention rules
/// (the retention policy's `finalKeepWithin`, for ever by default), and a restore that creates the folder brings the user back
/// from it.
public struct Retirement: Sendable {
    public let root: Root
    public let repository: any Repository
    /// Where the final archive is sent too, as a backup sends its archives.
    public let mirrors: [any Repository]

    public init(root: Root, repository: any Repository, mirrors: [any Repository] = []) {
        self.root = root
        self.repository = repository
        self.mirrors = mirrors
    }

    /// One store a retire removes (after archiving it).
    public struct Store: Sendable {
        public let name: String
        /// The database and its `-wal`.
        public let size: Int64
        /// Files in its external-data folder, and their bytes.
        public let externalFiles: Int
        public let externalSize: Int64
    }

    /// What a retire of one user will remove: the stores (archived first) and the other files,
    /// which no archive holds.
    public struct Plan: Sendable {
        public let user: UserID
        public let folder: String
        public let stores: [Store]
        /// Files (and links, special files) that are not part of a store, relative to the folder.
        public let others: [String]
        public let othersSize: Int64

        /// Every byte the folder's files hold.
        public var size: Int64 { stores.reduce(othersSize) { $0 + $1.size + $1.externalSize } }
    }

    /// What a retire will remove, for the question asked on a terminal.
    public func plan(_ user: UserID) throws -> Plan {
        Self.plan(try existingFolder(user))
    }

    /// Refuses (``RetireError/inUse``) while a store of `user` is open or served: checked before
    /// a person is asked, and again by ``run(_:lockTimeout:ownerTimeout:)``.
    public func checkNotInUse(_ user: UserID, ownerTimeout: Duration) throws {
        for store in try existingFolder(user).scan().stores {
            if let busy = Self.inUse(store.fileName, in: store.folder, ownerUID: store.uid, ownerTimeout: ownerTimeout)
            {
                throw RetireError.inUse(store: store.path, detail: busy)
            }
        }
    }

    /// The user's folder; a user who has none is retired already, or unknown.
    private func existingFolder(_ user: UserID) throws -> UserFolder {
        if let folder = try root.existingUser(user) { return folder }
        if let final = Self.finalArchive(of: user, root: root, repository: repository) {
            throw RetireError.alreadyRetired(user: user.rawValue, archive: final.path)
        }
        throw UserError.notFound(user.rawValue, root: root.path)
    }

    static func plan(_ folder: UserFolder) -> Plan {
        let stores = folder.scan().stores
        let contents = FolderContents.read(folder.folder)
        let others = contents.outside(stores: stores.map(\.name))
        return Plan(
            user: folder.id, folder: folder.path,
            stores: stores.map { store in
                let external = contents.items.filter {
                    $0.kind == .file && $0.name.hasPrefix(store.externalDataName + "/")
                }
                return Store(
                    name: store.name, size: store.bytes, externalFiles: external.count,
                    externalSize: FolderContents.size(of: external))
            },
            others: others.map(\.name), othersSize: FolderContents.size(of: others))
    }

    /// What a retire did.
    public struct Report: Sendable {
        public let plan: Plan
        /// The verified final archive, as the repository shows it.
        public let archive: String
        public let archiveSize: Int64
        /// What each mirror made of the final archive.
        public let mirrors: [BackupOperation.MirrorUpload]
        /// What the owner's permissions could not remove, moved out of the way (it is said, not
        /// removed as root).
        public let leftovers: [String]
        /// Where the leftovers are kept.
        public let leftoversFolder: String?
        /// What recovery did first, when an earlier run on the user had stopped.
        public let recovered: Recovery.Report?
    }

    public func run(_ user: UserID, lockTimeout: Duration, ownerTimeout: Duration) throws -> Report {
        _ = try root.open()
        let lock = try UserLock.acquire(root: root, user: user, timeout: lockTimeout)
        defer { lock.release() }
        let recovered = try Recovery.recover(root: root, user: user, ownerTimeout: ownerTimeout)
        let folder = try existingFolder(user)
        let plan = Self.plan(folder)
        let stores = folder.scan().stores

        // Nothing may have the user's stores open: the app must have let go.
        try checkNotInUse(user, ownerTimeout: ownerTimeout)
        let before = FolderContents.read(folder.folder).fingerprint

        // The final archive, verified in full before anything is removed.
        CrashPoint.reach(.retireArchiving)
        var options = BackupOperation.Options()
        options.label = ArchiveName.finalLabel
        options.check = .full
        options.lockTimeout = lockTimeout
        let backup: BackupOperation.Result
        do {
            backup = try BackupOperation(root: root, repository: repository, mirrors: mirrors, options: options)
                .runLocked(user, kind: .final)
        } catch BackupError.noStores(let user, let folder) {
            throw RetireError.noStores(user: user, folder: folder)
        }
        CrashPoint.reach(.retireArchived)
        let published = backup.entry
        _ = try CPUYield.shared.yielding {
            try ArchiveVerifier.verify(
                source: try repository.open(published), name: backup.archive,
                workFolder: try repository.prepareWorkFolder(), check: .full,
                expectedUser: user.rawValue)
        }
        let record = VerificationRecord(entry: published, good: true, reason: nil, check: .full)
        try repository.writeRecord(record, for: published)
        // Each mirror's copy is the same bytes: it is recorded verified there too (as sync would),
        // so that a host with the mirror alone sees the final archive verified.
        for (mirror, upload) in zip(mirrors, backup.mirrors) where upload.archive != nil {
            guard let copy = (try? mirror.archives(of: user))?.first(where: { $0.name == published.name }) else {
                continue
            }
            var moved = record
            moved.archiveSize = copy.size
            moved.archiveModified = copy.modified
            moved.archive = copy.name.fileName
            try? mirror.writeRecord(moved, for: copy)
        }

        // The journal, then the one rename that makes the user gone.
        CrashPoint.reach(.retireJournalling)
        let work = Self.workFolder(root: root, user: user)
        try FileSystem.makeDirectory(work)
        let workFolder = try Folder<GranaryOwned>.open(path: work)
        guard workFolder.entry(Self.movedName) == nil else {
            throw RetireError.stateInTheWay(path: workFolder.path(Self.movedName))
        }
        let info = try folder.folder.status()
        var journal = RetireJournal(
            user: user.rawValue, archive: backup.archive, device: info.device, inode: info.inode,
            fingerprint: before,
            stores: stores.map(\.name), stage: .moving)
        try journal.write(to: work)
        CrashPoint.reach(.retireMoving)
        let rootFolder = try root.open()
        do {
            try rootFolder.renameAsGranary(user.rawValue, to: workFolder, as: Self.movedName, .noReplace)
        } catch {
            // Nothing moved: the journal goes (recovery would find the folder in place and do the same).
            RawPath.unlink(work + "/journal")
            RawPath.rmdir(work)
            throw error
        }
        try rootFolder.sync()
        try workFolder.sync()

        // Checked again where no process can open anything by name: a store opened, or anything
        // written, since the check above would be lost with the folder.
        CrashPoint.reach(.retireMoved)
        if let changed = Self.changeSince(journal, work: workFolder, ownerTimeout: ownerTimeout) {
            try Self.putBack(user, work: work, root: root)
            // The final archive of a retire that did not happen would pass for the user's last word.
            if let object = published.object {
                try? repository.delete(object)
                for (mirror, upload) in zip(mirrors, backup.mirrors) where upload.archive != nil {
                    try? mirror.delete(object)
                }
            }
            throw RetireError.changed(user: user.rawValue, detail: changed)
        }
        journal.stage = .deleting
        try journal.write(to: work)

        // Removed where nobody else can reach it by name.
        let left = try Self.finish(work: work, journal: journal, root: root)
        return Report(
            plan: plan, archive: backup.archive, archiveSize: backup.size, mirrors: backup.mirrors,
            leftovers: left?.names ?? [],
            leftoversFolder: left?.folder, recovered: recovered.hadJournal || recovered.retire != nil ? recovered : nil)
    }

    /// Why the store `file` of `folder` is in use, or nil: a process has it open (as `fuser` sees
    /// it, or through SQLite's lock on its `-shm`), or an owner serves it (reopen protocol).
    static func inUse(_ file: String, in folder: Folder<UserOwned>, ownerUID: uid_t, ownerTimeout: Duration) -> String?
    {
        let holders = OpenFiles.holders(of: file, in: folder)
        if !holders.isEmpty { return "it is open by process \(holders.map(String.init).joined(separator: ", "))" }
        if OpenFiles.hasWALConnection(file, in: folder) { return "a process of another user has it open" }
        // A squatter of another uid on the socket (untrusted peer) is not the owner and blocks nothing.
        if let owner = try? Owners.connect(folder, file, ownerUID: ownerUID, timeout: ownerTimeout) {
            let pid = owner.ownerPID
            owner.close()
            return "process \(pid) serves it (an owner is running)"
        }
        return nil
    }

    /// What changed in the moved folder since the journal was written, or nil.
    static func changeSince(_ journal: RetireJournal, work: Folder<GranaryOwned>, ownerTimeout: Duration) -> String? {
        guard let entry = work.entry(movedName), entry.kind == .folder, entry.inode == journal.inode,
            entry.device == journal.device,
            let moved = try? work.userFolder(movedName)
        else { return "the folder set aside is not the user's" }
        for store in journal.stores {
            guard let (folder, file) = try? moved.parent(of: store), let info = folder.entry(file) else {
                return "\(store) is gone"
            }
            if let busy = inUse(file, in: folder, ownerUID: info.uid, ownerTimeout: ownerTimeout) {
                return "\(store): \(busy)"
            }
        }
        if FolderContents.read(moved).fingerprint != journal.fingerprint {
            return "something in the folder was written while its final archive was taken"
        }
        return nil
    }

    /// Renames the moved folder back to its place under the root (refusing to replace anything),
    /// then forgets the retire.
    static func putBack(_ user: UserID, work: String, root: Root) throws {
        let workFolder = try Folder<GranaryOwned>.open(path: work)
        let rootFolder = try root.open()
        try workFolder.renameAsGranary(movedName, to: rootFolder, as: user.rawValue, .noReplace)
        try rootFolder.sync()
        RawPath.unlink(work + "/journal")
        RawPath.rmdir(work)
    }

    /// `<root>/.granary/retire/<user>`.
    static func workFolder(root: Root, user: UserID) -> String { root.stateFolderPath + "/retire/" + user.rawValue }
    static let movedName = "folder"

    /// Deletes the moved folder (as its owner, never following a link), then the journal. What
    /// the owner could not remove is moved to `<root>/.granary/retire-left/` and named.
    static func finish(work: String, journal: RetireJournal, root: Root) throws -> (names: [String], folder: String)? {
        let container = try Folder<GranaryOwned>.open(path: work)
        var left: [String] = []
        if let entry = container.entry(movedName), entry.kind == .folder, entry.inode == journal.inode,
            entry.device == journal.device
        {
            let moved = try container.userFolder(movedName)
            // The folder itself opened up to its owner, as they could (a 0500 folder keeps its files).
            if entry.mode & 0o700 != 0o700 {
                try? moved.setMode((entry.mode & 0o7777) | 0o700)
            }
            for item in try moved.entries() {
                CrashPoint.reach(.retireDeleting)
                try Interruption.check()
                left += moved.removeAll(item.name)
            }
            if left.isEmpty {
                container.removeEmptyFolder(movedName)
            }
        }
        var kept: (names: [String], folder: String)?
        if container.entry(movedName) != nil {
            // Not the user's folder, or what its owner could not remove: out of the way, not deleted as root.
            let aside = root.stateFolderPath + "/retire-left"
            try FileSystem.makeDirectory(aside)
            let name = journal.user + "-" + ArchiveName.stamp(Date()) + "-\(getpid())"
            try container.renameAsGranary(
                movedName, to: try Folder<GranaryOwned>.open(path: aside), as: name, .noReplace)
            kept = (left.isEmpty ? ["./"] : left, aside + "/" + name)
        }
        try container.sync()
        RawPath.unlink(work + "/journal")
        RawPath.rmdir(work)
        return kept
    }

    /// Finishes or undoes a retire that stopped (the caller holds the user's lock). Returns what
    /// it did, nil when there was nothing to do.
    public static func recover(root: Root, user: UserID, ownerTimeout: Duration = .seconds(10)) throws
        -> RecoveryOutcome?
    {
        let work = workFolder(root: root, user: user)
        guard FileSystem.isDirectory(work) else { return nil }
        let container = try Folder<GranaryOwned>.open(path: work)
        guard let journal = RetireJournal.read(from: work) else {
            // Stopped before its journal: nothing was moved (the journal comes first).
            guard container.entry(movedName) == nil else {
                throw RetireError.stateInTheWay(path: container.path(movedName))
            }
            FileSystem.removeTree(work)
            return .undone(reason: "it stopped before its final archive had verified")
        }
        let moved = container.entry(movedName) != nil
        switch journal.stage {
        case .deleting:
            let left = try finish(work: work, journal: journal, root: root)
            return .finished(archive: journal.archive, leftovers: left?.folder)
        case .moving where !moved:
            // Stopped before the rename: the folder is where it was (or was finished deleting).
            if let entry = try root.open().entry(user.rawValue), entry.inode == journal.inode,
                entry.device == journal.device
            {
                RawPath.unlink(work + "/journal")
                RawPath.rmdir(work)
                return .undone(reason: "it stopped before the folder moved")
            }
            RawPath.unlink(work + "/journal")
            RawPath.rmdir(work)
            return .finished(archive: journal.archive, leftovers: nil)
        case .moving:
            if let changed = changeSince(journal, work: container, ownerTimeout: ownerTimeout) {
                try putBack(user, work: work, root: root)
                return .undone(reason: changed)
            }
            var deleting = journal
            deleting.stage = .deleting
            try deleting.write(to: work)
            let left = try finish(work: work, journal: deleting, root: root)
            return .finished(archive: journal.archive, leftovers: left?.folder)
        }
    }

    /// What recovery did to an interrupted retire.
    public enum RecoveryOutcome: Sendable, Equatable {
        /// The folder had been moved: its removal was finished; the final archive stays.
        /// `leftovers`: where what the owner could not remove was kept.
        case finished(archive: String, leftovers: String?)
        /// The folder is where it was: the retire stopped before it moved, or found on recovery
        /// that it had changed (the reason).
        case undone(reason: String)
    }

    /// The final archive of a retired user: none when the user has a folder under the root or when
    /// their newest archive is not a final one. Safety archives do not count (a restore that
    /// replaced something needs a folder), and a final archive wins a tie within its second: a
    /// retire's archive is the last thing made of the user (archive names order the labels of one
    /// second alphabetically, `final` before `pre-reset`).
    public static func finalArchive(of user: UserID, root: Root?, repository: any Repository) -> RepositoryEntry? {
        if let root, let folder = try? root.open(), folder.entry(user.rawValue) != nil { return nil }
        let archives = ((try? repository.archives(of: user)) ?? []).filter { $0.name.kind != .safety }
        let newest = archives.max { a, b in
            (a.name.created, a.name.kind == .final ? 1 : 0, a.name.sequence) < (
                b.name.created, b.name.kind == .final ? 1 : 0, b.name.sequence
            )
        }
        guard let newest, newest.name.kind == .final else { return nil }
        return newest
    }

    /// Whether `user` is retired: no folder under the root, and a final archive is their newest
    /// (safety archives aside).
    public static func isRetired(_ user: UserID, root: Root, repository: any Repository) -> Bool {
        finalArchive(of: user, root: root, repository: repository) != nil
    }
}

/// The journal of one retire: `<root>/.granary/retire/<user>/journal`, written (durably) after the
/// final archive verified and before the folder moves.
struct RetireJournal: Codable {
    enum Stage: String, Codable {
        /// The folder is about to move, or moved and not checked again yet.
        case moving
        /// The folder moved and was checked: it is being deleted.
        case deleting
    }

    var user: String
    var archive: String
    /// The user folder's identity, so that only that folder is ever deleted.
    var device: UInt64
    var inode: UInt64
    /// ``FolderContents/fingerprint`` when the retire began.
    var fingerprint: String
    /// The stores, relative to the folder: none may be open when the folder is deleted.
    var stores: [String]
    var stage: Stage

    func write(to work: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        try FileSystem.writeAtomically(Array(try encoder.encode(self)) + [0x0A], to: work + "/journal")
    }

    static func read(from work: String) -> RetireJournal? {
        guard let data = FileManager.default.contents(atPath: work + "/journal") else { return nil }
        return try? JSONDecoder().decode(RetireJournal.self, from: data)
    }
}

/// Why a retire did not happen (nothing was removed), or what it could not finish.
public enum RetireError: GranaryError, Sendable {
    case inUse(store: String, detail: String)
    /// Something was written in the folder, or a store opened, while the final archive was taken.
    case changed(user: String, detail: String)
    /// The user has no folder and their newest archive is a final one.
    case alreadyRetired(user: String, archive: String)
    /// Something granary did not put in its retire folder is there.
    case stateInTheWay(path: String)
    /// The folder holds no store: there is nothing to make a final archive of.
    case noStores(user: String, folder: String)

    public var description: String {
        switch self {
        case .inUse(let store, let detail): return "\(store) is in use: \(detail); nothing was removed"
        case .changed(let user, let detail):
            return
                "\(user) changed while its final archive was taken (\(detail)); the folder was put back and nothing was removed"
        case .alreadyRetired(let user, let archive):
            return "\(user) is retired already: it has no folder and its final archive is \(archive)"
        case .stateInTheWay(let path): return "\(path) is in the way of a retire; granary did not put it there"
        case .noStores(let user, let folder):
            return "\(user) has no store in \(folder) to make a final archive of; nothing was removed"
        }
    }

}
