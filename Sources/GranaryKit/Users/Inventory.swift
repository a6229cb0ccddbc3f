import Foundation

/// What `granary users` shows: each user, their stores, and their newest archive.
public struct UserSummary: Sendable {
    public let folder: UserFolder
    public let stores: [StoreFile]
    /// The newest archive in the repository, when a repository is configured and has one.
    public let lastBackup: Repository.Entry?

    /// Bytes of every store with its `-wal`.
    public var totalSize: Int64 { stores.reduce(0) { $0 + $1.size + ($1.walSize ?? 0) } }
}

/// Builds `UserSummary` values for a root (and, optionally, a repository).
public enum Inventory {
    /// Every user under `root`, or only `only` when given (each must exist).
    public static func summarize(
        root: Root, repository: Repository?, only: [UserID] = []
    ) throws(UserError) -> (users: [UserSummary], ignored: [Root.Ignored]) {
        let folders: [UserFolder]
        var ignored: [Root.Ignored] = []
        if only.isEmpty {
            (folders, ignored) = try root.scan()
        } else {
            var list: [UserFolder] = []
            for id in only { list.append(try root.user(id)) }
            folders = list
        }
        let users = folders.map { folder in
            UserSummary(
                folder: folder, stores: folder.stores(),
                lastBackup: repository?.archives(of: folder.id).last)
        }
        return (users, ignored)
    }
}
