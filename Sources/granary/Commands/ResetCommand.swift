import ArgumentParser
import Foundation
import GranaryKit

struct ResetCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reset",
        abstract: "Empty a user's stores, keeping their schema, with a pre-reset safety archive.",
        discussion: """
            Core Data stores keep Z_METADATA, get Z_PRIMARYKEY.Z_MAX set to 0 and lose their external \
            data files. Uses the same methods as restore (swap, online, offline, auto).
            """
    )

    @OptionGroup var global: GlobalOptions

    @Argument(help: ArgumentHelp("The user whose stores to empty.", valueName: "user"), completion: .custom(Completions.users))
    var user: String

    @Option(help: "auto, swap, online or offline.", completion: .list(RestoreMethod.allCases.map(\.rawValue)))
    var method: String = "auto"

    @Flag(help: "Print the plan and change nothing.")
    var dryRun = false

    @Option(help: ArgumentHelp("Seconds an owner has to acknowledge the pause.", valueName: "seconds"))
    var ownerTimeout: Double?

    @Flag(help: "Do not keep the replaced content as a pre-reset archive.")
    var noSafetyArchive = false

    func validate() throws {
        if RestoreMethod(rawValue: method) == nil { throw ValidationError("--method must be auto, swap, online or offline") }
    }

    func run() throws {
        let console = global.console()
        let settings = try global.settings()
        var request = RestoreRequest(user: try UserID(user))
        request.operation = .reset
        request.method = RestoreMethod(rawValue: method) ?? .auto
        request.dryRun = dryRun
        request.ownerTimeout = ownerTimeout.map { .milliseconds(Int64($0 * 1000)) } ?? settings.ownerTimeout.value
        request.lockTimeout = settings.lockTimeout.value
        request.safetyArchive = !noSafetyArchive
        let restorer = Restorer(root: try settings.requireRoot(), repository: try settings.repository())
        let report = try restorer.run(request)
        RestoreRendering.render(report, verb: "reset", console: console)
        if report.safetyArchivePending != nil { throw ExitCode(ExitStatus.partialFailure.rawValue) }
    }
}
