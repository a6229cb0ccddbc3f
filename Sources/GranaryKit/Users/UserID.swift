/// A user id: the name of the user's folder under the root, verbatim.
///
/// Email addresses are normal ids. Anything that could escape the root or confuse a
/// command line is refused: `/`, NUL, `.` and `..`, control characters, a leading `-`,
/// and names over 255 bytes (the longest file name Linux allows).
public struct UserID: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let rawValue: String

    /// Checks `text` and wraps it; throws `UserError.invalidID` naming the rule it breaks.
    public init(_ text: String) throws(UserError) {
        if let reason = UserID.problem(with: text) { throw .invalidID(text, reason: reason) }
        rawValue = text
    }

    /// Why `text` is not a valid id, or `nil` when it is.
    public static func problem(with text: String) -> String? {
        if text.isEmpty { return "is empty" }
        if text == "." || text == ".." { return "is a relative folder name" }
        if text.utf8.count > 255 { return "is longer than 255 bytes" }
        if text.hasPrefix("-") { return "starts with '-'" }
        // The root's state folder (and what a squatted one is moved aside as) is nobody's folder.
        if text == Root.stateFolderName || text.hasPrefix(Root.stateFolderName + "-") {
            return "is granary's state folder in the root"
        }
        // Text only: the id is the folder's name, whose bytes must be exactly the id's UTF-8
        // (an id made of a name that is not UTF-8 in NFC would be shown as one name and open another).
        if !FolderName.isUTF8(text) { return "is not UTF-8 text in normal form C" }
        for scalar in text.unicodeScalars {
            if scalar == "/" { return "contains '/'" }
            if scalar.value == 0 { return "contains a NUL byte" }
            if scalar.value < 0x20 || scalar.value == 0x7F || (0x80...0x9F).contains(scalar.value) {
                return "contains a control character"
            }
        }
        return nil
    }

    public var description: String { rawValue }

    public static func < (lhs: UserID, rhs: UserID) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// Problems finding a user.
public enum UserError: GranaryError, Sendable {
    case invalidID(String, reason: String)
    case notFound(String, root: String)
    /// The user's entry under the root is a link, a file or a folder that cannot be opened.
    case notAFolder(String, root: String, reason: String)
    case rootMissing(String)
    case unreadableRoot(String, String)
    /// The root folder could be changed by someone else than root.
    case unsafeRoot(String, String)

    public var description: String {
        switch self {
        case .invalidID(let id, let reason):
            return "invalid user id \(UserError.quoted(id)): it \(reason)"
        case .notFound(let id, let root): return "no user \(id) under \(root)"
        case .notAFolder(let id, let root, let reason): return "user \(id) under \(root) cannot be used: \(reason)"
        case .rootMissing(let root):
            return FileSystem.status(root) == nil
                ? "root folder \(root) does not exist" : "root folder \(root) is not a folder (nor a link to one)"
        case .unreadableRoot(let root, let reason): return "cannot read the root folder \(root): \(reason)"
        case .unsafeRoot(let root, let reason): return "refusing the root folder \(root): it \(reason)"
        }
    }

    /// The id with control characters made visible, so a hostile id cannot rewrite the terminal.
    static func quoted(_ text: String) -> String {
        var out = "'"
        for scalar in text.unicodeScalars {
            if scalar.value < 0x20 || scalar.value == 0x7F || (0x80...0x9F).contains(scalar.value) {
                out += "\\u{\(String(scalar.value, radix: 16))}"
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out + "'"
    }
}
