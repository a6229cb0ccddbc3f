import ArgumentParser
import Foundation
import GranaryKit

struct ResetCommand: GranaryCommand {
    static let configuration = CommandConfiguration(
        commandName: "reset",
        abstract: "Empty a user's stores, keeping their schema, with a pre-reset safety archive.",
        discussion: """
            Core Data stores keep Z_METADATA, get Z_PRIMARYKEY.Z_MAX set to 0 and lose their external \
            data files. Uses the same methods as restore (swap, online, offline, auto). \
            Exit codes as for restore.
            """
    )

    @OptionGroup(title: "Global Options") var global: GlobalOptions

    @Argument(help: ArgumentHelp("The user whose stores to empty.", valueName: "user"), completion: .custom(Completions.users))
    var user: String

    @Option(help: "How each store is put in place.")
    var method: RestoreMethod = .auto

    @Flag(help: "Print the plan and change nothing.")
    var dryRun = false

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp("How long an owner has to acknowledge the pause: 10s, 0.5 (default: 10s).", valueName: "duration"),
        transform: ArgumentValues.timeout(within: SettingLimits.ownerTimeout))
    var ownerTimeout: Duration?

    @OptionGroup var lock: LockOptions

    @Flag(help: "Do not keep the replaced content as a pre-reset archive.")
    var noSafetyArchive = false

    func execute(_ console: Console) throws -> RestoreResult {
        let settings = try global.settings()
        var request = RestoreRequest(user: try UserID(user))
        request.operation = .reset
        request.method = method
        request.dryRun = dryRun
        request.ownerTimeout = ownerTimeout ?? settings.ownerTimeout.value
        request.lockTimeout = lock.timeout(settings)
        request.safetyArchive = !noSafetyArchive
        let restorer = Restorer(root: try settings.requireRoot(), repository: try settings.repository())
        return RestoreResult(try restorer.run(request), operation: .reset)
    }
}
