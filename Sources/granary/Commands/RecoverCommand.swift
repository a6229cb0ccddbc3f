import ArgumentParser
import Foundation
import GranaryKit

struct RecoverCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "recover",
        abstract: "Finish or roll back a restore or reset that was interrupted.",
        discussion: "Each store ends fully old or fully new. Without users, every user with a pending journal. Temporaries left in the repository by a backup or verify that died are removed."
    )

    @OptionGroup var global: GlobalOptions

    @Argument(help: ArgumentHelp("Only these users.", valueName: "user"), completion: .custom(Completions.users))
    var users: [String] = []

    func run() throws {
        let console = global.console()
        let settings = try global.settings()
        let ids = try users.map { (id) throws(UserError) in try UserID(id) }
        let run = try Recovery.run(
            root: try settings.requireRoot(), users: ids, repository: try settings.repository(), lockTimeout: settings.lockTimeout.value,
            ownerTimeout: settings.ownerTimeout.value)
        for report in run.reports { RecoverRendering.render(report, console: console) }
        for path in run.removedTemporaries { console.info("removed \(path), left by a run that died") }
        if run.nothing { console.info("nothing to recover") }
        if let pending = run.reports.compactMap(\.safetyArchivePending).first {
            throw RestoreError.repositoryUnusable(repository: settings.repo?.value ?? "", reason: pending)
        }
    }
}
