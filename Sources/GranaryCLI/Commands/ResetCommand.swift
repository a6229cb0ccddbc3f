import ArgumentParser
import Foundation
import GranaryKit

struct ResetCommand: GranaryCommand {
    static let cleansUpOnSignals = true
    static let configuration = CommandConfiguration(
        commandName: "reset",
        abstract: "Empty a user's stores, keeping their schema, with a pre-reset safety archive.",
        discussion: """
            Each store is replaced by a new database built from its schema: its tables, virtual tables \
            (FTS3/4/5 and R-tree, recreated empty), indexes, views and then triggers (created last, so none \
            fires), with the header's page size, auto-vacuum, text encoding, user_version, application_id \
            and journal mode. No row is deleted and no old byte is copied. Only the tables that hold schema \
            state keep their rows: Core Data's Z_METADATA, Z_MODELCACHE and Z_PRIMARYKEY (its Z_MAX set to \
            0); alembic_version, schema_migrations, ar_internal_metadata, django_migrations, \
            __EFMigrationsHistory, grdb_migrations, room_master_table, android_metadata, \
            __diesel_schema_migrations, _sqlx_migrations, goose_db_version, flyway_schema_history, \
            knex_migrations, knex_migrations_lock, SequelizeMeta, doctrine_migration_versions, \
            DATABASECHANGELOG, DATABASECHANGELOGLOCK; and the tables named by [reset] keep_tables in \
            granary.toml(5). sqlite_sequence keeps the counters of kept tables only: an emptied AUTOINCREMENT \
            table starts again at 1. sqlite_stat1 and sqlite_stat4 are not carried over. Core Data external \
            data files go. The new store must pass integrity_check, the FTS integrity-check command and \
            rtreecheck(), with no row outside the kept tables, before anything live is touched; a schema \
            entry that is not one CREATE statement, or a virtual table of another module, fails the reset \
            (65). --dry-run lists, per store, the tables it empties and keeps with their rows. Uses the same \
            methods as restore (swap, online, offline, auto). On a terminal reset lists \
            what each store empties and asks; elsewhere it needs --yes (like retire). A user with no backup in \
            the repository is named in the question and warned about on standard error. \
            Exit codes as for restore, and 1 declined, 64 no --yes without a terminal (nothing emptied).
            """
    )

    @OptionGroup(title: "Global Options") var global: GlobalOptions

    @Argument(
        help: ArgumentHelp("The user whose stores to empty.", valueName: "user"), completion: .custom(Completions.users)
    )
    var user: String

    @Option(help: "How each store is put in place.")
    var method: RestoreMethod = .auto

    @Flag(help: "Print the plan (the tables each store empties and keeps) and change nothing.")
    var dryRun = false

    @OptionGroup var owners: OwnerTimeoutOptions

    @OptionGroup var lock: LockOptions

    @Flag(help: "Do not keep the replaced content as a pre-reset archive.")
    var noSafetyArchive = false

    @Flag(name: [.short, .long], help: "Do not ask: reset without a question (for scripts).")
    var yes = false

    func execute(_ console: Console) throws -> ResetResult {
        let settings = try global.settings()
        var request = RestoreRequest(user: try UserID(user), context: settings.context)
        request.operation = .reset
        request.method = method
        request.dryRun = dryRun
        request.ownerTimeout = owners.timeout(settings)
        request.lockTimeout = lock.timeout(settings)
        request.safetyArchive = !noSafetyArchive
        request.check = settings.check.value
        let root = try settings.requireRoot()
        let repository = try settings.repository()
        // A configured repository must be one (its safety archive goes there): an unmounted disk is
        // refused before anything is asked or done.
        try repository?.requireExisting()
        // Whether the user has a regular backup: without one, a reset is the end of the rows.
        let backedUp = ((try? repository?.archives(of: request.user)) ?? []).contains { $0.name.kind == .backup }
        if !dryRun && !yes {
            _ = try root.user(request.user)  // no such user: 66 before any question
            guard console.canAsk else {
                let words = ["granary"] + GranaryMain.argumentBytes().map(ShellWord.quote) + ["--yes"]
                throw ResetNotConfirmed.notConfirmed(
                    user: request.user.rawValue, backedUp: backedUp, command: words.joined(separator: " "))
            }
            let stores = try ResetPlan.stores(of: request.user, in: root, context: request.context).map(
                ResetResult.Plan.init)
            let lines = ResetResult.question(
                user: request.user.rawValue, stores: stores, backedUp: backedUp, safetyArchive: !noSafetyArchive,
                repository: repository?.location)
            let answer = console.ask(lines, prompt: "Type yes to reset \(request.user.rawValue): ")
            try Interruption.check()
            guard let answer, ["yes", "y"].contains(answer.lowercased()) else {
                throw ResetNotConfirmed.declined(user: request.user.rawValue)
            }
        }
        let restorer = Restorer(root: root, repository: repository)
        let restored = RestoreResult(try restorer.run(request), operation: .reset)
        let plan =
            dryRun
            ? try ResetPlan.stores(of: request.user, in: root, context: request.context).map(ResetResult.Plan.init)
            : nil
        var result = ResetResult(restore: restored, plan: plan)
        if !backedUp {
            result.warnings.append(
                noSafetyArchive || repository == nil
                    ? "\(request.user.rawValue) had no backup and no safety archive was kept: the emptied rows are gone for good"
                    : "\(request.user.rawValue) had no backup: the emptied rows are only in the safety archive")
        }
        return result
    }
}

