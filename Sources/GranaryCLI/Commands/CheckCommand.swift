import ArgumentParser
import Foundation
import GranaryKit

struct CheckCommand: GranaryCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "For monitoring: exit 1 unless every user has a checked archive younger than --max-age.",
        discussion: """
            Users are those named, else every user under the root and every user with archives in the repository. \
            A regular backup counts (never a safety archive) when its own backup checked every snapshot it packed \
            (check = quick or full, the default: backup records it beside the archive) or granary verify passed \
            on it, and it has not changed since; a bad verify or check = none makes it not count. \
            A delta counts only with its whole chain (each link there, the archive it was built on, none \
            found bad). When the newest archives do not restore (verify found them bad, they changed, a \
            chain is broken), the user fails, naming the archive, until a restorable archive newer than them \
            exists. \
            A restore, reset or retire that stopped half way (granary recover finishes it) fails its user. \
            A user whose folder cannot be read fails, saying why, and so does every entry of the root that may \
            hold a user's data but is no user granary can take (a link, a folder whose name is not UTF-8 or no \
            valid user id). \
            Results go to standard output: each failing user gets a FAIL line saying why, also with --quiet; \
            a user that passes gets an OK line on a terminal, with -v or --nagios, so check is silent under cron \
            when all pass. --nagios prints a first line for Nagios, Icinga or Sensu and exits 0 OK, 1 WARNING \
            (only a mirror or an entry of the root is wrong), 2 CRITICAL (a user fails), 3 UNKNOWN (check could \
            not run). --textfile PATH writes the results in Prometheus' text format for node_exporter's textfile \
            collector, atomically (a temporary file renamed over PATH, mode 0644). \
            With mirrors ([[mirror]] in the configuration, or --mirror), a user also fails when the repository's \
            newest regular archive is missing from a mirror, or the mirror's newest is older than --max-age. \
            A retired user (granary retire: no folder under the root, a final archive their newest) passes: \
            nothing of theirs is to be backed up any more. So does a user with no archive whose folder holds no \
            store yet, or who has no folder at all: nothing to back up (an OK line says so). lost+found and hidden \
            entries of the root are no users and fail nothing. --exclude and the configuration's exclude leave \
            users out, as for backup --all. \
            A user that granary follow follows on this host (its state in the repository, or segments) also \
            fails when follow lags more than --max-follow-lag behind, 1min unless given (the lag: now minus \
            the start of follow's newest round that left every commit of the user shipped; a follower that \
            stopped lags more each second) or when there is a gap (a segment missing, the newest window's base gone, or \
            following paused with no generation; not for a user with nothing to back up yet, who passes). \
            Exit codes: 0 every user passes, 1 some user fails (with --nagios: 0, 1, 2, 3 as above).
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
            "The oldest a user's newest checked archive may be: 30min, 26h, 2d, 1w (default: 1d).",
            valueName: "duration"
        ),
        transform: ArgumentValues.span(minimum: 1))
    var maxAge: Int64?

    @Option(
        help: ArgumentHelp(
            "Leave this user out when no user is named (repeatable; adds to exclude in the configuration).",
            valueName: "user"),
        completion: .custom(Completions.users))
    var exclude: [String] = []

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "The most a followed user's shipped commits may lag behind now: 10s, 5min (default: 1min).",
            valueName: "duration"),
        transform: ArgumentValues.span(minimum: 1))
    var maxFollowLag: Int64?

    @Flag(help: "Nagios plugin output: a status line first; exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.")
    var nagios = false

    @Option(
        help: ArgumentHelp(
            "Also write the results in Prometheus' text format to this file (for node_exporter), atomically.",
            valueName: "file"),
        completion: .file())
    var textfile: String?

    func execute(_ console: Console) throws -> CheckResult {
        let settings = try global.settings()
        let repository = try settings.requireRepository(rememberListings: true)
        var ids = try UserID.named(users)
        let root = settings.root == nil ? nil : try settings.requireRoot()
        var ignored: [Root.Ignored] = []
        if ids.isEmpty {
            var live: [UserID] = []
            if let root { (live, ignored) = try root.scan() }
            ids = Array(Set(live + (try repository.usersOfHost()))).sorted { $0.rawValue < $1.rawValue }
        }
        let interrupted = root.map(Freshness.interrupted) ?? []
        if users.isEmpty { ids = Array(Set(ids).union(interrupted)).sorted { $0.rawValue < $1.rawValue } }
        let excluded = Set(try UserID.named(exclude))
        for id in excluded where !ids.contains(id) {
            throw UserError.notFound(id.rawValue, root: root?.path ?? "")
        }
        if users.isEmpty {
            // As backup --all leaves them out (the configuration's may name users long gone).
            ids.removeAll { excluded.contains($0) || settings.exclude.value.contains($0.rawValue) }
        }
        var unreadable: [UserID: String] = [:]
        for id in ids { if let reason = root?.unreadable(id) { unreadable[id] = reason } }
        let limit = maxAge ?? 86_400
        let reports = try Freshness.evaluate(
            users: ids, repository: repository, maxAge: TimeInterval(limit),
            mirrors: try settings.mirrorRepositories(flags: mirror, rememberListings: true),
            root: root, interrupted: interrupted)
        let followed = try FollowHealth.evaluate(
            users: ids, repository: repository, host: settings.context.host,
            maxLag: TimeInterval(maxFollowLag ?? 60),
            nothingToBackUp: Set(reports.filter { $0.nothingToBackUp != nil }.map(\.user)))
        var result = CheckResult(
            maxAge: limit, reports: reports, unreadable: unreadable, ignored: ignored.filter(\.mayHoldData),
            root: root?.path ?? "", followed: followed)
        result.nagios = nagios
        if let textfile {
            do {
                try OutsideFile.write(
                    Array(result.prometheusText(now: Date()).utf8), to: CheckResult.absolute(textfile), mode: 0o644)
            } catch {
                throw CommandError(
                    description: "cannot write --textfile \(textfile): \(error)", status: .cannotCreate,
                    hint:
                        "name a file in a folder granary can write, such as /var/lib/prometheus/node-exporter/granary.prom"
                )
            }
        }
        return result
    }

    func checkArguments() throws {
        if !exclude.isEmpty && !users.isEmpty { throw ValidationError("--exclude goes with no users named") }
        if let textfile {
            if textfile.isEmpty || textfile.hasSuffix("/") { throw ValidationError("--textfile needs a file name") }
            try GlobalOptions.checkPlace(textfile, "--textfile")
        }
    }

    /// `--nagios`: the run with Nagios' exit codes, a failure to run included (3, UNKNOWN).
    func performNagios(_ console: Console, words: CommandLineWords) -> Int32 {
        do {
            try checkArguments()
            let result = try execute(console)
            _ = console.emit(result)
            return result.nagiosCode
        } catch {
            _ = GranaryMain.report(error, console: console, words: words)
            if !console.json {
                let message = (error as? any GranaryError)?.description ?? "\(error)"
                StandardStreams.output("GRANARY UNKNOWN - check could not run: \(message)\n")
            }
            return 3
        }
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
        /// Whether granary verify proved `newestVerified` restores (a delta with its whole chain),
        /// not only the backup's own check.
        let verified: Bool
        /// `newestVerified`'s standing: `restorable-verified`, `checked-by-backup` or `unverified` (none).
        let state: String
        /// The newest archive that does not restore (verify found it bad, it changed, its chain is
        /// broken), when newer than `newestVerified`: the user fails until a newer one restores.
        @Null var unrestorable: String?
        /// A restore, reset or retire of the user stopped half way (granary recover finishes it).
        let interrupted: Bool
        /// The size of `newest`, in bytes.
        @Null var newestSize: Int64?
        /// The age of `newest` (any state), in seconds.
        @Null var newestAgeSeconds: Int64?
        /// The number of problems (0 when ok): the user's own, and each mirror's.
        let problems: Int
        /// The user passes with no archive: no store yet, or no folder (and no archive) at all.
        let nothingToBackUp: Bool
        /// Why, in words (not in the JSON document: `reason` is for failures).
        var nothingReason: String? = nil
        /// granary follow follows the user on this host.
        var followed = false
        /// Seconds follow's shipped commits lag behind now (null: not followed, or nothing shipped).
        @Null var followLagSeconds: Double? = nil
        /// When follow observed the newest commit it shipped.
        @Null var followLastShipped: Date? = nil
        /// A hole in what restore --at can reach (a segment missing, the base gone, no generation).
        @Null var followGap: String? = nil
        /// check fails the user for its following (not in the JSON document: `reason` says why).
        var followProblem = false

        enum CodingKeys: String, CodingKey {
            case id, ok, newestVerified, ageSeconds, newest, reason, mirrors, retired, verified, state, unrestorable
            case interrupted, newestSize, newestAgeSeconds, problems, nothingToBackUp
            case followed, followLagSeconds, followLastShipped, followGap
        }
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
    /// `--nagios`: a status line first and the OK lines shown.
    var nagios = false
    /// Entries of the root that fail the check (links, folders that are no valid user id).
    let ignored: [Ignored]
    private let root: String

    enum CodingKeys: String, CodingKey { case maxAgeSeconds, ok, users, ignored }

    /// A results document, not a summary: FAIL lines show with --quiet too.
    var isAnswer: Bool { true }

    /// Exit 1 when anything fails (the lines say what, on standard output).
    var status: ExitStatus { ok ? .success : .partialFailure }

    /// Nagios' code: 0 OK, 1 WARNING (only mirrors or entries of the root), 2 CRITICAL.
    var nagiosCode: Int32 {
        if users.contains(where: { !$0.ok && ($0.reason.map { !Self.onlyMirrors($0) } ?? true) }) { return 2 }
        return ok ? 0 : 1
    }

    /// Whether a failing user's reason is only about mirrors.
    static func onlyMirrors(_ reason: String) -> Bool {
        reason.split(separator: ";").allSatisfy { $0.trimmingCharacters(in: .whitespaces).hasPrefix("mirror ") }
    }

    /// `path` made absolute against the current folder (the temporary file goes beside it).
    static func absolute(_ path: String) -> String {
        path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
    }

    /// `unreadable`: the users whose folder could not be read, with why; they fail whatever
    /// their archives.
    init(
        maxAge: Int64, reports: [Freshness.Report], unreadable: [UserID: String] = [:], ignored: [Root.Ignored] = [],
        root: String = "", now: Date = Date(), followed: [UserID: FollowHealth.Report] = [:]
    ) {
        maxAgeSeconds = maxAge
        users = reports.map { report in
            let folder = unreadable[report.user].map { "cannot read its folder: " + $0 }
            let follow = followed[report.user]
            let reason = [folder, report.reason, follow?.problem].compactMap { $0 }.joined(separator: "; ")
            var user = User(
                id: report.user.rawValue, ok: report.ok && folder == nil && follow?.problem == nil,
                newestVerified: report.newestVerified?.path,
                ageSeconds: report.age.map { Int64($0) }, newest: report.newest?.path,
                reason: reason.isEmpty ? nil : reason,
                mirrors: report.mirrors.isEmpty
                    ? nil
                    : report.mirrors.map {
                        Mirror(
                            repository: $0.location, newest: $0.newest?.path, ok: $0.problem == nil, reason: $0.problem)
                    },
                retired: report.retired != nil, verified: report.verified, state: report.standing.rawValue,
                unrestorable: report.problem?.path, interrupted: report.interrupted,
                newestSize: report.newest?.size,
                newestAgeSeconds: report.newest.map { Int64(max(0, now.timeIntervalSince($0.name.created))) },
                problems: reason.isEmpty ? (report.ok ? 0 : 1) : reason.components(separatedBy: "; ").count,
                nothingToBackUp: report.nothingToBackUp != nil, nothingReason: report.nothingToBackUp)
            if let follow {
                user.followed = true
                user.followLagSeconds = follow.lag.map { ($0 * 1000).rounded() / 1000 }
                user.followLastShipped = follow.lastShipped
                user.followGap = follow.gap
                user.followProblem = follow.problem != nil
            }
            return user
        }
        self.ignored = ignored.map { Ignored(name: $0.name, reason: $0.reason) }
        self.root = root
        ok = users.allSatisfy(\.ok) && ignored.isEmpty
    }

    /// One line per failing user or entry (also with --quiet: a result), no hint: monitoring
    /// mail stays one line per problem; OK lines on a terminal, with -v or --nagios.
    func render(_ text: inout TextOutput, _ detail: TextDetail) {
        if nagios { text.line(TextLine(stringLiteral: nagiosLine)) }
        for entry in ignored { text.line("FAIL  \(root)/\(entry.name): \(entry.reason)") }
        for user in users where !user.ok { text.line("FAIL  \(user.id): \(user.reason ?? "failed")") }
        guard detail.summaries || nagios else { return }
        for user in users where user.ok && user.retired {
            text.line(
                "OK    \(user.id): retired, final archive \(user.newest.map { PathText.lastComponent($0) } ?? "")")
        }
        for user in users where user.ok && user.nothingToBackUp {
            text.line("OK    \(user.id): \(user.nothingReason ?? "nothing to back up")")
        }
        for user in users where user.ok && !user.retired && !user.nothingToBackUp {
            let name = user.newestVerified.map { PathText.lastComponent($0) } ?? ""
            text.line(
                "OK    \(user.id): \(name) \(user.verified ? "verified" : "checked by its backup"), \(Freshness.describe(TimeInterval(user.ageSeconds ?? 0))) old"
            )
        }
    }

    /// Nagios' first line: `GRANARY CRITICAL - 1 of 3 users failing: bob@example.com | users=3 failing=1`.
    var nagiosLine: String {
        let failing = users.filter { !$0.ok }
        let word = ["OK", "WARNING", "CRITICAL"][Int(nagiosCode)]
        var line = "GRANARY \(word) - "
        if failing.isEmpty && ignored.isEmpty {
            line +=
                "\(users.count) user\(users.count == 1 ? "" : "s") with a checked archive under \(Freshness.describe(TimeInterval(maxAgeSeconds))) old"
        } else {
            line += "\(failing.count) of \(users.count) users failing"
            if !failing.isEmpty { line += ": " + failing.prefix(5).map(\.id).joined(separator: ", ") }
            if !ignored.isEmpty {
                line += "; \(ignored.count) entr\(ignored.count == 1 ? "y" : "ies") of the root ignored"
            }
        }
        return line + " | users=\(users.count) failing=\(failing.count) ignored=\(ignored.count)"
    }

    /// The results in Prometheus' text exposition format, one metric family per fact, each
    /// user a label (node_exporter's textfile collector reads it).
    func prometheusText(now: Date) -> String {
        let label = PrometheusText.label
        var text = PrometheusText()
        let byUser = users.map { ("{user=\"\(label($0.id))\"}", $0) }
        text.family(
            "granary_newest_archive_age_seconds", "Age of the user's newest regular archive, in seconds.",
            byUser.compactMap { labels, user in user.newestAgeSeconds.map { (labels, String($0)) } })
        text.family(
            "granary_newest_checked_archive_age_seconds",
            "Age of the user's newest archive that its backup checked or granary verify passed, in seconds.",
            byUser.compactMap { labels, user in user.ageSeconds.map { (labels, String($0)) } })
        text.family(
            "granary_newest_archive_verified",
            "1 when granary verify proved the user's newest checked archive restores (a delta with its chain), else 0.",
            byUser.map { labels, user in (labels, user.verified ? "1" : "0") })
        text.family(
            "granary_unrestorable_archive",
            "1 when the user's newest archives do not restore (found bad, changed, or a broken delta chain), else 0.",
            byUser.map { labels, user in (labels, user.unrestorable == nil ? "0" : "1") })
        text.family(
            "granary_newest_archive_size_bytes", "Size of the user's newest regular archive, in bytes.",
            byUser.compactMap { labels, user in user.newestSize.map { (labels, String($0)) } })
        text.family(
            "granary_problems",
            "Problems check found for the user (0: ok; a stopped restore, a mirror, an old archive).",
            byUser.map { labels, user in (labels, String(user.problems)) })
        text.family(
            "granary_interrupted", "1 when a restore, reset or retire of the user stopped half way, else 0.",
            byUser.map { labels, user in (labels, user.interrupted ? "1" : "0") })
        text.family(
            "granary_follow_problem",
            "For each user granary follow follows here: 1 when check found it lagging or with a gap, else 0.",
            byUser.compactMap { labels, user in user.followed ? (labels, user.followProblem ? "1" : "0") : nil })
        text.family(
            "granary_root_entries_ignored", "Entries of the root that may hold data but are no user granary can take.",
            [("", String(ignored.count))])
        text.family("granary_check_ok", "1 when every user passed check, else 0.", [("", ok ? "1" : "0")])
        text.family(
            "granary_check_max_age_seconds", "The --max-age check ran with, in seconds.", [("", String(maxAgeSeconds))])
        text.family(
            "granary_check_timestamp_seconds", "When check wrote this file, in seconds since 1970.",
            [("", String(Int64(now.timeIntervalSince1970)))])
        return text.output
    }
}
