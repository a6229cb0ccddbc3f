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
    /// What a placement did: the files created, and those kept because an entry was there.
    struct Placed {
        var created: [String] = []
        var kept: [String] = []
    }

    /// The archive's plain files, by name relative to the user's folder.
    static func names(in manifest: Manifest) -> [(name: String, file: Manifest.File)] {
        manifest.files.filter { $0.kind == .plain && $0.path.hasPrefix(Manifest.plainFilesFolder) }.map {
            (String($0.path.dropFirst(Manifest.plainFilesFolder.count)), $0)
        }
    }

    /// Creates each plain file of `manifest` in `user` from `staged` (the verified extraction).
    static func place(_ manifest: Manifest, from staged: String, into user: Folder<UserOwned>) throws -> Placed {
        var placed = Placed()
        let folderGID = try user.status().gid
        let uid = user.ownerUID ?? geteuid()
        for (name, file) in names(in: manifest) {
            try Interruption.check()
            let parentName = PathText.parent(name)
            let folder =
                parentName.isEmpty
                ? user
                : try user.makeFolders(parentName) { path in
                    SafeModes.restorable(mode: mode_t(manifest.folders?[path]?.mode ?? 0o700), isFolder: true)
                }
            let leaf = PathText.lastComponent(name)
            if folder.entry(leaf) != nil {
                placed.kept.append(name)
                continue
            }
            let source = Descriptor(
                RawPath.open(staged + "/" + file.path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), display: file.path)
            guard source.raw >= 0 else { throw FileSystemError("open", path: staged + "/" + file.path) }
            let target = try folder.createFile(leaf, mode: 0o600)
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
            placed.created.append(name)
        }
        return placed
    }

    /// Removes the files `names` placed (a restore that failed after placing them).
    static func remove(_ names: [String], from user: Folder<UserOwned>) {
        for name in names {
            guard let (folder, leaf) = try? user.parent(of: name) else { continue }
            try? folder.remove(leaf)
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
