import ArgumentParser
import Foundation
import GranaryKit

struct PruneCommand: GranaryCommand {
    static let configuration = CommandConfiguration(
        commandName: "prune",
        abstract: "Remove the archives a retention policy does not keep (restic's forget rules).",
        discussion: """
            Archives are taken newest first. --keep-last N keeps the N newest. --keep-hourly, --keep-daily, \
            --keep-weekly, --keep-monthly and --keep-yearly N keep the newest archive of each of the N most \
            recent hours, days, ISO weeks (Monday to Sunday), months or years that have an archive: periods \
            without one do not count. Periods are in UTC. --keep-within DURATION keeps every archive taken \
            within DURATION of the user's newest archive (not of now, so a stalled backup job never lets prune \
            empty a user). The rules are OR'd. A user's newest verified archive is always kept. Safety archives \
            follow safety_keep_within alone; final archives (what granary retire left) are kept for ever unless \
            --final-keep-within (or final_keep_within) says otherwise: once a retired user's final archive is \
            older than that, every archive of that user is removed. \
            Without --keep-* options the configured [retention] policy applies; an empty policy is refused \
            (exit 64). --dry-run and -v list each archive, kept (with the rules that keep it) or removed. \
            Delta archives: an archive a kept delta is built on is kept; a run of deltas that nothing keeps \
            but a kept delta is merged into one archive with that delta's state, time and label (a delta on \
            the run's base, or a new full when the chain's full is kept by nothing else), written and proven \
            before any archive it replaces is removed; --no-merge keeps such runs as they are. \
            Exit codes: 0, 1 some users failed, 64 empty policy, 66 unknown user, 75 lock held.
            """
    )

    @OptionGroup(title: "Global Options") var global: GlobalOptions

    @Argument(
        help: ArgumentHelp("Users whose archives to prune.", valueName: "user"), completion: .custom(Completions.users))
    var users: [String] = []

    @Flag(help: "Prune every user in the repository.")
    var all = false

    @Option(parsing: .unconditional, help: ArgumentHelp("Keep the N newest archives.", valueName: "n")) var keepLast:
        Int?
    @Option(
        parsing: .unconditional,
        help: ArgumentHelp("Keep the newest archive of each of the last N hours that have one.", valueName: "n"))
    var keepHourly: Int?
    @Option(
        parsing: .unconditional,
        help: ArgumentHelp("Keep the newest archive of each of the last N days that have one.", valueName: "n"))
    var keepDaily: Int?
    @Option(
        parsing: .unconditional,
        help: ArgumentHelp("Keep the newest archive of each of the last N ISO weeks that have one.", valueName: "n"))
    var keepWeekly: Int?
    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "Keep the newest archive of each of the last N months that have one (-1: every month).", valueName: "n"))
    var keepMonthly: Int?
    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "Keep the newest archive of each of the last N years that have one (-1: every year).", valueName: "n"))
    var keepYearly: Int?
    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "Keep every archive taken within this long of the user's newest archive, as restic: 12h, 7d, 6mo, 1y, 1y6mo.",
            valueName: "duration"),
        transform: ArgumentValues.retention())
    var keepWithin: TimeSpan?

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "Keep final archives (what retired users left) this long (1y, 6mo, 90d), then remove every archive of a retired user (default: for ever).",
            valueName: "duration"),
        transform: ArgumentValues.retention())
    var finalKeepWithin: TimeSpan?

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "Keep follow's windows that ended within this long of now (7d, 12h), with their base archives; remove older ones' segments (default: segments live as long as their base).",
            valueName: "duration"),
        transform: ArgumentValues.retention())
    var followedKeepWithin: TimeSpan?

    @OptionGroup var lock: LockOptions

    @Flag(help: "Show what would be kept (and by which rule), merged and removed; remove nothing.")
    var dryRun = false

    @Flag(help: "Keep runs of deltas that only a kept delta needs instead of merging them.")
    var noMerge = false

    func checkArguments() throws {
        if users.isEmpty && !all { throw ValidationError("name users to prune, or pass --all") }
        if !users.isEmpty && all { throw ValidationError("pass users or --all, not both") }
        for (value, option) in [
            (keepLast, "--keep-last"), (keepHourly, "--keep-hourly"), (keepDaily, "--keep-daily"),
            (keepWeekly, "--keep-weekly"), (keepMonthly, "--keep-monthly"), (keepYearly, "--keep-yearly"),
        ] {
            if let value, !SettingLimits.retentionCount.contains(value) {
                throw ValidationError(
                    "\(option) \(value) is out of range: give 0 to \(SettingLimits.retentionCount.upperBound), or -1 for no limit (restic's unlimited)"
                )
            }
        }
    }

    /// The policy from the flags, when any is given.
    var flagPolicy: RetentionPolicy? {
        guard
            [keepLast, keepHourly, keepDaily, keepWeekly, keepMonthly, keepYearly].contains(where: { $0 != nil })
                || keepWithin != nil
        else { return nil }
        return RetentionPolicy(
            keepLast: keepLast ?? 0, keepHourly: keepHourly ?? 0, keepDaily: keepDaily ?? 0,
            keepWeekly: keepWeekly ?? 0,
            keepMonthly: keepMonthly ?? 0, keepYearly: keepYearly ?? 0, keepWithin: keepWithin ?? TimeSpan())
    }

    func execute(_ console: Console) throws -> PruneResult {
        let settings = try global.settings()
        let repository = try settings.requireRepository(rememberListings: true)
        var policy = flagPolicy ?? settings.retention.value
        // Safety and final archives keep their own rules (the configuration's, --final-keep-within) whatever the keep flags.
        policy.safetyKeepWithin = settings.retention.value.safetyKeepWithin
        policy.finalKeepWithin = finalKeepWithin ?? settings.retention.value.finalKeepWithin
        policy.followedKeepWithin = followedKeepWithin ?? settings.retention.value.followedKeepWithin
        if policy.isEmpty {
            throw ValidationError(
                "the retention policy is empty: pass --keep-last, --keep-daily, … or set [retention] in the configuration file"
            )
        }
        let ids = all ? try repository.users() : try UserID.named(users)
        let folders = Set(try repository.folders())
        for id in ids where !folders.contains(id.rawValue) {
            throw NoArchivesError(user: id, repository: repository.location, root: try? settings.requireRoot())
        }
        let root = try? settings.requireRoot()
        var result = PruneResult(dryRun: dryRun)
        for id in ids {
            do {
                // follow's segments: a step of their own, under the same lock, after the archives.
                var removals: [FollowedRetention.Removal] = []
                let plan = try ArchiveRemoval.prune(
                    user: id, repository: repository, policy: policy, root: root,
                    lockTimeout: lock.timeout(settings), dryRun: dryRun, merge: !noMerge,
                    followed: { removals = $0 })
                var user = PruneResult.User(id: id.rawValue, plan: plan)
                user.followed = removals.map {
                    PruneResult.Followed(
                        host: $0.generation.host, base: $0.generation.base, segments: $0.generation.segments.count,
                        why: $0.why)
                }
                result.users.append(user)
            } catch let error as any GranaryError {
                if ids.count == 1 { throw error }
                result.users.append(PruneResult.User(id: id.rawValue, error: error))
            }
        }
        return result
    }
}

