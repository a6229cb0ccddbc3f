import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// What changed under the root since the last look, as `follow` needs it (docs/follow.md,
/// "Many users"): which users' stores were written, and which users must be looked at whole.
public struct FollowChanges: Sendable, Equatable {
    /// Stores written (their names relative to the user's folder), by user: their `-wal` was
    /// written, made or removed, or the file itself written.
    public var stores: [UserID: Set<String>] = [:]
    /// Users whose folders changed otherwise (an entry made, removed or renamed; a folder gone):
    /// every store of theirs is read, and their folders watched again.
    public var users: Set<UserID> = []
    /// Entries of the root itself changed: users may have appeared or gone.
    public var root = false
    /// The kernel dropped events (its queue overflowed): everything must be looked at.
    public var overflow = false

    public init() {}

    public var isEmpty: Bool { stores.isEmpty && users.isEmpty && !root && !overflow }
}

/// inotify(7) on the root and on every folder of every followed user, so that idle stores cost
/// nothing: a store is read when its folder reports a change to it, not on a timer.
///
/// Each watch is on a folder opened beneath the root (``Folder/watch(inotify:mask:)``: the inode
/// itself, never a path), and an event is only a hint: it names a user and a store, which
/// `follow` then opens beneath the root again, with every check. A folder a user moves out of
/// the root, or swaps for a link, can at most make `follow` look at that user again.
///
/// Watches cost kernel memory (about 1 KiB each) and are capped per uid
/// (`fs.inotify.max_user_watches`), a pool every user's folders share: one user with thousands of
/// folders must not take it from the others. So a user is watched whole or not at all: past
/// ``perUser`` folders (`follow_watches`), or when the kernel gives no more watches (`ENOSPC`),
/// the user's watches are all removed again and that user alone is polled instead (``polled``;
/// ``overCap`` says which of them have too many folders), said once.
public final class FollowWatcher {
    /// The inotify descriptor (non-blocking, closed on exec).
    public let descriptor: Int32
    /// Each watch: whose folder (nil: the root) and its path relative to the user's folder.
    var watches: [Int32: (user: UserID?, relative: String)] = [:]
    /// What a plain write (`IN_MODIFY`) of a name in a user's watched folder comes to: the store
    /// to read, or nil (a `-shm`, a `-journal`, a hidden name), by watch and the name's bytes.
    /// Such writes are most of the events, about one a commit; each made and cut strings before
    /// (``drain(into:)``). At most ``modifiedNames`` names a watch; forgotten when the watch is
    /// set again or removed.
    var modified: [Int32: [(raw: [UInt8], store: String?)]] = [:]
    static let modifiedNames = 8
    var byUser: [UserID: Set<Int32>] = [:]
    /// Users some of whose folders could not be watched, and why: they hold no watch, and are
    /// read whole on a timer instead.
    public private(set) var polled: [UserID: String] = [:]
    /// The users of ``polled`` with more folders than ``perUser``: their own doing, read whole
    /// more slowly than a user the kernel's limit left unwatched.
    public private(set) var overCap: Set<UserID> = []
    /// The most folders of one user watched (`follow_watches`).
    public var perUser: Int

    /// The most watches this process may hold: the kernel's limit, or in a debug build a lower one
    /// a test set (``CrashPoint/Plan/inotifyWatches``), past which an add fails as the kernel's
    /// would (`ENOSPC`).
    static var limit: Int? {
        #if TEST_HOOKS
            CrashPoint.plan.inotifyWatches
        #else
            nil
        #endif
    }

    /// What a user's folder watch reports: entries written, made, removed or renamed, and the
    /// folder itself removed or moved. Not a change of owner or mode (`IN_ATTRIB`): SQLite, run by
    /// root, gives each `-wal` and `-shm` it opens to the database's owner (`fchown`), so every
    /// read `follow` or a backup makes would report itself and be read again; an owner or mode
    /// changed is found by the checks of the next read (and by the sweep).
    static let folderMask =
        UInt32(IN_MODIFY) | UInt32(IN_CREATE) | UInt32(IN_DELETE) | UInt32(IN_MOVED_FROM) | UInt32(IN_MOVED_TO)
        | UInt32(IN_DELETE_SELF) | UInt32(IN_MOVE_SELF)
    static let rootMask = UInt32(IN_CREATE) | UInt32(IN_DELETE) | UInt32(IN_MOVED_FROM) | UInt32(IN_MOVED_TO)

