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
    /// The user has no folder under the root (and the request did not ask to create it). `create` is set
    /// when the repository has an archive to create the user from.
    case noUser(user: String, root: String, create: CreateSource?)
    /// Creating the folder from an archive that recorded no owner for it, with no owner given.
    case ownerUnknown(user: String)
    /// An undo with no safety archive of the user.
    case nothingToUndo(user: String)
    /// The repository cannot take the safety archive; checked before anything live is touched.
    case repositoryUnusable(repository: String, reason: String)
    /// A file appeared beside a store while its owner was paused (before the commit point).
    case pausedOwnerWrote(file: String)
    /// The restore committed but a later step failed: `granary recover` finishes it.
    case unfinished(user: String, reason: String)
    /// A signal arrived after the commit point, while the restore was being finished (the online
    /// copies, the safety archive): the restore stands, and `granary recover` finishes it.
    case interruptedAfterCommit(user: String, signal: String)
    case storesDiffer(user: String, detail: String)
    case modelMismatch(store: String, detail: String)
    case noOwner(store: String)
    case storeOpen(store: String, pids: [Int32])
    case differentFilesystem(staging: String, live: String)
    /// `slowest`: the store whose owner took longest to answer PAUSE, and how long (ms), when
    /// that was another store: its wait is what used up this store's lease.
    case leaseTooShort(store: String, slowest: (store: String, milliseconds: Int64)? = nil)
    case storeBusy(store: String, detail: String)
    /// An in-place restore would keep a live external-data file (`file`, of store `store`) whose
    /// bytes differ from the archive's file of that name: the store's owner rewrote an attachment
    /// in place. Permanent (issue 46): running again never helps.
    case externalDataChanged(store: String, file: String)
    /// Refused before the commit (granary changed nothing), but the live database is no longer the
    /// file that was checked: another process replaced it meanwhile.
    case replacedByOthers(store: String, reason: String)
    case targetExists(path: String)
    case owner(ReopenError)
    /// The staging folder's filesystem has not the room (`unit`: bytes or files) the archive's
    /// files need; found before any is written.
    case noRoomToStage(folder: String, needed: Int64, free: Int64, unit: StagingRoom.Unit)
    /// The archive is named by its repository, and the restorer was given none.
    case noRepository
    /// A reset of a user whose folder holds no SQLite store: there is nothing to reset.
    case nothingToReset(user: String, folder: String)

    public var description: String {
        switch self {
        case .noRepository: return "no repository is set"
        case .nothingToReset(let user, let folder):
            return "\(user): no SQLite store found in \(folder); nothing was reset"
        case .noArchives(let user): return "no archives of \(user) in the repository"
        case .archiveNotFound(let user, let name): return "no archive \(name) of \(user)"
        case .nothingBefore(let user, let time): return "no archive of \(user) at or before \(time)"
        case .verificationFailed(let archive, let reason, _, _):
            return "\(archive) failed verification: \(reason); nothing was changed"
        case .noUser(let user, let root, _): return "no user \(user) under \(root)"
        case .ownerUnknown(let user):
            return
                "the archive does not record who owned \(user)'s folder (it was made by an older granary); nothing was changed"
        case .nothingToUndo(let user):
            return "no restore or reset of \(user) to undo: the repository has no safety archive of \(user)"
        case .repositoryUnusable(let repository, let reason):
            return "the repository \(repository) cannot take the safety archive: \(reason); nothing was changed"
        case .pausedOwnerWrote(let file):
            return
                "\(file) appeared while its store's owner was paused (it would have been applied to the restored store); nothing was changed"
        case .unfinished(let user, let reason):
            return
                "the restore of \(user) committed, but finishing it failed: \(reason); every store ends new once it is finished"
        case .interruptedAfterCommit(let user, let signal):
            return
                "interrupted by \(signal) after the restore of \(user) committed: the restore stands, and finishing it is left to granary recover"
        case .storesDiffer(let user, let detail):
            return "the archive's stores differ from \(user)'s live stores: \(detail)"
        case .modelMismatch(let store, let detail):
            return "\(store): the archive's Core Data model differs from the live store's (\(detail))"
        case .noOwner(let store): return "nobody serves the reopen protocol for \(store)"
        case .storeOpen(let store, let pids):
            return
                "\(store) is open by process\(pids.count == 1 ? "" : "es") \(pids.map(String.init).joined(separator: ", "))"
        case .differentFilesystem(let staging, let live):
            return "the staging folder \(staging) is not on the filesystem of \(live); a rename cannot be atomic"
        case .leaseTooShort(let store, let slowest):
            let why =
                slowest.map {
                    " (it was used up waiting for the owner of \($0.store), which took \($0.milliseconds) ms to answer PAUSE)"
                } ?? ""
            return "the pause lease of \(store)'s owner ran too short to commit safely\(why); nothing was changed"
        case .storeBusy(let store, let detail): return "\(store) is busy: \(detail); nothing was changed"
        case .externalDataChanged(let store, let file):
            return
                "\(store): its live external-data file \(file) holds other bytes than the archive's file of that name (the owner rewrote it in place), so an in-place restore cannot keep both; nothing was changed"
        case .replacedByOthers(let store, let reason):
            return
                "\(reason); granary changed nothing, but \(store) is no longer the file it was when the restore began (another process replaced it)"
        case .targetExists(let path): return "\(path) already exists"
        case .noRoomToStage(let folder, let needed, let free, let unit):
            let (need, have) =
                unit == .bytes
                ? (ByteCountText.approximate(needed), ByteCountText.approximate(free))
                : ("\(needed) files", "room for \(free)")
            return
                "staging the archive's files needs \(need) in \(folder), whose filesystem has \(have) free; nothing was changed"
        // Thrown only before the commit point: the owner's refusal or fault changed nothing.
        case .owner(let error):
            return error.description.contains("nothing was changed")
                ? error.description : error.description + "; nothing was changed"
        }
    }

}

/// A missing user that an archive could create (`RestoreRequest.create`).
public struct CreateSource: Sendable, Equatable {
    /// The archive it would come from (its file name in the repository, or the path given).
    public let archive: String
    /// The owner the archive recorded, as this host names it (`USER:GROUP`), or nil when the
    /// archive recorded none (then the owner must be given).
    public let owner: String?
}

extension ReopenError: GranaryError {

}
