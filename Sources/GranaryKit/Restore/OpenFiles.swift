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
        var targets: Set<[UInt64]> = []
        for path in [store, store + "-wal", store + "-shm"] {
            var info = stat()
            if stat(path, &info) == 0 { targets.insert([UInt64(info.st_dev), UInt64(info.st_ino)]) }
        }
        if targets.isEmpty { return [] }
        let me = getpid()
        var pids: [Int32] = []
        for name in FileSystem.contents(of: "/proc") {
            guard let pid = Int32(name), pid != me else { continue }
            let fdFolder = "/proc/\(name)/fd"
            for fd in FileSystem.contents(of: fdFolder) {
                var info = stat()
                // stat(2) follows the magic link to the open file itself, even when it was renamed or unlinked.
                if stat(fdFolder + "/" + fd, &info) == 0, targets.contains([UInt64(info.st_dev), UInt64(info.st_ino)]) {
                    pids.append(pid)
                    break
                }
            }
        }
        return pids.sorted()
    }
}
