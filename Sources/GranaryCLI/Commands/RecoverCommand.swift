import ArgumentParser
import Foundation
import GranaryKit

struct RecoverCommand: GranaryCommand {
    static let configuration = CommandConfiguration(
        commandName: "recover",
        abstract: "Finish or roll back a restore or reset that was interrupted.",
        discussion: """
            Each store ends fully old or fully new. Without users, every user with a pending journal. \
            Temporaries left in the repository by a backup or verify that died are removed.
            """
    )

    @OptionGroup(title: "Global Options") var global: GlobalOptions

    @Argument(help: ArgumentHelp("Only these users.", valueName: "user"), completion: .custom(Completions.users))
    var users: [String] = []

    @OptionGroup var lock: LockOptions

    func execute(_ console: Console) throws -> RecoverResult {
        let settings = try global.settings()
        let root = try settings.requireRoot()
        var ids = try users.map { (id) throws(UserError) in try UserID(id) }
        if ids.isEmpty { ids = FileSystem.contents(of: root.stateFolder + "/restore").compactMap { try? UserID($0) } }
        var result = RecoverResult()
        for id in ids {
            let lock = try UserLock.acquire(root: root, user: id, timeout: lock.timeout(settings))
            defer { lock.release() }
            let report = try Recovery.recover(root: root, user: id)
            if report.hadJournal { result.users.append(RecoverResult.User(report)) }
        }
        // A backup or verify killed half-way leaves temporaries named after its dead pid; the next
        // backup would remove them, recover does it now.
        if let repo = settings.repo.map({ Repository(path: $0.value) }) {
            result.removedTemporaries = Recovery.removeDeadTemporaries(in: repo, users: users.isEmpty ? [] : ids)
        }
        return result
    }
}

/// `granary recover`: the interrupted swaps finished or rolled back, and the temporaries removed.
struct RecoverResult: CommandResult {
    struct User: Encodable, Sendable {
        let id: String
        /// Stores whose swap had committed: now fully new.
        let finished: [String]
        /// Stores whose swap had not committed: still fully old.
        let rolledBack: [String]
        @Null var safetyArchive: String?

        init(_ report: Recovery.Report) {
            id = report.user
            finished = report.rolledForward
            rolledBack = report.rolledBack
            safetyArchive = report.safetyArchive
        }

        func render(_ text: inout TextOutput, _ detail: TextDetail) {
            text.line("recovered an interrupted swap of \(id): rolled back \(rolledBack.count), finished \(finished.count)")
            for name in rolledBack { text.line("  \(name, width: 24) old content kept") }
            for name in finished { text.line("  \(name, width: 24) new content kept") }
            if let safetyArchive { text.line("replaced content kept in \(safetyArchive)") }
        }
    }

    var users: [User] = []
    /// Temporary files left by runs that died, now removed.
    var removedTemporaries: [String] = []

    func render(_ text: inout TextOutput, _ detail: TextDetail) {
        for user in users { user.render(&text, detail) }
        for path in removedTemporaries { text.line("removed \(path), left by a run that died") }
        if users.isEmpty && removedTemporaries.isEmpty && detail.summaries { text.line("nothing to recover") }
    }
}
