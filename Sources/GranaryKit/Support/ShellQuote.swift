import Foundation

/// A word as a POSIX shell reads it, for the command lines hints print ("Try: granary restore
/// 'bob smith@example.com' 20261123T150043Z.tar.zst"): a hint must run as shown when pasted.
public enum ShellQuote {
    /// `word` as it is when it holds only characters no shell treats specially, else in single
    /// quotes (a single quote inside as `'\''`).
    public static func word(_ word: String) -> String {
        let safe = word.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || "@%+=:,./_-".unicodeScalars.contains($0)
        }
        if safe && !word.isEmpty { return word }
        return "'" + word.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }
}
