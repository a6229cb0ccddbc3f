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
            A user whose folder cannot be read fails, saying why, and so does every entry of the root that may \
            hold a user's data but is no user granary can take (a link, a folder whose name is not UTF-8 or no \
            valid user id, a hidden folder). \
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

    @Option(
        name: .customLong("mirror"),
        help: ArgumentHelp(
            "Also watch this mirror (repeatable; replaces the configured mirrors).", valueName: "location"))
    var mirror: [String] = []

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "The oldest a user's newest verified archive may be: 30m, 26h, 2d, 1w (default: 1d).", valueName: "duration"
        ),
        transform: ArgumentValues.span(minimum: 1))
    var maxAge: Int64?

    func execute(_ console: Console) throws -> CheckResult {
        let settings = try global.settings()
        let repository = try settings.requireRepository()
        var ids = try UserID.named(users)
        let root = settings.root == nil ? nil : try settings.requireRoot()
        var ignored: [Root.Ignored] = []
        if ids.isEmpty {
            var live: [UserID] = []
            if let root { (live, ignored) = try root.scan() }
            ids = Array(Set(live + (try repository.users()))).sorted { $0.rawValue < $1.rawValue }
        }
        var unreadable: [UserID: String] = [:]
        for id in ids { if let reason = root?.unreadable(id) { unreadable[id] = reason } }
        let limit = maxAge ?? 86_400
        let reports = try Freshness.evaluate(
            users: ids, repository: repository, maxAge: TimeInterval(limit),
            mirrors: try settings.mirrorRepositories(flags: mirror),
            root: root)
        return CheckResult(
            maxAge: limit, reports: reports, unreadable: unreadable, ignored: ignored.filter(\.mayHoldData),
            root: root?.path ?? "")
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

    typealias Ignored = JSONName.NamedReason

    let maxAgeSeconds: Int64
    let ok: Bool
    let users: [User]
    /// Entries of the root that fail the check (links, folders that are no valid user id).
    let ignored: [Ignored]
    private let root: String

    enum CodingKeys: String, CodingKey { case maxAgeSeconds, ok, users, ignored }

    /// `unreadable`: the users whose folder could not be read, with why; they fail whatever
    /// their archives.
    init(
        maxAge: Int64, reports: [Freshness.Report], unreadable: [UserID: String] = [:], ignored: [Root.Ignored] = [],
        root: String = ""
    ) {
        maxAgeSeconds = maxAge
        users = reports.map { report in
            let folder = unreadable[report.user].map { "cannot read its folder: " + $0 }
            let reason = [folder, report.reason].compactMap { $0 }.joined(separator: "; ")
            return User(
                id: report.user.rawValue, ok: report.ok && folder == nil, newestVerified: report.newestVerified?.path,
                ageSeconds: report.age.map { Int64($0) }, newest: report.newest?.path,
                reason: reason.isEmpty ? nil : reason,
                mirrors: report.mirrors.isEmpty
                    ? nil
                    : report.mirrors.map {
                        Mirror(
                            repository: $0.location, newest: $0.newest?.path, ok: $0.problem == nil, reason: $0.problem)
                    },
                retired: report.retired != nil)
        }
        self.ignored = ignored.map { Ignored(name: $0.name, reason: $0.reason) }
        self.root = root
        ok = users.allSatisfy(\.ok) && ignored.isEmpty
    }

    var problems: [Failure] {
        // One line per failing user or entry, no hint: monitoring mail stays one line per problem.
        ignored.map { Failure(code: .partialFailure, message: "FAIL \(root)/\($0.name): \($0.reason)") }
            + users.filter { !$0.ok }.map {
                Failure(code: .partialFailure, message: "FAIL \($0.id): \($0.reason ?? "failed")")
            }
    }

    func render(_ text: inout TextOutput, _ detail: TextDetail) {
        guard detail.summaries else { return }
        for user in users where user.ok && user.retired {
            text.line(
                "ok    \(user.id): retired, final archive \(user.newest.map { PathText.lastComponent($0) } ?? "")"
            )
        }
        for user in users where user.ok && !user.retired {
            let name = user.newestVerified.map { PathText.lastComponent($0) } ?? ""
            text.line(
                "ok    \(user.id): \(name) verified, \(Freshness.describe(TimeInterval(user.ageSeconds ?? 0))) old")
        }
    }
}
