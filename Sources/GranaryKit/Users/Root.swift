import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The folder that holds one sub-folder per user, by its path.
///
/// A `Root` is a location, not an open folder: each use opens the path again and checks it
/// (``open()``: root's, writable by nobody else), and hands out open folders — the root itself as a
/// `Folder<GranaryOwned>`, each user's as a `Folder<UserOwned>` (``user(_:)``). Keep the
/// `Folder` for a sequence of operations that must reach the same folder; keep the `Root` to name
/// it.
///
/// Hidden entries (a leading `.`) are granary's or the system's, never users: `.granary` holds
/// granary's locks and restore journals. A user folder is opened beneath the root's descriptor
/// (``Folder``): an entry that is a symbolic link is not a user. Every entry that is not a user,
/// bar `.granary`, is reported with why (``scan()``): a user's data must never be passed over in
/// silence.
public struct Root: Sendable {
    public let path: String

    /// The name of granary's own state folder inside the root.
    public static let stateFolderName = ".granary"

    public init(path: String) {
        self.path = path.count > 1 && path.hasSuffix("/") ? String(path.dropLast()) : path
    }

    /// The display path of granary's state folder inside the root (locks, restore journals, staging).
    public var stateFolderPath: String { path + "/" + Root.stateFolderName }

    /// An entry of the root that is not a user, and why.
    public struct Ignored: Sendable, Equatable {
        public let name: String
        public let reason: String
        /// Whether it may hold a user's data: a folder or a link (a user folder granary cannot
        /// take), not a file or another kind of entry. `check` fails on these.
        public let mayHoldData: Bool
        /// An entry any root may hold that is no user: the file system's `lost+found` and hidden
        /// entries (a leading `.`). `users` lists it; `backup --all` passes it over without a
        /// warning (cron stays silent) and `check` does not fail on it.
        public let routine: Bool

        public init(name: String, reason: String, mayHoldData: Bool = false, routine: Bool = false) {
            self.name = name
            self.reason = reason
            self.mayHoldData = mayHoldData && !routine
            self.routine = routine
        }
    }

    /// The folder `mkfs` makes at the top of an ext2/3/4 file system for `fsck`'s finds: a root
    /// that is a file system of its own has one, and it is no user.
    public static let lostAndFound = "lost+found"

    /// Opens the root folder. It must belong to root (or to granary's uid) and be writable by
    /// nobody else (a sticky, world-writable folder such as /tmp is allowed: nobody can rename
    /// what is not theirs in it): granary keeps its locks and journals in it, by name.
    public func open() throws(UserError) -> Folder<GranaryOwned> {
        let folder: Folder<GranaryOwned>
        do {
            folder = try Folder<GranaryOwned>.open(path: path)
        } catch {
            if case .system(let failure) = error, failure.code == ENOENT || failure.code == ENOTDIR {
                throw .rootMissing(path)
            }
            throw .unreadableRoot(path, error.description)
        }
        guard let info = try? folder.status() else { throw .unreadableRoot(path, "cannot be examined") }
        if info.uid != 0 && info.uid != geteuid() {
            throw .unsafeRoot(
                path, "belongs to uid \(info.uid); the root must belong to root, the folders in it to their users")
        }
        if info.mode & 0o022 != 0 && info.mode & mode_t(S_ISVTX) == 0 {
            throw .unsafeRoot(
                path,
                "is writable by \(info.mode & 0o002 != 0 ? "everyone" : "its group") (mode \(String(info.mode, radix: 8)))"
            )
        }
        return folder
    }

