import ArgumentParser
import Foundation
import GranaryKit

struct DeleteCommand: GranaryCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete",
        abstract: "Remove archives (refuses a user's newest verified archive without --force).",
        discussion: """
            ARCHIVE is a path, USER/NAME, or NAME with --user; a NAME may be a unique prefix, such as the stamp. \
            Every name is checked before anything is removed: one that matches nothing exits 66 (with close \
            matches), one that matches several exits 64, and nothing is removed; a user's newest verified \
            archive is refused (exit 64) unless --force. The archive's verification record goes with it. \
            A path must be an archive of the repository: anything else inside the repository is refused \
            (exit 64), and a file outside it too, unless --force.
            """
    )

    @OptionGroup(title: "Global Options") var global: GlobalOptions

    @Argument(
        help: ArgumentHelp("Archives to remove.", valueName: "archive"),
        completion: .custom(Completions.archivesOrUsers))
    var archives: [String]

    @Option(
        help: ArgumentHelp("The user of archives given by NAME alone.", valueName: "user"),
        completion: .custom(Completions.users))
    var user: String?

    @Flag(help: "Remove even a user's newest verified archive, or an archive file outside the repository.")
    var force = false

    @Flag(help: "Show what would be removed; remove nothing.")
    var dryRun = false

    @OptionGroup var lock: LockOptions

    func execute(_ console: Console) throws -> DeleteResult {
        let settings = try global.settings()
        let repository = try settings.requireRepository()
        let owner = try UserID.named(user)
        let locator = ArchiveLocator(repository: repository)
        let entries = try archives.map { try locator.locate($0, user: owner) }
        let outside = entries.filter { $0.object == nil }.map(\.path)
        if !outside.isEmpty && !force {
            throw OutsideRepository(command: "delete", paths: outside, repository: repository.location)
        }
        try ArchiveRemoval.checkDeletable(entries, repository: repository, force: force)
        if dryRun { return DeleteResult(entries: entries, dryRun: true) }
        try ArchiveRemoval.delete(
            entries, from: repository, root: try? settings.requireRoot(), lockTimeout: lock.timeout(settings))
        return DeleteResult(entries: entries, dryRun: false)
    }
}

/// `granary delete`: the archives removed (or, with `--dry-run`, that would be).
struct DeleteResult: CommandResult {
    struct Archive: Encodable {
        let user: String
        let name: String
        let path: String
    }

    let dryRun: Bool
    /// A dry run's list is an answer, shown with --quiet too.
    var isAnswer: Bool { dryRun }
    let archives: [Archive]

    init(entries: [RepositoryEntry], dryRun: Bool) {
        self.dryRun = dryRun
        archives = entries.map { Archive(user: $0.user.rawValue, name: $0.name.fileName, path: $0.path) }
    }

    func render(_ text: inout TextOutput, _ detail: TextDetail) {
        guard dryRun || detail.summaries else { return }
        for archive in archives { text.line("\(dryRun ? "would remove" : "removed") \(archive.path)") }
    }
}
