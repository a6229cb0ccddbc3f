import Foundation
import GranaryOwner

/// Why a restore, reset or recovery did not happen. Nothing live was changed when one of these is thrown
/// before the swap's commit (the journal rolls back what was started).
public enum RestoreError: GranaryError, Sendable {
    case noArchives(user: String)
    case archiveNotFound(user: String, name: String)
    case nothingBefore(user: String, time: String)
    /// The archive failed verification; `newestGood` is the newest one of the user that verifies.
    case verificationFailed(archive: String, reason: String, newestGood: String?, user: String?)
    /// The user has no folder under the root (and `--create` was not given). `create` is set
    /// when the repository has an archive to create the user from.
    case noUser(user: String, root: String, create: CreateHint?)
    /// `--create` from an archive that recorded no owner for the folder, without `--owner`.
    case ownerUnknown(user: String)
    /// `--undo` with no safety archive of the user.
    case nothingToUndo(user: String)
    /// The repository cannot take the safety archive; checked before anything live is touched.
    case repositoryUnusable(repository: String, reason: String)
    /// A file appeared beside a store while its owner was paused (before the commit point).
    case pausedOwnerWrote(file: String)
    /// The restore committed but a later step failed: `granary recover` finishes it.
    case unfinished(user: String, reason: String)
    case storesDiffer(user: String, detail: String)
    case modelMismatch(store: String, detail: String)
    case noOwner(store: String)
    case storeOpen(store: String, pids: [Int32])
    case differentFilesystem(staging: String, live: String)
    case leaseTooShort(store: String)
    case storeBusy(store: String, detail: String)
    case targetExists(path: String)
    case owner(ReopenError)
    /// The staging folder's filesystem has not the room (`unit`: bytes or files) the archive's
    /// files need; found before any is written.
    case noRoomToStage(folder: String, needed: Int64, free: Int64, unit: StagingRoom.Unit)

    public var description: String {
        switch self {
        case .noArchives(let user): return "no archives of \(user) in the repository"
        case .archiveNotFound(let user, let name): return "no archive \(name) of \(user)"
        case .nothingBefore(let user, let time): return "no archive of \(user) at or before \(time)"
        case .verificationFailed(let archive, let reason, _, _): return "\(archive) failed verification: \(reason); nothing was changed"
        case .noUser(let user, let root, _): return "no user \(user) under \(root)"
        case .ownerUnknown(let user):
            return "the archive does not record who owned \(user)'s folder (it was made by an older granary); nothing was changed"
        case .nothingToUndo(let user): return "no restore or reset of \(user) to undo: the repository has no safety archive of \(user)"
        case .repositoryUnusable(let repository, let reason):
            return "the repository \(repository) cannot take the safety archive: \(reason); nothing was changed"
        case .pausedOwnerWrote(let file):
            return "\(file) appeared while its store's owner was paused (it would have been applied to the restored store); nothing was changed"
        case .unfinished(let user, let reason):
            return "the restore of \(user) committed, but finishing it failed: \(reason); every store ends new once it is finished"
        case .storesDiffer(let user, let detail): return "the archive's stores differ from \(user)'s live stores: \(detail)"
        case .modelMismatch(let store, let detail): return "\(store): the archive's Core Data model differs from the live store's (\(detail))"
        case .noOwner(let store): return "nobody serves the reopen protocol for \(store)"
        case .storeOpen(let store, let pids):
            return "\(store) is open by process\(pids.count == 1 ? "" : "es") \(pids.map(String.init).joined(separator: ", "))"
        case .differentFilesystem(let staging, let live):
            return "the staging folder \(staging) is not on the filesystem of \(live); a rename cannot be atomic"
        case .leaseTooShort(let store): return "the pause lease of \(store)'s owner ran too short to commit safely; nothing was changed"
        case .storeBusy(let store, let detail): return "\(store) is busy: \(detail); nothing was changed"
        case .targetExists(let path): return "\(path) already exists"
        case .noRoomToStage(let folder, let needed, let free, let unit):
            let (need, have) = unit == .bytes
                ? (ByteCountText.approximate(needed), ByteCountText.approximate(free)) : ("\(needed) files", "room for \(free)")
            return "staging the archive's files needs \(need) in \(folder), whose filesystem has \(have) free; nothing was changed"
        // Thrown only before the commit point: the owner's refusal or fault changed nothing.
        case .owner(let error): return error.description.contains("nothing was changed") ? error.description : error.description + "; nothing was changed"
        }
    }

