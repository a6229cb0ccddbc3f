/// What is wrong with a delta archive's members or chain.
public enum DeltaError: GranaryError, Sendable, Equatable {
    /// A file that should be whole pages is not.
    case notPages(path: String, size: Int64, pageSize: Int)
    /// A `.pages` or `.delta` file that is not what its format says.
    case malformed(path: String, reason: String)

    public var description: String {
        switch self {
        case .notPages(let path, let size, let pageSize):
            return "\(path): \(size) bytes is not a whole number of \(pageSize)-byte pages"
        case .malformed(let path, let reason): return "\(path) \(reason)"
        }
    }
}
