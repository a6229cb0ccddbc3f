import ArgumentParser
import Foundation
import GranaryKit

struct DeleteCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete",
        abstract: "Remove archives (refuses a user's newest verified archive without --force).",
        discussion: """
            ARCHIVE is a path, USER/NAME, or NAME with --user. Every name is checked before anything is removed: \
            one that matches nothing exits 66 (with close matches) and removes nothing; a user's newest verified \
            archive is refused (exit 64) unless --force. The archive's verification record goes with it.
            """
    )

    @OptionGroup var global: GlobalOptions

    @Argument(help: ArgumentHelp("Archives to remove.", valueName: "archive"), completion: .custom(Completions.archives))
    var archives: [String]

    @Option(help: ArgumentHelp("The user of archives given by NAME alone.", valueName: "user"), completion: .custom(Completions.users))
    var user: String?

    @Flag(help: "Remove even a user's newest verified archive.")
    var force = false

    @Flag(help: "Show what would be removed; remove nothing.")
    var dryRun = false

    func run() throws {
        let console = global.console()
        let settings = try global.settings()
        let repository = try settings.requireRepository()
        let owner = try user.map { (id) throws(UserError) in try UserID(id) }
        let locator = ArchiveLocator(repository: repository)
        let entries = try archives.map { try locator.locate($0, user: owner) }
        try ArchiveRemoval.checkDeletable(entries, repository: repository, force: force)
        if dryRun {
            for entry in entries { console.out("would remove \(entry.path)") }
            return
        }
        let root = try? settings.requireRoot()
        var locks: [UserLock] = []
        defer { for lock in locks { lock.release() } }
        if let root {
            for user in Set(entries.map(\.user)).sorted(by: { $0.rawValue < $1.rawValue }) {
                locks.append(try UserLock.acquire(root: root, user: user, timeout: settings.lockTimeout.value))
            }
        }
        try ArchiveRemoval.remove(entries, from: repository)
        if console.isTerminal || global.verbose {
            for entry in entries { console.out("removed \(entry.path)") }
        }
    }
}
