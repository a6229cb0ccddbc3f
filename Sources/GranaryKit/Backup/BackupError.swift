/// Why a user's backup failed (SQLite, archive and filesystem errors keep their own types).
public enum BackupError: GranaryError, Sendable {
    /// A snapshot failed its check: it is not archived.
    case checkFailed(user: String, store: String, problem: String)
    /// The rollback-mode store kept changing and could not be read, even under a read lock.
    case storeBusy(user: String, store: String)
    /// The repository filesystem filled up; nothing was published.
    case diskFull(repo: String, user: String)
    /// Files or folders in the user's folder that cannot be read: they may be stores.
    case unreadable(user: String, paths: [String])

    public var description: String {
        switch self {
        case .checkFailed(let user, let store, let problem):
            return "\(user): store \(store) failed its check: \(problem); no archive was written"
        case .storeBusy(let user, let store):
            return "\(user): store \(store) stayed busy; no archive was written"
        case .unreadable(let user, let paths):
            return "\(user): cannot read \(paths.prefix(3).joined(separator: ", "))\(paths.count > 3 ? " and \(paths.count - 3) more" : ""), which may \(paths.count == 1 ? "be a store" : "be stores"); no archive was written"
        case .diskFull(let repo, let user):
            return "\(user): the repository \(repo) is full; no archive was written"
        }
    }

    public var status: ExitStatus {
        switch self {
        case .checkFailed: return .dataError
        case .storeBusy: return .temporaryFailure
        case .diskFull, .unreadable: return .ioError
        }
    }

    public var hint: String? {
        switch self {
        case .checkFailed(_, let store, _): return "granary inspect \(store); restore the user from a verified archive"
        case .storeBusy: return "run the backup again later"
        case .unreadable: return "run granary as root or as the owner of those files, or fix their permissions"
        case .diskFull(let repo, _): return "free space in \(repo) (granary prune) or point --repo elsewhere, then run again"
        }
    }
}
