import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The other regular files of a final archive (`files/NAME`: notes, preferences, anything of the
/// user's folder that is not part of a store), put back by a restore that creates the user's
/// folder (`restore --create`).
///
/// Each file is created beneath the folder's descriptor with its owner's credentials, never
/// through a link and never over an existing entry (`O_EXCL`: an entry already there is kept, and
/// said), from the verified staging copy; the folders above it are made with the modes the archive
/// recorded. Its owner is the folder's owner, its group the recorded one when the owner is in it
/// (else the folder's), and its mode the recorded permission bits without setuid or setgid, as
/// for a restored store (``SafeModes``).
enum PlainFiles {
    /// What a placement did: the files and folders created (in order), and the files kept
    /// because an entry was there.
    struct Placed {
        var created: [String] = []
        var kept: [String] = []
        /// Folders this placement made, by path relative to the user's folder, parents first.
        var folders: [String] = []
    }

    /// The archive's plain files, by name relative to the user's folder.
    static func names(in manifest: Manifest) -> [(name: String, file: Manifest.File)] {
        manifest.files.filter { $0.kind == .plain && $0.path.hasPrefix(Manifest.plainFilesFolder) }.map {
            (String($0.path.dropFirst(Manifest.plainFilesFolder.count)), $0)
        }
    }

    /// Creates each plain file of `manifest` in `user` from `staged` (the verified extraction).
    /// Refused means untouched: when a file cannot be placed (an entry of another kind in the
    /// way, a read error, an interruption), what this call created, files and folders, is removed
    /// again before the error is thrown.
    static func place(_ manifest: Manifest, from staged: String, into user: Folder<UserOwned>) throws -> Placed {
        var placed = Placed()
        do {
            try place(manifest, from: staged, into: user, recording: &placed)
        } catch {
            remove(placed, from: user)
            throw error
        }
        return placed
    }

    private static func place(
        _ manifest: Manifest, from staged: String, into user: Folder<UserOwned>, recording placed: inout Placed
    ) throws {
        let folderGID = try user.status().gid
        let uid = user.ownerUID ?? geteuid()
        for (name, file) in names(in: manifest) {
            try Interruption.check()
            var folder = user
            var path = ""
            for part in PathText.parent(name).split(separator: "/", omittingEmptySubsequences: true) {
                path += (path.isEmpty ? "" : "/") + part
                let existed = folder.entry(String(part)) != nil
                folder = try folder.makeFolder(
                    String(part),
                    mode: SafeModes.restorable(mode: mode_t(manifest.folders?[path]?.mode ?? 0o700), isFolder: true))
                if !existed { placed.folders.append(path) }
            }
            let leaf = PathText.lastComponent(name)
            if folder.entry(leaf) != nil {
                placed.kept.append(name)
                continue
            }
            let source = Descriptor(
                RawPath.open(staged + "/" + file.path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), display: file.path)
            guard source.raw >= 0 else { throw FileSystemError("open", path: staged + "/" + file.path) }
            var made: Descriptor?
            do {
                made = try folder.createFile(leaf, mode: 0o600)
            } catch {
                // Made by someone else since the look above: theirs, kept as it is.
                if folder.entry(leaf) == nil { throw error }
            }
            guard let target = made else {
                placed.kept.append(name)
                continue
            }
            placed.created.append(name)
            try copy(from: source, to: target)
            let recordedGID = file.owner.map(AccountNames.hostGID).flatMap {
                AccountNames.isMember(uid: uid, of: $0) ? $0 : nil
            }
            let (mode, gid) = SafeModes.restorable(
                mode: mode_t(file.mode ?? file.owner?.mode ?? 0o600), uid: uid, gid: recordedGID ?? folderGID,
                folderGID: folderGID)
            if geteuid() == 0 && fchown(target.raw, uid, gid) != 0 {
                throw FileSystemError("chown", path: target.display)
            }
            if fchmod(target.raw, mode) != 0 { throw FileSystemError("chmod", path: target.display) }
            try target.sync()
            try folder.sync()
        }
    }

    /// Removes what a placement created: its files, then its folders (deepest first, only when
    /// empty), never following a link.
    static func remove(_ placed: Placed, from user: Folder<UserOwned>) {
        for name in placed.created.reversed() {
            guard let (folder, leaf) = try? user.parent(of: name) else { continue }
            try? folder.remove(leaf)
        }
        for path in placed.folders.reversed() {
            let parent = PathText.parent(path)
            guard let folder = parent.isEmpty ? user : try? user.folder(parent) else { continue }
            folder.removeEmptyFolder(PathText.lastComponent(path))
        }
    }

    private static func copy(from source: Descriptor, to target: Descriptor) throws {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let count = read(source.raw, buffer.baseAddress, buffer.count)
            if count < 0 {
                if errno == EINTR { continue }
                throw FileSystemError("read", path: source.display)
            }
            if count == 0 { return }
            try target.write(UnsafeRawBufferPointer(rebasing: buffer[..<count]))
        }
    }
}
