import Foundation
import GranaryOwner

#if canImport(Glibc)
    import Glibc
#endif

/// The steps of one store's swap, all after the user's commit point (``UserCommit``): the
/// checks that can refuse run before, and change nothing. Each step runs while nobody writes the
/// store (its owner is paused, and ``StoreGuard`` holds SQLite's exclusive lock on it), and each
/// can run again after a crash (``Recovery``):
///
/// ``prepare(_:user:work:guard:)``:
/// 1. `checkpointed`: the old WAL is checkpointed into the old database through the guard's
///    connection, so that the database file alone holds all of it;
/// 2. `keptAside`: the old database and its external-data files are linked into `aside/` by their
///    descriptors (the very inodes that were checked), so nothing of it can be lost;
/// 3. `externalAdded`: files only the new store has are linked into the live external-data folder
///    (unreferenced by the old store, so harmless to it);
/// 4. `staleRemoved`: the old `-wal` (empty now), `-shm` and `-journal` are removed, so that no
///    stale WAL can ever be applied to the new database.
///
/// Then ``switchIn(_:user:work:folderMode:)``: `rename(staged, live)` — one atomic rename per
/// store, descriptor to descriptor — and the old external-data files leave the live folder
/// (``cleanOldExternal(_:user:work:)``).
enum StoreSwap {
    /// The least lease left at which granary still commits.
    static let commitMargin: Duration = .seconds(2)

    /// The live folder of a store and its file name there; with `create`, missing folders are
    /// made (as the owner, with `mode`).
    static func live(
        _ name: String, in user: Folder<UserOwned>, create: Bool = false, mode: mode_t = 0o700,
        modes: [String: UInt32]? = nil
    ) throws(FolderError) -> (Folder<UserOwned>, String) {
        let parentName = (name as NSString).deletingLastPathComponent
        let file = (name as NSString).lastPathComponent
        if parentName.isEmpty { return (user, file) }
        guard create else { return (try user.folder(parentName), file) }
        return (try user.makeFolders(parentName) { path in modes?[path].map { mode_t($0 & 0o7777) } ?? mode }, file)
    }

    /// ``live(_:in:create:mode:)``, or nil when a folder on the way does not exist.
    static func liveIfPresent(_ name: String, in user: Folder<UserOwned>) throws(FolderError) -> (
        Folder<UserOwned>, String
    )? {
        do {
            return try live(name, in: user)
        } catch {
            if case .system(let failure) = error, failure.code == ENOENT { return nil }
            throw error
        }
    }

    // MARK: Before the commit point

    /// A live file's identity and last change (inode, size, modification and change times): equal
    /// fingerprints mean nobody wrote it in between.
    struct Fingerprint: Equatable {
        let inode: UInt64
        let size: Int64
        let modified: Int64
        let changed: Int64
        let device: UInt64

        init?(_ entry: FolderEntry?) {
            guard let entry else { return nil }
            device = entry.device
            inode = entry.inode
            size = entry.size
            modified = entry.modified
            changed = entry.changed
        }
    }

    /// Removes the aside link of a store's old database that an earlier attempt left (recovery
    /// prepares again after a crash): the live store must have its one link again to be opened.
    static func dropAsideLink(_ entry: SwapJournal.Entry, work: RestoreWork) {
        guard let (asideFolder, asideName) = try? RestoreWork.parent(of: work.asideStore(entry.name)) else { return }
        try? asideFolder.remove(asideName)
    }

