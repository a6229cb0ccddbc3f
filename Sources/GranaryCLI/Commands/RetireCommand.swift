import ArgumentParser
import Foundation
import GranaryKit

struct RetireCommand: GranaryCommand {
    static let configuration = CommandConfiguration(
        commandName: "retire",
        abstract: "Remove a user who left: a final archive, verified, then the user's folder.",
        discussion: """
            Refused while any process has one of the user's stores (or its -wal, -shm or -journal) open or an \
            owner serves one, with the checks a restore's commit makes; checked before the final archive and \
            again just before the folder moves, and a refused retire leaves the folder as it was. The final \
            archive (kind final) is verified in full before anything is removed; prune keeps it for ever unless \
            --final-keep-within says otherwise, and it is sent to each mirror. The final archive holds every \
            regular file of the folder: the stores, and the other files (notes, preferences) under files/, with \
            their owners and modes. Links, FIFOs, sockets, devices and files of another owner than the folder's \
            are in no archive: retire refuses while the folder holds any, naming them, unless --discard-others \
            is given (what the owner may remove goes with the folder; the rest is kept aside, as always). On a terminal retire \
            shows the stores and sizes it will remove and asks; elsewhere it needs --yes. An interrupted retire \
            is finished or undone by granary recover. granary restore USER --create brings the user back, here \
            or on another host. \
            Exit codes: 0 retired, 1 declined, or a mirror did not take the final archive (the user is retired), \
            64 usage (no --yes without a terminal), 65 a store is damaged, or the folder holds entries no archive can hold \
            (without --discard-others), 66 no such user (or retired already, or no store to archive), \
            73 or 74 cannot write, 75 a store is in use, or changed while it was archived, or lock held (nothing removed).
            """
    )

    static let cleansUpOnSignals = true

    @OptionGroup(title: "Global Options") var global: GlobalOptions

    @Argument(help: ArgumentHelp("The user to retire.", valueName: "user"), completion: .custom(Completions.users))
    var user: String

    @Flag(name: [.short, .long], help: "Do not ask: retire without a question (for scripts).")
    var yes = false

    @Flag(
        help:
            "Retire even though the folder holds links, FIFOs, other special files or files of another owner, which no archive holds."
    )
    var discardOthers = false

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "How long an owner has to answer when granary asks whether it serves a store: 10s, 0.5 (default: 10s).",
            valueName: "duration"),
        transform: ArgumentValues.timeout(within: SettingLimits.ownerTimeout))
    var ownerTimeout: Duration?

    @OptionGroup var lock: LockOptions

    func execute(_ console: Console) throws -> RetireResult {
        let settings = try global.settings()
        let id = try UserID(user)
        let root = try settings.requireRoot()
        var context = lock.context(settings.context)
        if let ownerTimeout { context.ownerTimeout = ownerTimeout }
        let repository = try settings.requireRepository()
        let retirement = Retirement(
            root: root, repository: repository, mirrors: try settings.mirrorRepositories(), context: context)
        if !yes {
            guard console.canAsk else {
                let words = ["granary"] + GranaryMain.argumentBytes().map(ShellWord.quote) + ["--yes"]
                throw RetireNotConfirmed.notConfirmed(user: id.rawValue, command: words.joined(separator: " "))
            }
            try retirement.checkNotInUse(id)
            let plan = try retirement.plan(id)
            let answer = console.ask(RetireResult.question(plan), prompt: "Type yes to retire \(id.rawValue): ")
            try Interruption.check()
            guard let answer, ["yes", "y"].contains(answer.lowercased()) else {
                throw RetireNotConfirmed.declined(user: id.rawValue)
            }
        }
        return RetireResult(try retirement.run(id, discardOthers: discardOthers))
    }
}

/// `granary retire`: the final archive and what was removed.
struct RetireResult: CommandResult {
    struct Store: Encodable {
        let name: String
        /// The database and its `-wal`, in bytes.
        let size: Int64
        let externalFiles: Int
        let externalSize: Int64
    }

    let user: String
    /// The user's folder, now gone.
    let folder: String
    /// The verified final archive.
    let archive: String
    let archiveSize: Int64
    let stores: [Store]
    /// Files of the folder that were not part of a store, relative to it: the regular ones are in
    /// the final archive under `files/`, the rest (`discarded`) in no archive.
    let others: [String]
    let othersSize: Int64
    /// Regular files that are not part of a store, in the final archive.
    let plainFiles: Int
    /// Links, special files and other owners' files and folders left out of the final archive (`--discard-others`).
    let discarded: [String]
    /// The final archive on each mirror (null without mirrors).
    @Null var mirrors: [BackupResult.Mirror]?
    /// What the owner's permissions could not remove (kept in `leftoversFolder`, not removed as root).
    let leftovers: [String]
    @Null var leftoversFolder: String?
    /// An interrupted restore, reset or retire of the user that was finished or undone first.
    @Null var recovered: RecoverResult.User?

