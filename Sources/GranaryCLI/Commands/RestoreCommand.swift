import ArgumentParser
import Foundation
import GranaryKit

struct RestoreCommand: GranaryCommand {
    static let cleansUpOnSignals = true
    static let configuration = CommandConfiguration(
        commandName: "restore",
        abstract: "Put a user's stores back from an archive (the newest by default), verified first.",
        discussion: """
            The archive is extracted and fully verified beside the live stores before anything live is \
            touched. Methods: swap (an owner serves the reopen protocol, see granary-reopen(7)), online (the \
            SQLite backup API into the live database), offline (nobody has the store open), auto (per store, in \
            that order of preference). The replaced content is kept as a pre-restore archive. For each swapped \
            store a line gives the owner's pause and how it ended (RESUMED, late, expired); -v also prints \
            each store's paths and the processes that have it open. \
            A user with no folder under the root (a new host, a user moved from another server, a retired user) is \
            restored with --create: the folder is made, owned as --owner says or else as the archive recorded, and \
            every store, external-data file and folder in it gets the owner, group and mode the archive recorded; \
            without a named archive the newest regular backup or final archive is used. \
            ARCHIVE is named as for verify, inspect and delete: a file name, a unique prefix of one (a bare stamp), \
            USER/NAME (the user's own; another user's archive is refused with 64, naming whose it is), latest (the \
            newest regular backup), or a path. --to must lie outside the root and the repository. \
            For a user granary follow follows, --at TIME inside a followed window (or after an idle user's last \
            commit, when the running follower's state attests it was caught up through TIME) restores the \
            window's base and replays its commits up to TIME; past a window's end it restores to that end, the \
            newest point covered, and says so, never claiming TIME; each segment's trailer must match its name \
            (65, naming it). \
            Exit codes: 0 restored, 64 usage (or --create from an archive that records no owner, without --owner; \
            another user's archive; --to in the root or the repository), \
            65 the archive is damaged or does not match, or a store's owner runs as another uid (--method swap) or \
            wrote to it while paused (granary-reopen(7)), 66 no such user (the hint is the --create command line) or \
            archive, 73 or 74 cannot write, 75 lock held, owner did not answer or store busy (nothing changed), \
            129 or 130 interrupted by SIGHUP, SIGINT or SIGTERM: before the commit nothing was changed; a signal \
            that arrives during the commit waits until every store is switched and every owner resumed, and the \
            run then stops, the restore standing (granary recover writes the safety archive if it was not written).
            """
    )

    @OptionGroup(title: "Global Options") var global: GlobalOptions

    @Argument(
        help: ArgumentHelp("The user whose stores to restore.", valueName: "user"),
        completion: .custom(Completions.usersAndArchived))
    var user: String

    @Argument(
        help: ArgumentHelp("An archive name or path (default: the newest).", valueName: "archive"),
        completion: .custom(Completions.archives))
    var archive: String?

    @Option(
        help: ArgumentHelp(
            "The newest archive at or before this time: 2026-11-28 13:00 (local time), RFC 3339 (to the microsecond), an archive's stamp (YYYYMMDDTHHMMSS[.ffffff]Z), yesterday, or a duration ago (1d, 2h30min); a time to the second covers that second.",
            valueName: "time"))
    var at: String?

    @Option(
        help: ArgumentHelp("Restore into this folder instead, touching nothing live.", valueName: "dir"),
        completion: .directory)
    var to: String?

    @Option(help: "How each store is put in place.")
    var method: RestoreMethod = .auto

    @Flag(help: "Print the plan and change nothing.")
    var dryRun = false

    @Flag(help: "Put back what the last restore or reset of the user replaced (its safety archive).")
    var undo = false

    @OptionGroup var owners: OwnerTimeoutOptions

    @OptionGroup var lock: LockOptions

    @Flag(help: "Restore even when the stores or the Core Data model differ from the live ones.")
    var force = false

    @Flag(help: "Do not keep the replaced content as a pre-restore archive.")
    var noSafetyArchive = false

    @Flag(help: "Create the user's folder when it does not exist (a new host, a moved or retired user).")
    var create = false

    @Option(
        help: ArgumentHelp(
            "With --create: the folder's owner, a user name or uid, and group (default: as the archive recorded).",
            valueName: "user[:group]"))
    var owner: String?

    @Option(
        help: ArgumentHelp(
            "With --create: the folder's mode, in octal (default: as the archive recorded).", valueName: "mode"))
    var mode: String?

