import ArgumentParser
import Foundation
import GranaryKit

struct AdoptCommand: GranaryCommand {
    static let configuration = CommandConfiguration(
        commandName: "adopt",
        abstract: "Give archives written before hosts were part of archive names the names of today.",
        discussion: """
            An archive's name holds its host (USER/STAMP[-LABEL].HOST.tar.zst). Archives written by an older \
            granary have names without one: those with this host's marker beside them (.NAME.host=HOST) are \
            renamed by this host's first backup or sync; those with no marker belong to no host, and no command \
            of any host restores, prunes, deletes or syncs them until they are adopted. adopt gives each of them \
            the host its own manifest records, and this host's marked ones this host's name, keeping the time, \
            sequence and label (a delta's base is still found under its old name). It is safe to stop and run \
            again: each archive is renamed once, never over another. Each user is adopted under its lock. \
            Exit codes: 0 done, 1 some user failed, 66 no repository, 75 lock held.
            """
    )
    static let cleansUpOnSignals = true

    @OptionGroup(title: "Global Options") var global: GlobalOptions

    @Argument(help: ArgumentHelp("Only these users.", valueName: "user"), completion: .custom(Completions.users))
    var users: [String] = []

    @Flag(help: "Show the names archives would get; change nothing.")
    var dryRun = false

    @OptionGroup var lock: LockOptions

    func execute(_ console: Console) throws -> AdoptResult {
        let settings = try global.settings()
        let repository = try settings.requireRepository()
        let reports = try Adoption.run(
            repository: repository, users: try UserID.named(users), root: try? settings.requireRoot(),
            lockTimeout: lock.timeout(settings), dryRun: dryRun)
        return AdoptResult(dryRun: dryRun, reports: reports)
    }
}

/// `granary adopt`: per user, the names legacy archives got.
struct AdoptResult: CommandResult {
    struct User: Encodable, Sendable {
        let id: String
        let adopted: [String]
        /// Legacy archives still without a host (their manifest names none).
        let left: [String]
        @Null var error: Failure?
    }

    let dryRun: Bool
    let users: [User]

    init(dryRun: Bool, reports: [Adoption.Report]) {
        self.dryRun = dryRun
        users = reports.map {
            User(id: $0.user.rawValue, adopted: $0.adopted, left: $0.left, error: $0.error.map(Failure.init))
        }
    }

    var problems: [Failure] { users.compactMap(\.error) }

    func render(_ text: inout TextOutput, _ detail: TextDetail) {
        for user in users where !user.adopted.isEmpty || !user.left.isEmpty {
            text.line("\(bold: user.id): \(dryRun ? "would adopt" : "adopted") \(user.adopted.count)")
            if detail.verbose || dryRun { for name in user.adopted { text.line("  \(name)") } }
            for name in user.left { text.line("  left without a host: \(name) (its manifest names none)") }
        }
    }
}
