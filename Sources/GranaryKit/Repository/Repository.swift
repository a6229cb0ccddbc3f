import Foundation

/// The folder where archives go: `<repo>/<user id>/<archive name>`.
///
/// Folders are created 0700 and archives 0600: they hold users' data.
public struct Repository: Sendable {
    public let path: String

    public init(path: String) {
        self.path = path.count > 1 && path.hasSuffix("/") ? String(path.dropLast()) : path
    }

    /// Where backup snapshots and verify extractions are made, always removed after; a dead
    /// run's leftovers carry its pid (`StaleTemporaries`).
    public var workFolder: String { path + "/.granary-tmp" }

    /// The folder of one user's archives (which may not exist yet).
    public func folder(for user: UserID) -> String { path + "/" + user.rawValue }

    /// One archive in the repository.
    public struct Entry: Sendable, Equatable {
        public let user: UserID
        public let name: ArchiveName
        public let path: String
        public let size: Int64
    }

    /// A user's archives, oldest first. Temporary files and other names are skipped.
    public func archives(of user: UserID) -> [Entry] {
        let folder = folder(for: user)
        return FileSystem.contents(of: folder).compactMap { file -> Entry? in
            guard !file.hasPrefix("."), let name = ArchiveName(fileName: file) else { return nil }
            let full = folder + "/" + file
            guard let info = FileSystem.status(full), (info.st_mode & S_IFMT) == S_IFREG else { return nil }
            return Entry(user: user, name: name, path: full, size: Int64(info.st_size))
        }.sorted { $0.name < $1.name }
    }

    /// The users that have a folder in the repository, sorted.
    public func users() -> [UserID] {
        FileSystem.contents(of: path).compactMap { name in
            guard !name.hasPrefix("."), FileSystem.isDirectory(path + "/" + name) else { return nil }
            return try? UserID(name)
        }
    }
}