    public var status: ExitStatus {
        switch self {
        case .noArchives, .archiveNotFound, .nothingBefore: return .notFound
        case .verificationFailed, .storesDiffer, .modelMismatch: return .dataError
        case .nothingToUndo, .noUser: return .notFound
        case .ownerUnknown: return .usage
        case .pausedOwnerWrote: return .dataError
        case .repositoryUnusable: return .cannotCreate
        case .unfinished: return .ioError
        case .noOwner, .storeOpen, .leaseTooShort, .storeBusy: return .temporaryFailure
        case .differentFilesystem, .targetExists: return .cannotCreate
        case .noRoomToStage: return .ioError
        case .owner(let error): return error.status
        }
    }

    public var hint: String? {
        switch self {
        case .noArchives(let user): return "granary backup \(ShellQuoting.word(user))"
        case .archiveNotFound(let user, _), .nothingBefore(let user, _): return "granary list \(ShellQuoting.word(user))"
        case .verificationFailed(_, _, let good, let user):
            if let good, let user {
                return "granary restore \(ShellQuoting.word(user)) \(ShellQuoting.word((good as NSString).lastPathComponent)) (the newest archive that verifies)"
            }
            return user.map { "no archive of \($0) verifies; check the repository with granary verify --user \(ShellQuoting.word($0))" }
                ?? "check the repository with granary verify --all"
        case .nothingToUndo(let user): return "granary list \(ShellQuoting.word(user))"
        case .ownerUnknown(let user): return "granary restore \(ShellQuoting.word(user)) --create --owner USER[:GROUP]"
        case .noUser(_, _, let create): return create.map { $0.command + " (creates the folder and restores into it)" } ?? "granary users lists the users under the root"
        case .repositoryUnusable: return "make room in the repository or fix its permissions, or pass --no-safety-archive"
        case .unfinished(let user, _): return "granary recover \(ShellQuoting.word(user))"
        case .pausedOwnerWrote: return "the owner must not write its store while paused (granary-reopen(7)); fix or stop it, then run again"
        case .storesDiffer, .modelMismatch: return "add --force if this is really the archive you want"
        case .noOwner: return "use --method online, or start the owner"
        case .storeOpen: return "use --method online (or auto), or stop the processes first"
        case .differentFilesystem: return "keep the root's .granary folder on the users' filesystem, or restore with --to DIR"
        case .leaseTooShort, .storeBusy: return "run again"
        case .targetExists: return "choose an empty folder for --to"
        case .noRoomToStage(let folder, _, _, _):
            return "free space on the filesystem of \(folder) (every file is counted at its full length), or restore with --to a folder on another filesystem"
        case .owner(let error): return error.hint
        }
    }
}

/// How a missing user would be created from the repository (`restore --create`).
public struct CreateHint: Sendable, Equatable {
    /// The command line: `granary restore USER [ARCHIVE] --create --owner USER:GROUP`.
    public let command: String
    /// `--owner`'s value: the owner the archive recorded, as this host names it (`USER:GROUP`),
    /// or nil when the archive recorded none (then `--owner` must be given).
    public let owner: String?
}

extension ReopenError: GranaryError {
    public var status: ExitStatus {
        switch self {
        case .storeNotFound: return .notFound
        case .untrustedPeer: return .dataError
        case .socket: return .ioError
        case .alreadyOwned, .refused, .timedOut, .unreachable, .protocolViolation: return .temporaryFailure
        }
    }

    public var hint: String? {
        switch self {
        case .timedOut: return "run again when the owner is less busy, or raise --owner-timeout"
        case .unreachable: return "use --method online (or auto), or stop the process that holds the socket"
        case .untrustedPeer: return "stop the process that poses as the owner"
        case .refused, .protocolViolation: return "run again; see the owner's log"
        default: return nil
        }
    }
}