    func checkArguments() throws {
        if let at, RestoreCommand.parseTime(at) == nil {
            throw ValidationError(
                "--at \(at) is not a time: give a local time such as \"2026-11-28 13:00\", RFC 3339, an archive's stamp YYYYMMDDTHHMMSS[.ffffff]Z, now, yesterday, or a duration ago such as 1d or 2h30min"
            )
        }
        if at != nil && archive != nil { throw ValidationError("give an archive or --at, not both") }
        if undo && (at != nil || archive != nil) {
            throw ValidationError("--undo picks the archive itself: give no archive and no --at")
        }
        if !create && (owner != nil || mode != nil) { throw ValidationError("--owner and --mode go with --create") }
        if create && (to != nil || undo) {
            throw ValidationError("--create makes the user's live folder: not with --to or --undo")
        }
        _ = try createFolder()
    }

    /// `--create`'s request: the owner and mode given, each checked (a name this host does not know is a usage error).
    func createFolder() throws -> RestoreRequest.CreateFolder? {
        guard create else { return nil }
        var folder = RestoreRequest.CreateFolder()
        if let owner {
            let parts = owner.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
            guard let uid = UInt32(parts[0]) ?? AccountNames.uid(parts[0]), !parts[0].isEmpty else {
                throw ValidationError("--owner \(owner): no user \(parts[0]) on this host (give a user name or a uid)")
            }
            folder.uid = uid
            if parts.count == 2 {
                guard let gid = UInt32(parts[1]) ?? AccountNames.gid(parts[1]), !parts[1].isEmpty else {
                    throw ValidationError(
                        "--owner \(owner): no group \(parts[1]) on this host (give a group name or a gid)")
                }
                folder.gid = gid
            }
        }
        if let mode {
            guard let value = mode_t(mode, radix: 8), value <= 0o7777 else {
                throw ValidationError("--mode \(mode) is not an octal mode such as 0700 or 750")
            }
            folder.mode = value
        }
        return folder
    }

    /// `--to` must be a folder of its own: not the root or in it (a folder there is a user, and
    /// would become one owned by root), not the repository or in it (it would look like a user's
    /// archives).
    static func checkTarget(_ to: String, settings: Settings) throws {
        let target = LocalRepository.resolvedPath(to)
        var places: [(String, String)] = []
        if let root = settings.root?.value { places.append(("the root", root)) }
        if let repo = settings.repo?.value, !Repositories.isRemote(repo) { places.append(("the repository", repo)) }
        for (name, place) in places {
            let base = LocalRepository.resolvedPath(place)
            if target == base || target.hasPrefix(base == "/" ? "/" : base + "/") {
                throw CommandError(
                    description: "--to \(to) is \(target == base ? "" : "inside ")\(name) \(place)", status: .usage,
                    hint: "restore into a folder of its own, outside the root and the repository, such as /tmp/drill")
            }
        }
    }

    /// `--at`'s time: an archive stamp (to the second or the microsecond), RFC 3339 (fractions too), a local date and time (`2026-11-28 13:00`,
    /// seconds optional, `T` or a space between), `now`, `yesterday` (24 hours ago, as GNU date
    /// reads it), or a duration with its units, ago (`1d`, `2h30min`; a bare number is refused:
    /// it reads as neither a time nor a duration to a person).
    static func parseTime(_ text: String, now: Date = Date(), timeZone: TimeZone = .current) -> Date? {
        // A time a stamp cannot write (before the year 0, after 9999: `--at 10000000d`) is none.
        guard let time = parsed(text, now: now, timeZone: timeZone),
            (-62_167_219_200...253_402_300_799).contains(time.timeIntervalSince1970)
        else { return nil }
        return time
    }

    private static func parsed(_ text: String, now: Date, timeZone: TimeZone) -> Date? {
        // (Both refuse a day the month does not have, never reading it as another day.)
        if let micros = ArchiveName.parseMicros(text) ?? CivilTime.parseRFC3339(text) {
            return Date(timeIntervalSince1970: Double(micros) / 1_000_000)
        }
        switch text.lowercased() {
        case "now": return now
        case "yesterday": return now.addingTimeInterval(-86_400)
        default: break
        }
        if text.contains(where: \.isLetter), let span = DurationText.span(text) {
            return now.addingTimeInterval(-span.seconds(before: now))
        }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = timeZone
        formatter.isLenient = false
        for format in ["yyyy-MM-dd HH:mm:ss", "yyyy-MM-dd HH:mm", "yyyy-MM-dd'T'HH:mm:ss", "yyyy-MM-dd'T'HH:mm"] {
            formatter.dateFormat = format
            if let time = formatter.date(from: text) { return time }
        }
        return nil
    }

