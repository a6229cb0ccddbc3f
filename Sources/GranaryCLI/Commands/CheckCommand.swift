import ArgumentParser
import Foundation
import GranaryKit

struct CheckCommand: GranaryCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "For monitoring: exit 1 unless every user has a verified archive younger than --max-age.",
        discussion: """
            Users are those named, else every user under the root and every user with archives in the repository. \
            Only an archive whose last granary verify passed, and which has not changed since, counts. \
            Each failing user gets one line on standard error saying why, also with --quiet; a user that \
            passes gets one on standard output on a terminal or with -v, so check is silent under cron when all pass. \
            With mirrors ([[mirror]] in the configuration, or --mirror), a user also fails when the repository's \
            newest regular archive is missing from a mirror, or the mirror's newest is older than --max-age. \
            A retired user (granary retire: no folder under the root, a final archive their newest) passes: \
            nothing of theirs is to be backed up any more. \
            Exit codes: 0 every user passes, 1 some user fails.
            """
    )

    @OptionGroup(title: "Global Options") var global: GlobalOptions

    @Argument(help: ArgumentHelp("Only these users.", valueName: "user"), completion: .custom(Completions.users))
    var users: [String] = []

    @Option(name: .customLong("mirror"), help: ArgumentHelp("Also watch this mirror (repeatable; replaces the configured mirrors).", valueName: "location"))
    var mirror: [String] = []

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp("The oldest a user's newest verified archive may be: 30m, 26h, 2d, 1w (default: 1d).", valueName: "duration"),
        transform: ArgumentValues.span(minimum: 1))
    var maxAge: Int64?

    func execute(_ console: Console) throws -> CheckResult {
        let settings = try global.settings()
        let repository = try settings.requireRepository()
        var ids = try users.map { (id) throws(UserError) in try UserID(id) }
        if ids.isEmpty {
            let live = (try? settings.requireRoot().scan().users) ?? []
            ids = Array(Set(live + (try repository.users()))).sorted { $0.rawValue < $1.rawValue }
        }
        let limit = maxAge ?? 86_400
        let reports = try Freshness.evaluate(
            users: ids, repository: repository, maxAge: TimeInterval(limit), mirrors: try settings.mirrorRepositories(flags: mirror),
            root: try? settings.requireRoot())
        return CheckResult(maxAge: limit, reports: reports)
    }
}

/// `granary check`: per user, whether its newest verified archive is recent enough.
struct CheckResult: CommandResult {
    struct User: Encodable {
        let id: String
        let ok: Bool
        @Null var newestVerified: String?
        @Null var ageSeconds: Int64?
        @Null var newest: String?
        @Null var reason: String?
        /// Each mirror's standing (null without mirrors).
        @Null var mirrors: [Mirror]?
        /// Retired (granary retire): passes without a recent backup; `newest` is its final archive.
        let retired: Bool
    }

    struct Mirror: Encodable, Sendable {
        let repository: String
        @Null var newest: String?
        let ok: Bool
        @Null var reason: String?
    }

    let maxAgeSeconds: Int64
    let ok: Bool
    let users: [User]

    init(maxAge: Int64, reports: [Freshness.Report]) {
        maxAgeSeconds = maxAge
        ok = reports.allSatisfy(\.ok)
        users = reports.map {
            User(
                id: $0.user.rawValue, ok: $0.ok, newestVerified: $0.newestVerified?.path, ageSeconds: $0.age.map { Int64($0) },
                newest: $0.newest?.path, reason: $0.reason,
                mirrors: $0.mirrors.isEmpty
                    ? nil : $0.mirrors.map { Mirror(repository: $0.location, newest: $0.newest?.path, ok: $0.problem == nil, reason: $0.problem) },
                retired: $0.retired != nil)
        }
    }

    var problems: [Failure] {
        // One line per failing user, no hint: monitoring mail stays one line per problem.
        users.filter { !$0.ok }.map { Failure(code: .partialFailure, message: "FAIL \($0.id): \($0.reason ?? "failed")") }
    }

    func render(_ text: inout TextOutput, _ detail: TextDetail) {
        guard detail.summaries else { return }
        for user in users where user.ok && user.retired {
            text.line("ok    \(user.id): retired, final archive \(user.newest.map { ($0 as NSString).lastPathComponent } ?? "")")
        }
        for user in users where user.ok && !user.retired {
            let name = user.newestVerified.map { ($0 as NSString).lastPathComponent } ?? ""
            text.line("ok    \(user.id): \(name) verified, \(Freshness.describe(TimeInterval(user.ageSeconds ?? 0))) old")
        }
    }
}
