import Foundation

/// The commit locks of the folders a swap renames into (the lock an owner whose lease ran out
/// takes before it reopens, see `granary-reopen(7)`): `flock(2)` on each distinct folder, taken
/// without ever blocking past a deadline (a user can hold their own folder's lock forever).
final class CommitLocks {
    private var held: [Folder<UserOwned>] = []

    /// Takes the lock of every distinct folder in `folders`, retrying until `deadline`.
    static func take(_ folders: [Folder<UserOwned>], until deadline: ContinuousClock.Instant) throws -> CommitLocks {
        let locks = CommitLocks()
        var seen: Set<[UInt64]> = []
        for folder in folders {
            guard let info = try? folder.status(), seen.insert([info.device, info.inode]).inserted else { continue }
            while true {
                let taken: Bool
                do { taken = try folder.tryLock() } catch {
                    locks.release()
                    throw error
                }
                if taken { break }
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
        for folder in held { folder.unlock() }
        held = []
    }

    deinit { release() }
}
