import ArgumentParser
import Foundation
import GranaryKit

struct CheckCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "For monitoring: exit 1 unless every user has a verified archive younger than --max-age.",
        discussion: """
            Users are those named, else every user under the root and every user with archives in the repository. \
            Only an archive whose last granary verify passed, and which has not changed since, counts. \
            Prints one line per failing user saying why (silent when all pass, unless on a terminal or -v). \
            With mirrors ([[mirror]] in the configuration, or --mirror), a user also fails when the repository's \
            newest regular archive is missing from a mirror, or the mirror's newest is older than --max-age. \
            Exit codes: 0 every user passes, 1 some user fails.
            """
    )

    @OptionGroup var global: GlobalOptions

    @Option(name: .customLong("mirror"), help: ArgumentHelp("Also watch this mirror (repeatable; replaces the configured mirrors).", valueName: "location"))
    var mirror: [String] = []

    @Argument(help: ArgumentHelp("Only these users.", valueName: "user"), completion: .custom(Completions.users))
    var users: [String] = []

    @Option(help: ArgumentHelp("The oldest a user's newest verified archive may be: 30m, 26h, 2d, 1w (default 1d).", valueName: "duration"))
    var maxAge: String = "1d"

    func validate() throws {
        guard let seconds = DurationText.seconds(maxAge), seconds > 0 else {
            throw ValidationError("--max-age \(maxAge.debugDescription) is not a duration such as 30m, 26h, 2d or 1w")
        }
    }

    func run() throws {
        let console = global.console()
        let settings = try global.settings()
        let repository = try settings.requireRepository()
        var ids = try users.map { (id) throws(UserError) in try UserID(id) }
        if ids.isEmpty {
            let live = (try? settings.requireRoot().scan().users) ?? []
            ids = Array(Set(live + (try repository.users()))).sorted { $0.rawValue < $1.rawValue }
        }
        let limit = TimeInterval(DurationText.seconds(maxAge) ?? 86_400)
        let reports = try Freshness.evaluate(
            users: ids, repository: repository, maxAge: limit, mirrors: try settings.mirrorRepositories(flags: mirror))
        if global.json {
            console.json(CheckDocument(maxAge: limit, reports: reports))
        } else {
            for report in reports {
                if let reason = report.reason {
                    console.out("FAIL  \(report.user): \(reason)")
                } else if console.isTerminal || global.verbose {
                    console.out("ok    \(report.user): \(report.newestVerified!.name) verified, \(Freshness.describe(report.age ?? 0)) old")
                }
            }
        }
        if reports.contains(where: { !$0.ok }) { throw ExitCode(ExitStatus.partialFailure.rawValue) }
    }
}

/// `granary check --json`: format version 1.
struct CheckDocument: Encodable {
    struct User: Encodable {
        let id: String
        let ok: Bool
        let newestVerified: String?
        let ageSeconds: Int64?
        let newest: String?
        let reason: String?
        /// Each mirror's standing (absent without mirrors).
        let mirrors: [Mirror]?
    }

    struct Mirror: Encodable {
        let repository: String
        let newest: String?
        let ok: Bool
        let reason: String?
    }

    let format = 1
    let maxAgeSeconds: Int64
    let ok: Bool
    let users: [User]

    init(maxAge: TimeInterval, reports: [Freshness.Report]) {
        maxAgeSeconds = Int64(maxAge)
        ok = reports.allSatisfy(\.ok)
        users = reports.map {
            User(
                id: $0.user.rawValue, ok: $0.ok, newestVerified: $0.newestVerified?.path, ageSeconds: $0.age.map { Int64($0) },
                newest: $0.newest?.path, reason: $0.reason,
                mirrors: $0.mirrors.isEmpty
                    ? nil : $0.mirrors.map { Mirror(repository: $0.location, newest: $0.newest?.path, ok: $0.problem == nil, reason: $0.problem) })
        }
    }
}
