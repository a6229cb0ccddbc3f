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
            Exit codes: 0 every user passes, 1 some user fails.
            """
    )

    @OptionGroup(title: "Global Options") var global: GlobalOptions

    @Argument(help: ArgumentHelp("Only these users.", valueName: "user"), completion: .custom(Completions.users))
    var users: [String] = []

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
            ids = Array(Set(live + repository.users())).sorted { $0.rawValue < $1.rawValue }
        }
        let limit = maxAge ?? 86_400
        let reports = Freshness.evaluate(users: ids, repository: repository, maxAge: TimeInterval(limit))
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
                newest: $0.newest?.path, reason: $0.reason)
        }
    }

    var problems: [Failure] {
        // One line per failing user, no hint: monitoring mail stays one line per problem.
        users.filter { !$0.ok }.map { Failure(code: .partialFailure, message: "FAIL \($0.id): \($0.reason ?? "failed")") }
    }

    func render(_ text: inout TextOutput, _ detail: TextDetail) {
        guard detail.summaries else { return }
        for user in users where user.ok {
            let name = user.newestVerified.map { ($0 as NSString).lastPathComponent } ?? ""
            text.line("ok    \(user.id): \(name) verified, \(Freshness.describe(TimeInterval(user.ageSeconds ?? 0))) old")
        }
    }
}
