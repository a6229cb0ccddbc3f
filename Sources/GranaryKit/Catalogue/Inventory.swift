import Foundation

/// What `granary users` shows: each user, their stores, and their newest archive (a retired
/// user, who has archives and no folder, with their final archive).
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
    /// For a retired user (no folder under the root, a final archive their newest): that archive.
    public var retired: RepositoryEntry? = nil

    public var stores: [StoreFile] { scan.stores }

    /// Bytes of every store with its `-wal`.
    public var totalSize: Int64 { StoreFile.bytes(of: stores) }
}

/// Builds `UserSummary` values for a root (and, optionally, a repository).
public enum Inventory {
    /// Every user under `root`, or only `only` when given (each must exist).
    public static func summarize(
        root: Root, repository: (any Repository)?, only: [UserID] = []
    ) throws -> (users: [UserSummary], ignored: [Root.Ignored]) {
        var ids = only
        var ignored: [Root.Ignored] = []
        if only.isEmpty {
            (ids, ignored) = try root.scan()
            // Retired users have archives and no folder: listed too, as retired.
            if let repository {
                let live = Set(ids)
                ids =
                    (ids
                    + (try repository.users()).filter {
                        !live.contains($0) && Retirement.isRetired($0, root: root, repository: repository)
                    })
                    .sorted { $0.rawValue < $1.rawValue }
            }
        }
        var users: [UserSummary] = []
        for id in ids {
            if let repository, let final = Retirement.finalArchive(of: id, root: root, repository: repository) {
                var summary = UserSummary(
                    id: id, path: root.path + "/" + id.rawValue, scan: .init(stores: [], unreadable: [], skipped: []),
                    lastBackup: final,
                    problem: nil)
                summary.retired = final
                users.append(summary)
                continue
            }
            // A regular backup: a safety archive is what a restore replaced, not a backup.
            let lastBackup = try repository?.archives(of: id).last(where: { $0.name.kind == .backup })
            do throws(UserError) {
                let folder = try root.user(id)
                users.append(
                    UserSummary(id: id, path: folder.path, scan: folder.scan(), lastBackup: lastBackup, problem: nil))
            } catch {
                if !only.isEmpty, case .notFound = error { throw error }
                users.append(
                    UserSummary(
                        id: id, path: root.path + "/" + id.rawValue,
                        scan: .init(stores: [], unreadable: [], skipped: []),
                        lastBackup: lastBackup, problem: error.description))
            }
        }
        return (users, ignored)
    }
}