    /// The users under the root, sorted, and the entries that are not users, with why.
    public func scan() throws(UserError) -> (users: [UserID], ignored: [Ignored]) {
        let folder = try open()
        let entries: [FolderEntry]
        do { entries = try folder.entries() } catch { throw .unreadableRoot(path, error.description) }
        var users: [UserID] = []
        var ignored: [Ignored] = []
        for entry in entries {
            let folderLike = entry.kind == .folder || entry.kind == .symbolicLink
            if entry.name == Root.stateFolderName { continue }
            if entry.name.hasPrefix(".") {
                ignored.append(
                    Ignored(
                        name: entry.name, reason: "is hidden; granary takes no hidden entry of the root for a user",
                        mayHoldData: folderLike, routine: true))
                continue
            }
            if entry.name == Root.lostAndFound && entry.kind == .folder {
                ignored.append(
                    Ignored(name: entry.name, reason: "is the file system's lost+found, not a user", routine: true))
                continue
            }
            switch entry.kind {
            case .folder: break
            case .symbolicLink:
                ignored.append(
                    Ignored(
                        name: entry.name, reason: "is a symbolic link; granary does not follow links in the root",
                        mayHoldData: true))
                continue
            default:
                ignored.append(Ignored(name: entry.name, reason: "is \(FolderError.phrase(entry.kind)), not a folder"))
                continue
            }
            if !FolderName.isUTF8(entry.name) {
                ignored.append(
                    Ignored(
                        name: entry.name,
                        reason: "is not UTF-8 text in normal form C, which a user id must be; rename the folder",
                        mayHoldData: true))
                continue
            }
            if let reason = UserID.problem(with: entry.name) {
                ignored.append(
                    Ignored(name: entry.name, reason: "is not a valid user id: it \(reason)", mayHoldData: true))
                continue
            }
            users.append(try UserID(entry.name))
        }
        return (users, ignored)
    }

    /// Why the folder of `id` cannot be read (opened beneath the root and listed with its owner's
    /// rights, as a backup does), or nil when it can, or when the root has no entry of that name.
    public func unreadable(_ id: UserID) -> String? {
        let folder: UserFolder
        do { folder = try user(id) } catch {
            if case .notFound = error { return nil }
            return error.description
        }
        do { _ = try folder.folder.entries() } catch { return "cannot list \(folder.path): \(error.description)" }
        return nil
    }

    /// Opens the folder of one user; throws `.notFound` when it does not exist and `.notAFolder`
    /// when it is a link or a file.
    public func user(_ id: UserID) throws(UserError) -> UserFolder {
        let root = try open()
        guard let entry = root.entry(id.rawValue) else { throw .notFound(id.rawValue, root: path) }
        guard entry.kind == .folder else {
            throw .notAFolder(id.rawValue, root: path, reason: "is \(FolderError.phrase(entry.kind))")
        }
        do {
            return UserFolder(id: id, folder: try root.userFolder(id.rawValue))
        } catch {
            throw .notAFolder(id.rawValue, root: path, reason: error.description)
        }
    }

    /// The folder of one user, or nil when there is none (other problems are thrown).
    public func existingUser(_ id: UserID) throws(UserError) -> UserFolder? {
        let root = try open()
        guard root.entry(id.rawValue) != nil else { return nil }
        return try user(id)
    }

    /// Creates the folder of a user who has none (a restore that creates it): made by root beneath
    /// the root's descriptor, then given `uid`, `gid` and `mode` through its descriptor.
    public func createUser(_ id: UserID, uid: uid_t, gid: gid_t, mode: mode_t) throws -> UserFolder {
        let root = try open()
        let made = try root.makeFolder(id.rawValue, mode: 0o700)
        try made.hand(to: uid, gid: gid, mode: SafeModes.restorable(mode: mode, isFolder: true))
        try root.sync()
        return try user(id)
    }

    /// Removes a user's folder that is empty (a restore that created it and did not get to restore anything).
    public func removeEmptyUser(_ id: UserID) {
        guard let root = try? open() else { return }
        root.removeEmptyFolder(id.rawValue)
    }

    /// Opens granary's state folder inside the root, creating it (mode 0700) when missing. It must
    /// be a real folder owned by granary's uid and closed to everyone else: the locks, journals and
    /// staged files in it are trusted. One another user made first (a sticky root lets anyone make
    /// a name) is moved aside (``reclaimStateFolder()``) and granary makes its own.
    public func stateFolder() throws(FolderError) -> Folder<GranaryOwned> {
        let root: Folder<GranaryOwned>
        do { root = try open() } catch { throw .system(FileSystemError("open", path: path, code: ENOENT)) }
        var attempt = 0
        while true {
            attempt += 1
            do throws(FolderError) {
                let state = try root.makeFolder(Root.stateFolderName, mode: 0o700)
                let info = try state.status()
                guard info.uid == geteuid() else {
                    throw .notOwned(path: state.display, uid: info.uid, owner: geteuid())
                }
                if info.mode & 0o077 != 0 { try state.setMode(0o700) }
                return state
            } catch .notOwned(let shown, let uid, let owner) {
                guard attempt < 4, (try? reclaimStateFolder()) != nil else {
                    throw .notOwned(path: shown, uid: uid, owner: owner)
                }
            } catch .symbolicLink(let shown) {
                guard attempt < 4, (try? reclaimStateFolder()) != nil else { throw .symbolicLink(path: shown) }
            } catch .notAFolder(let shown, let kind) {
                guard attempt < 4, (try? reclaimStateFolder()) != nil else {
                    throw .notAFolder(path: shown, kind: kind)
                }
            }
        }
    }

