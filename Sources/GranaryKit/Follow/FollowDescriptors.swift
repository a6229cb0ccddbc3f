import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The descriptors of busy users' followed stores, kept between rounds so that a user read every
/// interval does not open their folders, their store and its `-wal` again each time
/// (docs/follow.md, "Many users").
///
/// What is kept for a store: the user's folder, each folder down to the store's, the store's
/// file and its `-wal`, each opened beneath the root with every check a scan makes, and the
/// identity (device, inode, owner, group) each had when opened. A kept descriptor is used again
/// only after each name on the way is looked at again beneath its parent's descriptor
/// (`fstatat` with `AT_SYMLINK_NOFOLLOW`, ``Folder/entry(_:)``) and found to be the very inode
/// held, with the same owner and kind: a folder, store or `-wal` moved away and replaced by a
/// link, another file or a hard link to another's is then another inode (the one held cannot be
/// reused while it is held open), and the store is opened beneath the root as if nothing were
/// kept. So the trust boundary is the one a fresh open has; what is saved is the opens.
///
/// Bounded: at most ``budget`` descriptors in all (least recently used stores let go first),
/// and a store not used for ``idle`` is let go (an idle store costs no descriptor, and a file
/// the owner removed is not kept alive by granary).
final class FollowDescriptors {
    /// What an inode was when opened: a name that still gives all of it is the same thing.
    struct Identity: Equatable {
        let device: UInt64
        let inode: UInt64
        let uid: uid_t
        let gid: gid_t

        init(_ entry: FolderEntry) {
            device = entry.device
            inode = entry.inode
            uid = entry.uid
            gid = entry.gid
        }
    }

    /// One store's open descriptors, from the user's folder down.
    final class Kept {
        let top: Folder<UserOwned>
        let topIdentity: Identity
        /// The folders below the user's, down to the store's (empty: the store is in the user's
        /// folder), each with the name it has in the one above.
        let folders: [(name: String, folder: Folder<UserOwned>, identity: Identity)]
        let fileName: String
        let file: Descriptor
        let fileIdentity: Identity
        var wal: (file: Descriptor, identity: Identity)?
        var used: ContinuousClock.Instant

        init(
            top: Folder<UserOwned>, topIdentity: Identity,
            folders: [(name: String, folder: Folder<UserOwned>, identity: Identity)], fileName: String,
            file: Descriptor, fileIdentity: Identity, used: ContinuousClock.Instant
        ) {
            self.top = top
            self.topIdentity = topIdentity
            self.folders = folders
            self.fileName = fileName
            self.file = file
            self.fileIdentity = fileIdentity
            self.used = used
        }

        /// The store's folder.
        var folder: Folder<UserOwned> { folders.last?.folder ?? top }
        /// Descriptors it holds (a `-wal` counted whether open or not).
        var descriptors: Int { 3 + folders.count }
    }

    struct Key: Hashable {
        let user: String
        let store: String
    }

    /// The most descriptors kept in all: 512, within the 1,024 a service gets by default, with room
    /// for a round's own (SQLite's, a segment's, a backup's).
    let budget: Int
    /// How long a store not read keeps its descriptors.
    let idle: Duration
    let clock = ContinuousClock()
    private(set) var kept: [Key: Kept] = [:]
    private(set) var held = 0

    init(budget: Int = 512, idle: Duration = .seconds(5)) {
        self.budget = budget
        self.idle = idle
    }

    /// The store `name` of `user`, its descriptors kept and every name on the way checked again
    /// beneath the root (nil when nothing is kept, or when anything changed: the kept
    /// descriptors are let go and the caller opens the store afresh).
    func store(_ name: String, of user: UserID, root: Root) -> StoreFile? {
        let key = Key(user: user.rawValue, store: name)
        guard let entry = kept[key] else { return nil }
        guard let store = check(entry, name: name, user: user, root: root) else {
            drop(key)
            return nil
        }
        entry.used = clock.now
        return store
    }