    /// Steps 1 to 4 for one store (after the commit point; `guard` holds the old store's lock).
    static func prepare(
        _ entry: SwapJournal.Entry, user: Folder<UserOwned>, work: RestoreWork, guard guardian: StoreGuard?
    )
        throws
    {
        switch entry.method {
        case .online: return
        case .new:
            // A store that was not live: only its external-data files go in before the switch
            // (its folders made as the owner, with the user folder's mode; without any, the switch
            // makes its folders).
            guard !entry.externalAdded.isEmpty else { return }
            let mode = try folderMode(user)
            let (folder, file) = try live(entry.name, in: user, create: true, mode: mode, modes: entry.folderModes)
            try addExternal(entry, folder: folder, file: file, work: work, mode: mode)
            CrashPoint.reach(.externalAdded)
            return
        case .swap: break
        }
        let (folder, file) = try live(entry.name, in: user)
        guard let guardian else {
            throw RestoreError.storeBusy(store: folder.path(file), detail: "it was not locked for the swap")
        }
        try guardian.checkpoint()
        // Kept open until the guard lets go: closing it would drop SQLite's lock on the file.
        let old = try folder.openFile(file, .readWrite)
        guardian.keep(old)
        try old.sync()
        CrashPoint.reach(.checkpointed)

        let (asideFolder, asideName) = try RestoreWork.parent(of: work.asideStore(entry.name), create: true)
        try asideFolder.remove(asideName)
        try asideFolder.link(old, as: asideName)
        try asideFolder.sync()
        CrashPoint.reach(.keptAside)

        let externalName = StoreFile.supportFolderName(for: file) + "/" + StoreFile.externalDataFolderName
        if !entry.externalKept.isEmpty || !entry.externalRemoved.isEmpty {
            guard let liveExternal = try StoreFile.externalDataFolder(of: file, in: folder) else {
                throw RestoreError.storeBusy(
                    store: folder.path(externalName), detail: "its external-data folder went away")
            }
            let asideExternal = try FileSystem.makeDirectoryHandle(work.asideExternal(entry.name))
            for name in entry.externalKept + entry.externalRemoved {
                try Interruption.check()
                try asideExternal.remove(name)
                try asideExternal.link(try liveExternal.openFile(name), as: name)
            }
            try asideExternal.sync()
        }
        try addExternal(entry, folder: folder, file: file, work: work, mode: try folderMode(folder))
        CrashPoint.reach(.externalAdded)

        for companion in StoreFile.companions(of: file) { try folder.remove(companion) }
        CrashPoint.reach(.staleRemoved)
        // No fsync of the folder here: the one after the rename makes these unlinks durable with it
        // (a journalling filesystem commits metadata changes to one folder in order), and a power
        // loss that keeps neither leaves the old store with an empty -wal, which is harmless.
    }

    /// Step 3: links the external-data files only the new store has into the live folder (made as
    /// the owner when missing). Idempotent.
    static func addExternal(
        _ entry: SwapJournal.Entry, folder: Folder<UserOwned>, file: String, work: RestoreWork, mode: mode_t
    )
        throws
    {
        guard !entry.externalAdded.isEmpty else { return }
        let externalName = StoreFile.supportFolderName(for: file) + "/" + StoreFile.externalDataFolderName
        let parent = (entry.name as NSString).deletingLastPathComponent
        let liveExternal = try folder.makeFolders(externalName) { path in
            entry.mode(forFolder: parent.isEmpty ? path : parent + "/" + path, default: mode)
        }
        let stagedExternal = try Folder<GranaryOwned>.open(path: work.stagedExternal(entry.name))
        for name in entry.externalAdded where liveExternal.entry(name) == nil {
            try Interruption.check()
            try liveExternal.link(try stagedExternal.openFile(name), as: name)
        }
        try liveExternal.sync()
    }

    /// Undoes what an older granary's prepare added before its commit point (a journal it left): the new
    /// external-data files linked into the live folder (those that are still the staged inodes) and
    /// the aside links. The live database was never replaced.
    static func rollBack(_ entry: SwapJournal.Entry, user: Folder<UserOwned>, work: RestoreWork) {
        if !entry.externalAdded.isEmpty, let (folder, file) = try? live(entry.name, in: user),
            let liveExternal = try? StoreFile.externalDataFolder(of: file, in: folder),
            let stagedExternal = try? Folder<GranaryOwned>.open(path: work.stagedExternal(entry.name))
        {
            for name in entry.externalAdded {
                if let live = liveExternal.entry(name), let new = stagedExternal.entry(name), live.inode == new.inode,
                    live.device == new.device
                {
                    try? liveExternal.remove(name)
                }
            }
        }
        FileSystem.removeTree(work.asideStore(entry.name))
        FileSystem.removeTree(work.asideExternal(entry.name))
    }

    // MARK: After the commit point

    /// Whether the live name holds the staged inode: the store was switched.
    static func isSwitched(_ entry: SwapJournal.Entry, user: Folder<UserOwned>) -> Bool {
        guard entry.method != .online, let (folder, file) = try? live(entry.name, in: user),
            let info = folder.entry(file)
        else { return false }
        return info.inode == entry.stagedInode && info.device == entry.stagedDevice
    }

