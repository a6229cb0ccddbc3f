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
        let root = try settings.requireRoot()
        var ids = try users.map { (id) throws(UserError) in try UserID(id) }
        if ids.isEmpty { ids = FileSystem.contents(of: root.stateFolder + "/restore").compactMap { try? UserID($0) } }
        var nothing = true
        for id in ids {
            let lock = try UserLock.acquire(root: root, user: id, timeout: settings.lockTimeout.value)
            defer { lock.release() }
            let report = try Recovery.recover(root: root, user: id)
            if report.hadJournal { nothing = false }
            RecoverRendering.render(report, console: console)
        }
        // A backup or verify killed half-way leaves temporaries named after its dead pid; the next
        // backup would remove them, recover does it now.
        if let repo = settings.repo.map({ Repository(path: $0.value) }) {
            let removed = Recovery.removeDeadTemporaries(in: repo, users: users.isEmpty ? [] : ids)
            for path in removed { console.info("removed \(path), left by a run that died") }
            if !removed.isEmpty { nothing = false }
        }
        if nothing { console.info("nothing to recover") }
    }
}
