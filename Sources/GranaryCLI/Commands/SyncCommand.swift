import ArgumentParser
import Foundation
import GranaryKit

struct SyncCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync",
        abstract: "Bring the mirror repositories up to date with the repository.",
        discussion: """
            For each mirror ([[mirror]] in the configuration, or --mirror) and each user (those named, else every \
            user of the repository): archives the mirror lacks are uploaded, verification records are copied, and \
            archives the repository no longer has (prune or delete removed them) are removed from the mirror when \
            they are older than the repository's newest archive of the user. A user the repository has no archive \
            of is left alone on the mirror, so an empty or lost repository never empties its mirrors. Each user is \
            synced under its lock. Uploads that a killed run left behind are removed. \
            Exit codes: 0 every mirror is up to date, 1 some user or mirror failed (each is named), 64 no mirror, \
            66 no repository, 75 lock held.
            """
    )

    @OptionGroup var global: GlobalOptions

    @Argument(help: ArgumentHelp("Only these users.", valueName: "user"), completion: .custom(Completions.users))
    var users: [String] = []

    @Option(name: .customLong("mirror"), help: ArgumentHelp("Sync this mirror (repeatable; replaces the configured mirrors).", valueName: "location"))
    var mirror: [String] = []

    @Flag(help: "Show what would be sent and removed; change nothing.")
    var dryRun = false

    func run() throws {
        Interruption.installHandlers()
        let console = global.console()
        let settings = try global.settings()
        let repository = try settings.requireRepository()
        let mirrors = try settings.mirrorRepositories(flags: mirror)
        if mirrors.isEmpty { throw ValidationError("no mirror: set [[mirror]] repo = \"…\" in the configuration, or pass --mirror LOCATION") }
        let ids = try users.map { (id) throws(UserError) in try UserID(id) }
        let results = try MirrorSync.run(
            primary: repository, mirrors: mirrors, users: ids, root: try? settings.requireRoot(), lockTimeout: settings.lockTimeout.value,
            dryRun: dryRun)
        if global.json {
            console.json(SyncDocument(dryRun: dryRun, results: results))
        } else {
            for result in results {
                if let error = result.error { console.error(error) }
                for user in result.users {
                    if let error = user.error {
                        console.error(error)
                        continue
                    }
                    let changed = !user.uploaded.isEmpty || !user.records.isEmpty || !user.removed.isEmpty
                    guard changed || global.verbose || dryRun else { continue }
                    let verb = dryRun ? "would send" : "sent"
                    console.out(
                        "\(user.user) → \(result.location): \(verb) \(user.uploaded.count), records \(user.records.count), "
                            + "\(dryRun ? "would remove" : "removed") \(user.removed.count)")
                    if global.verbose || dryRun {
                        for name in user.uploaded { console.out("  send    \(name)") }
                        for name in user.removed { console.out("  remove  \(name)") }
                    }
                }
                for path in result.cleaned { console.info("removed \(path), left by a run that died") }
            }
        }
        if results.contains(where: \.failed) { throw ExitCode(ExitStatus.partialFailure.rawValue) }
    }
}

/// `granary sync --json`: format version 1.
struct SyncDocument: Encodable {
    struct User: Encodable {
        let id: String
        let ok: Bool
        let uploaded: [String]
        let records: [String]
        let removed: [String]
        let error: String?
        let exitCode: Int32?
    }

    struct Mirror: Encodable {
        let repository: String
        let ok: Bool
        let users: [User]
        let removedTemporaries: [String]
        let error: String?
        let exitCode: Int32?
    }

    let format = 1
    let dryRun: Bool
    let mirrors: [Mirror]

    init(dryRun: Bool, results: [MirrorSync.MirrorResult]) {
        self.dryRun = dryRun
        mirrors = results.map { result in
            Mirror(
                repository: result.location, ok: !result.failed,
                users: result.users.map {
                    User(
                        id: $0.user.rawValue, ok: $0.error == nil, uploaded: $0.uploaded, records: $0.records, removed: $0.removed,
                        error: $0.error?.description, exitCode: $0.error?.status.rawValue)
                },
                removedTemporaries: result.cleaned, error: result.error?.description, exitCode: result.error?.status.rawValue)
        }
    }
}
