import CLinux
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A failed system call on a path, with its `errno`.
public struct FileSystemError: GranaryError, Sendable {
    /// What we were doing: "open", "write", "rename", …
    public let operation: String
    public let path: String
    public let code: Int32

    public init(_ operation: String, path: String, code: Int32 = errno) {
        self.operation = operation
        self.path = path
        self.code = code
    }

    public var description: String {
        "cannot \(operation) \(path): \(String(cString: strerror(code)))"
    }

    /// Whether the failure means the disk (or a file size limit) is full.
    public var isDiskFull: Bool { code == ENOSPC || code == EDQUOT || code == EFBIG }
}

/// Small, careful wrappers over POSIX file calls: the durability steps (fsync of files and
/// folders, rename) that atomic publishing depends on.
public enum FileSystem {
    /// Creates `path` and any missing parents with `mode` (0700 by default), whatever the umask.
    /// A symbolic link where the folder itself is expected is refused (ELOOP), never followed; its
    /// existing parents are the administrator's path and are followed as given.
    public static func makeDirectory(_ path: String, mode: mode_t = 0o700) throws(FileSystemError) {
        try makeDirectory(path, mode: mode, followLink: false)
    }

    private static func makeDirectory(_ path: String, mode: mode_t, followLink: Bool) throws(FileSystemError) {
        if let info = status(path) {
            switch info.st_mode & S_IFMT {
            case S_IFDIR: return
            case S_IFLNK:
                if followLink {
                    let fd = RawPath.open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                    if fd >= 0 {
                        close(fd)
                        return
                    }
                }
                throw FileSystemError("create folder", path: path, code: ELOOP)
            default: throw FileSystemError("create folder", path: path, code: ENOTDIR)
            }
        }
        let parent = PathText.parent(path)
        if !parent.isEmpty && parent != path { try makeDirectory(parent, mode: mode, followLink: true) }
        if RawPath.mkdir(path, mode) != 0 {
            if errno == EEXIST && isDirectory(path) { return }
            throw FileSystemError("create folder", path: path)
        }
        // mkdir applies the umask; set the mode we mean.
        if RawPath.chmod(path, mode) != 0 { throw FileSystemError("chmod", path: path) }
    }

    /// Flushes a file or folder to stable storage.
    public static func sync(_ path: String) throws(FileSystemError) {
        let fd = RawPath.open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 { throw FileSystemError("open", path: path) }
        defer { close(fd) }
        if fsync(fd) != 0 { throw FileSystemError("fsync", path: path) }
    }

    /// Flushes the folder that holds `path`, making a rename or unlink in it durable.
    public static func syncParent(of path: String) throws(FileSystemError) {
        try sync(PathText.parent(path))
    }

    /// Moves `from` to `to`, replacing `to` atomically (rename(2)).
    public static func rename(_ from: String, to: String) throws(FileSystemError) {
        if RawPath.rename(from, to) != 0 { throw FileSystemError("rename \(from) to", path: to) }
    }

    /// Moves `from` to `to` only if `to` does not exist: `renameat2(2)` with `RENAME_NOREPLACE`,
    /// or, on a file system that cannot promise that (`EINVAL`), link(2) then unlink(2).
    /// Either `to` appears complete or not at all.
    public static func renameNoReplace(_ from: String, to: String) throws(FileSystemError) {
        let code = FolderName.withRaw(from) { a in
            FolderName.withRaw(to) { b in granary_rename_noreplace(a, b) == 0 ? 0 : errno }
        }
        if code == 0 { return }
        if code != EINVAL && code != ENOSYS { throw FileSystemError("publish", path: to, code: code) }
        if RawPath.link(from, to) != 0 { throw FileSystemError("publish", path: to) }
        if RawPath.unlink(from) != 0 { throw FileSystemError("remove", path: from) }
    }

    /// Removes a file; a missing file is not an error.
    public static func removeFile(_ path: String) throws(FileSystemError) {
        if RawPath.unlink(path) != 0 && errno != ENOENT { throw FileSystemError("remove", path: path) }
    }