    /// The default of ``perUser``: far more folders than an app's data has.
    public static let defaultPerUser = 1024

    /// A new inotify instance; nil when the kernel gives none (then every user is polled).
    public init?(perUser: Int = FollowWatcher.defaultPerUser) {
        let fd = inotify_init1(Int32(IN_NONBLOCK) | Int32(IN_CLOEXEC))
        guard fd >= 0 else { return nil }
        descriptor = fd
        self.perUser = max(1, perUser)
    }

    deinit { close(descriptor) }

    /// How many watches are held.
    public var count: Int { watches.count }

    /// Watches the root's own entries (users appearing and going). False when it cannot.
    public func watchRoot(_ folder: Folder<GranaryOwned>) -> Bool {
        let wd = folder.watch(inotify: descriptor, mask: Self.rootMask)
        guard wd >= 0 else { return false }
        watches[wd] = (nil, "")
        modified[wd] = nil
        return true
    }

    /// Watches the folders of `user` (the user's folder, and every folder beneath it that a scan
    /// searches: not hidden, the owner's, at most ``UserFolder/searchDepth`` deep), replacing the
    /// user's earlier watches. Returns the reason when some folder could not be watched: the
    /// user then holds no watch at all (those added are removed again, so that one user's folders
    /// never use up what the others need) and is polled. The walk stops at ``perUser`` folders
    /// (a user with a million folders costs that many of them here); when the kernel has no watch
    /// left, it goes on counting folders up to there without watching them, so that a user over
    /// the cap is said to be (``overCap``) whoever's watches ran out first.
    @discardableResult
    public func watch(_ user: UserFolder) -> String? {
        var fresh: Set<Int32> = []
        var failure: String?
        // No watch left: the walk goes on counting the user's folders (up to perUser), without
        // watching any more of them, so that a user with too many folders is found to be one
        // however soon the watches ran out (and is read every ten intervals, not every one).
        var exhausted: String?
        var visited = 0
        var tooMany = false
        let mine = byUser[user.id, default: []]
        func walk(_ folder: Folder<UserOwned>, relative: String, depth: Int) {
            guard failure == nil else { return }
            if visited >= perUser {
                tooMany = true
                failure = "more than \(perUser) folders to watch (follow_watches)"
                return
            }
            visited += 1
            // A debug build's lower limit counts the watches this user's walk would replace as free.
            if exhausted != nil {
                // Counted only.
            } else if let limit = Self.limit, watches.count - mine.subtracting(fresh).count >= limit {
                exhausted = "no inotify watch left (fs.inotify.max_user_watches)"
            } else {
                let wd = folder.watch(inotify: descriptor, mask: Self.folderMask)
                if wd < 0 {
                    let code = errno
                    guard code == ENOSPC else {
                        failure = String(cString: strerror(code))
                        return
                    }
                    exhausted = "no inotify watch left (fs.inotify.max_user_watches)"
                } else {
                    fresh.insert(wd)
                    watches[wd] = (user.id, relative)
                    modified[wd] = nil
                }
            }
            guard depth < UserFolder.searchDepth, let entries = try? folder.entries() else { return }
            for entry in entries where entry.kind == .folder && !entry.name.hasPrefix(".") {
                guard failure == nil else { return }
                guard entry.uid == folder.ownerUID || folder.ownerUID == nil,
                    let child = try? folder.folder(entry.name)
                else { continue }
                walk(child, relative: relative.isEmpty ? entry.name : relative + "/" + entry.name, depth: depth + 1)
            }
        }
        walk(user.folder, relative: "", depth: 0)
        if failure == nil { failure = exhausted }
        // Watched whole or not at all: a user some of whose folders cannot be watched is polled,
        // and the watches added for it would only take room from everyone else.
        let kept: Set<Int32> = failure == nil ? fresh : []
        for wd in mine.union(fresh).subtracting(kept) {
            inotify_rm_watch(descriptor, wd)
            watches[wd] = nil
            modified[wd] = nil
        }
        byUser[user.id] = kept
        polled[user.id] = failure
        if tooMany { overCap.insert(user.id) } else { overCap.remove(user.id) }
        return failure
    }