    func execute(_ console: Console) throws -> RestoreResult {
        let settings = try global.settings()
        var request = RestoreRequest(user: try UserID(user), context: settings.context)
        request.archive = archive
        request.undo = undo
        request.at = at.flatMap { RestoreCommand.parseTime($0) }
        if let to, !FolderName.isUTF8(to) {
            throw CommandError(
                description: "--to \(to) is not UTF-8 text", status: .usage,
                hint: "name the folder by a UTF-8 path (a link with such a name works)")
        }
        if let to {
            try GlobalOptions.checkPlace(to, "--to")
            try Self.checkTarget(to, settings: settings)
        }
        // Another user's archive of the repository named by its path (it lies in that user's folder
        // and its manifest agrees): named as such, not as damage. A file elsewhere whose manifest
        // names someone else stays a data error (65): its bytes may be forged.
        if let archive, archive.contains("/"), FileSystem.isRegularFile(archive),
            let owner = ArchiveLocator(repository: try settings.repository()).folderUser(ofFile: archive),
            owner != request.user.rawValue, let manifest = try? ArchiveHead(file: archive).manifest,
            manifest.user == owner
        {
            throw ArchiveOfAnotherUser(name: archive, owner: manifest.user, user: request.user.rawValue)
        }
        // An archive of the repository: the repository must be one (an unmounted disk, a typo)
        // before anything is made or locked.
        if !(archive.map { $0.contains("/") && FileSystem.isRegularFile($0) } ?? false) {
            try settings.repository()?.requireExisting()
        }
        // A new folder in a sticky shared folder (/tmp/drill): made private here, then judged. A
        // restore that fails leaves no empty folder behind it (rmdir removes only an empty one).
        var madeTarget: String?
        if let to, geteuid() == 0, TrustedPath.folderProblem(to) != nil, TrustedPath.canMakePrivateFolder(to),
            !dryRun, TrustedPath.makePrivateFolder(to)
        {
            madeTarget = to
        }
        var restored = false
        defer { if !restored, let madeTarget { rmdir(madeTarget) } }
        if let to, geteuid() == 0, !(dryRun && TrustedPath.canMakePrivateFolder(to)),
            let problem = TrustedPath.folderProblem(to)
        {
            // Root writes the restored stores there: a folder another user owns or can write
            // would let them swap what is written, or read it.
            throw CommandError(
                description: "refusing --to \(to): \(problem)", status: .cannotCreate,
                hint:
                    "restore into a folder only root can write (made with install -d -m 0700), then hand the files over"
            )
        }
        request.target = to
        request.method = method
        request.dryRun = dryRun
        request.ownerTimeout = owners.timeout(settings)
        request.lockTimeout = lock.timeout(settings)
        request.force = force
        request.safetyArchive = !noSafetyArchive
        request.check = settings.check.value
        request.create = try createFolder()
        // A time inside a followed window restores its base and replays its commits.
        if let repository = try? settings.repository() {
            FollowRestore.prepare(&request, repository: repository, cap: settings.bytesPerUser.value)
        }
        let restorer = Restorer(root: try settings.requireRoot(), repository: try settings.repository())
        do {
            let result = RestoreResult(try restorer.run(request), operation: .restore)
            restored = true
            return result
        } catch RestoreError.noUser(let user, let root, let create?) {
            // The hint is this very command line with --create: the same root, repository and archive.
            // It creates the folder and restores into it.
            let words = ["granary"] + GranaryMain.argumentBytes().map(ShellWord.quote) + ["--create", "--owner"]
            throw CommandError(
                description: RestoreError.noUser(user: user, root: root, create: nil).description, status: .notFound,
                hint: create.owner.map { Hint.quotedCommand(words + [ShellWord.quote($0)]) }
                    ?? (words + ["USER"]).joined(separator: " ") + " (creates the folder and restores into it)")
        }
    }
}