    init(_ report: Retirement.Report) {
        user = report.plan.user.rawValue
        folder = report.plan.folder
        archive = report.archive
        archiveSize = report.archiveSize
        stores = report.plan.stores.map(Self.store)
        others = report.plan.others
        othersSize = report.plan.othersSize
        plainFiles = report.plainFiles
        discarded = report.discarded
        mirrors = report.mirrors.isEmpty ? nil : report.mirrors.map(BackupResult.Mirror.init)
        leftovers = report.leftovers
        leftoversFolder = report.leftoversFolder
        recovered = report.recovered.map(RecoverResult.User.init)
    }

    static func store(_ store: Retirement.Store) -> Store {
        Store(name: store.name, size: store.size, externalFiles: store.externalFiles, externalSize: store.externalSize)
    }

    /// The question asked on a terminal: what will be archived and removed, with sizes.
    static func question(_ plan: Retirement.Plan) -> [TextLine] {
        var lines: [TextLine] = [
            "retire \(plan.user.rawValue): a final archive of its stores is taken and verified, then \(plan.folder) is removed for good (\(Format.bytes(plan.size)))"
        ]
        for store in plan.stores { lines.append(storeLine(Self.store(store))) }
        if plan.stores.isEmpty { lines.append("  no stores") }
        let regular = plan.others.filter { !plan.specials.contains($0) }
        if !regular.isEmpty {
            let shown = regular.prefix(5).joined(separator: ", ") + (regular.count > 5 ? ", …" : "")
            lines.append(
                "  and \(regular.count) other file\(regular.count == 1 ? "" : "s") (\(Format.bytes(plan.othersSize))), archived under files/: \(shown)"
            )
        }
        if !plan.specials.isEmpty {
            let shown = plan.specials.prefix(5).joined(separator: ", ") + (plan.specials.count > 5 ? ", …" : "")
            lines.append(
                "  and \(plan.specials.count) entr\(plan.specials.count == 1 ? "y" : "ies") that no archive holds (links, special files, other owners' files and folders): \(shown)"
            )
        }
        return lines
    }

    static func storeLine(_ store: Store) -> TextLine {
        var line: TextLine = "  \(store.name, width: 24) \(Format.bytes(store.size))"
        if store.externalFiles > 0 {
            line +=
                ", external data \(store.externalFiles) file\(store.externalFiles == 1 ? "" : "s") \(Format.bytes(store.externalSize))"
        }
        return line
    }

    func render(_ text: inout TextOutput, _ detail: TextDetail) {
        if let recovered { recovered.render(&text, detail) }
        text.line(
            "retired \(bold: user): final archive \(PathText.lastComponent(archive)) (\(Format.bytes(archiveSize)), verified, \(plainFiles) other file\(plainFiles == 1 ? "" : "s")); \(folder) removed"
        )
        if detail.verbose {
            text.line("  archive \(archive)")
            for store in stores { text.line(Self.storeLine(store)) }
            for name in others where !discarded.contains(name) {
                text.line("  \(name, width: 24) archived under files/")
            }
            for name in discarded { text.line("  \(name, width: 24) removed, in no archive") }
            for mirror in mirrors ?? [] where mirror.ok {
                text.line("  sent to \(mirror.archive ?? mirror.repository)")
            }
        }
    }

    /// A mirror that did not take the final archive: the user is retired, the mirror lacks it.
    var problems: [Failure] {
        (mirrors ?? []).compactMap(\.error).map {
            Failure(
                code: .partialFailure, message: "\(user): \($0.message)",
                hint: "granary sync \(ShellWord.quote(user)) sends it")
        }
    }

    var notes: [String] {
        leftovers.isEmpty
            ? []
            : [
                "warning: \(leftovers.count) entr\(leftovers.count == 1 ? "y" : "ies") of the folder could not be removed with its owner's permissions (\(leftovers.prefix(3).joined(separator: ", "))); they are kept in \(leftoversFolder ?? "the root's .granary folder")"
            ]
    }
}

/// A retire the admin did not confirm (nothing was removed).
enum RetireNotConfirmed: GranaryError, CommandLineError {
    /// A non-interactive retire without `--yes`.
    case notConfirmed(user: String, command: String)
    /// The answer to the question was not yes.
    case declined(user: String)

    var description: String {
        switch self {
        case .notConfirmed(let user, _):
            return "retire removes \(user)'s folder for good; without a terminal to ask on, it needs --yes"
        case .declined(let user): return "not retiring \(user): nothing was removed"
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
        // The very command line, its words quoted, with --yes.
        case .notConfirmed(_, let command): return Hint.marker + command
        case .declined: return nil
        }
    }
}
