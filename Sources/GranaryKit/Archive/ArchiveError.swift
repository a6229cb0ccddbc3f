/// A failure reading or writing an archive. libarchive's message is kept.
public enum ArchiveError: GranaryError, Sendable {
    /// The archive file could not be opened.
    case cannotOpen(path: String, message: String)
    /// The bytes are not a readable tar archive, or stop short.
    case malformed(path: String, message: String)
    /// Writing the archive failed.
    case writeFailed(path: String, message: String, code: Int32)
    /// A member's content is larger than allowed (a manifest over its limit, a decompression bomb).
    case tooLarge(path: String, member: String, limit: Int64)
    /// A member has a name or type that an archive of ours never holds.
    case unsafeMember(path: String, member: String, reason: String)

    /// Whether the bytes themselves are wrong (not a readable archive, a member too large or unsafe).
    public var isDataError: Bool {
        switch self {
        case .malformed, .tooLarge, .unsafeMember: return true
        case .cannotOpen, .writeFailed: return false
        }
    }

    public var description: String {
        switch self {
        case .cannotOpen(let path, let message): return "cannot open archive \(path): \(message)"
        case .malformed(let path, let message): return "\(path) is not a readable archive: \(message)"
        case .writeFailed(let path, let message, _): return "cannot write archive \(path): \(message)"
        case .tooLarge(let path, let member, let limit):
            return "\(path): member \(member) is larger than \(limit) bytes"
        case .unsafeMember(let path, let member, let reason): return "\(path): member \(member) \(reason)"
        }
    }

}
