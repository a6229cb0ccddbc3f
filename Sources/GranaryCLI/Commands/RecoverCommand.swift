import ArgumentParser
import Foundation
import GranaryKit

struct RecoverCommand: GranaryCommand {
    static let configuration = CommandConfiguration(
        commandName: "recover",
        abstract: "Finish or roll back a restore, reset or retire that was interrupted.",
        discussion: """
            Each store ends fully old or fully new. A retire that was interrupted ends with the user's folder \
            fully there (it had not moved yet, or changed since) or fully gone (its final archive verified before \
            anything moved). Without users, every user with a pending journal. \
            Temporaries left in the repository by a backup or verify that died are removed.
            """
    )

    @OptionGroup(title: "Global Options") var global: GlobalOptions

    @Argument(help: ArgumentHelp("Only these users.", valueName: "user"), completion: .custom(Completions.users))
    var users: [String] = []

    @OptionGroup var lock: LockOptions

    func execute(_ console: Console) throws -> RecoverResult {
        let settings = try global.settings()
        let ids = try UserID.named(users)
        let root = try settings.requireRoot()
        // A named user with no folder and nothing unfinished is a typo, not "nothing to do"
        // (and no lock file is made for an id that never existed).
        let unfinished = Set(Recovery.unfinishedUsers(root: root))
        let repository = try? settings.repository()
        for id in ids where !unfinished.contains(id) && FileSystem.status(root.path + "/" + id.rawValue) == nil {
            // A retired user (its final archive in the repository) is known: nothing to do.
            if let repository, Retirement.finalArchive(of: id, root: root, repository: repository) != nil { continue }
            throw CommandError(
                description: "no user \(id.rawValue) under the root \(root.path), and nothing of theirs to recover",
                status: .notFound, hint: "granary users lists the users")
        }
        let run = try Recovery.run(
            root: root, users: ids, repository: try settings.repository(), context: lock.context(settings.context))
        var result = RecoverResult()
        result.users = run.reports.filter(RecoverResult.User.applies).map(RecoverResult.User.init)
        result.removedTemporaries = run.removedTemporaries
        // A safety archive still waiting for the repository: the run has not done all it should.
        if let pending = run.reports.compactMap(\.safetyArchivePending).first {
            result.failure = Failure(
                RestoreError.repositoryUnusable(repository: settings.repo?.value ?? "", reason: pending))
        }
        return result
    }
}

/// `granary recover`: the interrupted swaps finished or rolled back, and the temporaries removed.
struct RecoverResult: CommandResult {
    struct User: Encodable, Sendable {
        let id: String
        /// Stores whose swap had committed: now fully new.
        let finished: [JSONName.Named]
        /// Stores whose swap had not committed: still fully old.
        let rolledBack: [JSONName.Named]
        @Null var safetyArchive: String?
        /// Why the safety archive could not be written yet, when it could not.
        @Null var safetyArchivePending: String?
        /// Files that appeared beside a store while its owner was paused, moved away.
        let intruders: [JSONName.Named]
        /// What the switch had to say: each file moved away, and where it is kept.
        let warnings: [String]
        /// An interrupted retire of the user, finished or undone (null when there was none).
        @Null var retire: Retire?
        /// The staging folder of a restore that died before its plan was written, removed.
        @Null var removedStaging: Staging?

        struct Staging: Encodable, Sendable {
            let path: String
            let bytes: Int64
        }

        /// What was done to an interrupted retire.
        struct Retire: Encodable, Sendable {
            /// `finished` (the folder is gone; the final archive stays) or `undone` (the folder is where it was).
            let outcome: String
            /// For `finished`: the final archive.
            @Null var archive: String?
            /// For `undone`: why.
            @Null var reason: String?
            /// For `finished`: where what the owner could not remove was kept.
            @Null var leftoversFolder: String?
        }

        /// Whether recovery had anything to do for the user.
        static func applies(_ report: Recovery.Report) -> Bool {
            report.hadJournal || report.retire != nil || report.removedStaging != nil
        }

        init(_ report: Recovery.Report) {
            id = report.user
            finished = report.rolledForward.map(JSONName.Named.init)
            rolledBack = report.rolledBack.map(JSONName.Named.init)
            safetyArchive = report.safetyArchive
            safetyArchivePending = report.safetyArchivePending
            intruders = report.intruders.map(JSONName.Named.init)
            warnings = report.warnings
            switch report.retire {
            case .finished(let archive, let leftovers):
                retire = Retire(outcome: "finished", archive: archive, reason: nil, leftoversFolder: leftovers)
            case .undone(let reason):
                retire = Retire(outcome: "undone", archive: nil, reason: reason, leftoversFolder: nil)
            case nil: retire = nil
            }
            removedStaging = report.removedStaging.map { Staging(path: $0.path, bytes: $0.bytes) }
        }

        func render(_ text: inout TextOutput, _ detail: TextDetail) {
            if let staging = removedStaging {
                text.line(
                    "removed \(staging.path) (\(Format.bytes(staging.bytes))): the staged files of a restore of \(id) that stopped before it changed anything"
                )
            }
            if let retire {
                if retire.outcome == "finished" {
                    text.line(
                        "finished an interrupted retire of \(id): its folder is gone; final archive \(retire.archive ?? "")"
                    )
                    if let left = retire.leftoversFolder {
                        text.line("  what its owner could not remove is kept in \(left)")
                    }
                } else {
                    text.line(
                        "undid an interrupted retire of \(id): its folder is where it was (\(retire.reason ?? ""))")
                }
            }
            guard !finished.isEmpty || !rolledBack.isEmpty || safetyArchive != nil || !intruders.isEmpty else { return }
            text.line(
                "recovered an interrupted swap of \(id): rolled back \(rolledBack.count), finished \(finished.count)")
            for store in rolledBack { text.line("  \(store.name, width: 24) old content kept") }
            for store in finished { text.line("  \(store.name, width: 24) new content kept") }
            if let safetyArchive { text.line("replaced content kept in \(safetyArchive)") }
            if warnings.isEmpty {
                for file in intruders { text.line("\(file.name) was written while its owner was paused") }
            }
            for warning in warnings { text.line("warning: \(warning)") }
        }
    }

    var users: [User] = []
    /// Temporary files left by runs that died, now removed.
    var removedTemporaries: [String] = []
    /// What keeps the run from having done all it should (a safety archive still waiting).
    var failure: Failure?

    enum CodingKeys: String, CodingKey { case users, removedTemporaries }

    var problems: [Failure] { failure.map { [$0] } ?? [] }
    var status: ExitStatus { failure?.status ?? .success }
    var notes: [String] { users.compactMap(\.safetyArchivePending) }

    func render(_ text: inout TextOutput, _ detail: TextDetail) {
        for user in users { user.render(&text, detail) }
        for path in removedTemporaries { text.line("removed \(path), left by a run that died") }
        if users.isEmpty && removedTemporaries.isEmpty && detail.summaries { text.line("nothing to recover") }
    }
}
