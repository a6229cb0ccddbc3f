import Foundation
import GranaryDigest

/// Everything in a user's folder, as its owner sees it: what `retire` will remove, and a
/// fingerprint that tells whether anything in the folder was written while the final archive
/// was taken.
///
/// The folder is walked through ``Folder`` (beneath its descriptor, with the owner's
/// credentials, never following a link: a link is an item, not a way in). A folder the owner
/// cannot list, or one deeper than ``depthLimit``, is an item of its own whose content is not
/// seen (``unlisted``).
public struct FolderContents: Sendable {
    /// One entry of the folder or of a folder inside it.
    public struct Item: Sendable, Equatable {
        /// Relative to the user's folder, for example `Data/App.sqlite`.
        public let name: String
        public let kind: FolderEntry.Kind
        public let size: Int64
        public let inode: UInt64
        /// `st_mtim` in nanoseconds.
        public let modified: Int64
        /// `st_ctim` in nanoseconds: a rewrite in place with the modification time put back
        /// (`touch -d`) still changes it, and nobody can set it back.
        public var changed: Int64 = 0
        /// Its owner's uid.
        public var uid: uid_t = 0
    }

    public let items: [Item]
    /// Folders whose content could not be listed (relative names ending in `/`).
    public let unlisted: [String]

    /// How deep the walk goes.
    public static let depthLimit = 64

    /// Walks `folder` (a user's folder, or the folder a retire moved aside).
    public static func read(_ folder: Folder<UserOwned>) -> FolderContents {
        var items: [Item] = []
        var unlisted: [String] = []
        func walk(_ current: Folder<UserOwned>, _ prefix: String, _ depth: Int) {
            guard let entries = try? current.entries() else {
                unlisted.append(prefix.isEmpty ? "./" : prefix)
                return
            }
            for entry in entries {
                let name = prefix + entry.name
                items.append(
                    Item(
                        name: name, kind: entry.kind, size: entry.size, inode: entry.inode, modified: entry.modified,
                        changed: entry.changed, uid: entry.uid))
                guard entry.kind == .folder else { continue }
                if depth < depthLimit, let child = try? current.folder(entry.name) {
                    walk(child, name + "/", depth + 1)
                } else {
                    unlisted.append(name + "/")
                }
            }
        }
        walk(folder, "", 0)
        return FolderContents(items: items, unlisted: unlisted)
    }

    /// SHA-256 over every item but folders' own times: name, kind, size, inode, modification
    /// and change times (a `-wal` or `-journal` without its change time: SQLite, opening one as
    /// root, gives it its owner again, which changes nothing but that time). A store's `-shm`
    /// (which readers write, granary's snapshot among them) is left out, and so is an empty
    /// `-wal` or `-journal` (SQLite makes and removes empty ones as connections come and go,
    /// without changing the store).
    public var fingerprint: String {
        var hasher = SHA256()
        for item in items.sorted(by: { $0.name < $1.name }) {
            if item.name.hasSuffix("-shm") { continue }
            if item.size == 0 && (item.name.hasSuffix("-wal") || item.name.hasSuffix("-journal")) { continue }
            let companion = item.name.hasSuffix("-wal") || item.name.hasSuffix("-journal")
            let changed = companion ? "" : " \(item.changed)"
            let line =
                item.kind == .folder
                ? "\(item.name)/\n"
                : "\(item.name) \(item.kind) \(item.size) \(item.inode) \(item.modified)\(changed)\n"
            hasher.update(data: FolderName.encode(line))
        }
        for name in unlisted.sorted() { hasher.update(data: Array("\(name) unlisted\n".utf8)) }
        return hasher.finalize().hex
    }

    /// The files, links and special files that no archive holds: everything but the stores
    /// `stores` names, their `-wal`, `-shm` and `-journal`, and what their external-data folders hold.
    public func outside(stores: [String]) -> [Item] {
        var archived = Set<String>()
        var externalPrefixes: [String] = []
        for store in stores {
            for name in [store] + StoreFile.companions(of: store) { archived.insert(name) }
            externalPrefixes.append(StoreFile.externalDataName(for: store) + "/")
        }
        return items.filter { item in
            item.kind != .folder && !archived.contains(item.name)
                && !externalPrefixes.contains { item.name.hasPrefix($0) }
        }
    }

    /// Among `items`, those a final archive takes (``Manifest/plainFilesFolder``): regular files
    /// of the folder's owner `owner` (any owner's when nil).
    public static func archivable(_ items: [Item], owner: uid_t?) -> [Item] {
        items.filter { $0.kind == .file && (owner == nil || $0.uid == owner) }
    }

    /// Bytes of the regular files among `items`.
    public static func size(of items: [Item]) -> Int64 {
        items.reduce(0) { $0 + ($1.kind == .file ? $1.size : 0) }
    }
}
