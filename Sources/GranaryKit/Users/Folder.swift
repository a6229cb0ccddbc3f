import CBeneath
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Who a folder belongs to, and so who acts inside it: the trust parameter of a ``Folder``.
///
/// The two kinds are types, not values, so that the compiler checks who acts: a function that
/// works in a user's folder takes a `Folder<UserOwned>`, one that works in granary's own folders a
/// `Folder<GranaryOwned>`, and a rename says in its name whose credentials it runs with
/// (``Folder/renameAsOwner(_:to:as:_:)``, ``Folder/renameAsGranary(_:to:as:_:)``).
public protocol FolderTrust: Sendable {}

/// A user's folder (or one inside it): everything granary touches must belong to its owner, and
/// every call is made with the owner's file-system credentials.
public enum UserOwned: FolderTrust {}

/// granary's own folder (the root itself, the repository, the state folder, a staging folder): no
/// owner check and no change of credentials, but still no links followed.
public enum GranaryOwned: FolderTrust {}

/// An open folder: the only way granary reaches anything inside a user's folder.
///
/// granary runs as root; each user's folder is controlled by its owner, who can put symbolic
/// links, hard links, FIFOs and devices there and swap them while granary runs. So a `Folder`
/// holds an open descriptor of the folder, checked once when it was opened, and every name under
/// it is resolved beneath that descriptor one component at a time: no symbolic link is followed
/// (not even in the last component), no mount point is crossed, nothing escapes it (openat2(2)
/// with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV`).
/// What is opened is checked through its descriptor (`fstat`): a regular file, never a FIFO or a
/// device (opens never block: `O_NONBLOCK`), owned by the folder's owner, and with one link
/// when granary will write, rename or chown it. Metadata is changed through descriptors
/// (`fchown`, `fchmod`), renames go from descriptor to descriptor (`renameat2`), and a file
/// granary moves aside is linked by its descriptor (the very inode that was checked).
///
/// `Trust` says whose folder it is (``UserOwned`` or ``GranaryOwned``). In a user's folder every
/// call is made with the owner's file-system credentials (`setfsuid`, `setfsgid`, no
/// supplementary groups, on the calling thread only): the kernel refuses what the owner could not
/// do, and what granary creates there belongs to the owner by construction. Only moves between
/// granary's own folders and a user's (restore's staged files, the replaced files kept aside) run
/// as root, always between two checked descriptors, and always through
/// ``renameAsGranary(_:to:as:_:)``; a rename between two users' folders is refused.
///
/// The descriptor never leaves this type: what other code needs of it (the folder's own status,
/// its commit lock, its mode) is a method here, so a reviewer can check the trust boundary by
/// reading this one file.
///
/// SQLite opens its files by name; ``sqliteName(_:)`` gives it a name that resolves beneath this
/// folder with the same rules (see `Sources/CBeneath/include/granary_beneath.h`).
///
/// Paths appear in a `Folder` only as `display` text for messages, never to reach a file.
public final class Folder<Trust: FolderTrust>: Sendable, CustomStringConvertible {
    /// Whose credentials calls are made with (fixed by `Trust`; the ids are the owner's).
    private enum Control: Sendable, Equatable {
        case owner(uid: uid_t, gid: gid_t)
        case granary
    }

    /// The open folder.
    private let descriptor: Descriptor
    /// The path it was opened as, for messages only.
    public let display: String
    private let control: Control

    private init(descriptor: Descriptor, display: String, control: Control) {
        self.descriptor = descriptor
        self.display = display
        self.control = control
    }

    public var description: String { display }

    /// The uid everything in this folder must belong to (nil for granary's own folders).
    public var ownerUID: uid_t? {
        if case .owner(let uid, _) = control { return uid }
        return nil
    }

    /// Where the kernel says the open folder is now (`/proc/self/fd/N`), whatever name it was
    /// opened by: the canonical path the reopen protocol derives a store's socket name from.
    public var canonicalPath: String { FolderName.decode(canonicalPathBytes ?? FolderName.encode(display)) }

    /// The bytes of ``canonicalPath`` as the kernel gives them (a name that is not UTF-8 or not in
    /// normal form C kept as it is), or nil when the kernel does not say.
    public var canonicalPathBytes: [UInt8]? {
        var buffer = [CChar](repeating: 0, count: 8193)
        let n = readlink("/proc/self/fd/\(descriptor.raw)", &buffer, 8192)
        guard n > 0 else { return nil }
        return buffer[0..<n].map { UInt8(bitPattern: $0) }
    }

