/// The compression filters an archive may use. The file name's ending says which.
public enum Compression: String, Sendable, CaseIterable, Codable {
    case zstd
    case gzip
    case xz
    case none

    /// The file name ending, with its dot.
    public var fileExtension: String {
        switch self {
        case .zstd: return ".tar.zst"
        case .gzip: return ".tar.gz"
        case .xz: return ".tar.xz"
        case .none: return ".tar"
        }
    }

    /// The compression named by a file name's ending, or `nil` when it is not an archive name.
    public init?(fileName: String) {
        // Longest endings first: ".tar" is a suffix of none of the others, but be explicit.
        for candidate in [Compression.zstd, .gzip, .xz, .none] where fileName.hasSuffix(candidate.fileExtension) {
            self = candidate
            return
        }
        return nil
    }

    /// The level used when none is given: zstd 3 (its own default), gzip 6, xz 6.
    public var defaultLevel: Int? {
        switch self {
        case .zstd: return 3
        case .gzip, .xz: return 6
        case .none: return nil
        }
    }

    /// The levels libarchive accepts.
    public var levels: ClosedRange<Int>? {
        switch self {
        case .zstd: return 1...19
        case .gzip, .xz: return 0...9
        case .none: return nil
        }
    }

    /// Why `level` cannot be used with this compression, or `nil` when it can.
    public func problem(withLevel level: Int) -> String? {
        guard let levels else { return "compression none takes no level" }
        guard levels.contains(level) else {
            return
                "level \(level) is out of range for \(rawValue): it must be \(levels.lowerBound) to \(levels.upperBound)"
        }
        return nil
    }
}
