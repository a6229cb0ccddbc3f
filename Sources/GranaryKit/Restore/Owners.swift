import Foundation
import GranaryOwner

#if canImport(Glibc)
    import Glibc
#endif

/// Finding a store's owner (the reopen protocol) from the open folder that holds it.
enum Owners {
    /// Connects to whatever process serves store `file` of `folder`, or nil when none does. The
    /// socket name is derived from the canonical path of the folder as the kernel knows the open
    /// descriptor (not by resolving a name the user controls) and the file's name in it. A
    /// process that is not the store owner's uid (or root) is refused (`ReopenError.untrustedPeer`).
    static func connect(_ folder: Folder, _ file: String, ownerUID: uid_t, timeout: Duration) throws(ReopenError)
        -> ReopenClient?
    {
        // The bytes of the folder's path as the kernel knows the descriptor: the name hashes the
        // path's bytes, which a string of a name that is not UTF-8 (or not NFC) would not give back.
        var buffer = [UInt8](repeating: 0, count: 8192)
        let n = buffer.withUnsafeMutableBufferPointer { raw in
            raw.baseAddress!.withMemoryRebound(to: CChar.self, capacity: raw.count) {
                readlink("/proc/self/fd/\(folder.descriptor.raw)", $0, raw.count)
            }
        }
        var bytes = n > 0 ? Array(buffer[0..<n]) : FolderName.encode(folder.canonicalPath)
        if bytes != [0x2F] { bytes.append(0x2F) }
        bytes += FolderName.encode(file)
        // realpath(3) fails for a path of PATH_MAX bytes or more: no owner can serve such a store.
        if bytes.count >= Int(PATH_MAX) { return nil }
        let address = ReopenAddress(canonicalPathBytes: bytes)
        return try ReopenClient.connect(
            address: address, store: folder.path(file), storeOwnerUID: ownerUID, timeout: timeout)
    }
}

/// The commit locks of the folders a swap renames into (the lock an owner whose lease ran out
/// takes before it reopens, see `granary-reopen(7)`): `flock(2)` on each distinct folder, taken
/// without ever blocking past a deadline (a user can hold their own folder's lock forever).
final class CommitLocks {
    private var held: [Folder] = []

    /// Takes the lock of every distinct folder in `folders`, retrying until `deadline`.
    static func take(_ folders: [Folder], until deadline: ContinuousClock.Instant) throws -> CommitLocks {
        let locks = CommitLocks()
        var seen: Set<[UInt64]> = []
        for folder in folders {
            guard let info = try? folder.descriptor.status(),
                seen.insert([UInt64(info.st_dev), UInt64(info.st_ino)]).inserted
            else { continue }
            while flock(folder.descriptor.raw, LOCK_EX | LOCK_NB) != 0 {
                guard errno == EWOULDBLOCK || errno == EINTR else {
                    locks.release()
                    throw FileSystemError("lock", path: folder.display)
                }
                if ContinuousClock.now >= deadline {
                    locks.release()
                    throw RestoreError.storeBusy(
                        store: folder.display, detail: "another process holds its folder's commit lock")
                }
                try Interruption.check()
                Thread.sleep(forTimeInterval: 0.01)
            }
            locks.held.append(folder)
        }
        return locks
    }

    /// Releases every lock (also done when the value goes away).
    func release() {
        for folder in held { flock(folder.descriptor.raw, LOCK_UN) }
        held = []
    }

    deinit { release() }
}
