/// Text made safe to print on a terminal.
///
/// Names come from users (folder names, store names, archive labels) and may hold anything a
/// file name can: escape sequences that rewrite the screen, carriage returns that hide what
/// came before, line separators, and bidirectional overrides (U+202E) that make a name read
/// backwards. Every piece of text granary prints in text form goes through `escape`, so each
/// name is shown the same way everywhere: printable characters as they are, the others as
/// `\e`, `\n`, `\r`, `\t`, `\xHH` (other C0 controls and DEL, and a byte of a name that is not
/// UTF-8, which GranaryKit carries as U+10FF00 + the byte) or `\u{HHHH}` (C1 controls,
/// U+2028/U+2029 and the bidirectional controls). A backslash is left as it is: text the core
/// has already made printable (an owner's answer as `"…\x1b…"`) is shown as the core wrote it,
/// not escaped twice. JSON output carries the exact string instead.
///
/// A combining mark at the start of a text, or right after an escape, is shown as `\u{HHHH}`
/// too: it would join the character before it on the screen (the last letter of `\e`, or the
/// text printed before the name), and two different names would look the same.
public enum TerminalText {
    public static func escape(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: needsEscape) || text.unicodeScalars.first.map(joinsPrevious) == true
        else { return text }
        var out = ""
        out.reserveCapacity(text.utf8.count + 8)
        var afterEscape = true
        for scalar in text.unicodeScalars {
            guard needsEscape(scalar) || (afterEscape && joinsPrevious(scalar)) else {
                out.unicodeScalars.append(scalar)
                afterEscape = false
                continue
            }
            afterEscape = true
            switch scalar.value {
            case 0x1B: out += "\\e"
            case 0x0A: out += "\\n"
            case 0x0D: out += "\\r"
            case 0x09: out += "\\t"
            case 0..<0x20, 0x7F: out += "\\x" + hex(scalar.value, width: 2)
            case 0x10_FF00...0x10_FFFF: out += "\\x" + hex(scalar.value - 0x10_FF00, width: 2)
            default: out += "\\u{" + hex(scalar.value, width: 4) + "}"
            }
        }
        return out
    }

    /// Whether `scalar` joins the character before it on the screen (a combining mark, a
    /// Hangul vowel or final consonant).
    static func joinsPrevious(_ scalar: Unicode.Scalar) -> Bool {
        let properties = scalar.properties
        if properties.canonicalCombiningClass != .notReordered || properties.isGraphemeExtend { return true }
        switch properties.generalCategory {
        case .nonspacingMark, .spacingMark, .enclosingMark: return true
        default: return (0x1160...0x11FF).contains(scalar.value) || (0xD7B0...0xD7FF).contains(scalar.value)
        }
    }

    /// Whether `scalar` is shown escaped.
    public static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0..<0x20, 0x7F, 0x80...0x9F: return true
        case 0x10_FF00...0x10_FFFF: return true  // a byte that is not UTF-8, as GranaryKit carries it
        case 0x2028, 0x2029: return true  // line and paragraph separators
        case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: return true  // bidirectional controls
        default: return false
        }
    }

    private static func hex(_ value: UInt32, width: Int) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }
}
