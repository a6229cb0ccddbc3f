import Foundation
import GranaryKit

/// How a JSON document carries a name from a user's folder (a store, a file, a folder under the
/// root) or a path that holds one: file names are bytes, and JSON strings are Unicode.
///
/// Every such field `x` has a sibling `xBase64`. When the name's bytes are UTF-8, `x` is the name
/// exactly and `xBase64` is null. When they are not, `x` shows it with U+FFFD for each byte that
/// is not UTF-8, and `xBase64` holds the exact bytes in base64: a reader that needs the file tests
/// `xBase64` first. (A name holding one of the code points U+10FF00–U+10FFFF, which GranaryKit
/// keeps for such bytes, is given the same way: its bytes in base64, each shown as U+FFFD.) An array of names is an array of `{"name", "nameBase64"}` objects. Every other
/// string of a document (messages included) shows such bytes as U+FFFD (`Console.encode`).
public enum JSONName {
    /// nil when `name` is UTF-8 (the string is then exact); else its exact bytes, base64.
    public static func base64(_ name: String) -> String? {
        FolderName.isUTF8(name) ? nil : Data(FolderName.encode(name)).base64EncodedString()
    }

    /// `text` as a JSON document shows it: each byte that is not UTF-8 (carried by GranaryKit as
    /// U+10FF00 + the byte) as U+FFFD.
    public static func text(_ text: String) -> String {
        guard !FolderName.isUTF8(text) else { return text }
        var scalars = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            scalars.append((0x10_FF00...0x10_FFFF).contains(scalar.value) ? "\u{FFFD}" : scalar)
        }
        return String(scalars)
    }

    /// One name of an array of names.
    struct Named: Encodable, Sendable {
        let name: String
        @Null var nameBase64: String?

        init(_ name: String) {
            self.name = name
            nameBase64 = JSONName.base64(name)
        }
    }

    /// A name with why granary passed it over (an entry of the root, a file of a user's folder).
    struct NamedReason: Codable, Sendable {
        let name: String
        @Null var nameBase64: String?
        let reason: String

        init(name: String, reason: String) {
            self.name = name
            nameBase64 = JSONName.base64(name)
            self.reason = reason
        }
    }
}