    /// Removes a folder tree; a missing folder is not an error. Never follows symlinks.
    public static func removeTree(_ path: String) {
        var info = stat()
        guard RawPath.lstat(path, &info) == 0 else { return }
        if (info.st_mode & S_IFMT) == S_IFDIR {
            for name in contents(of: path) { removeTree(path + "/" + name) }
            RawPath.rmdir(path)
        } else {
            RawPath.unlink(path)
        }
    }

    /// `lstat(2)`, or `nil` when the path does not exist.
    public static func status(_ path: String) -> stat? {
        var info = stat()
        return RawPath.lstat(path, &info) == 0 ? info : nil
    }

    /// Whether `path` is a regular file (not following symlinks).
    public static func isRegularFile(_ path: String) -> Bool {
        guard let info = status(path) else { return false }
        return (info.st_mode & S_IFMT) == S_IFREG
    }

    /// Whether `path` is a folder (not following symlinks).
    public static func isDirectory(_ path: String) -> Bool {
        guard let info = status(path) else { return false }
        return (info.st_mode & S_IFMT) == S_IFDIR
    }

    /// The size of a regular file, or 0.
    public static func size(_ path: String) -> Int64 {
        guard let info = status(path) else { return 0 }
        return Int64(info.st_size)
    }

    /// Names in a folder, sorted; empty when it cannot be read.
    public static func contents(of path: String) -> [String] {
        RawPath.list(path).sorted()
    }

    /// A new, empty file created exclusively with mode 0600 in `directory`, named so that
    /// listings skip it (a leading dot) and a crash leaves an obvious leftover: `.NAME.tmp-PID-RANDOM`.
    public static func createTemporaryFile(in directory: String, for name: String) throws(FileSystemError) -> (
        fd: Int32, path: String
    ) {
        for _ in 0..<16 {
            let path = directory + "/" + temporaryName(for: name)
            let fd = RawPath.open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            if fd >= 0 {
                fchmod(fd, 0o600)
                return (fd, path)
            }
            if errno != EEXIST { throw FileSystemError("create", path: path) }
        }
        throw FileSystemError("create a temporary file in", path: directory, code: EEXIST)
    }

    /// A fresh private folder (mode 0700) in `directory`.
    public static func createTemporaryDirectory(in directory: String, for name: String) throws(FileSystemError)
        -> String
    {
        for _ in 0..<16 {
            let path = directory + "/" + temporaryName(for: name)
            if RawPath.mkdir(path, 0o700) == 0 {
                RawPath.chmod(path, 0o700)
                return path
            }
            if errno != EEXIST { throw FileSystemError("create folder", path: path) }
        }
        throw FileSystemError("create a temporary folder in", path: directory, code: EEXIST)
    }

    /// The marker that every temporary name carries, so that cleanup can find leftovers.
    public static let temporaryMarker = ".tmp-"

    public static func temporaryName(for name: String) -> String {
        ".\(name)\(temporaryMarker)\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    }

    /// Writes all of `bytes` to `fd`.
    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String) throws(FileSystemError) {
        var offset = 0
        while offset < bytes.count {
            let n = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if n < 0 {
                if errno == EINTR { continue }
                throw FileSystemError("write", path: path)
            }
            offset += n
        }
    }

    /// Writes `data` to `path` atomically: a temporary file, fsync, rename (replacing what was
    /// there), fsync of the folder. The journal, verification records and the repository marker.
    public static func writeAtomically(_ data: [UInt8], to path: String, mode: mode_t = 0o600) throws(FileSystemError) {
        let directory = PathText.parent(path)
        let (fd, temporary) = try createTemporaryFile(in: directory, for: PathText.lastComponent(path))
        let file = Descriptor(fd, display: temporary)
        var published = false
        defer { if !published { RawPath.unlink(temporary) } }
        let failure: FileSystemError? = data.withUnsafeBytes { buffer in
            do throws(FileSystemError) { try file.write(buffer) } catch { return error }
            return nil
        }
        if let failure { throw failure }
        fchmod(file.raw, mode)
        try file.sync()
        let code = file.close()
        if code != 0 { throw FileSystemError("close", path: temporary, code: code) }
        try rename(temporary, to: path)
        published = true
        try syncParent(of: path)
    }