    /// The display path of `name` in this folder.
    public func path(_ name: String) -> String {
        name.isEmpty ? display : (display == "/" ? "/" : display + "/") + name
    }

    // MARK: Opening folders

    /// Opens the folder at `path` by name, with no trust decided yet.
    private static func openPath(_ path: String) throws(FolderError) -> (Int32, stat) {
        let fd = RawPath.open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        if fd < 0 {
            let code = errno
            if code == ELOOP { throw .symbolicLink(path: path) }
            throw .system(FileSystemError("open folder", path: path, code: code))
        }
        var info = stat()
        if fstat(fd, &info) != 0 {
            let code = errno
            Glibc.close(fd)
            throw .system(FileSystemError("stat", path: path, code: code))
        }
        return (fd, info)
    }

    /// The folder's own status (`fstat` of the open descriptor), named by its display path.
    public func status() throws(FolderError) -> FolderEntry {
        FolderEntry(name: display, try statusOfSelf())
    }

    /// Opens the user folder `name` directly inside this one: a real folder, not a link, whose
    /// owner becomes the owner of everything in it.
    private func openUserFolder(_ name: String) throws(FolderError) -> Folder<UserOwned> {
        let child = try openChild(name, flags: O_RDONLY | O_DIRECTORY, control: control)
        let info = try child.statusOfSelf()
        return Folder<UserOwned>(
            descriptor: child.descriptor, display: child.display, control: .owner(uid: info.st_uid, gid: info.st_gid))
    }

    /// Opens the folder at `relative` (components separated by `/`) beneath this one; each
    /// component must be a real folder belonging to this folder's owner.
    public func folder(_ relative: String) throws(FolderError) -> Folder<Trust> {
        var current = self
        for part in relative.split(separator: "/", omittingEmptySubsequences: true) {
            current = try current.openChild(String(part), flags: O_RDONLY | O_DIRECTORY, control: control)
            try current.checkOwner(try current.statusOfSelf(), name: current.display)
        }
        return current
    }

    /// The folder holding `relative` and its last component: `Data/App.sqlite` → (`Data`, `App.sqlite`).
    public func parent(of relative: String) throws(FolderError) -> (folder: Folder<Trust>, name: String) {
        guard let slash = relative.lastIndex(of: "/") else { return (self, relative) }
        return (try folder(String(relative[..<slash])), String(relative[relative.index(after: slash)...]))
    }

    /// Opens `name` (one component) beneath this folder, not following it if it is a link.
    private func openChild(_ name: String, flags: Int32, control: Control) throws(FolderError) -> Folder<Trust> {
        try Self.checkComponent(name, in: self)
        let fd: Int32
        do {
            fd = try asOwner { () throws(FolderError) -> Int32 in
                let fd = FolderName.withRaw(name) { granary_open_beneath(descriptor.raw, $0, flags | O_NONBLOCK, 0) }
                if fd < 0 { throw classify(errno, name: name, operation: "open folder") }
                return fd
            }
        } catch {
            // O_DIRECTORY with O_NOFOLLOW fails with ENOTDIR on a link as on a file: say which it is.
            if case .system(let failure) = error, failure.code == ENOTDIR, let found = entry(name) {
                throw found.kind == .symbolicLink
                    ? .symbolicLink(path: path(name)) : .notAFolder(path: path(name), kind: found.kind)
            }
            throw error
        }
        return Folder(descriptor: Descriptor(fd, display: path(name)), display: path(name), control: control)
    }

    private func statusOfSelf() throws(FolderError) -> stat {
        do { return try descriptor.status() } catch { throw .system(error) }
    }

    // MARK: Listing and looking

