import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A file root writes by name outside the repository (`check --textfile`): written through a
/// checked descriptor of its folder, never through the folder's name again.
///
/// The folder such a file goes in is often another account's: Debian's prometheus user owns
/// `/var/lib/prometheus`, where node_exporter's textfile folder lives. Written by path (a
/// temporary file, then a rename, both by name), the file lands wherever the folder's name
/// leads at that moment, and whoever owns a folder above it can swap the folder for a link to
/// `/etc` between the two steps. So the folder is reached from `/` one component at a time
/// (`openat` with `O_NOFOLLOW`), a link followed only where it lies in a folder no one but root
/// can write (the administrator's own, `/var/run -> /run`), and the folder judged by its
/// descriptor: a folder, writable by nobody but its owner and root unless sticky. The temporary
/// file is created in it with `openat(O_CREAT | O_EXCL | O_NOFOLLOW)`, synced, and renamed
/// with `renameat` within that descriptor; a swap of any name on the way after the folder was
/// opened changes nothing, and one before is a link that is refused.
public enum OutsideFile {
    /// Why a file cannot be written at a path.
    public struct Refused: GranaryError, Sendable {
        public let path: String
        public let reason: String
        public var description: String { "\(path): \(reason); nothing was written" }
    }

    /// Writes `data` to the file at `path` (absolute) with `mode`, atomically, through a checked
    /// descriptor of its folder (see above).
    public static func write(_ data: [UInt8], to path: String, mode: mode_t = 0o644) throws {
        let name = PathText.lastComponent(path)
        guard path.hasPrefix("/"), !name.isEmpty, name != ".", name != ".." else {
            throw Refused(path: path, reason: "is not an absolute path to a file")
        }
        let folder = try openFolder(PathText.parent(path), for: path)
        defer { close(folder) }
        var info = stat()
        guard fstat(folder, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
            throw Refused(path: path, reason: "its folder cannot be examined")
        }
        let sticky = info.st_mode & UInt32(S_ISVTX) != 0
        if info.st_mode & 0o022 != 0 && !sticky {
            throw Refused(
                path: path,
                reason:
                    "its folder is writable by \(info.st_mode & 0o002 != 0 ? "everyone" : "its group"): choose a folder only its owner writes"
            )
        }
        var temporary = ""
        var fd: Int32 = -1
        for _ in 0..<16 {
            temporary = FileSystem.temporaryName(for: name)
            fd = openat(folder, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
            if fd >= 0 || errno != EEXIST { break }
        }
        guard fd >= 0 else { throw FileSystemError("create", path: PathText.parent(path) + "/" + temporary) }
        let file = Descriptor(fd, display: PathText.parent(path) + "/" + temporary)
        var published = false
        defer { if !published { unlinkat(folder, temporary, 0) } }
        let failure: FileSystemError? = data.withUnsafeBytes { buffer in
            do throws(FileSystemError) { try file.write(buffer) } catch { return error }
            return nil
        }
        if let failure { throw failure }
        fchmod(file.raw, mode)
        try file.sync()
        let code = file.close()
        if code != 0 { throw FileSystemError("close", path: file.display, code: code) }
        guard renameat(folder, temporary, folder, name) == 0 else { throw FileSystemError("rename", path: path) }
        published = true
        _ = fsync(folder)
    }

    /// An open (`O_RDONLY | O_DIRECTORY`) descriptor of the folder `path`, reached from `/` one
    /// component at a time without following a link another user could have placed.
    static func openFolder(_ path: String, for file: String) throws -> Int32 {
        var pending = path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        var current = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard current >= 0 else { throw FileSystemError("open", path: "/") }
        var stack: [Int32] = []
        var links = 0
        var shown = ""
        defer { for fd in stack { close(fd) } }
        while !pending.isEmpty {
            let part = pending.removeFirst()
            if part == "." { continue }
            if part == ".." {
                if let parent = stack.popLast() {
                    close(current)
                    current = parent
                }
                continue
            }
            let here = shown + "/" + part
            let next = openat(current, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            if next >= 0 {
                stack.append(current)
                current = next
                shown = here
                continue
            }
            let failure = errno
            // A link: followed only when it lies in a folder nobody but root writes.
            var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let n = readlinkat(current, part, &buffer, buffer.count - 1)
            guard n > 0 else {
                close(current)
                throw Refused(
                    path: file, reason: "\(here) cannot be opened as a folder (\(String(cString: strerror(failure))))")
            }
            var info = stat()
            let trusted = fstat(current, &info) == 0 && info.st_uid == 0 && info.st_mode & 0o022 == 0
            links += 1
            guard trusted, links <= 40 else {
                close(current)
                throw Refused(
                    path: file,
                    reason:
                        "\(here) is a link in a folder another user can write (\(shown.isEmpty ? "/" : shown)), so it is not followed"
                )
            }
            let target = String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            pending = target.split(separator: "/", omittingEmptySubsequences: true).map(String.init) + pending
            if target.hasPrefix("/") {
                for fd in stack { close(fd) }
                stack.removeAll()
                close(current)
                current = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                shown = ""
                guard current >= 0 else { throw FileSystemError("open", path: "/") }
            }
        }
        return current
    }
}
