import Foundation

/// Words as a POSIX shell reads them, for the command lines hints print ("Try: granary …").
public enum ShellQuoting {
    /// `word` as one shell word: as it is when it holds only safe characters, else in single
    /// quotes (a single quote inside as `'\''`).
    public static func word(_ word: String) -> String {
        let safe = word.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0)
                || "@%+=:,./_-".unicodeScalars.contains($0)
        }
        if safe && !word.isEmpty { return word }
        return "'" + word.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }
}
