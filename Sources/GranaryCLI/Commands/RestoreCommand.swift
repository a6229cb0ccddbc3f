import ArgumentParser
import Foundation
import GranaryKit

struct RestoreCommand: GranaryCommand {
    static let configuration = CommandConfiguration(
        commandName: "restore",
        abstract: "Put a user's stores back from an archive (the newest by default), verified first.",
        discussion: """
            The archive is extracted and fully verified beside the live stores before anything live is \
            touched. Methods: swap (an owner serves the reopen protocol, see granary-reopen(7)), online (the \
            SQLite backup API into the live database), offline (nobody has the store open), auto (per store, in \
            that order of preference). The replaced content is kept as a pre-restore archive. -v also prints \
            each store's paths, the processes that have it open and the owner's pause. \
            Exit codes: 0 restored, 64 usage, 65 the archive is damaged or does not match, 66 no such user or \
            archive, 73 or 74 cannot write, 75 lock held, owner did not answer or store busy (nothing changed).
            """
    )

    @OptionGroup(title: "Global Options") var global: GlobalOptions

    @Argument(help: ArgumentHelp("The user whose stores to restore.", valueName: "user"), completion: .custom(Completions.users))
    var user: String

    @Argument(help: ArgumentHelp("An archive name or path (default: the newest).", valueName: "archive"), completion: .custom(Completions.archives))
    var archive: String?

    @Option(help: ArgumentHelp("The newest archive at or before this time (RFC 3339 or YYYYMMDDTHHMMSSZ).", valueName: "time"))
    var at: String?

    @Option(help: ArgumentHelp("Restore into this folder instead, touching nothing live.", valueName: "dir"), completion: .directory)
    var to: String?

    @Option(help: "How each store is put in place.")
    var method: RestoreMethod = .auto

    @Flag(help: "Print the plan and change nothing.")
    var dryRun = false

    @Flag(help: "Put back what the last restore or reset of the user replaced (its safety archive).")
    var undo = false

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp("How long an owner has to acknowledge the pause: 10s, 0.5 (default: 10s).", valueName: "duration"),
        transform: ArgumentValues.timeout(within: SettingLimits.ownerTimeout))
    var ownerTimeout: Duration?

    @OptionGroup var lock: LockOptions

    @Flag(help: "Restore even when the stores or the Core Data model differ from the live ones.")
    var force = false

    @Flag(help: "Do not keep the replaced content as a pre-restore archive.")
    var noSafetyArchive = false

    func checkArguments() throws {
        if let at, RestoreCommand.parseTime(at) == nil { throw ValidationError("--at \(at) is neither RFC 3339 nor YYYYMMDDTHHMMSSZ") }
        if at != nil && archive != nil { throw ValidationError("give an archive or --at, not both") }
        if undo && (at != nil || archive != nil) { throw ValidationError("--undo picks the archive itself: give no archive and no --at") }
    }

    static func parseTime(_ text: String) -> Date? {
        ArchiveName.parseStamp(text) ?? ISO8601DateFormatter().date(from: text)
    }

    func execute(_ console: Console) throws -> RestoreResult {
        let settings = try global.settings()
        var request = RestoreRequest(user: try UserID(user))
        request.archive = archive
        request.undo = undo
        request.at = at.flatMap(RestoreCommand.parseTime)
        request.target = to
        request.method = method
        request.dryRun = dryRun
        request.ownerTimeout = ownerTimeout ?? settings.ownerTimeout.value
        request.lockTimeout = lock.timeout(settings)
        request.force = force
        request.safetyArchive = !noSafetyArchive
        let restorer = Restorer(root: try settings.requireRoot(), repository: try settings.repository())
        return RestoreResult(try restorer.run(request), operation: .restore)
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
        /// `swap`, `online` or `offline` (`create` for a store the archive adds).
        let method: String
        @Null var ownerPid: Int32?
        /// Processes that have the store open (other than an owner).
        let openBy: [Int32]
        /// How long its owner was paused, in seconds: from PAUSE sent to RESUMED received.
        @Null var paused: Double?
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
    /// An interrupted restore or reset of the user that was finished or rolled back first.
    @Null var recovered: RecoverResult.User?

    init(_ report: RestoreReport, operation: RestoreRequest.Operation) {
        self.operation = operation.rawValue
        user = report.user
        dryRun = report.dryRun
        archive = report.archive
        target = report.target
        stores = report.stores.map {
            Store(
                name: $0.name, nameBase64: JSONName.base64($0.name), live: $0.live, liveBase64: JSONName.base64($0.live), staged: $0.staged,
                stagedBase64: JSONName.base64($0.staged), method: $0.method.rawValue, ownerPid: $0.ownerPID, openBy: $0.openBy,
                paused: $0.paused.map(RestoreResult.seconds))
        }
        safetyArchive = report.safetyArchive
        safetyArchivePending = report.safetyArchivePending
        warnings = report.warnings
        recovered = report.recovered.flatMap { $0.hadJournal ? RecoverResult.User($0) : nil }
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    func render(_ text: inout TextOutput, _ detail: TextDetail) {
        if let recovered { recovered.render(&text, detail) }
        let head = dryRun ? "would \(operation)" : operation == "restore" ? "restored" : "reset"
        var line: TextLine = "\(head) \(bold: user)"
        if let archive { line += " from \((archive as NSString).lastPathComponent)" }
        if let target { line += " into \(target)" }
        text.line(line)
        if detail.verbose, let archive { text.line("  archive \(archive)") }
        for store in stores {
            var line: TextLine = "  \(store.name, width: 24) \(store.method, width: 8)"
            if let pid = store.ownerPid { line += " owner pid \(pid)" }
            if !store.openBy.isEmpty && store.ownerPid == nil { line += " open by \(store.openBy.map(String.init).joined(separator: ", "))" }
            if dryRun && !detail.verbose { line += "  \(store.staged) -> \(store.live)" }
            text.line(line)
            if detail.verbose {
                text.line("    live   \(store.live)")
                text.line("    staged \(store.staged)")
                if !store.openBy.isEmpty { text.line("    open by \(store.openBy.map(String.init).joined(separator: ", "))") }
            }
        }
        for store in stores {
            guard let paused = store.paused else { continue }
            text.line("\(store.name): owner paused for \(String(format: "%.1f", paused * 1000)) ms (from PAUSE sent to RESUMED received)")
        }
        if let safetyArchive { text.line("replaced content kept in \(safetyArchive)") }
    }

    var notes: [String] { warnings.map { "warning: " + $0 } }

    /// Restored, but the safety archive waits: its own exit status (1) and what to run.
    var problems: [Failure] {
        guard let pending = safetyArchivePending else { return [] }
        return [Failure(
            code: .partialFailure, message: "restored; \(pending)",
            hint: "granary recover \(ShellWord.quote(user)) once the repository can take it")]
    }
}