    /// The folder's entries (`.` and `..` left out), sorted by name. Names that are not valid
    /// UTF-8 come back escaped so that they round-trip (see ``FolderName``).
    public func entries() throws(FolderError) -> [FolderEntry] {
        try asOwner { () throws(FolderError) -> [FolderEntry] in
            let fd = granary_open_beneath(descriptor.raw, ".", O_RDONLY | O_DIRECTORY, 0)
            if fd < 0 { throw classify(errno, name: "", operation: "read folder") }
            guard let dir = fdopendir(fd) else {
                let code = errno
                Glibc.close(fd)
                throw classify(code, name: "", operation: "read folder")
            }
            defer { closedir(dir) }
            var result: [FolderEntry] = []
            while let item = readdir(dir) {
                let raw = RawPath.entryName(item)  // in place: the record may be shorter than dirent
                if raw == [0x2E] || raw == [0x2E, 0x2E] { continue }
                var info = stat()
                let rc = raw.withUnsafeBufferPointer { buffer -> Int32 in
                    (Array(buffer) + [0]).withUnsafeBufferPointer {
                        $0.withMemoryRebound(to: CChar.self) {
                            fstatat(descriptor.raw, $0.baseAddress!, &info, AT_SYMLINK_NOFOLLOW)
                        }
                    }
                }
                if rc != 0 { continue }  // gone since it was listed
                result.append(FolderEntry(name: FolderName.decode(raw), info))
            }
            return result.sorted { $0.name < $1.name }
        }
    }

    /// `fstatat(name, AT_SYMLINK_NOFOLLOW)` for one component, or nil when there is nothing there.
    public func entry(_ name: String) -> FolderEntry? {
        guard (try? Self.checkComponent(name, in: self)) != nil else { return nil }
        var info = stat()
        let rc = asOwnerQuietly { FolderName.withRaw(name) { fstatat(descriptor.raw, $0, &info, AT_SYMLINK_NOFOLLOW) } }
        return rc == 0 ? FolderEntry(name: name, info) : nil
    }

    // MARK: Files

    /// Opens the existing regular file `name` (one component). It must not be a link, a FIFO, a
    /// device or a folder; in a user's folder it must belong to the owner; with `.readWrite`
    /// (or `singleLink`) it must have exactly one link.
    public func openFile(_ name: String, _ access: FileAccess = .read, singleLink: Bool = false) throws(FolderError)
        -> Descriptor
    {
        try Self.checkComponent(name, in: self)
        let flags = (access == .read ? O_RDONLY : O_RDWR) | O_NONBLOCK
        let fd = try asOwner { () throws(FolderError) -> Int32 in
            let fd = FolderName.withRaw(name) { granary_open_beneath(descriptor.raw, $0, flags, 0) }
            if fd < 0 { throw classify(errno, name: name, operation: "open") }
            return fd
        }
        let file = Descriptor(fd, display: path(name))
        try checkFile(file, name: name, singleLink: singleLink || access == .readWrite)
        clearNonBlocking(fd)
        return file
    }

    /// Creates the new file `name` (it must not exist) with `mode`, open for reading and writing.
    /// In a user's folder it belongs to the owner.
    public func createFile(_ name: String, mode: mode_t = 0o600) throws(FolderError) -> Descriptor {
        try Self.checkComponent(name, in: self)
        let fd = try asOwner { () throws(FolderError) -> Int32 in
            let fd = FolderName.withRaw(name) {
                granary_open_beneath(descriptor.raw, $0, O_RDWR | O_CREAT | O_EXCL, mode)
            }
            if fd < 0 { throw classify(errno, name: name, operation: "create") }
            return fd
        }
        let file = Descriptor(fd, display: path(name))
        if fchmod(fd, mode) != 0 { throw .system(FileSystemError("chmod", path: path(name))) }
        return file
    }

    /// Creates the folder `name` with `mode` (an existing folder that passes the checks is
    /// returned as it is) and opens it.
    @discardableResult
    public func makeFolder(_ name: String, mode: mode_t = 0o700) throws(FolderError) -> Folder<Trust> {
        try Self.checkComponent(name, in: self)
        let rc = asOwnerQuietly { FolderName.withRaw(name) { mkdirat(descriptor.raw, $0, mode) } }
        let created = rc == 0
        if rc != 0 && errno != EEXIST { throw classify(errno, name: name, operation: "create folder") }
        let child = try openChild(name, flags: O_RDONLY | O_DIRECTORY, control: control)
        try child.checkOwner(try child.statusOfSelf(), name: child.display)
        if created && fchmod(child.descriptor.raw, SafeModes.restorable(mode: mode, isFolder: true)) != 0 {
            throw .system(FileSystemError("chmod", path: child.display))
        }
        return child
    }

