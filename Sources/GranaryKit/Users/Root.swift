import Foundation

/// The folder that holds one sub-folder per user.
///
/// Hidden entries (a leading `.`) are granary's or the system's, never users: `.granary`
/// holds granary's locks and restore journals. Symlinks are not followed.
public struct Root: Sendable {
    public let path: String

    /// The name of granary's own state folder inside the root.
    public static let stateFolderName = ".granary"

    public init(path: String) {
        self.path = path.count > 1 && path.hasSuffix("/") ? String(path.dropLast()) : path
    }

    /// granary's state folder inside the root (locks, restore journals, staging).
    public var stateFolder: String { path + "/" + Root.stateFolderName }

    /// A folder name that is not a valid user id, and why.
    public struct Ignored: Sendable, Equatable {
        public let name: String
        public let reason: String
    }

    /// The users under the root, sorted, and the folder names that are not valid ids.
    public func scan() throws(UserError) -> (users: [UserFolder], ignored: [Ignored]) {
        guard FileSystem.isDirectory(path) else { throw .rootMissing(path) }
        var users: [UserFolder] = []
        var ignored: [Ignored] = []
        for name in FileSystem.contents(of: path) where !name.hasPrefix(".") {
            let full = path + "/" + name
            guard FileSystem.isDirectory(full) else { continue }
            if let reason = UserID.problem(with: name) {
                ignored.append(Ignored(name: name, reason: reason))
                continue
            }
            users.append(UserFolder(id: try UserID(name), path: full))
        }
        return (users, ignored)
    }

    /// The folder of one user; throws `.notFound` when it does not exist.
    public func user(_ id: UserID) throws(UserError) -> UserFolder {
        guard FileSystem.isDirectory(path) else { throw .rootMissing(path) }
        let full = path + "/" + id.rawValue
        guard FileSystem.isDirectory(full) else { throw .notFound(id.rawValue, root: path) }
        return UserFolder(id: id, path: full)
    }
}

/// One user's folder and the stores in it.
public struct UserFolder: Sendable, Equatable {
    public let id: UserID
    public let path: String

    public init(id: UserID, path: String) {
        self.id = id
        self.path = path
    }

    /// How deep below the user's folder stores are looked for.
    public static let searchDepth = 6

    /// The stores in this folder, found by content: regular files that start with the
    /// SQLite magic. Hidden folders (Core Data's `.X_SUPPORT`, granary's own) and
    /// symlinks are not searched; `-wal`, `-shm` and `-journal` files belong to the store
    /// beside them and are never stores themselves.
    public func stores() -> [StoreFile] {
        scan().stores
    }

    /// The stores, and the files and folders that could not be read to tell whether they are
    /// stores (relative names; folders end in `/`). A backup must not pass over an unreadable
    /// file in silence: it may be a store.
    public func scan() -> (stores: [StoreFile], unreadable: [String]) {
        var found: [StoreFile] = []
        var unreadable: [String] = []
        collect(relative: "", depth: 0, into: &found, unreadable: &unreadable)
        return (found.sorted { $0.name < $1.name }, unreadable.sorted())
    }

    private func collect(relative: String, depth: Int, into found: inout [StoreFile], unreadable: inout [String]) {
        let folder = relative.isEmpty ? path : path + "/" + relative
        if access(folder, R_OK | X_OK) != 0 {
            unreadable.append(relative.isEmpty ? "./" : relative + "/")
            return
        }
        for name in FileSystem.contents(of: folder) where !name.hasPrefix(".") {
            let rel = relative.isEmpty ? name : relative + "/" + name
            let full = folder + "/" + name
            guard let info = FileSystem.status(full) else { continue }
            switch info.st_mode & S_IFMT {
            case S_IFDIR:
                if depth < UserFolder.searchDepth { collect(relative: rel, depth: depth + 1, into: &found, unreadable: &unreadable) }
            case S_IFREG:
                if name.hasSuffix("-wal") || name.hasSuffix("-shm") || name.hasSuffix("-journal") { continue }
                if info.st_size > 0 && access(full, R_OK) != 0 {
                    unreadable.append(rel)
                    continue
                }
                guard let header = StoreHeader.read(full) else { continue }
                let wal = FileSystem.status(full + "-wal")
                let external = StoreFile.externalDataFolder(for: full)
                found.append(
                    StoreFile(
                        name: rel, path: full, size: Int64(info.st_size), header: header,
                        walSize: wal.map { Int64($0.st_size) },
                        hasSHM: FileSystem.isRegularFile(full + "-shm"),
                        hasJournal: FileSystem.isRegularFile(full + "-journal"),
                        externalDataPath: FileSystem.isDirectory(external) ? external : nil))
            default:
                continue
            }
        }
    }
}
