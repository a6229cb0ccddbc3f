import ArgumentParser
import Foundation
import GranaryKit

struct PruneCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "prune",
        abstract: "Remove the archives a retention policy does not keep (restic's forget rules).",
        discussion: """
            Archives are taken newest first. --keep-last N keeps the N newest. --keep-hourly, --keep-daily, \
            --keep-weekly, --keep-monthly and --keep-yearly N keep the newest archive of each of the N most \
            recent hours, days, ISO weeks (Monday to Sunday), months or years that have an archive: periods \
            without one do not count. Periods are in UTC. --keep-within DURATION keeps every archive taken \
            within DURATION of the newest archive (not of now, so a stalled backup job never lets prune empty \
            a user). The rules are OR'd. A user's newest verified archive is always kept. \
            Without --keep-* options the configured [retention] policy applies; an empty policy is refused \
            (exit 64). \
            Example, hourly archives from 2025-01-01 to 2025-12-31 23:30 and --keep-last 2 --keep-daily 3 \
            --keep-weekly 2 --keep-monthly 2: kept are 12-31 23:30 (last, daily, weekly, monthly), 12-31 22:30 \
            (last), 12-30 23:30 and 12-29 23:30 (daily), 12-28 23:30 (weekly: the Sunday ending the week \
            before) and 11-30 23:30 (monthly); the other 8,754 are removed. \
            Exit codes: 0, 1 some users failed, 64 empty policy, 66 unknown user, 75 lock held.
            """
    )

    @OptionGroup var global: GlobalOptions

    @Argument(help: ArgumentHelp("Users whose archives to prune.", valueName: "user"), completion: .custom(Completions.users))
    var users: [String] = []

    @Flag(help: "Prune every user in the repository.")
    var all = false

    @Option(help: ArgumentHelp("Keep the N newest archives.", valueName: "n")) var keepLast: Int?
    @Option(help: ArgumentHelp("Keep the newest archive of each of the last N hours that have one.", valueName: "n")) var keepHourly: Int?
    @Option(help: ArgumentHelp("Keep the newest archive of each of the last N days that have one.", valueName: "n")) var keepDaily: Int?
    @Option(help: ArgumentHelp("Keep the newest archive of each of the last N ISO weeks that have one.", valueName: "n")) var keepWeekly: Int?
    @Option(help: ArgumentHelp("Keep the newest archive of each of the last N months that have one.", valueName: "n")) var keepMonthly: Int?
    @Option(help: ArgumentHelp("Keep the newest archive of each of the last N years that have one.", valueName: "n")) var keepYearly: Int?
    @Option(help: ArgumentHelp("Keep every archive taken within this long of the newest (30m, 12h, 7d, 1d12h).", valueName: "duration"))
    var keepWithin: String?

    @Flag(help: "Show what would be kept (and by which rule) and removed; remove nothing.")
    var dryRun = false

    func validate() throws {
        if users.isEmpty && !all { throw ValidationError("name users to prune, or pass --all") }
        if !users.isEmpty && all { throw ValidationError("pass users or --all, not both") }
        for value in [keepLast, keepHourly, keepDaily, keepWeekly, keepMonthly, keepYearly] {
            if let value, value < 0 { throw ValidationError("--keep-* counts must not be negative") }
        }
        if let keepWithin, DurationText.seconds(keepWithin) == nil {
            throw ValidationError("--keep-within \(keepWithin.debugDescription) is not a duration such as 12h, 7d or 1d12h")
        }
    }

    /// The policy from the flags, when any is given.
    var flagPolicy: RetentionPolicy? {
        guard [keepLast, keepHourly, keepDaily, keepWeekly, keepMonthly, keepYearly].contains(where: { $0 != nil }) || keepWithin != nil
        else { return nil }
        return RetentionPolicy(
            keepLast: keepLast ?? 0, keepHourly: keepHourly ?? 0, keepDaily: keepDaily ?? 0, keepWeekly: keepWeekly ?? 0,
            keepMonthly: keepMonthly ?? 0, keepYearly: keepYearly ?? 0, keepWithin: keepWithin.flatMap(DurationText.seconds) ?? 0)
    }

    func run() throws {
        let console = global.console()
        let settings = try global.settings()
        let repository = try settings.requireRepository()
        var policy = flagPolicy ?? settings.retention.value
        // Safety and final archives keep their own rules (the configuration's) whatever the flags.
        policy.safetyKeepWithin = settings.retention.value.safetyKeepWithin
        policy.finalKeepWithin = settings.retention.value.finalKeepWithin
        if policy.isEmpty {
            throw ValidationError("the retention policy is empty: pass --keep-last, --keep-daily, … or set [retention] in the configuration file")
        }
        let ids = all ? try repository.users() : try users.map { (id) throws(UserError) in try UserID(id) }
        let folders = Set(try repository.folders())
        for id in ids where !folders.contains(id.rawValue) {
            throw UserError.notFound(id.rawValue, root: repository.path)
        }
        let root = try? settings.requireRoot()
        var document: [PruneDocument.User] = []
        var failures = 0
        for id in ids {
            do {
                let plan = try ArchiveRemoval.prune(
                    user: id, repository: repository, policy: policy, root: root, lockTimeout: settings.lockTimeout.value, dryRun: dryRun)
                document.append(PruneDocument.User(id: id.rawValue, plan: plan))
                if global.json { continue }
                let removed = plan.filter { !$0.keep }.count
                if dryRun {
                    console.out(console.bold(id.rawValue) + "  keep \(plan.count - removed), remove \(removed)")
                    for item in plan {
                        console.out("  " + Format.pad(item.keep ? "keep" : "remove", 7) + Format.pad(item.entry.name.fileName, 40)
                            + item.keptBy.joined(separator: ", "))
                    }
                } else if console.isTerminal || global.verbose {
                    console.out("\(id): kept \(plan.count - removed), removed \(removed)")
                }
            } catch let error as GranaryError {
                if ids.count == 1 { throw error }
                failures += 1
                console.error(error)
            }
        }
        if global.json { console.json(PruneDocument(dryRun: dryRun, users: document)) }
        if failures > 0 { throw ExitCode(ExitStatus.partialFailure.rawValue) }
    }
}

/// `granary prune --json`: format version 1.
struct PruneDocument: Encodable {
    struct Archive: Encodable {
        let name: String
        let path: String
        let keep: Bool
        let keptBy: [String]
    }

    struct User: Encodable {
        let id: String
        let archives: [Archive]

        init(id: String, plan: [ArchiveRemoval.Item]) {
            self.id = id
            archives = plan.map { Archive(name: $0.entry.name.fileName, path: $0.entry.path, keep: $0.keep, keptBy: $0.keptBy) }
        }
    }

    let format = 1
    let dryRun: Bool
    let users: [User]
}
