/// The exit codes (granary(1), EXIT STATUS), in one place. The executable maps every error to one of these.
public enum ExitStatus: Int32, Sendable, CaseIterable {
    /// Everything asked for was done.
    case success = 0
    /// Some items of a multi-item run failed; others succeeded.
    case partialFailure = 1
    /// The command line or configuration is wrong.
    case usage = 64
    /// Data error: a corrupt archive or store, or verification failed.
    case dataError = 65
    /// A user, store or archive was not found.
    case notFound = 66
    /// Output could not be created.
    case cannotCreate = 73
    /// Reading or writing failed.
    case ioError = 74
    /// Temporary: a lock is held, an owner did not acknowledge, a store is busy. Retry later.
    case temporaryFailure = 75
    /// Ended by SIGHUP (the terminal went away), cleaned up like an interruption.
    case hangup = 129
    /// Interrupted by SIGINT or SIGTERM.
    case interrupted = 130
}

/// An error that knows its exit status and, where one helps, what the user should try.
///
/// `description` is one line naming the thing concerned; `hint` is printed after it as
/// "Try: …" (Litestream's habit).
public protocol GranaryError: Error, CustomStringConvertible {
    /// The exit code a script sees.
    var status: ExitStatus { get }
    /// What to do about it, when there is something to do.
    var hint: String? { get }
}

extension GranaryError {
    public var hint: String? { nil }
}

extension SQLiteError: GranaryError {
    public var status: ExitStatus {
        switch kind {
        case .cannotOpen: return .notFound
        case .notADatabase, .corrupt, .refused, .overLimit: return .dataError
        case .busy: return .temporaryFailure
        case .readOnly: return .cannotCreate
        case .full, .ioError, .other: return .ioError
        }
    }

    public var hint: String? {
        switch kind {
        case .busy: return "run again when the store is less busy, or raise the busy timeout"
        case .full: return "free space on the filesystem that holds \(path ?? "the store")"
        case .corrupt, .notADatabase:
            return path.map { "granary inspect \(ShellQuoting.word($0)) to see what is wrong; restore from a verified archive" }
                ?? "restore the store from a verified archive"
        case .refused: return "remove or replace that file: a store's companions must be regular files with one link, owned by the folder's owner"
        case .overLimit: return limit?.hint
        default: return nil
        }
    }
}
