/// What one user's backup copies, counted as it goes against `[limits] bytes_per_user`, and the
/// sparse files it meets on the way.
///
/// A store counts as long as it claims to be (the larger of its file and its header's pages: a
/// snapshot copies every page) plus its `-wal`; an external-data file counts its length. A user
/// who owns a file of a few KiB on disk and terabytes long (`truncate -s 1T`) would otherwise make
/// granary read it all, for hours, before every other user after them; past the cap their backup
/// fails (65) before the file is copied, and the next user's goes on.
public struct UserBytes: Sendable {
    /// A file far longer than what it takes on disk.
    public struct Sparse: Sendable, Equatable, CustomStringConvertible {
        public let length: Int64
        public let allocated: Int64
        public var description: String {
            "\(ByteCountText.approximate(length)) long, \(ByteCountText.approximate(allocated)) on disk"
        }
    }

    public let user: String
    /// 0: no cap.
    public let cap: Int64
    /// Bytes counted so far.
    public private(set) var total: Int64 = 0
    /// The sparse files met: the first few by name, and how many in all.
    public private(set) var sparseFiles: [(name: String, sparse: Sparse)] = []
    public private(set) var sparseCount = 0

    /// The sparse files named in the warnings; the others are counted.
    static let namedSparse = 10

    public init(user: String, cap: Int64) {
        self.user = user
        self.cap = cap
    }

    /// A file of at least 1 MiB whose blocks on disk cover less than a sixteenth of its length.
    /// No app writes its store or attachments so (a filesystem that compresses may show a little
    /// of it: that is why this is a warning, not a refusal).
    public static func sparse(length: Int64, allocated: Int64) -> Sparse? {
        length >= 1 << 20 && allocated < length / 16 ? Sparse(length: length, allocated: allocated) : nil
    }

    /// Counts `length` bytes of `name` (a path in the user's folder); throws
    /// `BackupError.overUserCap` when they bring the user past the cap.
    public mutating func add(_ name: String, length: Int64, allocated: Int64) throws(BackupError) {
        let sparse = Self.sparse(length: length, allocated: allocated)
        if let sparse {
            sparseCount += 1
            if sparseFiles.count < Self.namedSparse { sparseFiles.append((name, sparse)) }
        }
        let (sum, overflow) = total.addingReportingOverflow(max(0, length))
        total = overflow ? .max : sum
        if cap > 0 && total > cap { throw .overUserCap(user: user, bytes: total, cap: cap, item: name, sparse: sparse) }
    }

    /// One warning per sparse file named, and one for the rest.
    public var warnings: [String] {
        var lines = sparseFiles.map { "\($0.name) is sparse: \($0.sparse) (an app does not write its files so)" }
        if sparseCount > sparseFiles.count { lines.append("\(sparseCount - sparseFiles.count) more sparse files") }
        return lines
    }
}