    func check(_ entry: Kept, name: String, user: UserID, root: Root) -> StoreFile? {
        guard let top = try? root.open(), let found = top.entry(user.rawValue), found.kind == .folder,
            Identity(found) == entry.topIdentity
        else { return nil }
        var parent = entry.top
        for step in entry.folders {
            guard let found = parent.entry(step.name), found.kind == .folder, Identity(found) == step.identity else {
                return nil
            }
            parent = step.folder
        }
        guard let found = parent.entry(entry.fileName), found.kind == .file, Identity(found) == entry.fileIdentity,
            let bytes = try? entry.file.read(count: 100, at: 0), let header = StoreHeader(bytes), header.isWAL
        else { return nil }
        return StoreFile(
            name: name, folder: parent, fileName: entry.fileName, size: found.size, allocated: found.allocated,
            header: header, uid: found.uid, gid: found.gid, mode: found.mode, walSize: nil, hasSHM: false,
            hasJournal: false, hasExternalData: false, device: found.device, inode: found.inode)
    }

    /// Opens the store `name` of `user` beneath the root, with every check a scan makes (a real
    /// folder at each step, no link, a regular file of the owner's, a WAL store), and keeps its
    /// descriptors; nil when it is no longer a WAL store there.
    func open(_ name: String, of user: UserID, root: Root) -> StoreFile? {
        let key = Key(user: user.rawValue, store: name)
        drop(key)
        guard let top = try? root.user(user), let topStatus = try? top.folder.status() else { return nil }
        var parts = name.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        guard let fileName = parts.popLast() else { return nil }
        var folders: [(name: String, folder: Folder<UserOwned>, identity: Identity)] = []
        var parent = top.folder
        for part in parts {
            guard let child = try? parent.folder(part), let status = try? child.status() else { return nil }
            folders.append((part, child, Identity(status)))
            parent = child
        }
        guard let found = parent.entry(fileName), found.kind == .file, let file = try? parent.openFile(fileName),
            let info = try? file.status(), let bytes = try? file.read(count: 100, at: 0),
            let header = StoreHeader(bytes), header.isWAL
        else { return nil }
        let opened = FolderEntry(name: fileName, info)
        let store = StoreFile(
            name: name, folder: parent, fileName: fileName, size: opened.size, allocated: opened.allocated,
            header: header, uid: opened.uid, gid: opened.gid, mode: opened.mode, walSize: nil, hasSHM: false,
            hasJournal: false, hasExternalData: false, device: opened.device, inode: opened.inode)
        // Kept only when the name gave the file opened (not swapped between the look and the open).
        if Identity(found) == Identity(opened) {
            let entry = Kept(
                top: top.folder, topIdentity: Identity(topStatus), folders: folders, fileName: fileName, file: file,
                fileIdentity: Identity(opened), used: clock.now)
            kept[key] = entry
            held += entry.descriptors
            trim()
        }
        return store
    }

    /// The `-wal` of `store` (of `user`), read through the descriptor kept when the name still
    /// gives that inode, the owner's (beneath the store's folder, no link followed); otherwise
    /// opened as ``WALReader/open(in:store:storeOwner:)`` does, and kept. Nil when there is none.
    func wal(of store: StoreFile, user: UserID) throws -> WALReader? {
        let key = Key(user: user.rawValue, store: store.name)
        let entry = kept[key].flatMap {
            $0.fileIdentity.device == store.device && $0.fileIdentity.inode == store.inode ? $0 : nil
        }
        if let entry, let wal = entry.wal {
            if let found = store.folder.entry(store.fileName + "-wal"), found.kind == .file,
                Identity(found) == wal.identity, found.uid == store.uid
            {
                return try WALReader(file: wal.file)
            }
            entry.wal = nil
        }
        guard let reader = try WALReader.open(in: store.folder, store: store.fileName, storeOwner: store.uid) else {
            return nil
        }
        if let entry, let info = try? reader.file.status() {
            entry.wal = (reader.file, Identity(FolderEntry(name: store.fileName + "-wal", info)))
        }
        return reader
    }

    /// Lets go of every store of `user` (a new generation, a round that broke, a user gone).
    func forget(_ user: UserID) {
        for key in kept.keys where key.user == user.rawValue { drop(key) }
    }

    /// Lets go of the stores not used for ``idle``.
    func expire() {
        let now = clock.now
        for (key, entry) in kept where now - entry.used >= idle { drop(key) }
    }

    func drop(_ key: Key) {
        guard let entry = kept.removeValue(forKey: key) else { return }
        held -= entry.descriptors
    }

    /// Lets go of the least recently used stores until the budget holds.
    func trim() {
        while held > budget, let oldest = kept.min(by: { $0.value.used < $1.value.used }) {
            drop(oldest.key)
        }
    }
}
