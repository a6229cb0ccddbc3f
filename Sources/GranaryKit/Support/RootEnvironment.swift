import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// What a process running as root must not take from the environment it inherits.
///
/// `sudo -E` (or sudoers' SETENV) passes the invoking user's environment through; sudo strips
/// `LD_*` and the like, not `SWIFT_*`. The Swift runtime reads `SWIFT_BACKTRACE` before `main`
/// runs, and on a crash starts the program it names (`swift-backtrace=…`): as root, that would be a
/// program of the user's choosing. So, as root, granary re-executes itself once without it, before
/// doing anything else; the toolchain's own backtracer (root's, at its installed path) is used then.
public enum RootEnvironment {
    /// Variables that let the environment choose a program for a root granary to run.
    public static let dangerous = ["SWIFT_BACKTRACE"]

    /// What a dangerous variable may say, as it chooses no program: `SWIFT_BACKTRACE=enable=no`
    /// turns the crash handler off (`make tsan` sets it: the backtracer hangs on an instrumented
    /// process).
    public static let harmless: Set<String> = ["enable=no"]

    /// Whether `environment` holds a variable a root process must not run with.
    public static func needsScrubbing(
        euid: uid_t = geteuid(), environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> Bool {
        euid == 0 && dangerous.contains { name in environment[name].map { !harmless.contains($0) } ?? false }
    }

    /// As root, with a dangerous variable set: removes it and replaces the process with a fresh
    /// copy of itself (the same argument bytes: `argv` is the process's own vector, not
    /// `CommandLine.arguments`, which turns bytes that are not UTF-8 into U+FFFD). Returns only
    /// when there is nothing to do (or the re-exec failed, in which case the variable is at least
    /// gone from what granary starts).
    public static func scrubAndReexec(
        argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?> = CommandLine.unsafeArgv
    ) {
        guard needsScrubbing() else { return }
        for name in dangerous { unsetenv(name) }
        execv("/proc/self/exe", argv)
    }

    /// Whether this is root acting for a user through sudo (`SUDO_USER` set): then the user's
    /// `XDG_*` and `HOME` do not choose root's configuration.
    public static func isSudo(
        euid: uid_t = geteuid(), environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> Bool {
        euid == 0 && (environment["SUDO_USER"].map { !$0.isEmpty } ?? false)
    }

    /// Why root must not read the configuration file at `path` (nil when it may): it, or a folder
    /// on the way to it, is not root's or is writable by its group or others (a sticky folder is
    /// allowed: nobody can rename root's entries in it). Every component is walked from `/`, links
    /// (the administrator's own, `/etc/granary/config.toml -> …`) followed by hand and judged where
    /// they lie, so nothing another user controls can change what the name reaches. A file that is
    /// not there is no problem when nobody but root could create it there.
    public static func trustProblem(_ path: String) -> String? {
        switch TrustedPath.walk(path, open: false) {
        case .opened(let fd): close(fd); return nil
        case .absent: return nil
        case .untrusted(let problem): return problem
        }
    }

    /// Opens the file at `path` for reading after the checks of ``trustProblem(_:)``, the file
    /// itself judged through the descriptor returned (never opened again by name). `.absent` when
    /// there is no such file.
    public static func openTrusted(_ path: String) -> TrustedPath.Outcome {
        TrustedPath.walk(path, open: true)
    }
}

/// Resolves a path component by component from `/` as root, checking each folder and link on the
/// way and the file at the end.
public enum TrustedPath {
    /// `O_PATH` (Glibc's Swift overlay does not export it): a descriptor that names, not opens.
    static let pathOnly: Int32 = 0o10_000_000
    public enum Outcome {
        /// An open descriptor of the file (`O_RDONLY`), or of an `O_PATH` one when only checked.
        case opened(Int32)
        case absent
        case untrusted(String)
    }

    static func judge(_ info: stat, _ what: String, folder: Bool) -> String? {
        if info.st_uid != 0 { return "\(what) belongs to uid \(info.st_uid), not root" }
        let sticky = folder && info.st_mode & UInt32(S_ISVTX) != 0
        if info.st_mode & 0o022 != 0 && !sticky {
            return "\(what) is writable by \(info.st_mode & 0o002 != 0 ? "everyone" : "its group")"
        }
        return nil
    }

    /// Why root must not write into the folder at `path` (`restore --to`): it, or a folder on the
    /// way to it, belongs to another user or is writable by others (a sticky folder is allowed on
    /// the way, not as the folder itself nor as the one a missing folder would be made in: others
    /// could make the name first). Nil when it may.
    public static func folderProblem(_ path: String) -> String? {
        switch walk(path, open: false, folder: true) {
        case .opened(let fd): close(fd); return nil
        case .absent: return nil
        case .untrusted(let problem): return problem
        }
    }

    /// The first folder on the way to `path` (from `/`, links not followed) that ``walk`` refuses:
    /// another uid's, or writable by others and not sticky. Nil when every folder is root's alone
    /// (then the file itself is what is wrong). For a hint only: it names what to fix.
    public static func untrustedFolder(on path: String) -> String? {
        var folder = ""
        let parts = path.split(separator: "/", omittingEmptySubsequences: true).dropLast()
        if let info = FileSystem.status("/"), judge(info, "/", folder: true) != nil { return "/" }
        for part in parts {
            folder += "/" + part
            guard let info = FileSystem.status(folder), info.st_mode & S_IFMT == S_IFDIR else { return nil }
            if judge(info, folder, folder: true) != nil { return folder }
        }
        return nil
    }

    /// A folder's owner and mode, judged strictly: root's or granary's uid, writable by nobody else.
    static func strictProblem(_ fd: Int32, _ what: String) -> String? {
        var info = stat()
        guard fstat(fd, &info) == 0 else { return "\(what) cannot be examined" }
        if info.st_uid != 0 && info.st_uid != geteuid() { return "\(what) belongs to uid \(info.st_uid)" }
        if info.st_mode & 0o022 != 0 {
            return "\(what) is writable by \(info.st_mode & 0o002 != 0 ? "everyone" : "its group")"
        }
        return nil
    }

    static func walk(_ path: String, open wantOpen: Bool, folder wantFolder: Bool = false) -> Outcome {
        guard path.hasPrefix("/") else {
            let cwd = FileManager.default.currentDirectoryPath
            return walk(cwd + "/" + path, open: wantOpen, folder: wantFolder)
        }
        var pending = path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        var current = Glibc.open("/", TrustedPath.pathOnly | O_DIRECTORY | O_CLOEXEC)
        guard current >= 0 else { return .untrusted("/ cannot be opened") }
        var shown = "/"
        var info = stat()
        if fstat(current, &info) == 0, let problem = judge(info, "the folder /", folder: true) {
            close(current)
            return .untrusted(problem)
        }
        var links = 0
        var stack: [Int32] = []
        defer {
            for fd in stack { close(fd) }
        }
        while !pending.isEmpty {
            let name = pending.removeFirst()
            if name == "." { continue }
            if name == ".." {
                if let parent = stack.popLast() {
                    close(current)
                    current = parent
                    shown = (shown as NSString).deletingLastPathComponent
                }
                continue
            }
            let next = openat(current, name, TrustedPath.pathOnly | O_NOFOLLOW | O_CLOEXEC)
            let here = shown == "/" ? "/" + name : shown + "/" + name
            guard next >= 0 else {
                if wantFolder && errno == ENOENT, let problem = strictProblem(current, "the folder \(shown)") {
                    close(current)
                    return .untrusted("\(here) does not exist and \(problem): someone else could make it first")
                }
                close(current)
                // Not there: nobody but root can make it in a folder judged root's alone.
                return errno == ENOENT
                    ? .absent : .untrusted("\(here) cannot be reached (\(String(cString: strerror(errno))))")
            }
            guard fstat(next, &info) == 0 else {
                close(next)
                close(current)
                return .untrusted("\(here) cannot be examined")
            }
            switch info.st_mode & S_IFMT {
            case S_IFLNK:
                // A link's target is root's choice when the link lies in a folder only root writes.
                links += 1
                var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
                let n = readlinkat(next, "", &buffer, buffer.count - 1)
                close(next)
                guard n > 0, links <= 40 else {
                    close(current)
                    return .untrusted("\(here) is a link that cannot be followed")
                }
                let target = String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
                let parts = target.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
                pending = parts + pending
                if target.hasPrefix("/") {
                    for fd in stack { close(fd) }
                    stack.removeAll()
                    close(current)
                    current = Glibc.open("/", TrustedPath.pathOnly | O_DIRECTORY | O_CLOEXEC)
                    shown = "/"
                }
            case S_IFDIR:
                if let problem = judge(info, "the folder \(here)", folder: true) {
                    close(next)
                    close(current)
                    return .untrusted(problem)
                }
                stack.append(current)
                current = next
                shown = here
            default:
                guard pending.isEmpty else {
                    close(next)
                    close(current)
                    return .untrusted("\(here) is not a folder")
                }
                if let problem = judge(info, path == here ? "it" : "\(here)", folder: false) {
                    close(next)
                    close(current)
                    return .untrusted(problem)
                }
                guard wantOpen else {
                    close(current)
                    return .opened(next)
                }
                // Opened through the checked O_PATH descriptor: the same inode, whatever the name is by now.
                let fd = Glibc.open("/proc/self/fd/\(next)", O_RDONLY | O_NONBLOCK | O_CLOEXEC)
                close(next)
                close(current)
                guard fd >= 0 else { return .untrusted("it cannot be read (\(String(cString: strerror(errno))))") }
                return .opened(fd)
            }
        }
        // The path named a folder.
        if wantFolder {
            if let problem = strictProblem(current, "it") {
                close(current)
                return .untrusted(problem)
            }
            return .opened(current)
        }
        close(current)
        return .untrusted("\(path) is a folder")
    }
}
