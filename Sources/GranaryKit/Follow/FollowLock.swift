import Foundation
import GranaryDigest

#if canImport(Glibc)
    import Glibc
#endif

/// One `granary follow` per repository and host at a time (a service, `follow --once`, a second
/// service by mistake): two followers would resume the same generation and publish different
/// segments under the same sequence numbers, and the window of every user would end where they
/// met. An exclusive `flock(2)` in the root's state folder, `locks/.follow-HASH.lock`, HASH
/// naming the repository (a local one by its folder's device and inode, a remote one by what it
/// is, ``LocationIdentity``: `s3:B/R`, `s3://B/R` and `s3:B/R/` are one place) and the host the
/// segments are written as; taken without waiting. Dropped by the
/// kernel when its holder and the processes it started (its uploads, which inherit the
/// descriptor) have exited, however they exit (``UserLock``).
public enum FollowLock {
    /// What names the repository and host in the lock's file name.
    static func key(repository: any Repository) -> String {
        var place = repository.location
        if let local = repository.localPath {
            var folder = stat()
            place =
                stat(local, &folder) == 0
                ? "local \(folder.st_dev) \(folder.st_ino)" : "local " + LocalRepository.resolvedPath(local)
        } else {
            place = LocationIdentity(repository).description
        }
        return place + "\n" + repository.context.host
    }

    /// The lock file of `repository` (and its host) in `root`'s state folder.
    public static func path(root: Root, repository: any Repository) -> String {
        let hash = SHA256.hash(data: Array(key(repository: repository).utf8)).hex.prefix(32)
        return root.stateFolderPath + "/locks/.follow-" + hash + ".lock"
    }

    /// Takes the lock, or fails at once with ``LockError/followHeld(repository:host:holder:)``
    /// naming the follower that holds it.
    public static func acquire(root: Root, repository: any Repository) throws(LockError) -> UserLock {
        let path = path(root: root, repository: repository)
        let name = PathText.lastComponent(path)
        // A name no user folder is discovered under (a leading dot), so never a user's lock.
        guard let id = try? UserID(String(name.dropLast(".lock".count))) else {
            throw .cannotCreate(path: path, underlying: FileSystemError("open", path: path, code: EINVAL))
        }
        do {
            let lock = try UserLock.acquire(root: root, path: path, user: id, timeout: .zero, kept: true)
            // Held by the uploads it starts (rclone) too: a follower killed with SIGKILL may leave
            // them running, and a follower started meanwhile would resume while they still land
            // segments behind its back. The file stays, so that the next one locks the same file.
            lock.inheritedByChildren()
            return lock
        } catch .held(_, _, let holder) {
            throw .followHeld(repository: repository.location, host: repository.context.host, holder: holder)
        }
    }
}