    /// Puts the staged database in place: one `renameat2` from granary's staging folder into the
    /// live folder (replacing the old name for a swap; refusing to replace anything for a new
    /// store, whose folders are made as the owner). Idempotent.
    static func switchIn(_ entry: SwapJournal.Entry, user: Folder<UserOwned>, work: RestoreWork, folderMode: mode_t)
        throws
    {
        precondition(entry.method != .online)
        if isSwitched(entry, user: user) { return }
        let (folder, file) = try live(
            entry.name, in: user, create: entry.method == .new, mode: folderMode, modes: entry.folderModes)
        let (staging, stagedName) = try RestoreWork.parent(of: work.stagedStore(entry.name))
        try staging.renameAsGranary(stagedName, to: folder, as: file, entry.method == .new ? .noReplace : .replace)
        try folder.sync()
        CrashPoint.reach(.switched)
    }

    /// What an owner (or a process outside the protocol) left beside a switched store while it
    /// was paused: a `-wal`, `-shm` or `-journal` that appeared after the stale ones were removed
    /// would be applied to the new database. Each is moved out of the user's folder into
    /// ``RestoreWork/kept`` (which nothing deletes: it may hold transactions an owner committed),
    /// under a name of its own; returns where each went.
    static func keepIntruders(
        _ entry: SwapJournal.Entry, user: Folder<UserOwned>, work: RestoreWork,
        sparing own: (device: UInt64, inode: UInt64)? = nil
    ) throws -> [(from: String, to: String)] {
        let (folder, file) = try live(entry.name, in: user)
        var moved: [(from: String, to: String)] = []
        // The empty -wal granary's own lock on the new store created is no intruder.
        func isOwn(_ name: String) -> Bool {
            guard let own, let found = folder.entry(name) else { return false }
            return found.device == own.device && found.inode == own.inode
        }
        // Companions a process has open belong to a live connection to the new store (a process
        // outside the protocol may open it as soon as it is in place): moving them would lose its
        // writes. Only files nobody has open are moved away.
        let present = StoreFile.companions(of: file).contains { folder.entry($0) != nil && !isOwn($0) }
        if !present || !OpenFiles.holders(of: file, in: folder).isEmpty { return [] }
        // One name per restore and store: the time in microseconds, then the store's name with
        // its folders flattened.
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let stamp = String(Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1000)
        let flat = entry.name.replacingOccurrences(of: "/", with: "_")
        for suffix in StoreFile.companionSuffixes where folder.entry(file + suffix) != nil && !isOwn(file + suffix) {
            let kept = try FileSystem.makeDirectoryHandle(work.kept)
            let name = "\(stamp)-\(flat)\(suffix)"
            try folder.renameAsGranary(file + suffix, to: kept, as: name)
            moved.append((from: folder.path(file + suffix), to: work.kept + "/" + name))
        }
        if !moved.isEmpty {
            try folder.sync()
            try? Folder<GranaryOwned>.open(path: work.kept).sync()
        }
        return moved
    }

    /// Removes the old external-data files from the live folder (each is kept aside already) —
    /// only names that still hold the inode kept aside. Idempotent.
    static func cleanOldExternal(_ entry: SwapJournal.Entry, user: Folder<UserOwned>, work: RestoreWork) throws {
        guard !entry.externalRemoved.isEmpty, let (folder, file) = try? live(entry.name, in: user),
            let liveExternal = try StoreFile.externalDataFolder(of: file, in: folder)
        else { return }
        let aside = try? Folder<GranaryOwned>.open(path: work.asideExternal(entry.name))
        for name in entry.externalRemoved {
            guard let current = liveExternal.entry(name) else { continue }
            if let kept = aside?.entry(name), kept.inode == current.inode, kept.device == current.device {
                try liveExternal.remove(name)
            }
        }
        try liveExternal.sync()
    }

    /// The mode the restore gives folders it creates in a user's folder: the user folder's own.
    static func folderMode(_ folder: Folder<UserOwned>) throws -> mode_t {
        try folder.status().mode
    }
}

extension FileSystem {
    /// Creates `path` (and its parents, 0700) in granary's own folders and opens it.
    static func makeDirectoryHandle(_ path: String) throws -> Folder<GranaryOwned> {
        try makeDirectory(path)
        return try Folder<GranaryOwned>.open(path: path)
    }
}