/// `granary restore` and `granary reset`: what was (or, with `--dry-run`, would be) put in
/// place, how, and where the replaced content is kept.
struct RestoreResult: CommandResult {
    struct Store: Encodable {
        let name: String
        @Null var nameBase64: String?
        /// The live store.
        let live: String
        @Null var liveBase64: String?
        /// The verified copy put in place.
        let staged: String
        @Null var stagedBase64: String?
        /// `swap`, `online` or `offline`; `new` for a store the archive adds, `copy` into `--to`.
        let method: String
        @Null var ownerPid: Int32?
        /// Processes that have the store open (other than an owner).
        let openBy: [Int32]
        /// How long its owner was paused, in seconds: from PAUSE sent to RESUMED (or EXPIRED) received.
        @Null var paused: Double?
        /// How its owner's pause ended: `resumed`, `late`, `expired`, `unanswered` or `gone` (the
        /// owner closed its connection without an answer: it exited or crashed).
        @Null var pauseEnding: String?
    }

    /// `restore` or `reset`.
    let operation: String
    let user: String
    let dryRun: Bool
    @Null var archive: String?
    /// `--to`: the folder restored into instead of the live one.
    @Null var target: String?
    let stores: [Store]
    @Null var safetyArchive: String?
    /// Restored, but the safety archive could not be written yet (it waits, and `recover` writes it).
    @Null var safetyArchivePending: String?
    /// What went wrong without undoing the restore (an owner that resumed late, …).
    let warnings: [String]
    /// Restored stores (or files beside them) a paused owner wrote to before RESUME: exit 65.
    let writtenWhilePaused: [String]
    /// An interrupted restore or reset of the user that was finished or rolled back first.
    @Null var recovered: RecoverResult.User?
    /// `--create`: the user's folder, made by this restore (null when it existed).
    @Null var createdFolder: CreatedFolder?

    /// A folder `--create` made.
    struct CreatedFolder: Encodable {
        let path: String
        let uid: UInt32
        let gid: UInt32
        @Null var user: String?
        @Null var group: String?
        /// Permission bits in octal, such as `0700`.
        let mode: String
        /// Other regular files of the archive (a final archive's `files/`) created in the folder.
        let files: Int
    }

    init(_ report: RestoreReport, operation: RestoreRequest.Operation) {
        self.operation = operation.rawValue
        user = report.user
        dryRun = report.dryRun
        archive = report.archive
        target = report.target
        stores = report.stores.map {
            Store(
                name: $0.name, nameBase64: JSONName.base64($0.name), live: $0.live,
                liveBase64: JSONName.base64($0.live), staged: $0.staged,
                stagedBase64: JSONName.base64($0.staged), method: $0.method.rawValue, ownerPid: $0.ownerPID,
                openBy: $0.openBy,
                paused: $0.paused?.timeInterval, pauseEnding: $0.pauseEnding?.rawValue)
        }
        safetyArchive = report.safetyArchive
        safetyArchivePending = report.safetyArchivePending
        warnings = report.warnings
        writtenWhilePaused = report.writtenWhilePaused
        createdFolder = report.createdFolder.map {
            CreatedFolder(
                path: report.createdPath ?? "", uid: $0.uid, gid: $0.gid, user: $0.user, group: $0.group,
                mode: RestoreResult.octal($0.mode), files: report.plainFiles)
        }
        recovered = report.recovered.flatMap { RecoverResult.User.applies($0) ? RecoverResult.User($0) : nil }
    }

    /// How an owner's pause ended, as its pause line says it.
    enum PauseEnding: Equatable {
        case resumed, late, expired, unanswered, gone
    }

    /// How a pause ended, from the restore's report (RESUMED on time when it says nothing).
    static func pauseEnding(_ text: String?) -> PauseEnding {
        switch text {
        case "late": return .late
        case "expired": return .expired
        case "unanswered": return .unanswered
        case "gone": return .gone
        default: return .resumed
        }
    }

    /// `Local.sqlite: owner paused for 1.8 ms (from PAUSE sent to RESUMED received)`, saying
    /// `expired` when the owner's lease ran out (it sent EXPIRED, not RESUMED).
    static func pauseLine(_ store: String, seconds: Double, ending: PauseEnding) -> String {
        let ms = String(format: "%.1f", seconds * 1000)
        switch ending {
        case .resumed: return "\(store): owner paused for \(ms) ms (from PAUSE sent to RESUMED received)"
        case .late: return "\(store): owner paused for \(ms) ms (from PAUSE sent to RESUMED received, late)"
        case .expired:
            return
                "\(store): owner paused for \(ms) ms, expired (from PAUSE sent to EXPIRED received: its lease ran out)"
        case .unanswered:
            return
                "\(store): owner paused for at least \(ms) ms (from PAUSE sent until granary stopped waiting for RESUMED)"
        case .gone:
            return
                "\(store): owner paused for at most \(ms) ms, gone (from PAUSE sent until its connection closed without an answer: the owner exited)"
        }
    }

