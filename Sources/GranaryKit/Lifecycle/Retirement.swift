import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The end of a user's life on this host: `granary retire USER`.
///
/// Reads top to bottom: lock → recover → refuse while anything has a store open or serves one →
/// final archive (a backup with the label `final`, `"kind": "final"` in its manifest, checked with
/// `integrity_check` and then verified in full, its verification record written) → journal →
/// the user's folder renamed into granary's state folder (one atomic rename: from here on the
/// user is gone) → its content removed there, without following a link and with the owner's
/// permissions → journal removed.
///
/// A crash at any step is finished or undone by ``recover(root:user:)`` (every command on the
/// user runs it first): a folder not moved yet stays where it is; a folder moved is deleted (its
/// final archive exists: the journal is written only after it verified). The final archive is
/// kept out of the regular retention rules (`prune --final-keep-within`, default for ever), and
/// `restore --create` brings the user back from it.
public struct Retirement: Sendable {
    public let root: Root
    public let repository: any Repository

    public init(root: Root, repository: any Repository) {
        self.root = root
        self.repository = repository
    }

    /// What a retire will remove: the user's stores and their sizes (for the question asked on a terminal).
    public func plan(_ user: UserID) throws -> [StoreFile] {
        try root.user(user).scan().stores
    }

    /// What a retire did.
    public struct Report: Sendable {
        public let user: UserID
        /// The verified final archive.
        public let archive: String
        public let stores: [String]
        /// The folder that is gone.
        public let folder: String
    }

    public func run(_ user: UserID, lockTimeout: Duration, ownerTimeout: Duration) throws -> Report {
        let lock = try UserLock.acquire(root: root, user: user, timeout: lockTimeout)
        defer { lock.release() }
        _ = try Recovery.recover(root: root, user: user, ownerTimeout: ownerTimeout)
        let folder = try root.user(user)
        let stores = folder.scan().stores

        // Nothing may have the user's stores open: the app must have let go.
        for store in stores {
            let holders = OpenFiles.holders(of: store.fileName, in: store.folder)
            if !holders.isEmpty { throw RetireError.inUse(store: store.path, detail: "it is open by process \(holders.map(String.init).joined(separator: ", "))") }
            if OpenFiles.hasWALConnection(store.fileName, in: store.folder) {
                throw RetireError.inUse(store: store.path, detail: "a process of another user has it open")
            }
            if let owner = try? Owners.connect(store.folder, store.fileName, ownerUID: store.uid, timeout: ownerTimeout) {
                let pid = owner.ownerPID
                owner.close()
                throw RetireError.inUse(store: store.path, detail: "process \(pid) serves it (an owner is running)")
            }
        }

        // The final archive, verified in full before anything is removed.
        CrashPoint.reach()
        var options = BackupOperation.Options()
        options.label = ArchiveName.finalLabel
        options.check = .full
        options.lockTimeout = lockTimeout
        let backup = try BackupOperation(root: root, repository: repository, options: options).runLocked(user, kind: .final)
        CrashPoint.reach()
        let published = backup.entry
        let verified = try CPUYield.shared.yielding {
            try ArchiveVerifier.verify(
                source: try repository.open(published), name: backup.archive, workFolder: try repository.prepareWorkFolder(), check: .full,
                expectedUser: user.rawValue)
        }
        try repository.writeRecord(VerificationRecord(entry: published, good: true, reason: nil, check: .full), for: published)
        _ = verified

        // The journal, then the one rename that makes the user gone.
        CrashPoint.reach()
        let work = Self.workFolder(root: root, user: user)
        FileSystem.removeTree(work)
        try FileSystem.makeDirectory(work)
        let info = try folder.folder.descriptor.status()
        let journal = RetireJournal(user: user.rawValue, archive: backup.archive, device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
        try journal.write(to: work)
        CrashPoint.reach()
        let rootFolder = try root.open()
        let workFolder = try Folder.open(path: work)
        try rootFolder.rename(user.rawValue, to: workFolder, as: Self.movedName, .noReplace)
        try rootFolder.sync()
        try workFolder.sync()

        // Removed where nobody else can reach it by name.
        CrashPoint.reach()
        try Self.finish(work: work, journal: journal)
        return Report(user: user, archive: backup.archive, stores: stores.map(\.name), folder: folder.path)
    }

    /// `<root>/.granary/retire/<user>`.
    static func workFolder(root: Root, user: UserID) -> String { root.stateFolderPath + "/retire/" + user.rawValue }
    static let movedName = "folder"

    /// Deletes the moved folder (as its owner, never following a link), then the journal.
    static func finish(work: String, journal: RetireJournal) throws {
        let container = try Folder.open(path: work)
        if let entry = container.entry(movedName), entry.kind == .folder, entry.inode == journal.inode, entry.device == journal.device {
            let moved = try container.userFolder(movedName)
            for item in try moved.entries() {
                try Interruption.check()
                moved.removeTree(item.name)
            }
            _ = FolderName.withRaw(movedName) { unlinkat(container.descriptor.raw, $0, AT_REMOVEDIR) }
        }
        FileSystem.removeTree(work)
    }

    /// Finishes or undoes a retire that stopped (the caller holds the user's lock): a folder
    /// already moved is deleted, one not moved yet is left where it is. Returns what it did.
    public static func recover(root: Root, user: UserID) throws -> RecoveryOutcome? {
        let work = workFolder(root: root, user: user)
        guard FileSystem.isDirectory(work) else { return nil }
        guard let journal = RetireJournal.read(from: work) else {
            // Stopped before its journal: nothing was moved.
            FileSystem.removeTree(work)
            return .undone
        }
        if FileSystem.status(work + "/" + movedName) != nil && FileSystem.isRegularFile(journal.archive) {
            try finish(work: work, journal: journal)
            return .finished(archive: journal.archive)
        }
        FileSystem.removeTree(work + "/journal")
        FileSystem.removeTree(work)
        return .undone
    }

    /// What recovery did to an interrupted retire.
    public enum RecoveryOutcome: Sendable, Equatable {
        /// The folder had been moved: its removal was finished; the final archive stays.
        case finished(archive: String)
        /// The folder had not been moved: it is where it was.
        case undone
    }

    /// Whether `user` is retired: no folder under the root, and a final archive is their newest.
    public static func isRetired(_ user: UserID, root: Root, repository: any Repository) -> Bool {
        guard let root = try? root.open(), root.entry(user.rawValue) == nil else { return false }
        return (try? repository.archives(of: user))?.last?.name.kind == .final
    }
}

/// The journal of one retire: `<root>/.granary/retire/<user>/journal`, written (durably) after the
/// final archive verified and before the folder moves.
struct RetireJournal: Codable {
    var user: String
    var archive: String
    /// The user folder's identity, so that only that folder is ever deleted.
    var device: UInt64
    var inode: UInt64

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

/// Why a retire did not happen (nothing was removed).
public enum RetireError: GranaryError, Sendable {
    case inUse(store: String, detail: String)

    public var description: String {
        switch self {
        case .inUse(let store, let detail): return "\(store) is in use: \(detail); nothing was removed"
        }
    }

    public var status: ExitStatus { .temporaryFailure }

    public var hint: String? { "stop the app's use of this user (its owner process), then run again" }
}