    /// Creates every missing folder of `relative` with `mode` and opens the last.
    public func makeFolders(_ relative: String, mode: mode_t = 0o700) throws(FolderError) -> Folder<Trust> {
        try makeFolders(relative) { _ in mode }
    }

    /// Creates every missing folder of `relative`, each with the mode `modeFor` gives its path
    /// (relative to this folder, `Data` then `Data/Sub`), and opens the last.
    public func makeFolders(_ relative: String, modeFor: (String) -> mode_t) throws(FolderError) -> Folder<Trust> {
        var current = self
        var path = ""
        for part in relative.split(separator: "/", omittingEmptySubsequences: true) {
            path += (path.isEmpty ? "" : "/") + part
            current = try current.makeFolder(String(part), mode: modeFor(path))
        }
        return current
    }

    /// Removes the entry `name` (one component; a file, link, FIFO…, never a folder). Nothing
    /// there is not an error.
    public func remove(_ name: String) throws(FolderError) {
        try Self.checkComponent(name, in: self)
        let rc = asOwnerQuietly { FolderName.withRaw(name) { unlinkat(descriptor.raw, $0, 0) } }
        if rc != 0 && errno != ENOENT { throw classify(errno, name: name, operation: "remove") }
    }

    /// Removes `name` and, if it is a folder, everything in it, never following a link.
    public func removeTree(_ name: String) {
        guard let entry = entry(name) else { return }
        if entry.kind == .folder, let child = try? openChild(name, flags: O_RDONLY | O_DIRECTORY, control: control) {
            for item in (try? child.entries()) ?? [] { child.removeTree(item.name) }
            _ = asOwnerQuietly { FolderName.withRaw(name) { unlinkat(descriptor.raw, $0, AT_REMOVEDIR) } }
        } else {
            _ = asOwnerQuietly { FolderName.withRaw(name) { unlinkat(descriptor.raw, $0, 0) } }
        }
    }

    /// Removes everything in this folder as ``removeAll(_:)`` does; what stayed is returned.
    public func removeContents() -> [String] {
        guard let items = try? entries() else { return ["./"] }
        return items.flatMap { removeAll($0.name) }
    }

    /// Removes `name` (one component) and, if it is a folder, everything in it, never following
    /// a link and with the owner's permissions: a folder of the owner's that they closed to
    /// themselves (mode 0500, say) is opened up to them first, as they could (as the owner, a
    /// chmod reaches only the owner's own files), then emptied and removed. What the owner could
    /// not remove stays, and its names (relative to this folder; folders end in `/`) are returned:
    /// `retire` reports them rather than remove them as root.
    public func removeAll(_ name: String) -> [String] {
        removeAll(name, depth: 0)
    }

    private func removeAll(_ name: String, depth: Int) -> [String] {
        guard let item = entry(name) else { return [] }
        guard item.kind == .folder else {
            let rc = asOwnerQuietly { FolderName.withRaw(name) { unlinkat(descriptor.raw, $0, 0) } }
            return rc != 0 && errno != ENOENT ? [name] : []
        }
        if item.mode & 0o700 != 0o700, ownerUID == nil || item.uid == ownerUID {
            _ = asOwnerQuietly {
                FolderName.withRaw(name) { fchmodat(descriptor.raw, $0, (item.mode & 0o7777) | 0o700, 0) }
            }
        }
        guard depth < Self.removalDepth,
            let child = try? openChild(name, flags: O_RDONLY | O_DIRECTORY, control: control)
        else {
            return [name + "/"]
        }
        var left: [String] = []
        for inner in (try? child.entries()) ?? [] {
            left += child.removeAll(inner.name, depth: depth + 1).map { name + "/" + $0 }
        }
        let rc = asOwnerQuietly { FolderName.withRaw(name) { unlinkat(descriptor.raw, $0, AT_REMOVEDIR) } }
        if rc != 0 && errno != ENOENT && left.isEmpty { left.append(name + "/") }
        return left
    }

    /// How deep ``removeAll(_:)`` goes (one descriptor is open per level).
    static var removalDepth: Int { 256 }