/// A reset the admin did not confirm (nothing was emptied).
enum ResetNotConfirmed: GranaryError, CommandLineError {
    /// A non-interactive reset without `--yes`.
    case notConfirmed(user: String, backedUp: Bool, command: String)
    /// The answer to the question was not yes.
    case declined(user: String)

    var description: String {
        switch self {
        case .notConfirmed(let user, let backedUp, _):
            return
                "reset empties every store of \(user)\(backedUp ? "" : ", which has no backup"); without a terminal to ask on, it needs --yes"
        case .declined(let user): return "not resetting \(user): nothing was emptied"
        }
    }

    var status: ExitStatus {
        switch self {
        case .notConfirmed: return .usage
        case .declined: return .partialFailure
        }
    }

    var hint: String? {
        switch self {
        case .notConfirmed(_, _, let command): return Hint.marker + command
        case .declined: return nil
        }
    }
}

/// `granary reset`: restore's document, and with `--dry-run` what each store empties and keeps.
struct ResetResult: CommandResult {
    /// One store's plan: the tables emptied and kept (with their rows now), the counters set back
    /// and the internal tables not carried over.
    struct Plan: Encodable {
        struct Table: Encodable {
            let name: String
            /// Rows in the live store now (`null` when they could not be counted).
            @Null var rows: Int64?
            /// A virtual table (FTS, R-tree), recreated empty.
            let virtual: Bool
        }
        let name: String
        let empties: [Table]
        let keeps: [Table]
        let countersReset: [String]
        let dropped: [String]

        init(_ store: ResetPlan.Store) {
            name = store.name
            empties = store.plan.emptied.map { Table(name: $0.name, rows: $0.rows, virtual: $0.virtual) }
            keeps = store.plan.kept.map { Table(name: $0.name, rows: $0.rows, virtual: $0.virtual) }
            countersReset = store.plan.countersReset
            dropped = store.plan.dropped
        }
    }

    let restore: RestoreResult
    /// `--dry-run` only, else `null`.
    let plan: [Plan]?
    /// Said loudly on standard error (not a result): the user had no backup.
    var warnings: [String] = []

    enum Keys: String, CodingKey { case plan }

    init(restore: RestoreResult, plan: [Plan]?) {
        self.restore = restore
        self.plan = plan
    }

    /// The question asked on a terminal: what each store loses, and whether anything keeps it.
    static func question(user: String, stores: [Plan], backedUp: Bool, safetyArchive: Bool, repository: String?)
        -> [TextLine]
    {
        var lines: [TextLine] = [
            "reset \(user): every store is emptied (its schema kept)\(safetyArchive && repository != nil ? "; what it held goes to a safety archive" : "")"
        ]
        for store in stores { lines += Self.lines(store).prefix(1).map { "  " + $0 } }
        if stores.isEmpty { lines.append("  no stores") }
        if !backedUp {
            lines.append(
                safetyArchive && repository != nil
                    ? "WARNING: \(user) has no backup in \(repository ?? ""): the safety archive will be the only copy"
                    : "WARNING: \(user) has no backup and no safety archive is kept: the rows will be gone for good")
        }
        return lines
    }

    func encode(to encoder: Encoder) throws {
        try restore.encode(to: encoder)
        var container = encoder.container(keyedBy: Keys.self)
        if let plan { try container.encode(plan, forKey: .plan) } else { try container.encodeNil(forKey: .plan) }
    }

    func render(_ text: inout TextOutput, _ detail: TextDetail) {
        restore.render(&text, detail)
        for store in plan ?? [] { for line in Self.lines(store) { text.line(line) } }
    }

    var status: ExitStatus { restore.status }
    var isAnswer: Bool { restore.dryRun }
    var problems: [Failure] { restore.problems }
    var notes: [String] { restore.notes + warnings.map { "warning: " + $0 } }

    /// `Notes.sqlite: empties notes (100 rows), …` and `Notes.sqlite: keeps Z_METADATA (1 row), …`.
    static func lines(_ store: Plan) -> [TextLine] {
        func table(_ table: Plan.Table) -> String {
            let rows = table.rows.map { "\($0) row\($0 == 1 ? "" : "s")" } ?? "?"
            return "\(table.name) (\(rows)\(table.virtual ? ", virtual" : ""))"
        }
        var lines: [TextLine] = [
            "\(store.name): empties \(store.empties.isEmpty ? "nothing" : store.empties.map(table).joined(separator: ", "))",
            "\(store.name): keeps \(store.keeps.isEmpty ? "no table's rows" : store.keeps.map(table).joined(separator: ", "))",
        ]
        if !store.countersReset.isEmpty {
            lines.append("\(store.name): sets back \(store.countersReset.joined(separator: ", "))")
        }
        if !store.dropped.isEmpty { lines.append("\(store.name): drops \(store.dropped.joined(separator: ", "))") }
        return lines
    }
}
