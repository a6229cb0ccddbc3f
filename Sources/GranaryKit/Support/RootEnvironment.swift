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

    /// Whether `environment` holds a variable a root process must not run with.
    public static func needsScrubbing(
        euid: uid_t = geteuid(), environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> Bool {
        euid == 0 && dangerous.contains { environment[$0] != nil }
    }

    /// As root, with a dangerous variable set: removes it and replaces the process with a fresh
    /// copy of itself (same arguments). Returns only when there is nothing to do (or the re-exec
    /// failed, in which case the variable is at least gone from what granary starts).
    public static func scrubAndReexec(arguments: [String] = CommandLine.arguments) {
        guard needsScrubbing() else { return }
        for name in dangerous { unsetenv(name) }
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        execv("/proc/self/exe", &argv)
        for pointer in argv { free(pointer) }
    }

    /// Whether this is root acting for a user through sudo (`SUDO_USER` set): then the user's
    /// `XDG_*` and `HOME` do not choose root's configuration.
    public static func isSudo(
        euid: uid_t = geteuid(), environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> Bool {
        euid == 0 && (environment["SUDO_USER"].map { !$0.isEmpty } ?? false)
    }

    /// Why root must not read the configuration file at `path` (nil when it may): not root's, or
    /// writable by its group or others, or in a folder that is (granary's configuration file, rclone's).
    public static func trustProblem(_ path: String) -> String? {
        guard FileSystem.status(path) != nil else { return nil }
        // A link (the administrator's own, /etc/granary/config.toml -> …) is followed: what it
        // points to is judged, and the folder holding the name.
        let parent = PathText.parent(path)
        for (what, checked) in [("it", path), ("its folder \(parent)", parent.isEmpty ? "." : parent)] {
            var resolved = stat()
            guard stat(checked, &resolved) == 0 else { continue }
            if resolved.st_uid != 0 { return "\(what) belongs to uid \(resolved.st_uid), not root" }
            if resolved.st_mode & 0o022 != 0 && !(what != "it" && resolved.st_mode & UInt32(S_ISVTX) != 0) {
                return "\(what) is writable by \(resolved.st_mode & 0o002 != 0 ? "everyone" : "its group")"
            }
        }
        return nil
    }
}
