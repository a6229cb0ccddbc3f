import Foundation
import GranaryOwner

#if canImport(Glibc)
    import Glibc
#endif

/// The journalled swap of one store's files, done while nobody has the store open (its owner
/// is paused, or there is none). The order makes every instant safe:
///
/// 1. `checkpoint`: open the old store and `wal_checkpoint(TRUNCATE)` (a rollback store: read
///    it, which rolls back a hot journal), so that the database file alone holds all of it;
/// 2. `aside`: `link(live, aside)` keeps the old inode under a second name;
/// 3. `external-add`: files only the new store has are linked into the external-data folder
///    (unreferenced by the old store, so harmless to it);
/// 4. `stale`: the old `-wal` (empty now), `-shm` and `-journal` are removed *before* the commit,
///    so that no stale WAL can ever be applied to the new database, even if the owner reopens
///    at once after the commit;
/// 5. `commit`: `rename(staged, live)` — the atomic commit, done only when the owner's lease has
///    more than `commitMargin` left, under the folder's ``CommitLock`` which an owner whose lease
///    expired takes before reopening (otherwise it could reopen the old file just before the rename
///    and keep writing into a file that is no longer the store);
/// 6. `external-remove`: files only the old store had are moved aside.
///
/// Before 5, the live path still names the complete old database; after it, the complete new one.
/// A crash anywhere is finished by ``Recovery``.
enum StoreSwap {
    /// The least lease left at which granary still commits.
    static let commitMargin: Duration = .seconds(2)

    static func perform(_ entry: SwapJournal.Entry, journal: SwapJournal, owner: ReopenClient?) throws {
        CrashPoint.reach()
        try checkpoint(entry)
        try journal.record("checkpoint \(entry.name)")

        CrashPoint.reach()
        try FileSystem.removeFile(entry.aside)
        if link(entry.live, entry.aside) != 0 { throw FileSystemError("link", path: entry.aside) }
        try FileSystem.syncParent(of: entry.aside)
        try journal.record("aside \(entry.name)")

        CrashPoint.reach()
        if let liveExternal = entry.liveExternal, let staged = entry.stagedExternal, !entry.externalAdded.isEmpty {
            try makeExternalFolder(liveExternal, like: entry.live)
            for name in entry.externalAdded {
                if link(staged + "/" + name, liveExternal + "/" + name) != 0 && errno != EEXIST {
                    throw FileSystemError("link", path: liveExternal + "/" + name)
                }
            }
            try FileSystem.sync(liveExternal)
        }
        try journal.record("external-add \(entry.name)")

        CrashPoint.reach()
        for suffix in ["-wal", "-shm", "-journal"] { try FileSystem.removeFile(entry.live + suffix) }
        // No fsync of the folder here: the one after the rename makes these unlinks durable with it
        // (a journalling filesystem commits metadata changes to one folder in order), and a power
        // loss that keeps neither leaves the old store with an empty -wal, which is harmless.
        try journal.record("stale \(entry.name)")

        CrashPoint.reach()
        do {
            // The commit lock keeps an owner whose lease just ran out from reopening between the check and the rename.
            let lock = CommitLock(store: entry.live)
            defer { lock?.release() }
            if let owner, owner.leaseRemaining < commitMargin { throw RestoreError.leaseTooShort(store: entry.live) }
            try FileSystem.rename(entry.staged, to: entry.live)
            try FileSystem.syncParent(of: entry.live)
        }
        try journal.record("commit \(entry.name)")

        CrashPoint.reach()
        try removeOldExternal(entry)
        try journal.record("external-remove \(entry.name)")
    }

    /// Step 1. Fails with `storeBusy` when another connection keeps the WAL from being emptied
    /// (someone outside the protocol has the store open).
    static func checkpoint(_ entry: SwapJournal.Entry) throws {
        let wal = FileSystem.status(entry.live + "-wal")
        let journal = FileSystem.status(entry.live + "-journal")
        if wal == nil && journal == nil { return }
        do {
            let db = try Database(path: entry.live, mode: .readWrite, busyTimeout: .seconds(2))
            if try db.journalMode() == "wal" {
                let result = try db.checkpoint(.truncate)
                if result.logFrames != 0 && result.logFrames != result.checkpointedFrames {
                    throw RestoreError.storeBusy(store: entry.live, detail: "its WAL could not be checkpointed")
                }
            } else {
                _ = try db.scalar("SELECT count(*) FROM sqlite_schema")
            }
        } catch let error as SQLiteError where error.kind == .busy {
            throw RestoreError.storeBusy(store: entry.live, detail: "another connection holds it (\(error.message))")
        }
        if let size = FileSystem.status(entry.live + "-wal")?.st_size, size > 0 {
            throw RestoreError.storeBusy(store: entry.live, detail: "its -wal is not empty after a checkpoint")
        }
        try FileSystem.sync(entry.live)
    }

    /// Step 6 (idempotent: Recovery runs it again after a crash).
    static func removeOldExternal(_ entry: SwapJournal.Entry) throws {
        guard let liveExternal = entry.liveExternal, let asideExternal = entry.asideExternal, !entry.externalRemoved.isEmpty else { return }
        try FileSystem.makeDirectory(asideExternal)
        for name in entry.externalRemoved where FileSystem.status(liveExternal + "/" + name) != nil {
            try FileSystem.rename(liveExternal + "/" + name, to: asideExternal + "/" + name)
        }
        try FileSystem.sync(liveExternal)
    }

    /// Creates `.<Store>_SUPPORT/_EXTERNAL_DATA` owned like the store.
    static func makeExternalFolder(_ path: String, like store: String) throws {
        let support = (path as NSString).deletingLastPathComponent
        for folder in [support, path] where !FileSystem.isDirectory(folder) {
            try FileSystem.makeDirectory(folder, mode: 0o755)
            if let info = FileSystem.status(store) { chown(folder, info.st_uid, info.st_gid) }
        }
    }

    /// Whether the live path names the staged inode: the commit happened.
    static func isCommitted(_ entry: SwapJournal.Entry) -> Bool {
        guard let info = FileSystem.status(entry.live) else { return false }
        return UInt64(info.st_ino) == entry.stagedInode && UInt64(info.st_dev) == entry.stagedDevice
    }
}
