import Foundation

/// What shell completion offers for USER and ARCHIVE arguments, read from folder listings only.
///
/// Completion runs on every TAB, so nothing here opens a store or an archive: one
/// `readdir` of the root or of a user's repository folder, and a name check per entry.
/// Nothing throws: a missing or unreadable folder offers nothing.
public enum CompletionCandidates {
    /// The valid user ids (sub-folders, not hidden) under `root` that start with `prefix`, sorted.
    public static func users(root: String, prefix: String = "") -> [String] {
        names(in: root, directories: true).filter { $0.hasPrefix(prefix) && (try? UserID($0)) != nil }
    }

    /// The archive file names of `user` in `repository` that start with `prefix`, newest first.
    public static func archives(repository: String, user: String, prefix: String = "") -> [String] {
        guard (try? UserID(user)) != nil else { return [] }
        return names(in: repository + "/" + user, directories: false)
            .filter { $0.hasPrefix(prefix) && ArchiveName(fileName: $0) != nil }
            .sorted(by: >)
    }

    /// The names in a folder (sub-folders or other entries), hidden ones left out, sorted.
    static func names(in path: String, directories: Bool) -> [String] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: path) else { return [] }
        return names.filter { !$0.hasPrefix(".") && FileSystem.isDirectory(path + "/" + $0) == directories }.sorted()
    }
}