    /// `448` → `0700`.
    static func octal(_ mode: UInt32) -> String {
        let digits = String(mode & 0o7777, radix: 8)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }

    /// A dry run's plan is an answer (shown with --quiet); what a restore put in place is one
    /// line of chatter (-q hides it).
    var isAnswer: Bool { dryRun }

    func render(_ text: inout TextOutput, _ detail: TextDetail) {
        if let recovered { recovered.render(&text, detail) }
        let head = dryRun ? "would \(operation)" : operation == "restore" ? "restored" : "reset"
        var line: TextLine = "\(head) \(bold: user)"
        if let archive { line += " from \(PathText.lastComponent(archive))" }
        if let target { line += " into \(target)" }
        text.line(line)
        if let created = createdFolder {
            let owner = (created.user ?? String(created.uid)) + ":" + (created.group ?? String(created.gid))
            text.line("  \(dryRun ? "would create" : "created") \(created.path) (owner \(owner), mode \(created.mode))")
            if created.files > 0 {
                text.line(
                    "  \(created.files) other file\(created.files == 1 ? "" : "s") put back from the archive's files/")
            }
        }
        if detail.verbose, let archive { text.line("  archive \(archive)") }
        for store in stores {
            var line: TextLine = "  \(store.name, width: 24) \(store.method, width: 8)"
            if let pid = store.ownerPid { line += " owner pid \(pid)" }
            if !store.openBy.isEmpty && store.ownerPid == nil {
                line += " open by \(store.openBy.map(String.init).joined(separator: ", "))"
            }
            if dryRun && !detail.verbose { line += "  \(store.staged) -> \(store.live)" }
            text.line(line)
            if detail.verbose {
                text.line("    live   \(store.live)")
                text.line("    staged \(store.staged)")
                if !store.openBy.isEmpty {
                    text.line("    open by \(store.openBy.map(String.init).joined(separator: ", "))")
                }
            }
        }
        // Printed without -v too: the pause is what the owner's users felt (granary-reopen(7)).
        for store in stores {
            guard let paused = store.paused else { continue }
            text.line(
                TextLine(
                    stringLiteral: Self.pauseLine(
                        store.name, seconds: paused, ending: Self.pauseEnding(store.pauseEnding))))
        }
        if let safetyArchive { text.line("replaced content kept in \(safetyArchive)") }
    }

    var notes: [String] { warnings.map { "warning: " + $0 } }

    /// Restored, but the safety archive waits: its own exit status (1) and what to run. Restored,
    /// but an owner wrote while it was paused: 65, naming the store.
    var problems: [Failure] {
        var problems: [Failure] = []
        if !writtenWhilePaused.isEmpty {
            problems.append(
                Failure(
                    code: .dataError,
                    message:
                        "restored, but the owner wrote to \(writtenWhilePaused.joined(separator: ", ")) while it was paused, or another process did (the protocol forbids it). Where every byte is: what was written after the switch is in the restored store, at its path (it stays live); the replaced content is in the safety archive; a file that appeared beside the store is where the warning above names it (nothing was deleted)",
                    hint:
                        "fix the app that owns it (it must not open the store between PAUSED and RESUME, man 7 granary-reopen), or stop the process that writes the store outside the protocol"
                )
            )
        }
        if let pending = safetyArchivePending {
            problems.append(
                Failure(
                    code: Self.interruption ?? .partialFailure, message: "restored; \(pending)",
                    hint: "granary recover \(ShellWord.quote(user))"
                        + (Self.interruption == nil ? " once the repository can take it" : " writes it")))
        }
        return problems
    }

    var status: ExitStatus {
        guard writtenWhilePaused.isEmpty else { return .dataError }
        if problems.isEmpty { return .success }
        // A signal that arrived during the commit waits for it, then stops what follows (the
        // safety archive, which `recover` writes): the run ends as interrupted.
        if safetyArchivePending != nil, let interrupted = Self.interruption { return interrupted }
        return .partialFailure
    }

    /// 130 (129 after SIGHUP) when a signal arrived during the run.
    static var interruption: ExitStatus? {
        Interruption.signal == 0 ? nil : Interruption.signal == SIGHUP ? .hangup : .interrupted
    }
}
