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
    static func connect(_ folder: Folder<UserOwned>, _ file: String, ownerUID: uid_t, timeout: Duration)
        throws(ReopenError)
        -> ReopenClient?
    {
        // The bytes of the folder's path as the kernel knows the descriptor: the name hashes the
        // path's bytes, which a string of a name that is not UTF-8 (or not NFC) would not give back.
        var bytes = folder.canonicalPathBytes ?? FolderName.encode(folder.canonicalPath)
        if bytes != [0x2F] { bytes.append(0x2F) }
        bytes += FolderName.encode(file)
        // realpath(3) fails for a path of PATH_MAX bytes or more: no owner can serve such a store.
        if bytes.count >= Int(PATH_MAX) { return nil }
        let address = ReopenAddress(canonicalPathBytes: bytes)
        return try ReopenClient.connect(
            address: address, store: folder.path(file), storeOwnerUID: ownerUID, timeout: timeout)
    }
}
