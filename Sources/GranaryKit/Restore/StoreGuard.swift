import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// SQLite's own exclusive lock on a live store, held by granary from the moment it decides to
/// commit until the store's new database is at the live name.
///
/// Every connection to a WAL database holds a shared lock on the database file for as long as it
/// is open (SQLite takes the exclusive lock on close to learn that it is the last one), and every
/// rollback-mode transaction takes one. A connection in `locking_mode=EXCLUSIVE` that begins and
/// ends an exclusive transaction therefore succeeds only when no other connection has the store
/// open (WAL) or is inside a transaction (rollback), and from then on keeps every other
/// connection from reading or writing the old file: a process outside the reopen protocol cannot
/// write into a file granary is about to set aside. Taking the lock changes no byte of any file
/// (in exclusive mode SQLite keeps the WAL index in its own memory and does not touch `-shm`, and
/// the connection closes without a checkpoint: `SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE`); it is a
/// check, and refusing after it leaves the store as it was. One trace it can leave: SQLite opens
/// a WAL store's `-wal`, creating it empty when it was not there (a store whose last connection
/// closed cleanly). Released without a commit (``release(removingCreatedWAL:)``), the guard
/// removes that empty file again, while it still holds the lock, so nobody else can have used it.
///
/// After the commit the same connection checkpoints the old WAL into the old database (so that
/// the file set aside holds every committed transaction) and is closed only once the rename is
/// done, with its `-wal` kept (``Database/persistWAL()``): SQLite's close must not unlink, by
/// name, a `-wal` that by then belongs to the new database.
final class StoreGuard {
    private var database: Database?
    /// Descriptors granary opened on the locked file meanwhile: POSIX locks belong to the process
    /// and the inode, so closing any descriptor of the file would drop SQLite's lock. They are
    /// closed after the connection.
    private var kept: [Descriptor] = []
    let store: String
    private let folder: Folder<UserOwned>
    private let file: String
    /// The `-wal` SQLite created when the lock was taken (none was there before), by identity.
    private(set) var createdWAL: (device: UInt64, inode: UInt64)?

    /// Takes the lock on store `file` of `folder`, or throws ``RestoreError/storeBusy`` naming why
    /// (another connection has it open). Never waits: whoever holds the store now would hold it
    /// past any short wait granary could afford inside an owner's pause.
    init(_ folder: Folder<UserOwned>, _ file: String) throws {
        store = folder.path(file)
        self.folder = folder
        self.file = file
        let walThere = folder.entry(file + "-wal") != nil
        let db: Database
        do {
            db = try Database(try folder.sqliteName(file), mode: .readWrite, busyTimeout: .zero)
            try db.persistWAL()
            try db.keepWALOnClose()
            try db.execute("PRAGMA locking_mode=EXCLUSIVE")
            try db.execute("BEGIN EXCLUSIVE")
            try db.execute("COMMIT")
        } catch let error as SQLiteError where error.kind == .busy {
            throw RestoreError.storeBusy(
                store: store, detail: "another connection has it open (SQLite's lock is held: \(error.message))")
        }
        database = db
        if !walThere, let wal = folder.entry(file + "-wal"), wal.kind == .file, wal.size == 0 {
            createdWAL = (wal.device, wal.inode)
        }
    }

    /// Whether the lock could be taken now (taken and let go at once: a check, nothing changes).
    /// Any other failure (a companion that is not a plain file of the owner, say) is thrown.
    static func isFree(_ folder: Folder<UserOwned>, _ file: String) throws -> Bool {
        do {
            try StoreGuard(folder, file).release(removingCreatedWAL: true)
            return true
        } catch RestoreError.storeBusy {
            return false
        }
    }

    /// Moves every frame of the old WAL into the old database file and empties the WAL (before
    /// the old file is set aside, so that it holds all of its store).
    func checkpoint() throws {
        guard let database else { return }
        if try database.journalMode() == "wal" {
            let result = try database.checkpoint(.truncate)
            if result.logFrames != 0 && result.logFrames != result.checkpointedFrames {
                throw RestoreError.storeBusy(store: store, detail: "its WAL could not be checkpointed")
            }
        }
    }

    /// Keeps `file` (a descriptor of the locked database) open until the lock is let go.
    func keep(_ file: Descriptor) { kept.append(file) }

    /// Lets go of the lock (closes the connection, then the descriptors kept). With
    /// `removingCreatedWAL` (no commit happened: the `-wal` at the store's name is still the one
    /// taking the lock created), that `-wal` is removed first when it is still empty.
    func release(removingCreatedWAL: Bool = false) {
        if removingCreatedWAL, database != nil, let created = createdWAL,
            let wal = folder.entry(file + "-wal"), wal.kind == .file, wal.size == 0, wal.device == created.device,
            wal.inode == created.inode
        {
            try? folder.remove(file + "-wal")
        }
        createdWAL = nil
        database = nil
        kept = []
    }

    deinit { release() }
}