    /// When `.granary` in the root is not granary's own (another uid's, a link, not a folder),
    /// moves it aside as `.granary-squatted-UID-TIME` (a rename in the root's folder, descriptor
    /// to descriptor; nothing in it is touched) and says so, naming who made it. Nil when there is
    /// nothing to move.
    @discardableResult
    public func reclaimStateFolder() throws -> String? {
        let root = try open()
        guard let entry = root.entry(Root.stateFolderName) else { return nil }
        if entry.kind == .folder && entry.uid == geteuid() { return nil }
        let who = AccountNames.user(entry.uid).map { "\($0) (uid \(entry.uid))" } ?? "uid \(entry.uid)"
        let aside = Root.stateFolderName + "-squatted-\(entry.uid)-\(Int(Date().timeIntervalSince1970))-\(getpid())"
        try root.renameAsGranary(Root.stateFolderName, to: root, as: aside, .noReplace)
        try root.sync()
        return
            "\(path)/\(Root.stateFolderName) was \(FolderError.phrase(entry.kind)) made by \(who), not granary's state folder: moved aside to \(path)/\(aside); granary made its own"
    }
}

/// One user's folder, open: the handle through which granary reaches the user's stores.
public struct UserFolder: Sendable {
    public let id: UserID
    /// The open folder (its owner is the owner of everything granary touches in it).
    public let folder: Folder<UserOwned>

    public init(id: UserID, folder: Folder<UserOwned>) {
        self.id = id
        self.folder = folder
    }

    /// The folder's path, for messages.
    public var path: String { folder.display }

    /// How deep below the user's folder stores are looked for.
    public static let searchDepth = 6

    /// An entry the scan passed over, and why (every skip is reported: it may be a store).
    public struct Skipped: Sendable, Equatable {
        /// The name relative to the user's folder (folders end in `/`).
        public let name: String
        public let reason: String
    }

    /// What a scan found.
    public struct Scan: Sendable {
        /// The stores, sorted by name.
        public var stores: [StoreFile]
        /// Files and folders that could not be read to tell whether they are stores (relative
        /// names; folders end in `/`): a backup must not pass over them in silence.
        public var unreadable: [String]
        /// Entries that were passed over on purpose, with why.
        public var skipped: [Skipped]
    }

    /// The stores in this folder.
    public func stores() -> [StoreFile] {
        scan().stores
    }

    /// The stores, found by content: regular files that start with the SQLite magic. `-wal`,
    /// `-shm` and `-journal` files belong to the store beside them. Symbolic links, hidden entries,
    /// special files and folders deeper than ``searchDepth`` are passed over and reported; a
    /// Core Data `.X_SUPPORT` folder belongs to its store and is not.
    public func scan() -> Scan {
        var scan = Scan(stores: [], unreadable: [], skipped: [])
        collect(folder, relative: "", depth: 0, into: &scan)
        scan.stores.sort { $0.name < $1.name }
        scan.unreadable.sort()
        scan.skipped.sort { $0.name < $1.name }
        return scan
    }

