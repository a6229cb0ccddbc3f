import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// `restore --to DIR` into a new folder of a shared sticky folder (`/tmp/drill`, the drill the
/// manual shows): granary makes DIR itself, 0700, before anything is written in it.
///
/// `mkdir(2)` never follows a link at its last name and fails when the name exists, so the
/// folder it makes is root's alone from its first instant; in a sticky folder no other user can
/// rename or remove it afterwards. A name another user made first is judged as it is (and refused
/// when it is theirs), exactly as without this.
extension TrustedPath {
    /// Whether `path` is missing and its parent a sticky folder of root's, reached through folders
    /// only root writes: the case ``makePrivateFolder(_:)`` handles.
    public static func canMakePrivateFolder(_ path: String) -> Bool {
        guard let (absolute, parent) = split(path) else { return false }
        var info = stat()
        guard lstat(absolute, &info) != 0 && errno == ENOENT else { return false }
        // The parent itself is shared (folderProblem refuses it as a target): the folders above it
        // must be root's alone, and it a real folder of root's (not a link) with the sticky bit.
        let grandparent = (parent as NSString).deletingLastPathComponent
        guard parent == "/" || folderProblem(grandparent.isEmpty ? "/" : grandparent) == nil else { return false }
        guard lstat(parent, &info) == 0 else { return false }
        return info.st_uid == 0 && info.st_mode & S_IFMT == S_IFDIR && info.st_mode & mode_t(S_ISVTX) != 0
    }

    /// Makes `path` (mode 0700, root's) when ``canMakePrivateFolder(_:)``; true when it did.
    public static func makePrivateFolder(_ path: String) -> Bool {
        guard canMakePrivateFolder(path), let (absolute, _) = split(path) else { return false }
        return mkdir(absolute, 0o700) == 0
    }

    /// `path` made absolute, and its parent.
    private static func split(_ path: String) -> (String, String)? {
        var absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        while absolute.count > 1 && absolute.hasSuffix("/") { absolute.removeLast() }
        let parent = (absolute as NSString).deletingLastPathComponent
        let name = (absolute as NSString).lastPathComponent
        guard !parent.isEmpty, absolute != "/", name != ".", name != ".." else { return nil }
        return (absolute, parent)
    }
}
