import Foundation

/// What `granary users` shows: each user, their stores, and their newest archive.
public struct UserSummary: Sendable {
    public let id: UserID
    /// The folder's path, for messages.
    public let path: String
    /// What the scan of the user's folder found (stores, unreadable entries, skipped entries).
    public let scan: UserFolder.Scan
    /// The newest archive in the repository, when a repository is configured and has one.
    public let lastBackup: RepositoryEntry?
    /// Why the user's folder could not be opened, when it could not (the user is still listed).
    public let problem: String?

    public var stores: [StoreFile] { scan.stores }

    /// Bytes of every store with its `-wal`.
    public var totalSize: Int64 { stores.reduce(0) { $0 + $1.size + ($1.walSize ?? 0) } }
}

/// Builds `UserSummary` values for a root (and, optionally, a repository).
public enum Inventory {
    /// Every user under `root`, or only `only` when given (each must exist).
    public static func summarize(
        root: Root, repository: (any Repository)?, only: [UserID] = []
    ) throws -> (users: [UserSummary], ignored: [Root.Ignored]) {
        var ids = only
        var ignored: [Root.Ignored] = []
        if only.isEmpty { (ids, ignored) = try root.scan() }
        var users: [UserSummary] = []
        for id in ids {
            let lastBackup = try repository?.archives(of: id).last
            do throws(UserError) {
                let folder = try root.user(id)
                users.append(UserSummary(id: id, path: folder.path, scan: folder.scan(), lastBackup: lastBackup, problem: nil))
            } catch {
                if !only.isEmpty, case .notFound = error { throw error }
                users.append(
                    UserSummary(
                        id: id, path: root.path + "/" + id.rawValue, scan: .init(stores: [], unreadable: [], skipped: []),
                        lastBackup: lastBackup, problem: error.description))
            }
        }
        return (users, ignored)
    }
}