    /// Renames `name` in this folder to `newName` in `destination` (`renameat2`, descriptor to
    /// descriptor), with `control`'s credentials.
    private func rename<Other>(
        _ name: String, to destination: Folder<Other>, as newName: String, _ mode: RenameMode, asOwner: Bool
    ) throws(FolderError) {
        try Self.checkComponent(name, in: self)
        try Folder<Other>.checkComponent(newName, in: destination)
        let body = {
            FolderName.withRaw(name) { old in
                FolderName.withRaw(newName) { new in
                    granary_renameat2(self.descriptor.raw, old, destination.descriptor.raw, new, mode.rawValue)
                }
            }
        }
        let rc = asOwner ? asOwnerQuietly(body) : body()
        if rc != 0 {
            let code = errno
            throw .system(FileSystemError("rename \(path(name)) to", path: destination.path(newName), code: code))
        }
    }

    /// Gives the open file `file` the name `name` in this folder: the very inode that was opened
    /// and checked, whatever it is called now (`linkat` through `/proc/self/fd`).
    public func link(_ file: Descriptor, as name: String) throws(FolderError) {
        try Self.checkComponent(name, in: self)
        let rc = FolderName.withRaw(name) { granary_link_descriptor(file.raw, descriptor.raw, $0) }
        if rc != 0 { throw .system(FileSystemError("link \(file.display) as", path: path(name))) }
    }

    /// Asks the inotify instance `inotify` to report changes in this very folder: the inode this
    /// descriptor holds, named through `/proc/self/fd` (the kernel resolves that link to the open
    /// folder itself), never by a path in a user's folder, so a folder renamed or swapped for a
    /// link later cannot move the watch elsewhere. The watch's id, or -1 with `errno`.
    public func watch(inotify: Int32, mask: UInt32) -> Int32 {
        inotify_add_watch(inotify, "/proc/self/fd/\(descriptor.raw)", mask | UInt32(IN_ONLYDIR))
    }

    /// Flushes the folder's entries to stable storage (after a rename, link or unlink in it).
    public func sync() throws(FolderError) {
        do { try descriptor.sync() } catch { throw .system(error) }
    }

    /// Gives an open file the folder owner's uid and gid (in granary's own folders: nothing) and `mode`.
    public func own(_ file: Descriptor, mode: mode_t) throws(FolderError) {
        if case .owner(let uid, let gid) = control, geteuid() == 0, fchown(file.raw, uid, gid) != 0 {
            throw .system(FileSystemError("chown", path: file.display))
        }
        if fchmod(file.raw, mode) != 0 { throw .system(FileSystemError("chmod", path: file.display)) }
    }

    /// Sets the folder's own permission bits (`fchmod` of its descriptor), with this folder's
    /// credentials: in a user's folder as its owner, who may change only their own folder.
    public func setMode(_ mode: mode_t) throws(FolderError) {
        if asOwnerQuietly({ fchmod(descriptor.raw, mode) }) != 0 {
            throw .system(FileSystemError("chmod", path: display))
        }
    }

    /// Removes the empty folder `name` (one component), with this folder's credentials. False
    /// when it is not there, not empty or cannot be removed.
    @discardableResult
    public func removeEmptyFolder(_ name: String) -> Bool {
        guard (try? Self.checkComponent(name, in: self)) != nil else { return false }
        return asOwnerQuietly { FolderName.withRaw(name) { unlinkat(descriptor.raw, $0, AT_REMOVEDIR) } } == 0
    }

    // MARK: The commit lock

    /// Tries to take the folder's `flock(2)` exclusive lock without blocking (the commit lock of
    /// the reopen protocol, see `granary-reopen(7)`): true when taken, false while another holds it.
    public func tryLock() throws(FolderError) -> Bool {
        if flock(descriptor.raw, LOCK_EX | LOCK_NB) == 0 { return true }
        let code = errno
        guard code == EWOULDBLOCK || code == EINTR else {
            throw .system(FileSystemError("lock", path: display, code: code))
        }
        return false
    }

    /// Releases the lock ``tryLock()`` took.
    public func unlock() { flock(descriptor.raw, LOCK_UN) }

    // MARK: SQLite

