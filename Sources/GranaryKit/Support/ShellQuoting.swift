import Foundation

/// Words as a POSIX shell reads them, for the command lines hints print ("Try: granary …").
public enum ShellQuoting {
    /// `word` as one shell word: as it is when it holds only safe characters, else in single
    /// quotes (a single quote inside as `'\''`). A word holding a byte that is not UTF-8 (a file
    /// name's, kept by `FolderName`), a control character, a line separator or a bidi override is
    /// written in ANSI-C quotes instead (`$'…'`, with such bytes as `\xHH`: bash, zsh, ksh and
    /// POSIX.1-2024 shells read it back as the very same bytes), so that a hint pasted back names
    /// the same file and never shows a character that rewrites the line it is on.
    public static func word(_ word: String) -> String {
        let safe = word.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0)
                || "@%+=:,./_-".unicodeScalars.contains($0)
        }
        if safe && !word.isEmpty { return word }
        guard word.unicodeScalars.contains(where: needsEscape) else {
            return "'" + word.replacingOccurrences(of: "'", with: "'\\''") + "'"
        }
        var out = "$'"
        for scalar in word.unicodeScalars {
            if needsEscape(scalar) {
                for byte in FolderName.encode(String(scalar)) {
                    out += "\\x" + String(byte, radix: 16, uppercase: false).leftPadded(2)
                }
            } else if scalar == "'" || scalar == "\\" {
                out += "\\" + String(scalar)
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out + "'"
    }

    /// Whether a scalar is written as bytes: controls, formatting characters (bidi overrides),
    /// line and paragraph separators, and the private-use scalars `FolderName` stands raw bytes in.
    private static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.properties.generalCategory {
        case .control, .format, .lineSeparator, .paragraphSeparator, .privateUse, .surrogate, .unassigned: return true
        default: return false
        }
    }
}

extension String {
    fileprivate func leftPadded(_ width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
