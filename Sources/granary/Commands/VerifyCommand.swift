import ArgumentParser
import Foundation
import GranaryKit

struct VerifyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Re-read archives: every member against the manifest, then SQLite's integrity check.",
        discussion: """
            Each archive is streamed once: MANIFEST.json must come first, every member must be listed with the \
            size and SHA-256 it has, nothing may be missing, extra or unsafe (absolute names, .., links, devices). \
            The stores are extracted into a private temporary folder under the repository and checked with \
            integrity_check (--check quick: quick_check); the folder is always removed. The result is recorded \
            beside the archive (.NAME.verify.json) for list and check. \
            Exit codes: 0 all good, 65 any archive bad (one line each, naming the member and what is wrong), \
            66 an archive named that does not exist, 130 interrupted. \
            Like backup's compression, the work yields the CPU to every other program (SCHED_IDLE) until other \
            load leaves it none for a second; --json says which ("priority"); GRANARY_YIELD=0 turns this off.
            """
    )

    @OptionGroup var global: GlobalOptions

    @Argument(help: ArgumentHelp("Archives: a path, USER/NAME, or NAME with --user.", valueName: "archive"),
              completion: .custom(Completions.archives))
    var archives: [String] = []

    @Option(help: ArgumentHelp("Verify this user's archives.", valueName: "user"), completion: .custom(Completions.users))
    var user: String?

    @Flag(help: "Verify the archives of every user in the repository.")
    var all = false

    @Flag(help: "Only each user's newest archive.")
    var latest = false

    @Option(help: "full (integrity_check, the default) or quick (quick_check).", completion: .list(["full", "quick"]))
    var check: CheckMode = .full

    func validate() throws {
        if archives.isEmpty && user == nil && !all { throw ValidationError("name archives, or pass --user USER or --all") }
        if all && (user != nil || !archives.isEmpty) { throw ValidationError("pass --all alone, not with archives or --user") }
        if check == .none { throw ValidationError("--check must be full or quick") }
    }

    func run() throws {
        Interruption.installHandlers()
        let console = global.console()
        let settings = try global.settings()
        // Archives named by path can be verified without a configured repository: the folder
        // above the user's folder is taken as the repository (for its work folder).
        let repository: any Repository
        if settings.repo == nil, let first = archives.first, archives.allSatisfy({ FileSystem.isRegularFile($0) }) {
            let absolute = first.hasPrefix("/") ? first : FileManager.default.currentDirectoryPath + "/" + first
            repository = LocalRepository(path: ((absolute as NSString).deletingLastPathComponent as NSString).deletingLastPathComponent)
        } else {
            repository = try settings.requireRepository()
        }
        let owner = try user.map { (id) throws(UserError) in try UserID(id) }
        var entries: [RepositoryEntry] = []
        if !archives.isEmpty {
            let locator = ArchiveLocator(repository: repository)
            entries = try archives.map { try locator.locate($0, user: owner) }
        } else {
            let users = try owner.map { [$0] } ?? repository.users()
            if let owner, try !repository.folders().contains(owner.rawValue) {
                throw UserError.notFound(owner.rawValue, root: repository.path)
            }
            for user in users {
                let all = try repository.archives(of: user)
                // --latest means the user's newest regular backup, never a safety or final archive.
                entries += latest ? Array(all.filter { $0.name.kind == .backup }.suffix(1)) : all.reversed()
            }
        }
        if entries.isEmpty { console.info("no archives to verify in \(repository.path)") }
        let outcomes = try ArchiveVerification.run(entries, repository: repository, check: check)
        var bad = 0
        for outcome in outcomes {
            if let failure = outcome.failure {
                bad += 1
                if !global.json { console.error(failure) }
            } else if (console.isTerminal || global.verbose) && !global.json {
                console.out("ok  \(outcome.entry.user)/\(outcome.entry.name)  \(outcome.stores) store\(outcome.stores == 1 ? "" : "s"), \(Format.bytes(outcome.bytes)) checked (\(check.rawValue))")
            }
        }
        if global.json { console.json(VerifyDocument(outcomes, check: check)) }
        if bad > 0 { throw ExitCode(ExitStatus.dataError.rawValue) }
    }
}

/// `granary verify --json`: format version 1.
struct VerifyDocument: Encodable {
    struct Fault: Encodable {
        let member: String?
        let reason: String
    }

    struct Archive: Encodable {
        let user: String
        let archive: String
        let path: String
        let ok: Bool
        let stores: Int
        let bytes: Int64
        let error: Fault?
    }

    let format = 1
    let check: String
    /// "yielded", "raised" or "normal": how the work was scheduled (see CPUYield).
    let priority: String
    let archives: [Archive]

    init(_ outcomes: [ArchiveVerification.Outcome], check: CheckMode) {
        self.check = check.rawValue
        priority = CPUYield.shared.mode.rawValue
        archives = outcomes.map {
            Archive(
                user: $0.entry.user.rawValue, archive: $0.entry.name.fileName, path: $0.entry.path, ok: $0.failure == nil,
                stores: $0.stores, bytes: $0.bytes, error: $0.failure.map { Fault(member: $0.member, reason: $0.reason) })
        }
    }
}