    /// A name under which SQLite opens `name` (one component of this folder) and its `-wal`,
    /// `-shm` and `-journal` beneath this folder, with this folder's rules. Keep the value alive
    /// as long as the connection.
    public func sqliteName(_ name: String) throws(FolderError) -> SQLiteName {
        try Self.checkComponent(name, in: self)
        // Installed by the program at start (ProcessSetup.install()), never from here.
        guard granary_beneath_installed() != 0 else {
            throw .system(
                FileSystemError(
                    "open SQLite beneath (ProcessSetup.install() was not called)", path: display, code: ENOSYS))
        }
        let (uid, gid, check): (uid_t, gid_t, Int32) = {
            switch control {
            case .owner(let uid, let gid): return (uid, gid, 1)
            case .granary: return (geteuid(), getegid(), 0)
            }
        }()
        let token = granary_beneath_register(descriptor.raw, uid, gid, check)
        if token < 0 { throw .system(FileSystemError("register", path: display)) }
        return SQLiteName(token: token, name: name, display: path(name))
    }

    // MARK: Checks and credentials

    /// A name granary may use as one component.
    static func checkComponent(_ name: String, in folder: Folder<Trust>) throws(FolderError) {
        // (Bytes, not `contains("/")`: that is Foundation's substring search, on every open.)
        if name.isEmpty || name == "." || name == ".." || name.utf8.contains(where: { $0 == 0x2F || $0 == 0 }) {
            throw .badName(path: folder.path(name))
        }
    }

    private func checkOwner(_ info: stat, name: String) throws(FolderError) {
        if case .owner(let uid, _) = control, info.st_uid != uid {
            // Another's file with more than one name is a hard link to it: giving it to the folder's
            // owner (chown, as a hint for "not owned" would say) would hand them the other file.
            if info.st_mode & S_IFMT != S_IFDIR && info.st_nlink > 1 {
                throw .hardLinked(path: name, links: Int(info.st_nlink))
            }
            throw .notOwned(path: name, uid: info.st_uid, owner: uid)
        }
    }

    private func checkFile(_ file: Descriptor, name: String, singleLink: Bool) throws(FolderError) {
        let info: stat
        do { info = try file.status() } catch { throw .system(error) }
        let kind = FolderEntry(name: name, info).kind
        guard kind == .file else { throw .notRegular(path: path(name), kind: kind) }
        try checkOwner(info, name: path(name))
        if singleLink && info.st_nlink != 1 { throw .hardLinked(path: path(name), links: Int(info.st_nlink)) }
    }

    private func clearNonBlocking(_ fd: Int32) {
        let flags = fcntl(fd, F_GETFL)
        if flags >= 0 { _ = fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) }
    }

    private func classify(_ code: Int32, name: String, operation: String) -> FolderError {
        // Opened with the owner's credentials: the kernel refused what the owner could not open
        // (a root-only file hard-linked in, say), not something granary cannot write.
        if (code == EACCES || code == EPERM) && ownerUID != nil && operation.hasPrefix("open") {
            return .ownerCannotOpen(path: path(name))
        }
        switch code {
        case ELOOP: return .symbolicLink(path: path(name))
        case EXDEV: return .crossesMount(path: path(name))
        case ENXIO: return .notRegular(path: path(name), kind: .fifo)
        default: return .system(FileSystemError(operation, path: path(name), code: code))
        }
    }

    /// Runs `body` with the owner's file-system credentials (nothing changes in granary's folders).
    private func asOwner<T>(_ body: () throws(FolderError) -> T) throws(FolderError) -> T {
        guard case .owner(let uid, let gid) = control else { return try body() }
        let entered = granary_creds_enter(uid, gid)
        if entered < 0 { throw .system(FileSystemError("take the credentials of uid \(uid) for", path: display)) }
        defer { granary_creds_leave(entered) }
        return try body()
    }

    /// `asOwner` for a system call whose result and errno the caller reads.
    private func asOwnerQuietly(_ body: () -> Int32) -> Int32 {
        guard case .owner(let uid, let gid) = control else { return body() }
        let entered = granary_creds_enter(uid, gid)
        if entered < 0 { return -1 }
        defer { granary_creds_leave(entered) }
        return body()
    }
}

// MARK: Opening by path, and what only one kind of folder does

extension Folder where Trust == GranaryOwned {
    /// Opens one of granary's own folders that an administrator named or granary made (the root,
    /// the repository, the state folder, a work folder): the path is followed as given, but its
    /// last component must be a folder and not a symbolic link. Nothing in it is checked for an
    /// owner and nothing runs with another's credentials.
    public static func open(path: String) throws(FolderError) -> Folder<GranaryOwned> {
        let (fd, _) = try openPath(path)
        return Folder(descriptor: Descriptor(fd, display: path), display: path, control: .granary)
    }

