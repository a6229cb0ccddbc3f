import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Which processes have a store open, found the way `fuser(1)` does: every `/proc/<pid>/fd/*`
/// whose target is the same inode as the store's database, `-wal` or `-shm` file.
///
/// The store's files are named through the open folder that holds them (never followed by path),
/// and matched by device and inode. This sees every process when granary runs as root (or as the
/// processes' uid); a process of another uid whose `/proc/<pid>/fd` cannot be read is not seen,
/// which is why the `offline` method also refuses when a checkpoint finds another connection.
public enum OpenFiles {
    /// A file's identity.
    public struct Identity: Hashable, Sendable {
        public let device: UInt64
        public let inode: UInt64
    }

    /// The identities of store `file` of `folder`, its `-wal`, `-shm` and `-journal` (those that exist).
    public static func identities<Trust>(of file: String, in folder: Folder<Trust>) -> Set<Identity> {
        Set(
            ([file] + StoreFile.companions(of: file)).compactMap { folder.entry($0) }.map {
                Identity(device: $0.device, inode: $0.inode)
            })
    }

    /// Process ids (other than this one) that hold the store or its companions open.
    public static func holders<Trust>(of file: String, in folder: Folder<Trust>, among candidates: [Int32]? = nil)
        -> [Int32]
    {
        holders(of: identities(of: file, in: folder), among: candidates)
    }

    /// Process ids (other than this one) that hold any of `targets` open. Checking only the few
    /// processes that had the store open before a pause (`candidates`) keeps the pause short: a
    /// full /proc scan costs milliseconds on a busy machine.
    public static func holders(of targets: Set<Identity>, among candidates: [Int32]?) -> [Int32] {
        if targets.isEmpty { return [] }
        let me = getpid()
        var found: [Int32] = []
        for name in candidates?.map({ String($0) }) ?? FileSystem.contents(of: "/proc") {
            guard let pid = Int32(name), pid != me else { continue }
            let fdFolder = "/proc/\(name)/fd"
            for fd in FileSystem.contents(of: fdFolder) {
                var info = stat()
                // stat(2) follows the magic link to the open file itself, even when it was renamed or unlinked.
                if stat(fdFolder + "/" + fd, &info) == 0,
                    targets.contains(Identity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino)))
                {
                    found.append(pid)
                    break
                }
            }
        }
        // A pid listed twice among the candidates (the owner's, found by name too) is named once.
        return Set(found).sorted()
    }

    /// Whether some process has the WAL-mode store open, asked the way SQLite itself asks: every
    /// connection to a WAL database holds a shared POSIX lock on the "DMS" byte of the `-shm`
    /// file (offset 128, see `unixLockSharedMemory` in SQLite's os_unix.c), and `F_GETLK` reports it.
    /// This sees processes of any uid, in constant time.
    public static func hasWALConnection<Trust>(_ file: String, in folder: Folder<Trust>) -> Bool {
        guard let shm = try? folder.openFile(file + "-shm") else { return false }
        var query = flock()
        query.l_type = Int16(F_WRLCK)
        query.l_whence = Int16(SEEK_SET)
        query.l_start = 128
        query.l_len = 1
        guard fcntl(shm.raw, F_GETLK, &query) == 0 else { return false }
        return query.l_type != Int16(F_UNLCK)
    }
}
