import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Which processes have a store open, found the way `fuser(1)` does: every `/proc/<pid>/fd/*`
/// whose target is the same inode as the store's database, `-wal` or `-shm` file.
///
/// This sees every process when granary runs as root (or as the processes' uid); a process
/// of another uid whose `/proc/<pid>/fd` cannot be read is not seen, which is why the
/// `offline` method also refuses when a checkpoint finds another connection.
public enum OpenFiles {
    /// Process ids (other than this one) that hold the store or its companions open.
    public static func holders(of store: String) -> [Int32] {
        holders(of: store, among: nil)
    }

    /// Like ``holders(of:)`` but looking only at `pids` (nil: every process). Checking the few
    /// processes that had the store open before a pause keeps the pause short: a full /proc scan
    /// costs milliseconds on a busy machine.
    public static func holders(of store: String, among candidates: [Int32]?) -> [Int32] {
        var targets: Set<[UInt64]> = []
        for path in [store, store + "-wal", store + "-shm"] {
            var info = stat()
            if stat(path, &info) == 0 { targets.insert([UInt64(info.st_dev), UInt64(info.st_ino)]) }
        }
        if targets.isEmpty { return [] }
        let me = getpid()
        var found: [Int32] = []
        for name in candidates?.map({ String($0) }) ?? FileSystem.contents(of: "/proc") {
            guard let pid = Int32(name), pid != me else { continue }
            let fdFolder = "/proc/\(name)/fd"
            for fd in FileSystem.contents(of: fdFolder) {
                var info = stat()
                // stat(2) follows the magic link to the open file itself, even when it was renamed or unlinked.
                if stat(fdFolder + "/" + fd, &info) == 0, targets.contains([UInt64(info.st_dev), UInt64(info.st_ino)]) {
                    found.append(pid)
                    break
                }
            }
        }
        return found.sorted()
    }

    /// Whether some process has the WAL-mode store open, asked the way SQLite itself asks: every
    /// connection to a WAL database holds a shared POSIX lock on the "DMS" byte of the `-shm`
    /// file (offset 128, see `unixLockSharedMemory` in SQLite's os_unix.c), and `F_GETLK` reports it.
    /// This sees processes of any uid, in constant time.
    public static func hasWALConnection(_ store: String) -> Bool {
        let fd = open(store + "-shm", O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        if fd < 0 { return false }
        defer { close(fd) }
        var query = flock()
        query.l_type = Int16(F_WRLCK)
        query.l_whence = Int16(SEEK_SET)
        query.l_start = 128
        query.l_len = 1
        guard fcntl(fd, F_GETLK, &query) == 0 else { return false }
        return query.l_type != Int16(F_UNLCK)
    }
}
