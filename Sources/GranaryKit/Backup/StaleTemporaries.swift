import Foundation

/// Removes temporary files and folders left by granary runs that died (SIGKILL, power loss).
///
/// Temporary names are `.NAME.tmp-PID-RANDOM` (`FileSystem.createTemporaryFile`). A run
/// holding the user's lock removes entries whose PID is no longer alive; entries of live
/// processes (another granary working on another user) are left alone. A recycled PID only
/// delays the cleanup to a later run.
public enum StaleTemporaries {
    /// Removes dead runs' temporaries directly inside `folder`; returns the paths removed.
    @discardableResult
    public static func clean(_ folder: String) -> [String] {
        var removed: [String] = []
        for name in FileSystem.contents(of: folder) where name.hasPrefix(".") {
            guard let marker = name.range(of: FileSystem.temporaryMarker, options: .backwards) else { continue }
            let tail = name[marker.upperBound...]
            guard let pidText = tail.split(separator: "-").first, let pid = Int32(pidText) else { continue }
            if pid == getpid() || kill(pid, 0) == 0 || errno == EPERM { continue }
            FileSystem.removeTree(folder + "/" + name)
            removed.append(folder + "/" + name)
        }
        return removed
    }
}
