import Foundation
import GranaryKit
import GranaryOwner

/// The exit codes (granary(1), EXIT STATUS), in one place: the command line maps every error to one.
enum ExitStatus: Int32, Sendable, CaseIterable {
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

/// What the command line makes of an error: the exit code a script sees and, where one helps,
/// what the user should try ("Try: …", after the one-line description).
protocol CommandLineError {
    var status: ExitStatus { get }
    var hint: String? { get }
}

extension CommandLineError {
    var hint: String? { nil }
}

extension GranaryError {
    /// The exit status of any error the core throws (an error the command line gives none to is
    /// an I/O error: 74).
    var exitStatus: ExitStatus { (self as? any CommandLineError)?.status ?? .ioError }
    /// The hint printed after the error, if any.
    var advice: String? { (self as? any CommandLineError)?.hint }
}

// The exit status and the hint of each of GranaryKit's errors: the command line's business,
// so the core's errors carry only what happened (typed values and a plain description).

// Sources/GranaryKit/Restore/RestoreError.swift
extension RestoreError: CommandLineError {
    var status: ExitStatus {
        switch self {
        case .noArchives, .archiveNotFound, .nothingBefore: return .notFound
        case .verificationFailed, .storesDiffer, .modelMismatch, .nothingToReset: return .dataError
        case .nothingToUndo, .noUser: return .notFound
        case .ownerUnknown: return .usage
        case .pausedOwnerWrote: return .dataError
        case .repositoryUnusable: return .cannotCreate
        case .unfinished: return .ioError
        case .interruptedAfterCommit: return Interruption.signal == SIGHUP ? .hangup : .interrupted
        case .noOwner, .storeOpen, .leaseTooShort, .storeBusy, .replacedByOthers: return .temporaryFailure
        case .externalDataChanged: return .dataError
        case .differentFilesystem, .targetExists: return .cannotCreate
        case .noRoomToStage: return .ioError
        case .noRepository: return .usage
        case .owner(let error): return error.status
        }
    }
    var hint: String? {
        switch self {
        case .noArchives(let user):
            return
                "\(Hint.command("granary", "backup", user)); granary list --all-hosts shows other hosts' archives and those of no host (granary adopt gives these theirs)"
        case .archiveNotFound(let user, _), .nothingBefore(let user, _):
            return Hint.command("granary", "list", user)
        case .verificationFailed(_, _, let good, let user):
            if let good, let user {
                // The newest archive that verifies.
                return Hint.command("granary", "restore", user, PathText.lastComponent(good))
            }
            return user.map {
                "no archive of \(Hint.name($0)) verifies; check the repository with granary verify --user \(ShellQuoting.word($0))"
            }
                ?? "check the repository with granary verify --all"
        case .nothingToUndo(let user): return Hint.command("granary", "list", user)
        case .ownerUnknown(let user): return "granary restore \(ShellQuoting.word(user)) --create --owner USER[:GROUP]"
        case .noUser(let user, _, let create):
            return create.map { source in
                // Creates the folder and restores into it.
                source.owner.map { owner in
                    Hint.command("granary", "restore", user, source.archive, "--create", "--owner", owner)
                }
                    ?? "granary restore \(ShellQuoting.word(user)) \(ShellQuoting.word(source.archive)) --create --owner USER (creates the folder and restores into it)"
            } ?? "granary users lists the users under the root"
        case .noRepository: return "pass --repo DIR or set GRANARY_REPO"
        case .nothingToReset: return "granary users shows what granary sees in each user's folder"
        case .repositoryUnusable:
            return "make room in the repository or fix its permissions, or pass --no-safety-archive"
        case .unfinished(let user, _), .interruptedAfterCommit(let user, _):
            return Hint.command("granary", "recover", user)
        case .pausedOwnerWrote:
            return "the owner must not write its store while paused (granary-reopen(7)); fix or stop it, then run again"
        case .storesDiffer, .modelMismatch: return "add --force if this is really the archive you want"
        case .noOwner: return "use --method online, or start the owner"
        case .storeOpen: return "use --method online (or auto), or stop the processes first"
        case .differentFilesystem:
            return "keep the root's .granary folder on the users' filesystem, or restore with --to DIR"
        case .storeBusy(_, let detail) where detail.hasPrefix("still open by process"):
            // Running again cannot help while that process keeps the store open.
            return
                "stop the process named above (or make it close the store), then run again; --method online works while others have the store open"
        case .leaseTooShort, .storeBusy, .replacedByOthers: return "run again"
        case .externalDataChanged:
            return
                "running again will not help: restore into another folder with --to DIR and copy what you need, or have the owner app remove or rename that file (it is its attachment), then restore again"
        case .targetExists: return "choose an empty folder for --to"
        case .noRoomToStage(let folder, _, _, _):
            return
                "free space on the filesystem of \(Hint.name(folder)) (every file is counted at its full length), or restore with --to a folder on another filesystem"
        case .owner(let error): return error.hint
        }
    }
}

// Sources/GranaryKit/Restore/RestoreError.swift
extension ReopenError: CommandLineError {
    var status: ExitStatus {
        switch self {
        case .storeNotFound: return .notFound
        case .untrustedPeer: return .dataError
        case .socket: return .ioError
        case .alreadyOwned, .refused, .timedOut, .unreachable, .protocolViolation: return .temporaryFailure
        }
    }
    var hint: String? {
        switch self {
        case .timedOut: return "run again when the owner is less busy, or raise --owner-timeout"
        case .unreachable: return "use --method online (or auto), or stop the process that holds the socket"
        case .untrustedPeer: return "stop the process that poses as the owner"
        case .refused(_, let reason) where reason.hasPrefix("unsupported-version"):
            return "update granary or the app so that both speak one version of the reopen protocol (granary-reopen(7))"
        case .refused: return "run again; see the owner's log"
        case .protocolViolation:
            // Running again meets the same owner: it is the owner that must change.
            return "see the owner's log, and check the owner with granary-reopen-check (granary-reopen(7))"
        default: return nil
        }
    }
}

// Sources/GranaryKit/Archive/ArchiveError.swift
extension ArchiveError: CommandLineError {
    var status: ExitStatus {
        switch self {
        case .cannotOpen: return .notFound
        case .malformed, .tooLarge, .unsafeMember: return .dataError
        case .writeFailed(_, _, let code):
            return FileSystemError("write", path: "", code: code).status == .cannotCreate ? .cannotCreate : .ioError
        }
    }
    var hint: String? {
        switch self {
        case .writeFailed(let path, _, let code):
            return FileSystemError("write", path: path, code: code).hint
        case .malformed, .tooLarge, .unsafeMember:
            return "the archive is damaged or not one of granary's; use another archive (granary list)"
        case .cannotOpen: return nil
        }
    }
}

// Sources/GranaryKit/Archive/Manifest.swift
extension ManifestError: CommandLineError {
    var status: ExitStatus { .dataError }
    var hint: String? {
        switch self {
        case .unsupportedFormat(_, let format): return ManifestFormat.hint(format)
        case .tooLarge:
            return
                "the user's folder holds more stores or Core Data entities than one archive can describe; see them with granary users and granary inspect STORE"
        default: return "the archive is damaged or not one of granary's; use another archive (granary list)"
        }
    }
}

// Sources/GranaryKit/SQLite/EmptyStore.swift
extension EmptyStoreError: CommandLineError {
    var status: ExitStatus { .dataError }
    // The store's schema, read only.
    var hint: String? { Hint.command("sqlite3", "-readonly", store.hasPrefix("-") ? "./" + store : store, ".schema") }
}

// Sources/GranaryKit/Support/Interruption.swift
extension InterruptedError: CommandLineError {
    var status: ExitStatus { signal == SIGHUP ? .hangup : .interrupted }
}

// Sources/GranaryKit/Support/FileSystem.swift
extension FileSystemError: CommandLineError {
    var status: ExitStatus {
        switch code {
        case ENOENT, ENOTDIR: return .notFound
        case EACCES, EPERM, EROFS, EEXIST: return .cannotCreate
        case EINTR: return .interrupted
        default: return .ioError
        }
    }
    var hint: String? {
        switch code {
        case ENOSPC, EDQUOT, EFBIG: return "free space on the filesystem that holds \(Hint.name(path)), then run again"
        case EACCES, EPERM: return "check the owner and mode of \(Hint.name(path)), or run as the user who owns it"
        case EROFS: return "\(Hint.name(path)) is on a read-only filesystem; choose another location"
        default: return nil
        }
    }
}

// Sources/GranaryKit/Support/OutsideFile.swift
extension OutsideFile.Refused: CommandLineError {
    var status: ExitStatus { .cannotCreate }
    var hint: String? {
        "name a file in a folder reached through folders only root writes (links only in those), such as /var/lib/prometheus/node-exporter/granary.prom"
    }
}

// Sources/GranaryKit/Support/SHA256Hex.swift
extension GrownFileError: CommandLineError {
    var status: ExitStatus { .dataError }
    var hint: String? {
        "look at \(Hint.name(path)): an app does not grow a file while it is backed up; run the backup again once it has settled"
    }
}

extension CopyTimeError: CommandLineError {
    var status: ExitStatus { .dataError }
    var hint: String? {
        "look at \(Hint.name(path)) (a file with a hole of terabytes reads for a long time); if it is genuine, raise [limits] time or time_per_gib in the configuration (granary.toml(5))"
    }
}

// Sources/GranaryKit/Support/ConfigFile.swift
extension ConfigError: CommandLineError {
    var status: ExitStatus { .usage }
    var hint: String? {
        switch self {
        case .unreadable: return "check the path given to --config or GRANARY_CONFIG"
        case .untrusted(let path, _):
            // The folder that is open to others, when it is one (fixing the file would not do),
            // else the file.
            let target =
                TrustedPath.untrustedFolder(
                    on: path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path) ?? path
            return Hint.commands([["chown", "root", "--", target], ["chmod", "go-w", "--", target]])
        case .unknownKey(_, _, let key):
            // Each table's own keys, from the one list of keys.
            if let dot = key.firstIndex(of: "."), let table = ConfigTable.named(String(key[..<dot])) {
                let brackets = table.isArray ? ("[[", "]]") : ("[", "]")
                return
                    "the \(brackets.0)\(table.name)\(brackets.1) keys are \(ConfigKey.names(in: table.name).joined(separator: ", ")); see granary.toml(5)"
            }
            // A table's key at the top level: a `#keep_daily` uncommented without `#[retention]`.
            if let row = ConfigKey.all.first(where: { $0.table != nil && $0.name == key }), let table = row.table {
                let brackets = ConfigTable.named(table)?.isArray == true ? ("[[", "]]") : ("[", "]")
                return
                    "\(key) is a key of \(brackets.0)\(table)\(brackets.1): put it below a \(brackets.0)\(table)\(brackets.1) line (uncomment that line too); see granary.toml(5)"
            }
            return "the keys are \(ConfigKey.names(in: nil).joined(separator: ", ")); see granary.toml(5)"
        default: return "see granary.toml(5)"
        }
    }
}

// Sources/GranaryKit/SQLite/Database.swift
extension SQLiteError: CommandLineError {
    var status: ExitStatus {
        // What the store's schema asked for and SQLite refused is the store's doing (65), not an I/O error.
        if isNotAuthorized && kind == .other { return .dataError }
        switch kind {
        case .cannotOpen: return .notFound
        case .notADatabase, .corrupt, .refused, .overLimit: return .dataError
        case .busy: return .temporaryFailure
        // A hot journal a killed writer left (SQLITE_READONLY_ROLLBACK): the store needs a writer
        // to roll it back; it does not pass with time (issue 46).
        case .readOnly where isHotJournal: return .dataError
        case .readOnly: return .cannotCreate
        case .full, .ioError, .other: return .ioError
        }
    }
    var hint: String? {
        if isNotAuthorized && kind == .other {
            return
                "the store's schema asks SQLite for something granary does not allow (such as load_extension); look at its schema with sqlite3 -readonly"
        }
        if isHotJournal {
            let store = path.map(ShellQuoting.word) ?? "STORE"
            return
                "let SQLite roll the journal back: start the app that owns the store (it does so when it opens it), or, with the app stopped, run as the store's owner: sqlite3 \(store) 'PRAGMA quick_check'; then back up again"
        }
        switch kind {
        case .busy: return "run again when the store is less busy, or raise the busy timeout"
        case .full: return "free space on the filesystem that holds \(path.map(Hint.name) ?? "the store")"
        case .corrupt, .notADatabase:
            return path.map {
                "granary inspect \(ShellQuoting.word($0)) to see what is wrong; restore from a verified archive"
            }
                ?? "restore the store from a verified archive"
        case .refused:
            return
                "remove or replace that file: a store's companions must be regular files with one link, owned by the folder's owner"
        case .overLimit: return limit?.hint
        default: return nil
        }
    }
}

// Sources/GranaryKit/Support/Settings.swift
extension SettingsError: CommandLineError {
    var status: ExitStatus { .usage }
    var hint: String? {
        switch self {
        case .missing(_, let flag, let variable, let key, let config):
            return
                "pass \(flag) \(flag == "--root" ? "DIR" : "LOCATION"), set \(variable), or write \(key) = \"…\" in \(config)"
        case .invalid: return nil
        }
    }
}

// Sources/GranaryKit/Support/UserLock.swift
extension LockError: CommandLineError {
    var status: ExitStatus {
        switch self {
        case .held, .followHeld: return .temporaryFailure
        case .cannotCreate(_, let underlying): return underlying.status
        case .interrupted: return (Interruption.signal == SIGHUP ? ExitStatus.hangup : .interrupted)
        }
    }
    var hint: String? {
        switch self {
        case .held: return "wait for it to finish, or wait longer with --lock-timeout (such as 10min)"
        case .followHeld:
            return
                "one follow per repository and host: stop the other first (systemctl stop granary-follow), or follow into another --repo"
        case .cannotCreate(_, let underlying): return underlying.hint
        case .interrupted: return nil
        }
    }
}

// Sources/GranaryKit/Repository/Repository.swift
extension RepositoryError: CommandLineError {
    var status: ExitStatus {
        switch self {
        case .notARepository, .missing: return .notFound
        case .parentMissing, .notEmpty, .unsafe, .planted, .cannotCreate, .denied, .noRoom, .squatted:
            return .cannotCreate
        // No rclone: the configuration asks for what this machine cannot do (EX_UNAVAILABLE, 69,
        // is not one of granary's codes; usage is the closest: fix the setup, then run again).
        case .overlapsRoot, .badLocation, .rcloneMissing, .untrustedFile, .sameLocation: return .usage
        case .nameTaken: return .cannotCreate
        case .transport(_, _, let temporary): return temporary ? .temporaryFailure : .ioError
        case .local(let error): return error.status
        }
    }
    var hint: String? {
        switch self {
        case .notARepository(let location):
            // A typo or an unmounted disk is fixed otherwise; the message says what is missing.
            return Hint.command("granary", "init", location)
        case .notEmpty:
            return "name an empty or new folder (granary init /var/backups/granary)"
        case .parentMissing(let path):
            return "create \(Hint.name(PathText.parent(path))) first, or check --repo for a typo"
        case .unsafe(let path, _):
            return Hint.commands([["chown", "root", "--", path], ["chmod", "0700", "--", path]])
        case .planted(let path, _): return "look at \(Hint.name(path)) and remove it (rm -r), or choose another --repo"
        case .overlapsRoot: return "choose a --repo outside the root, for example /var/backups/granary"
        case .cannotCreate(_, let error): return error.hint
        case .badLocation:
            return
                "a repository is a local folder, s3:BUCKET/PREFIX or rclone:REMOTE:PATH (see granary(1), REPOSITORIES)"
        case .rcloneMissing: return Hint.command("apt-get", "install", "rclone")
        case .transport(_, _, let temporary):
            return temporary ? "run again later (cron may retry)" : "check the network and the remote, then run again"
        case .missing: return "check the location (the bucket must exist) and --repo"
        case .denied:
            return
                "check the credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, or the rclone remote's) and the bucket's policy"
        case .local(let error): return error.hint
        case .noRoom(let path, _, _): return "free space in \(Hint.name(path))"
        case .untrustedFile: return nil
        case .squatted: return nil
        case .nameTaken(let object):
            return "look at \(Hint.name(object)) (granary verify names whose archive it is)"
        case .sameLocation:
            return "remove it from the configuration's [[mirror]] tables (or --mirror), or name another location"
        }
    }
}

// Sources/GranaryKit/Users/UserID.swift
extension UserError: CommandLineError {
    var status: ExitStatus {
        switch self {
        case .invalidID: return .usage
        case .notFound, .rootMissing: return .notFound
        case .notAFolder: return .dataError
        case .unreadableRoot: return .ioError
        case .unsafeRoot: return .cannotCreate
        }
    }
    var hint: String? {
        switch self {
        case .invalidID: return "a user id is the name of a folder under the root, such as alice@example.com"
        case .notFound: return "granary users lists the users under the root"
        case .rootMissing: return "pass --root DIR or set GRANARY_ROOT to the folder that holds one folder per user"
        case .notAFolder: return "a user is a real folder directly under the root; granary does not follow links"
        case .unreadableRoot: return "check the root folder's permissions"
        case .unsafeRoot(let root, _):
            return Hint.commands([["chown", "root", "--", root], ["chmod", "go-w", "--", root]])
        }
    }
}

// Sources/GranaryKit/Users/Folder.swift
extension FolderError: CommandLineError {
    var status: ExitStatus {
        if case .system(let error) = self { return error.status }
        return .dataError
    }
    var hint: String? {
        switch self {
        case .system(let error): return error.hint
        // Never "chown it": the file may be a hard link to another's file (root's, say), and giving
        // it to the folder's owner would give them that file.
        case .notOwned, .ownerCannotOpen:
            return
                "look at the file (ls -li): a file of another user, or a second name of another's file, does not belong there; move or remove it"
        case .differentOwners: return "nothing was moved; this is a bug in granary, please report it"
        default: return "remove or replace the file; it is not part of a store granary can take"
        }
    }
}

// Sources/GranaryKit/Lifecycle/Retirement.swift
extension RetireError: CommandLineError {
    var status: ExitStatus {
        switch self {
        case .inUse, .changed: return .temporaryFailure
        case .alreadyRetired, .noStores: return .notFound
        case .stateInTheWay: return .cannotCreate
        case .specialFiles: return .dataError
        }
    }
    var hint: String? {
        switch self {
        case .inUse, .changed: return "stop the app's use of this user (its owner process), then run again"
        case .alreadyRetired(let user, _): return "granary restore \(ShellQuoting.word(user)) --create brings it back"
        case .stateInTheWay: return "look at it, move it away, then run again"
        case .noStores(_, let folder):
            return
                "granary only retires users it can archive; remove \(ShellQuoting.word(folder)) by hand if it should go"
        case .specialFiles: return "remove or replace them, or add --discard-others to retire without them"
        }
    }
}

// Sources/GranaryKit/Backup/BackupOperation.swift
extension MirrorError: CommandLineError {
    var status: ExitStatus { .cannotCreate }
    var hint: String? {
        switch self {
        case .nameTaken(let mirror, _):
            return "a mirror takes the archives of one primary repository; check the mirrors of \(Hint.name(mirror))"
        }
    }
}

// Sources/GranaryKit/Backup/BackupError.swift
extension BackupError: CommandLineError {
    var status: ExitStatus {
        switch self {
        case .checkFailed, .noStores, .unsupportedName, .overUserCap, .memberClash: return .dataError
        case .noUsers: return .notFound
        case .nothingToBackUp: return .success
        case .noRoom, .claimedPastRoom: return .ioError
        case .reservedLabel: return .usage
        case .storeBusy: return .temporaryFailure
        case .diskFull, .unreadable: return .ioError
        }
    }
    var hint: String? {
        switch self {
        case .checkFailed(_, let store, _, let path):
            return "granary inspect \(ShellQuoting.word(path ?? store)); restore the user from a verified archive"
        case .storeBusy: return "run the backup again later"
        case .unreadable: return "run granary as root or as the owner of those files, or fix their permissions"
        case .diskFull(let repo, _):
            return "free space in \(Hint.name(repo)) (granary prune) or point --repo elsewhere, then run again"
        case .noStores: return "granary users shows what granary sees in each user's folder"
        case .nothingToBackUp: return nil
        case .unsupportedName: return "rename the file"
        case .memberClash(_, _, _, let second):
            return
                "rename or move \(Hint.name(second)) (a copy an app left beside its store shares the store's attachments folder), then run again"
        case .reservedLabel: return "choose another label"
        case .overUserCap(_, _, _, _, let sparse):
            return sparse != nil
                ? "look at that file: a sparse file is no store or attachment an app wrote"
                : "if the data is honest, raise bytes_per_user under [limits] in granary.toml(5)"
        case .noRoom(_, let repo, _, _, _, let sparse):
            return sparse != nil
                ? "look at that store: a sparse SQLite file is no store an app wrote"
                : "free space in \(Hint.name(repo)) (granary prune), then run again"
        case .noUsers: return "check --root (is the volume mounted?); granary users lists what granary sees"
        case .claimedPastRoom(_, let repo, let store, _, _):
            return
                "look at \(Hint.name(store)) and its -wal (granary users shows both; a -wal that claims pages it does not hold is no store an app wrote), or free space in \(Hint.name(repo))"
        }
    }
}

// Sources/GranaryKit/Backup/BackupRun.swift
extension UnexpectedError: CommandLineError {
    var status: ExitStatus { .ioError }
}

// Sources/GranaryKit/Catalogue/ArchiveVerifier.swift
extension VerificationFailure: CommandLineError {
    var status: ExitStatus { .dataError }
    var hint: String? {
        limit?.hint ?? unreadableFormat.map(ManifestFormat.hint)
            ?? "the archive is damaged; restore from another one (granary list shows which verify)"
    }
}

// Sources/GranaryKit/Delta/DeltaMerge.swift
extension MergeFailure: CommandLineError {
    var status: ExitStatus { (underlying as? any CommandLineError)?.status ?? .ioError }
    var hint: String? {
        "granary verify --chain \(user)/\(name) names the damaged archive; granary prune --no-merge prunes without merging"
    }
}

// Sources/GranaryKit/Delta/FollowedChanges.swift
extension FollowedCrossCheckFailure: CommandLineError {
    /// A delta that would have left out a changed page: nothing is published, as for a failed check.
    var status: ExitStatus { .dataError }
    var hint: String? { "granary backup --full USER makes a full, without follow's record, until it is fixed" }
}

// Sources/GranaryKit/Catalogue/Inspector.swift
extension InspectError: CommandLineError {
    var status: ExitStatus {
        if case .missing = kind { return .notFound }
        return .dataError
    }
    var hint: String? {
        switch kind {
        case .missing:
            return
                "name a store by its path (granary users lists each user's stores), or an archive of the repository as USER/NAME"
        case .unreadable:
            return "inspect takes a SQLite store, a granary archive, or an archive of the repository as USER/NAME"
        case .damagedStore:
            return "the store is damaged; restore it from an archive that verifies (granary list shows them)"
        case .overLimit(let limit): return limit.hint
        }
    }
}

// Sources/GranaryKit/Catalogue/ArchiveRemoval.swift
extension RemovalRefused: CommandLineError {
    var status: ExitStatus { .usage }
    var hint: String? {
        neededBy != nil
            ? "delete the deltas built on it first, or pass --force if you really mean it"
            : "pass --force if you really mean it, or verify a newer archive first"
    }
}

// Sources/GranaryKit/Catalogue/ArchiveLocator.swift
extension ArchiveNotFound: CommandLineError {
    var status: ExitStatus { .notFound }
    var hint: String? {
        if let otherHost { return "act on host \(otherHost)'s archives with --host \(ShellQuoting.word(otherHost))" }
        return suggestions.isEmpty
            ? "granary list shows the archives" : "did you mean " + suggestions.joined(separator: " or ") + "?"
    }
}

// Sources/GranaryKit/Catalogue/ArchiveLocator.swift
extension AmbiguousArchive: CommandLineError {
    var status: ExitStatus { .usage }
    var hint: String? { matches.first.map { "name one archive in full, such as \($0)" } ?? "name one archive in full" }
}

// Sources/GranaryKit/Catalogue/ArchiveLocator.swift
extension NotAnArchive: CommandLineError {
    var status: ExitStatus { .dataError }
    var hint: String? { "granary list shows the repository's archives" }
}

// Sources/GranaryKit/Catalogue/ArchiveLocator.swift
extension NotInRepository: CommandLineError {
    var status: ExitStatus { .usage }
    var hint: String? { "granary list shows the repository's archives" }
}

// Sources/GranaryKit/SQLite/ContentLimits.swift
extension ContentLimit {
    /// What to try, for messages.
    var hint: String {
        switch self {
        case .time:
            return
                "if the store is honest, raise time or time_per_gib under [limits] in granary.toml(5); otherwise its schema makes SQLite work without end (look at it with: sqlite3 -readonly STORE .schema)"
        case .memory:
            return
                "if the store is honest, raise memory under [limits] in granary.toml(5); otherwise its schema makes SQLite build huge values (look at it with: sqlite3 -readonly STORE .schema)"
        }
    }
}

// Sources/GranaryKit/Users/SafeModes.swift
extension OwnershipError: CommandLineError {
    var status: ExitStatus { .cannotCreate }
    var hint: String? {
        "look at who made the folder and why; move it away (as root: mv), then run restore --create again"
    }
}

// Sources/GranaryKit/Isolation/UserWorkers.swift
extension WorkerFailed: CommandLineError {
    /// A crash-class fault reading the user's files (SIGBUS: one was truncated under a mapping) or
    /// a kill: the work could not be done, as for a failed read.
    var status: ExitStatus { .ioError }
    var hint: String? { Hint.command("granary", "backup", user) }
}

// Sources/GranaryKit/Follow/Replay.swift
extension FollowReplay.Failure: CommandLineError {
    var status: ExitStatus { .dataError }
    var hint: String? {
        switch self {
        case .broken(let user, _):
            return
                "restore a moment outside the followed window (granary list \(user) shows the archives), or the archive itself: granary restore \(user) ARCHIVE"
        }
    }
}

// Sources/GranaryKit/Follow/Segment.swift
extension Segment.Failure: CommandLineError {
    var status: ExitStatus {
        switch self {
        case .corrupt: return .dataError
        case .io: return .ioError
        }
    }
    var hint: String? {
        switch self {
        case .corrupt: return "the segment is damaged: restore a moment outside its generation's window"
        case .io: return nil
        }
    }
}

// Sources/GranaryKit/Follow/WALReader.swift
extension WALReader.Failure: CommandLineError {
    var status: ExitStatus {
        switch self {
        case .changedWhileRead: return .temporaryFailure
        case .notRegular, .wrongOwner: return .dataError
        case .read: return .ioError
        }
    }
    var hint: String? { nil }
}

// Sources/GranaryKit/Follow/SegmentVerification.swift
extension SegmentVerification.Problem: CommandLineError {
    var status: ExitStatus { .dataError }
    var hint: String? {
        "a followed window cannot be restored past this point: restore a moment outside it (granary list \(user)), and let granary follow start a new generation"
    }
}
