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
        let canonical = folder.canonicalPath
        let address = ReopenAddress(canonicalPath: (canonical == "/" ? "" : canonical) + "/" + file)
        return try ReopenClient.connect(
            address: address, store: folder.path(file), storeOwnerUID: ownerUID, timeout: timeout)
    }
}