    /// Opens the user folder `name` directly inside this one (the root, or a folder granary set
    /// a user's folder aside in): a real folder, not a link, whose owner becomes the owner of
    /// everything in it.
    public func userFolder(_ name: String) throws(FolderError) -> Folder<UserOwned> {
        try openUserFolder(name)
    }

    /// Gives this folder (one granary made, about to become a user's) to `uid` and `gid` and sets
    /// `mode`, as root through its descriptor.
    public func hand(to uid: uid_t, gid: gid_t, mode: mode_t) throws(FolderError) {
        if geteuid() == 0 && fchown(descriptor.raw, uid, gid) != 0 {
            throw .system(FileSystemError("chown", path: display))
        }
        if fchmod(descriptor.raw, mode) != 0 { throw .system(FileSystemError("chmod", path: display)) }
    }

    /// Renames `name` in this folder to `newName` in `destination`, as granary (root): a move
    /// between granary's own folders, or from one into a user's (a staged store put in place).
    public func renameAsGranary<Other>(
        _ name: String, to destination: Folder<Other>, as newName: String, _ mode: RenameMode = .replace
    ) throws(FolderError) {
        try rename(name, to: destination, as: newName, mode, asOwner: false)
    }
}

extension Folder where Trust == UserOwned {
    /// Opens a folder by `path` as a user's: its owner (as `fstat` gives it once it is open)
    /// becomes the owner of everything in it, and every call runs with that owner's
    /// credentials. The path is followed as given, but its last component must be a folder and
    /// not a symbolic link.
    public static func open(path: String) throws(FolderError) -> Folder<UserOwned> {
        let (fd, info) = try openPath(path)
        return Folder(
            descriptor: Descriptor(fd, display: path), display: path,
            control: .owner(uid: info.st_uid, gid: info.st_gid))
    }

    /// The uid everything in this folder belongs to.
    public var owner: uid_t {
        if case .owner(let uid, _) = control { return uid }
        preconditionFailure("a user's folder without an owner")
    }

    /// Renames `name` in this folder to `newName` in `destination`, another folder of the same
    /// user, with the owner's credentials (the kernel refuses what the owner could not do). A
    /// rename into another user's folder is refused (`FolderError.differentOwners`): nobody's
    /// credentials could make it, and granary does not make it as root.
    public func renameAsOwner(
        _ name: String, to destination: Folder<UserOwned>, as newName: String, _ mode: RenameMode = .replace
    ) throws(FolderError) {
        guard destination.owner == owner else {
            throw .differentOwners(
                from: path(name), to: destination.path(newName), uid: owner, other: destination.owner)
        }
        try rename(name, to: destination, as: newName, mode, asOwner: true)
    }

    /// Renames `name` in this user's folder into granary's own folder `destination`, as granary
    /// (root): a file set aside (a replaced store, a companion left by a paused owner).
    public func renameAsGranary(
        _ name: String, to destination: Folder<GranaryOwned>, as newName: String, _ mode: RenameMode = .replace
    ) throws(FolderError) {
        try rename(name, to: destination, as: newName, mode, asOwner: false)
    }
}

/// How a rename treats an existing destination.
public enum RenameMode: UInt32, Sendable {
    /// Replace it atomically (rename(2)).
    case replace = 0
    /// Fail with `EEXIST` when it exists (`RENAME_NOREPLACE`).
    case noReplace = 1
    /// Swap the two atomically (`RENAME_EXCHANGE`); both must exist.
    case exchange = 2
}

/// One entry of a folder, as `fstatat(…, AT_SYMLINK_NOFOLLOW)` saw it.
public struct FolderEntry: Sendable {
    /// What kind of thing an entry is (never following a link).
    public enum Kind: Sendable, Equatable {
        case folder, file, symbolicLink, fifo, socket, device
    }

    public let name: String
    public let kind: Kind
    public let size: Int64
    /// Bytes actually allocated (`st_blocks * 512`): far below `size` for a sparse file.
    public let allocated: Int64
    public let uid: uid_t
    public let gid: gid_t
    public let mode: mode_t
    public let links: Int
    public let device: UInt64
    public let inode: UInt64
    /// The last change of its content (`st_mtim`), in nanoseconds since 1970.
    public let modified: Int64
    /// The last change of its content or its inode (`st_ctim`), in nanoseconds since 1970.
    public let changed: Int64

