/// Why a user's backup failed (SQLite, archive and filesystem errors keep their own types).
public enum BackupError: GranaryError, Sendable {
    /// A snapshot failed its check: it is not archived.
    /// `path` is the live store's, so that the hint can be run as shown.
    case checkFailed(user: String, store: String, problem: String, path: String? = nil)
    /// The rollback-mode store kept changing and could not be read, even under a read lock.
    case storeBusy(user: String, store: String)
    /// The repository filesystem filled up; nothing was published.
    case diskFull(repo: String, user: String)
    /// Files or folders in the user's folder that cannot be read: they may be stores.
    case unreadable(user: String, paths: [String])
    /// The user's folder holds no SQLite store: an archive of nothing is not a backup.
    case noStores(user: String, folder: String)
    /// The user's folder holds nothing that could be a store (no store, nothing unreadable,
    /// nothing passed over): a user whose app has not written yet. Not a failure of a backup
    /// (`BackupRun` reports it as nothing to back up); nothing was written to the repository.
    case nothingToBackUp(user: String, folder: String)
    /// A backup of all users over a root with no user folder (an unmounted volume, a wrong root).
    case noUsers(root: String)
    /// The snapshots would not fit in the repository (checked before a byte is written).
    case noRoom(user: String, repo: String, needed: Int64, free: Int64, store: String, sparse: Int64?)
    /// A store's copy, at the size SQLite reads it (its `-wal` applied: `claimed` bytes), would
    /// not fit in the `free` bytes left in the repository's scratch folder; nothing was copied.
    case claimedPastRoom(user: String, repo: String, store: String, claimed: Int64, free: Int64)
    /// The user's data passed `[limits] bytes_per_user` at `item` (`sparse`: the item's length
    /// and what it takes on disk, when it is a sparse file); nothing was written.
    case overUserCap(user: String, bytes: Int64, cap: Int64, item: String, sparse: UserBytes.Sparse?)
    /// Two of the user's stores would be packed under one member name (``MemberNames``): the
    /// archive would be refused by `verify` and `restore`, so none is written.
    case memberClash(user: String, member: String, first: String, second: String)
    /// A label granary keeps for its own archives (safety and final).
    case reservedLabel(String)
    /// A file whose name granary cannot yet carry into an archive.
    case unsupportedName(user: String, path: String)

    public var description: String {
        switch self {
        case .checkFailed(let user, let store, let problem, _):
            return "\(user): store \(store) failed its check: \(problem); no archive was written"
        case .storeBusy(let user, let store):
            return "\(user): store \(store) stayed busy; no archive was written"
        case .unreadable(let user, let paths):
            return
                "\(user): cannot read \(paths.prefix(3).joined(separator: ", "))\(paths.count > 3 ? " and \(paths.count - 3) more" : ""), which may \(paths.count == 1 ? "be a store" : "be stores"); no archive was written"
        case .diskFull(let repo, let user):
            return "\(user): the repository \(repo) is full; no archive was written"
        case .noStores(let user, let folder):
            return "\(user): no SQLite store found in \(folder); no archive was written"
        case .nothingToBackUp(let user, let folder):
            return "\(user): nothing to back up: \(folder) holds no SQLite store yet"
        case .noRoom(let user, let repo, let needed, let free, let store, let sparse):
            let why =
                sparse.map {
                    "; \(store) takes only \($0 >> 10) KiB on disk but claims more: its snapshot writes every page"
                } ?? ""
            return
                "\(user): the snapshots need up to \(ByteCountText.approximate(needed)) and the repository \(repo) has \(ByteCountText.approximate(free)) free\(why); nothing was written"
        case .claimedPastRoom(let user, let repo, let store, let claimed, let free):
            return
                "\(user): store \(store) reads as \(ByteCountText.approximate(claimed)) once its -wal is applied, more than the \(ByteCountText.approximate(free)) the repository \(repo) has free; nothing was copied, no archive was written"
        case .overUserCap(let user, let bytes, let cap, let item, let sparse):
            let why = sparse.map { "; \(item) is sparse: \($0)" } ?? ""
            return
                "\(user): with \(item) the user's data comes to \(ByteCountText.approximate(bytes)), over the \(ByteCountText.render(cap)) a user may have ([limits] bytes_per_user)\(why); nothing was written"
        case .memberClash(let user, let member, let first, let second):
            return
                "\(user): stores \(first) and \(second) would both be packed as \(member), and an archive with a member twice cannot be restored; no archive was written"
        case .reservedLabel(let label):
            return "the label \(label) is granary's own (safety and final archives); no archive was written"
        case .noUsers(let root):
            return "no user folders under \(root); nothing was backed up"
        case .unsupportedName(let user, let path):
            return "\(user): \(path) has a name that is not valid UTF-8; no archive was written"
        }
    }

}
