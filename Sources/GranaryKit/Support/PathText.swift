import Foundation

/// Paths taken apart by their text alone, byte for byte.
///
/// Foundation's `NSString` path methods are not used on paths granary is given: on Linux they
/// expand or trap on a `~` (`--repo 'x/~'` stopped granary with a signal), and they may rewrite
/// what they do not understand. These never look at the filesystem, never expand anything, and
/// never trap, whatever the text: every path a person, a configuration file or a user's folder
/// hands granary goes through them.
public enum PathText {
    /// The folder part of `path`: `/a/b` → `/a`, `/a` → `/`, `a` → ``, `a/b/` → `a`, `/` → `/`.
    /// Repeated slashes between the parts are dropped (`a//b` → `a`).
    public static func parent(_ path: String) -> String {
        var bytes = Array(path.utf8)
        while bytes.count > 1 && bytes.last == UInt8(ascii: "/") { bytes.removeLast() }
        guard let slash = bytes.lastIndex(of: UInt8(ascii: "/")) else { return "" }
        var end = slash
        while end > 0 && bytes[end - 1] == UInt8(ascii: "/") { end -= 1 }
        if end == 0 { return "/" }
        return String(decoding: bytes[..<end], as: UTF8.self)
    }

    /// The last part of `path`: `/a/b` → `b`, `/a/b/` → `b`, `a` → `a`, `/` → `/`, `` → ``.
    public static func lastComponent(_ path: String) -> String {
        var bytes = Array(path.utf8)
        while bytes.count > 1 && bytes.last == UInt8(ascii: "/") { bytes.removeLast() }
        if bytes == [UInt8(ascii: "/")] { return "/" }
        guard let slash = bytes.lastIndex(of: UInt8(ascii: "/")) else { return String(decoding: bytes, as: UTF8.self) }
        return String(decoding: bytes[(slash + 1)...], as: UTF8.self)
    }

    /// `path` with `.` parts and repeated slashes removed and each `..` taking away the part
    /// before it (by the text: links are not resolved): `/a/./b/../c//` → `/a/c`. A relative
    /// path stays relative (`..` that climbs above it is kept).
    public static func normalized(_ path: String) -> String {
        let absolute = path.hasPrefix("/")
        var parts: [Substring] = []
        for part in path.split(separator: "/", omittingEmptySubsequences: true) {
            if part == "." { continue }
            if part == ".." {
                if let last = parts.last, last != ".." {
                    parts.removeLast()
                    continue
                }
                if absolute { continue }
            }
            parts.append(part)
        }
        let joined = parts.joined(separator: "/")
        if absolute { return "/" + joined }
        return joined.isEmpty ? "." : joined
    }

    /// Why `path`, as a place granary is told to use, cannot be taken: it starts with `~`, which
    /// granary does not expand (the shell does, when the `~` is not quoted: as with restic, a
    /// quoted `~` would be a folder of that name in the current folder, which nobody means).
    /// `nil` when the path is fine. `home` is the expansion shown in the hint.
    public static func tildeProblem(_ path: String, home: String? = ProcessInfo.processInfo.environment["HOME"])
        -> (problem: String, hint: String)?
    {
        guard path.hasPrefix("~") else { return nil }
        let first = path.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        let rest = path.dropFirst(first.count)
        var hint = "write the absolute path"
        if first == "~", let home, home.hasPrefix("/") {
            hint += " (\(home == "/" ? "" : home)\(rest.isEmpty ? "" : String(rest)))"
        } else if first == "~" {
            hint += " (granary does not expand ~)"
        }
        hint += ", or leave the ~ unquoted for the shell to expand"
        return ("starts with \(first), which granary does not expand", hint)
    }
}