    init(name: String, _ info: stat) {
        self.name = name
        switch info.st_mode & S_IFMT {
        case S_IFDIR: kind = .folder
        case S_IFREG: kind = .file
        case S_IFLNK: kind = .symbolicLink
        case S_IFIFO: kind = .fifo
        case S_IFSOCK: kind = .socket
        default: kind = .device
        }
        size = Int64(info.st_size)
        allocated = Int64(info.st_blocks) * 512
        uid = info.st_uid
        gid = info.st_gid
        mode = info.st_mode & 0o7777
        links = Int(info.st_nlink)
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
        modified = Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
        changed = Int64(info.st_ctim.tv_sec) * 1_000_000_000 + Int64(info.st_ctim.tv_nsec)
    }
}

/// How a file is opened.
public enum FileAccess: Sendable {
    /// To read it.
    case read
    /// To write it in place.
    case readWrite
}

/// A name that makes SQLite open a file beneath a ``Folder`` (see `Folder.sqliteName(_:)`).
/// The registration ends when the value goes away.
public final class SQLiteName: Sendable {
    let token: Int32
    /// What SQLite is given: `/.granary-beneath/<token>/<name>`.
    public let path: String
    /// The file's display path, for messages.
    public let display: String

    init(token: Int32, name: String, display: String) {
        self.token = token
        self.path = "/.granary-beneath/\(token)/" + name
        self.display = display
    }

    deinit { granary_beneath_unregister(token) }

    /// Why the calling thread's last open beneath a folder was refused, if it was (for example
    /// `Local.sqlite-wal: has more than one hard link`).
    public static func lastRefusal() -> String? {
        let text = String(cString: granary_beneath_refusal())
        return text.isEmpty ? nil : text
    }

    /// Forgets the calling thread's last refusal.
    public static func clearRefusal() { granary_beneath_clear_refusal() }
}

/// Something in a user's folder that granary refuses to touch, or a failed call there.
public enum FolderError: GranaryError, Sendable {
    case symbolicLink(path: String)
    case crossesMount(path: String)
    case notRegular(path: String, kind: FolderEntry.Kind)
    case notOwned(path: String, uid: uid_t, owner: uid_t)
    /// The folder's owner may not open it (granary opens files in a user's folder as the owner).
    case ownerCannotOpen(path: String)
    case notAFolder(path: String, kind: FolderEntry.Kind)
    case hardLinked(path: String, links: Int)
    case badName(path: String)
    /// A rename from one user's folder into another user's: neither owner may make it, and
    /// granary does not make it as root.
    case differentOwners(from: String, to: String, uid: uid_t, other: uid_t)
    case system(FileSystemError)

    public var description: String {
        switch self {
        case .symbolicLink(let path):
            return "\(path) is a symbolic link; granary does not follow links in a user's folder"
        case .crossesMount(let path):
            return "\(path) is a mount point; granary does not cross mounts in a user's folder"
        case .notRegular(let path, let kind): return "\(path) is \(Self.phrase(kind)), not a regular file"
        case .notOwned(let path, let uid, let owner):
            return "\(path) belongs to uid \(uid), not to its folder's owner (uid \(owner))"
        case .ownerCannotOpen(let path):
            return
                "\(path) cannot be opened with its folder owner's permissions; granary opens nothing there that the owner could not"
        case .notAFolder(let path, let kind): return "\(path) is \(Self.phrase(kind)), not a folder"
        case .hardLinked(let path, let links):
            return "\(path) has \(links) hard links; granary only changes files with one"
        case .badName(let path): return "\(path) is not a usable file name"
        case .differentOwners(let from, let to, let uid, let other):
            return
                "\(from) (uid \(uid)'s) cannot be moved to \(to) (uid \(other)'s); granary moves nothing between two users' folders"
        case .system(let error): return error.description
        }
    }

    static func phrase(_ kind: FolderEntry.Kind) -> String {
        switch kind {
        case .folder: return "a folder"
        case .file: return "a file"
        case .symbolicLink: return "a symbolic link"
        case .fifo: return "a FIFO"
        case .socket: return "a socket"
        case .device: return "a device"
        }
    }

}