    /// Drops the watches of a user who is gone.
    public func forget(_ user: UserID) {
        for wd in byUser.removeValue(forKey: user) ?? [] {
            inotify_rm_watch(descriptor, wd)
            watches[wd] = nil
            modified[wd] = nil
        }
        polled[user] = nil
        overCap.remove(user)
    }

    /// Waits until an event is there or `timeout` passes (a signal ends the wait too).
    public func wait(_ timeout: Duration) {
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        let ms = max(
            0,
            min(
                Int64(Int32.max),
                timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000))
        _ = poll(&poller, 1, Int32(ms))
    }

    /// Reads every event waiting, into `changes`.
    public func drain(into changes: inout FollowChanges) {
        let size = 64 * 1024
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 8)
        defer { buffer.deallocate() }
        while true {
            let n = read(descriptor, buffer, size)
            if n <= 0 { return }
            var offset = 0
            while offset + 16 <= n {
                let wd = buffer.load(fromByteOffset: offset, as: Int32.self)
                let mask = buffer.load(fromByteOffset: offset + 4, as: UInt32.self)
                let length = Int(buffer.load(fromByteOffset: offset + 12, as: UInt32.self))
                let bytes = UnsafeRawBufferPointer(
                    start: buffer + offset + 16, count: max(0, min(length, n - offset - 16)))
                let raw = UnsafeRawBufferPointer(rebasing: bytes.prefix { $0 != 0 })
                offset += 16 + length
                if mask == UInt32(IN_MODIFY), !raw.isEmpty, let (owner, relative) = watches[wd], let user = owner {
                    let store: String?
                    if let known = modified[wd]?.first(where: { $0.raw.elementsEqual(raw) }) {
                        store = known.store
                    } else {
                        store = Self.written(FolderName.decode(Array(raw)), in: relative)
                        var names = modified[wd] ?? []
                        if names.count >= Self.modifiedNames { names.removeFirst() }
                        names.append((Array(raw), store))
                        modified[wd] = names
                    }
                    if let store { changes.stores[user, default: []].insert(store) }
                    continue
                }
                note(wd: wd, mask: mask, name: raw.isEmpty ? "" : FolderName.decode(Array(raw)), into: &changes)
            }
        }
    }

    func note(wd: Int32, mask: UInt32, name: String, into changes: inout FollowChanges) {
        if mask & UInt32(IN_Q_OVERFLOW) != 0 {
            changes.overflow = true
            return
        }
        guard let (owner, relative) = watches[wd] else { return }
        if mask & UInt32(IN_IGNORED) != 0 {
            // The kernel dropped the watch (its folder is gone): look again.
            watches[wd] = nil
            modified[wd] = nil
            if let owner {
                byUser[owner]?.remove(wd)
                changes.users.insert(owner)
            } else {
                changes.root = true
            }
            return
        }
        guard let user = owner else {
            changes.root = true
            if let id = try? UserID(name) { changes.users.insert(id) }
            return
        }
        if mask & (UInt32(IN_DELETE_SELF) | UInt32(IN_MOVE_SELF)) != 0 {
            changes.users.insert(user)
            return
        }
        if name.hasSuffix("-wal") || mask & UInt32(IN_MODIFY) != 0 {
            if let store = Self.written(name, in: relative) { changes.stores[user, default: []].insert(store) }
            return
        }
        if !Self.ignored(name) { changes.users.insert(user) }
    }

    /// Hidden entries are never stores (nor searched), and SQLite writes `-shm` through a
    /// mapping: its `-wal` says the same, so neither is worth a read; a `-journal` belongs to a
    /// rollback store (not followed).
    static func ignored(_ name: String) -> Bool {
        name.isEmpty || name.hasPrefix(".") || name.hasSuffix("-shm") || name.hasSuffix("-journal")
    }

    /// The store that a write of (or a change to the `-wal`) `name` in the watched folder at
    /// `relative` says to read: nil for a name that is never worth a read.
    static func written(_ name: String, in relative: String) -> String? {
        if ignored(name) { return nil }
        let path = relative.isEmpty ? name : relative + "/" + name
        // A store's own file is written by checkpoints (nothing to ship) and by a rollback
        // store's commits (not followed); any other file may be becoming a store.
        return name.hasSuffix("-wal") ? String(path.dropLast(4)) : path
    }
}
