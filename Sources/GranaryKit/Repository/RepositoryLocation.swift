import Foundation

/// Where a repository is, recorded for a later run to open it again (the restore journal names
/// the repository its safety archive goes to, and `recover` opens it, perhaps from another
/// working folder, from cron or systemd): a local folder by its absolute real path, or a remote
/// location as typed (`s3:BUCKET/PREFIX`, `rclone:REMOTE:PATH`; it never holds a credential).
///
/// In JSON it is `{"local": "/srv/granary"}` or `{"remote": "s3:bucket/prefix"}`; a bare string
/// (what journals written before held: the location as typed) is read as that location was.
public enum RepositoryLocation: Codable, Sendable, Equatable, CustomStringConvertible {
    case local(String)
    case remote(String)

    /// Where `repository` is: a local one by its absolute real path (a relative location would
    /// name another folder from another working folder), a remote one by its location.
    public init(_ repository: any Repository) {
        if let path = repository.localPath {
            let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
            self = .local(LocalRepository.resolvedPath(absolute))
        } else {
            self = .remote(repository.location)
        }
    }

    /// A location as typed (a journal written before locations were typed).
    public init(typed location: String) {
        self = Repositories.isRemote(location) ? .remote(location) : .local(location)
    }

    /// The repository there.
    public func open(
        context: RunContext = .defaults, environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(RepositoryError) -> any Repository {
        switch self {
        case .local(let path): return LocalRepository(path: path, context: context)
        case .remote(let location): return try Repositories.open(location, context: context, environment: environment)
        }
    }

    /// The location, to show.
    public var description: String {
        switch self {
        case .local(let path): return path
        case .remote(let location): return location
        }
    }

    private enum Key: String, CodingKey {
        case local, remote
    }

    public init(from decoder: any Decoder) throws {
        if let typed = try? decoder.singleValueContainer().decode(String.self) {
            self.init(typed: typed)
            return
        }
        let container = try decoder.container(keyedBy: Key.self)
        if let path = try container.decodeIfPresent(String.self, forKey: .local) {
            self = .local(path)
        } else {
            self = .remote(try container.decode(String.self, forKey: .remote))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Key.self)
        switch self {
        case .local(let path): try container.encode(path, forKey: .local)
        case .remote(let location): try container.encode(location, forKey: .remote)
        }
    }
}

/// What a location is, whatever its spelling: two locations with one identity are one place.
///
/// A local folder is its device and inode (`REPO/`, `REPO/.`, `ROOT/../REPO` and a link to it are
/// one folder); a folder not made yet, its real path. A remote one is its scheme, remote and
/// path with repeated and trailing slashes and `.` components taken out (`s3:bucket//p/` is
/// `s3:bucket/p`).
public struct LocationIdentity: Hashable, Sendable, CustomStringConvertible {
    let key: String

    public init(_ repository: any Repository) {
        if let path = repository.localPath {
            let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
            if let info = FileSystem.status(LocalRepository.resolvedPath(absolute)) {
                key = "local:\(info.st_dev):\(info.st_ino)"
            } else {
                key = "path:" + LocalRepository.resolvedPath(absolute)
            }
        } else {
            key = Self.normalizedRemote(repository.location)
        }
    }

    /// `s3:BUCKET/PREFIX` or `rclone:REMOTE:PATH` with its path's empty and `.` components removed.
    static func normalizedRemote(_ location: String) -> String {
        var scheme = "", rest = Substring(location)
        if let backend = RepositoryBackends.backend(of: location) {
            scheme = backend.scheme
            rest = rest.dropFirst(scheme.count)
            if backend.scheme == "rclone:" {
                // The remote's name is part of the place: `rclone:a:x` is not `rclone:b:x`.
                let remote = rest.prefix { $0 != ":" }
                scheme += remote + ":"
                rest = rest.dropFirst(remote.count + 1)
            } else if backend.scheme == "s3:", rest.hasPrefix("//") {
                // `s3://BUCKET/PREFIX` is `s3:BUCKET/PREFIX` (RcloneRepository reads it so).
                rest = rest.dropFirst(2)
            }
        }
        // A leading `/` is kept: `remote:/path` (absolute on sftp) is not `remote:path` (under home).
        let parts = rest.split(separator: "/", omittingEmptySubsequences: true).filter { $0 != "." }
        return scheme + (rest.hasPrefix("/") ? "/" : "") + parts.joined(separator: "/")
    }

    public var description: String { key }
}
