import ArgumentParser
import Foundation
import GranaryKit

struct RestoreCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "restore",
        abstract: "Put a user's stores back from an archive (the newest by default), verified first.",
        discussion: """
            The archive is extracted and fully verified in <root>/.granary/restore/<user> before anything \
            live is touched. Methods: swap (an owner serves the reopen protocol, see granary-reopen(7)), \
            online (SQLite backup API into the live database), offline (nobody has the store open), \
            auto (per store, in that order of preference). The replaced content becomes a pre-restore archive.
            """
    )

    @OptionGroup var global: GlobalOptions

    @Argument(help: ArgumentHelp("The user whose stores to restore.", valueName: "user"), completion: .custom(Completions.users))
    var user: String

    @Argument(help: ArgumentHelp("An archive name or path (default: the newest).", valueName: "archive"), completion: .custom(Completions.archives))
    var archive: String?

    @Option(help: ArgumentHelp("The newest archive at or before this time (RFC 3339 or YYYYMMDDTHHMMSSZ).", valueName: "time"))
    var at: String?

    @Option(help: ArgumentHelp("Restore into this folder instead, touching nothing live.", valueName: "dir"), completion: .directory)
    var to: String?

    @Option(help: "auto, swap, online or offline.", completion: .list(RestoreMethod.allCases.map(\.rawValue)))
    var method: String = "auto"

    @Flag(help: "Print the plan and change nothing.")
    var dryRun = false

    @Flag(help: "Put back what the last restore or reset of the user replaced (its safety archive).")
    var undo = false

    @Option(help: ArgumentHelp("Seconds an owner has to acknowledge the pause.", valueName: "seconds"))
    var ownerTimeout: Double?

    @Flag(help: "Restore even when the stores or the Core Data model differ from the live ones.")
    var force = false

    @Flag(help: "Do not keep the replaced content as a pre-restore archive.")
    var noSafetyArchive = false

    func validate() throws {
        if RestoreMethod(rawValue: method) == nil { throw ValidationError("--method must be auto, swap, online or offline") }
        if let at, RestoreCommand.parseTime(at) == nil { throw ValidationError("--at \(at) is neither RFC 3339 nor YYYYMMDDTHHMMSSZ") }
        if at != nil && archive != nil { throw ValidationError("give an archive or --at, not both") }
        if undo && (at != nil || archive != nil) { throw ValidationError("--undo picks the archive itself: give no archive and no --at") }
        if let ownerTimeout, ownerTimeout <= 0 { throw ValidationError("--owner-timeout must be positive") }
    }

    static func parseTime(_ text: String) -> Date? {
        ArchiveName.parseStamp(text) ?? ISO8601DateFormatter().date(from: text)
    }

    func run() throws {
        let console = global.console()
        let settings = try global.settings()
        var request = RestoreRequest(user: try UserID(user))
        request.archive = archive
        request.undo = undo
        request.at = at.flatMap(RestoreCommand.parseTime)
        request.target = to
        request.method = RestoreMethod(rawValue: method) ?? .auto
        request.dryRun = dryRun
        request.ownerTimeout = ownerTimeout.map { .milliseconds(Int64($0 * 1000)) } ?? settings.ownerTimeout.value
        request.lockTimeout = settings.lockTimeout.value
        request.force = force
        request.safetyArchive = !noSafetyArchive
        let restorer = Restorer(root: try settings.requireRoot(), repository: try settings.repository())
        let report = try restorer.run(request)
        RestoreRendering.render(report, verb: "restore", console: console)
        // Restored, but the safety archive waits for the repository: its own exit status (1).
        if report.safetyArchivePending != nil { throw ExitCode(ExitStatus.partialFailure.rawValue) }
    }
}