    /// Publishes a finished, synced temporary file under a new name in `folder`, never replacing
    /// anything: `name(1)`, or `name(2)`, `name(3)`… when that is taken (a second archive in the
    /// same second); `onPublished` runs right after the rename, before the folder's fsync. Archives
    /// (backups and safety archives) appear this way: complete under their final name, or not at all.
    public static func publishNew(
        _ temporary: String, in folder: String, name: (Int) -> String, onPublished: () -> Void = {}
    ) throws(FileSystemError) -> String {
        var sequence = 1
        while true {
            try? Interruption.check()
            let final = folder + "/" + name(sequence)
            do {
                try renameNoReplace(temporary, to: final)
            } catch {
                if error.code == EEXIST {
                    sequence += 1
                    continue
                }
                throw error
            }
            onPublished()
            try syncParent(of: final)
            return final
        }
    }

    /// The first `count` bytes of a file (fewer when it is shorter); empty when unreadable.
    public static func head(_ path: String, count: Int) -> [UInt8] {
        let fd = RawPath.open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        if fd < 0 { return [] }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: count)
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, count) }
        return n > 0 ? Array(buffer[0..<n]) : []
    }
}

/// Path-based system calls on paths that may carry names that are not UTF-8 (escaped in granary's
/// strings, see ``FolderName``): each path is turned back into its bytes before the call. Used for
/// granary's own folders (repository, state folder, staging); a user's folder is reached only
/// through ``Folder``.
public enum RawPath {
    public static func open(_ path: String, _ flags: Int32, _ mode: mode_t = 0) -> Int32 {
        FolderName.withRaw(path) { Glibc.open($0, flags, mode) }
    }
    @discardableResult public static func mkdir(_ path: String, _ mode: mode_t) -> Int32 {
        FolderName.withRaw(path) { Glibc.mkdir($0, mode) }
    }
    @discardableResult public static func chmod(_ path: String, _ mode: mode_t) -> Int32 {
        FolderName.withRaw(path) { Glibc.chmod($0, mode) }
    }
    @discardableResult public static func unlink(_ path: String) -> Int32 {
        FolderName.withRaw(path) { Glibc.unlink($0) }
    }
    @discardableResult public static func rmdir(_ path: String) -> Int32 {
        FolderName.withRaw(path) { Glibc.rmdir($0) }
    }
    public static func lstat(_ path: String, _ info: inout stat) -> Int32 {
        FolderName.withRaw(path) { Glibc.lstat($0, &info) }
    }
    public static func link(_ from: String, _ to: String) -> Int32 {
        FolderName.withRaw(from) { a in FolderName.withRaw(to) { b in Glibc.link(a, b) } }
    }
    public static func rename(_ from: String, _ to: String) -> Int32 {
        FolderName.withRaw(from) { a in FolderName.withRaw(to) { b in Glibc.rename(a, b) } }
    }

    /// The name of the entry `readdir` returned, read in place up to its NUL. A record is only
    /// as long as its name (`d_reclen`): copying the whole struct (`item.pointee.d_name`) read
    /// past the last record of readdir's buffer (AddressSanitizer: heap-buffer-overflow, found
    /// by the `paths` fuzz target listing `/`).
    static func entryName(_ item: UnsafeMutablePointer<dirent>) -> [UInt8] {
        let name = (UnsafeRawPointer(item) + MemoryLayout<dirent>.offset(of: \dirent.d_name)!)
            .assumingMemoryBound(to: CChar.self)
        return Array(UnsafeRawBufferPointer(start: name, count: strlen(name)))
    }

    /// The names in a folder (`.` and `..` left out), unsorted; empty when it cannot be read.
    public static func list(_ path: String) -> [String] {
        guard let dir = FolderName.withRaw(path, { opendir($0) }) else { return [] }
        defer { closedir(dir) }
        var names: [String] = []
        while let item = readdir(dir) {
            let raw = entryName(item)
            if raw == [0x2E] || raw == [0x2E, 0x2E] { continue }
            names.append(FolderName.decode(raw))
        }
        return names
    }
}
