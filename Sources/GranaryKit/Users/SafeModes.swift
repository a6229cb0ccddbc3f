import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The modes and groups granary gives, as root, to what it restores or creates in a user's folder.
///
/// Root can set any bit and any group, the owner cannot: the kernel clears a file's setgid bit
/// when its owner changes the mode without being in its group, and `chgrp` works only to a group
/// the owner is in. A mode or group copied from an archive (which the user's own files made) and
/// applied as root would hand the user what the kernel refuses them: a `-rwxr-sr-x` file of a
/// group they are not in is a program that runs with that group. So:
///
/// - a file never gets a setuid, setgid or sticky bit from granary (the permission bits only);
/// - a folder never gets setuid (setgid and sticky on a folder only shape what is made in it);
/// - the group is the one asked for only when the owner is in it, or it is the group of the
///   folder the entry is in (what a setgid folder gives everything made in it); otherwise that
///   folder's group.
public enum SafeModes {
    /// The mode and group to give an entry of `uid` that the archive (or the live file) says
    /// should have `mode` and group `gid`, in a folder of group `folderGID`.
    public static func restorable(mode: mode_t, uid: uid_t, gid: gid_t, folderGID: gid_t, isFolder: Bool = false)
        -> (mode: mode_t, gid: gid_t)
    {
        let allowed = gid == folderGID || uid == 0 || AccountNames.isMember(uid: uid, of: gid)
        return (restorable(mode: mode, isFolder: isFolder), allowed ? gid : folderGID)
    }

    /// The mode alone: a file's permission bits, a folder's with setgid and sticky.
    public static func restorable(mode: mode_t, isFolder: Bool) -> mode_t {
        isFolder ? mode & 0o3777 : mode & 0o777
    }
}

extension SafeModes {
    /// Refuses to fill an existing folder (`restore --create` into a folder that holds no store)
    /// that is not `owner`'s: in a sticky or shared root another user could have made it first.
    public static func checkFolderToFill(_ folder: Folder<UserOwned>, owner: uid_t) throws {
        let info = try folder.status()
        guard info.uid == owner else {
            throw OwnershipError.notTheRecordedOwner(path: folder.display, uid: info.uid, owner: owner)
        }
    }
}

/// A folder granary would fill for one user that another user made.
public enum OwnershipError: GranaryError, Sendable {
    case notTheRecordedOwner(path: String, uid: uid_t, owner: uid_t)

    public var description: String {
        switch self {
        case .notTheRecordedOwner(let path, let uid, let owner):
            let who = AccountNames.user(uid).map { "\($0) (uid \(uid))" } ?? "uid \(uid)"
            let expected = AccountNames.user(owner).map { "\($0) (uid \(owner))" } ?? "uid \(owner)"
            return
                "\(path) belongs to \(who), not to \(expected), the owner the archive recorded; refusing to restore into it"
        }
    }
}
