import Glibc

/// Gives files granary creates in a user's folder the store owner's uid, gid and mode.
///
/// Opening a WAL store can create its `-wal` and `-shm` files; run as root, they would be
/// root-owned and the owner process could no longer open its own store. `OwnerMatch`
/// remembers which companions existed before and fixes the ones that appeared.
public struct OwnerMatch: Sendable {
    /// The store whose owner and mode are copied.
    public let storePath: String
    private let existedBefore: [String: Bool]

    /// Companion suffixes SQLite may create beside a store.
    public static let companions = ["-wal", "-shm", "-journal"]

    /// Records which companions of `storePath` exist now.
    public init(storePath: String) {
        self.storePath = storePath
        var map: [String: Bool] = [:]
        for suffix in Self.companions { map[suffix] = FileSystem.status(storePath + suffix) != nil }
        self.existedBefore = map
    }

    /// Gives every companion that did not exist at `init` the store's uid, gid and mode.
    /// Only root can chown; for anyone else the files are theirs already.
    public func fixCreatedCompanions() {
        guard let store = FileSystem.status(storePath) else { return }
        for suffix in Self.companions where existedBefore[suffix] == false {
            let path = storePath + suffix
            let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
            guard fd >= 0 else { continue }
            defer { close(fd) }
            if geteuid() == 0 { _ = fchown(fd, store.st_uid, store.st_gid) }
            _ = fchmod(fd, store.st_mode & 0o7777)
        }
    }
}
