import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The descriptors a process holds on a store's database, `-wal` or `-shm` file, found the way
/// `fuser(1)` does: every `/proc/<pid>/fd/*` whose target is the same inode.
///
/// An owner checks itself with it after its `close` callback: some SQLite bindings keep the
/// file open after a close (a connection pool, `sqlite3_close_v2` with a statement not yet
/// finalized), and a descriptor kept across the swap would go on reading and writing the old
/// file. `granary-reopen-check` uses it on the owner's process.
public enum StoreDescriptors {
    /// The descriptor numbers of process `pid` (nil: this process) that name the store at the
    /// canonical path `store` or its `-wal`/`-shm`; nil when `/proc/<pid>/fd` cannot be read.
    public static func open(in pid: Int32? = nil, store: String) -> [Int32]? {
        var targets: Set<[UInt64]> = []
        for path in [store, store + "-wal", store + "-shm"] {
            var info = stat()
            if stat(path, &info) == 0 { targets.insert([UInt64(info.st_dev), UInt64(info.st_ino)]) }
        }
        let folder = "/proc/" + (pid.map(String.init) ?? "self") + "/fd"
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: folder) else { return nil }
        if targets.isEmpty { return [] }
        var found: [Int32] = []
        for name in names {
            var info = stat()
            // stat(2) follows the magic link to the open file itself, even when it was renamed or unlinked.
            if let fd = Int32(name), stat(folder + "/" + name, &info) == 0,
                targets.contains([UInt64(info.st_dev), UInt64(info.st_ino)])
            {
                found.append(fd)
            }
        }
        return found.sorted()
    }
}