/// `granary prune`: per user, each archive kept (with the rules that keep it) or removed.
struct PruneResult: CommandResult {
    struct Archive: Encodable, Sendable {
        let name: String
        let path: String
        let keep: Bool
        /// The rules that keep it: `last`, `hourly`, `daily`, `weekly`, `monthly`, `yearly`,
        /// `within`, `newest verified`; empty when it is removed.
        let keptBy: [String]
        /// Replaced by an archive prune merged (delta archives): what it becomes.
        var mergedInto: String?
        /// An archive prune merged: the names of the archives it replaces.
        var merged: [String]?
    }

    /// One user's archives after the policy, newest first.
    struct Plan: Encodable, Sendable {
        let archives: [Archive]

        init(_ items: [ArchiveRemoval.Item]) {
            archives = items.map {
                Archive(
                    name: $0.entry.name.fileName, path: $0.entry.path, keep: $0.keep, keptBy: $0.keptBy,
                    mergedInto: $0.mergedInto, merged: $0.merged)
            }
        }

        /// One line per archive: `keep NAME rules` or `remove NAME` (`removed` once done).
        func render(_ text: inout TextOutput, dryRun: Bool) {
            for archive in archives {
                if let into = archive.mergedInto {
                    text.line("  \(dryRun ? "merge" : "merged", width: 8)\(archive.name, width: 40)into \(into)")
                    continue
                }
                let verb = archive.keep ? (dryRun ? "keep" : "kept") : (dryRun ? "remove" : "removed")
                var why = archive.keep ? archive.keptBy.joined(separator: ", ") : "kept by no rule"
                if let merged = archive.merged { why += " (merged from \(merged.count) archives)" }
                text.line("  \(verb, width: 8)\(archive.name, width: 40)\(why)")
            }
        }
    }

    /// A followed generation (its segments) prune removes.
    struct Followed: Encodable, Sendable {
        let host: String
        let base: String
        let segments: Int
        let why: String
    }

    struct User: Encodable {
        let id: String
        let archives: [Archive]
        /// follow's generations removed (their segments), with why.
        var followed: [Followed] = []
        @Null var error: Failure?

        init(id: String, plan: [ArchiveRemoval.Item]) {
            self.id = id
            archives = Plan(plan).archives
        }

        init(id: String, error: any GranaryError) {
            self.id = id
            archives = []
            self.error = Failure(error)
        }
    }

    let dryRun: Bool
    /// A dry run's list is an answer, shown with --quiet too.
    var isAnswer: Bool { dryRun }
    var users: [User] = []

    var problems: [Failure] { users.compactMap(\.error) }

    func render(_ text: inout TextOutput, _ detail: TextDetail) {
        for user in users where user.error == nil {
            let removed = user.archives.filter { !$0.keep }.count
            // Delta archives: those a merge replaces are removed too, once the merged archive is proven.
            let merged = user.archives.filter { $0.mergedInto != nil }.count
            let into = Set(user.archives.compactMap(\.mergedInto)).count
            let merges = merged == 0 ? "" : " (\(merged) replaced by \(into) merged archive\(into == 1 ? "" : "s"))"
            if dryRun {
                text.line("\(bold: user.id)  keep \(user.archives.count - removed), remove \(removed)\(merges)")
            } else if detail.summaries {
                text.line("\(bold: user.id): kept \(user.archives.count - removed), removed \(removed)\(merges)")
            }
            if dryRun || detail.verbose { Plan(archives: user.archives).render(&text, dryRun: dryRun) }
            if dryRun || detail.summaries {
                for generation in user.followed {
                    text.line(
                        "  \(dryRun ? "remove" : "removed", width: 8)followed window on \(generation.base) (\(generation.segments) segment\(generation.segments == 1 ? "" : "s")): \(generation.why)"
                    )
                }
            }
        }
    }
}

extension PruneResult.Plan {
    init(archives: [PruneResult.Archive]) { self.archives = archives }
}