    private func collect(_ current: Folder<UserOwned>, relative: String, depth: Int, into scan: inout Scan) {
        let entries: [FolderEntry]
        do { entries = try current.entries() } catch {
            scan.unreadable.append(relative.isEmpty ? "./" : relative + "/")
            return
        }
        let names = Set(entries.map(\.name))
        for entry in entries {
            let rel = relative.isEmpty ? entry.name : relative + "/" + entry.name
            if entry.name.hasPrefix(".") {
                if entry.kind == .folder
                    && StoreFile.supportOwner(entry.name).map({ base in
                        names.contains { StoreFile.baseName($0) == base }
                    }) == true
                {
                    continue  // a store's Core Data support folder
                }
                if let found = sqliteFiles(in: current, entry: entry, depth: depth), !found.isEmpty {
                    for name in found {
                        scan.skipped.append(
                            Skipped(
                                name: relative.isEmpty ? name : relative + "/" + name,
                                reason: "is in a hidden folder or hidden; granary does not back up hidden stores"))
                    }
                }
                continue
            }
            switch entry.kind {
            case .folder:
                if depth >= UserFolder.searchDepth {
                    scan.skipped.append(
                        Skipped(
                            name: rel + "/", reason: "is deeper than \(UserFolder.searchDepth) levels; not searched"))
                } else if entry.uid != current.ownerUID && current.ownerUID != nil {
                    scan.skipped.append(
                        Skipped(name: rel + "/", reason: "belongs to uid \(entry.uid), not to the folder's owner"))
                } else if let child = try? current.folder(entry.name) {
                    collect(child, relative: rel, depth: depth + 1, into: &scan)
                } else {
                    scan.unreadable.append(rel + "/")
                }
            case .symbolicLink:
                scan.skipped.append(
                    Skipped(name: rel, reason: "is a symbolic link; granary does not follow links in a user's folder"))
            case .fifo, .socket, .device:
                // A companion of a store is refused when its store is opened.
                if StoreFile.companionSuffixes.contains(where: { entry.name.hasSuffix($0) }) { continue }
                scan.skipped.append(
                    Skipped(name: rel, reason: "is \(FolderError.phrase(entry.kind)), not a regular file"))
            case .file:
                if entry.size == 0 { continue }
                // A companion is its store's: SQLite opens it (beneath the folder, with the checks)
                // when it opens the store. It is not opened here.
                if let suffix = StoreFile.companionSuffixes.first(where: { entry.name.hasSuffix($0) }),
                    names.contains(String(entry.name.dropLast(suffix.count)))
                {
                    continue
                }
                let file: Descriptor
                do { file = try current.openFile(entry.name) } catch {
                    if case .ownerCannotOpen = error {
                        scan.unreadable.append(rel)
                    } else if case .system(let failure) = error, failure.code == EACCES || failure.code == EPERM {
                        scan.unreadable.append(rel)
                    } else {
                        scan.skipped.append(Skipped(name: rel, reason: error.description))
                    }
                    continue
                }
                guard let bytes = try? file.read(count: 100, at: 0) else {
                    scan.unreadable.append(rel)
                    continue
                }
                guard let header = StoreHeader(bytes) else { continue }
                if let suffix = StoreFile.companionSuffixes.first(where: { entry.name.hasSuffix($0) }) {
                    scan.skipped.append(
                        Skipped(
                            name: rel,
                            reason: "is a SQLite database named like a \(suffix) file; rename it to back it up"))
                    continue
                }
                var hasExternal = false
                do {
                    hasExternal = try StoreFile.externalDataFolder(of: entry.name, in: current) != nil
                } catch {
                    // The store's attachments cannot be taken: say so (the store itself still can).
                    scan.skipped.append(
                        Skipped(
                            name: StoreFile.externalDataName(for: rel),
                            reason: error.description + "; the store's external data is not backed up"))
                }
                scan.stores.append(
                    StoreFile(
                        name: rel, folder: current, fileName: entry.name, size: entry.size, allocated: entry.allocated,
                        header: header, uid: entry.uid, gid: entry.gid, mode: entry.mode,
                        walSize: entries.first { $0.name == entry.name + "-wal" }.map(\.size),
                        hasSHM: names.contains(entry.name + "-shm"),
                        hasJournal: names.contains(entry.name + "-journal"),
                        hasExternalData: hasExternal, device: entry.device, inode: entry.inode))
            }
        }
    }

    /// The SQLite files in a hidden entry (itself, or inside it to the depth limit), for the report.
    private func sqliteFiles(in current: Folder<UserOwned>, entry: FolderEntry, depth: Int) -> [String]? {
        switch entry.kind {
        case .file:
            guard entry.size >= 100, let file = try? current.openFile(entry.name),
                let bytes = try? file.read(count: 16, at: 0),
                bytes == StoreHeader.magic
            else { return [] }
            return [entry.name]
        case .folder:
            guard depth < UserFolder.searchDepth, let child = try? current.folder(entry.name) else { return [] }
            var found: [String] = []
            for item in (try? child.entries()) ?? [] {
                found += (sqliteFiles(in: child, entry: item, depth: depth + 1) ?? []).map { entry.name + "/" + $0 }
            }
            return found
        default:
            return []
        }
    }
}
