import ArgumentParser
import Foundation
import GranaryKit

struct UsersCommand: GranaryCommand {
    static let configuration = CommandConfiguration(
        commandName: "users",
        abstract: "List the users under the root: stores, sizes, last backup and its age.",
        discussion: """
            Retired users (granary retire: no folder under the root, a final archive their newest) are listed too, \
            as retired, with their final archive; granary restore USER --create brings one back.
            """
    )

    @OptionGroup(title: "Global Options") var global: GlobalOptions

    @Argument(help: ArgumentHelp("Only these users.", valueName: "user"), completion: .custom(Completions.users))
    var users: [String] = []

    func execute(_ console: Console) throws -> UsersResult {
        let settings = try global.settings()
        let root = try settings.requireRoot()
        let ids = try UserID.named(users)
        // A configured repository must be one: a typo or an unmounted disk is said, not shown as no archives.
        let repository = try settings.repository()
        try repository?.requireExisting()
        let (summaries, ignored) = try Inventory.summarize(root: root, repository: repository, only: ids)
        var notes: [String] = []
        if summaries.isEmpty { notes.append("no users under \(root.path)") }
        for user in summaries {
            if let problem = user.problem { notes.append("\(user.id): \(problem)") }
            for path in user.scan.unreadable {
                notes.append("\(user.id): cannot read \(path), which may be a store (backup will refuse this user)")
            }
            for skipped in user.scan.skipped { notes.append("\(user.id): skipped \(skipped.name): \(skipped.reason)") }
        }
        for entry in ignored { notes.append("ignored '\(entry.name)': \(entry.reason)") }
        return UsersResult(
            root: root.path, summaries: summaries, ignored: ignored, hasRepository: settings.repo != nil, notes: notes)
    }
}

/// `granary users`: each user with its stores and newest archive.
struct UsersResult: CommandResult {
    /// A listing: shown with --quiet too.
    var isAnswer: Bool { true }
    struct Store: Encodable {
        let name: String
        @Null var nameBase64: String?
        let path: String
        @Null var pathBase64: String?
        let size: Int64
        /// `wal` or `rollback`.
        let journalMode: String
        let pageSize: Int
        @Null var walSize: Int64?
        let shm: Bool
        let journal: Bool
        let externalData: Bool
    }

    struct User: Encodable {
        let id: String
        let path: String
        let size: Int64
        let stores: [Store]
        @Null var lastBackup: Date?
        @Null var lastArchive: String?
        /// Entries of the folder passed over on purpose, with why.
        let skipped: [Ignored]
        /// Entries that could not be read to tell whether they are stores.
        let unreadable: [JSONName.Named]
        /// Why the folder could not be opened, when it could not.
        @Null var problem: String?
        /// Retired (granary retire): no folder under the root, and `lastArchive` is its final archive.
        let retired: Bool
    }

    typealias Ignored = JSONName.NamedReason

    let root: String
    let users: [User]
    let ignored: [Ignored]
    /// Whether a repository is configured (so "never backed up" means something).
    private let hasRepository: Bool
    let notes: [String]

    enum CodingKeys: String, CodingKey { case root, users, ignored }

    init(root: String, summaries: [UserSummary], ignored: [Root.Ignored], hasRepository: Bool, notes: [String]) {
        self.root = root
        users = summaries.map { user in
            User(
                id: user.id.rawValue, path: user.path, size: user.totalSize,
                stores: user.stores.map {
                    Store(
                        name: $0.name, nameBase64: JSONName.base64($0.name), path: $0.path,
                        pathBase64: JSONName.base64($0.path), size: $0.size,
                        journalMode: JournalMode.name($0.journalKind),
                        pageSize: $0.header.pageSize, walSize: $0.walSize, shm: $0.hasSHM, journal: $0.hasJournal,
                        externalData: $0.hasExternalData)
                },
                lastBackup: user.lastBackup?.name.created, lastArchive: user.lastBackup?.path,
                skipped: user.scan.skipped.map { Ignored(name: $0.name, reason: $0.reason) },
                unreadable: user.scan.unreadable.map(JSONName.Named.init),
                problem: user.problem, retired: user.retired != nil)
        }
        self.ignored = ignored.map { Ignored(name: $0.name, reason: $0.reason) }
        self.hasRepository = hasRepository
        self.notes = notes
    }

    func render(_ text: inout TextOutput, _ detail: TextDetail) {
        let now = Date()
        for user in users {
            if user.retired {
                var line: TextLine = "\(bold: user.id)  retired"
                if let last = user.lastBackup, let archive = user.lastArchive {
                    line +=
                        ": final archive \(PathText.lastComponent(archive)) (\(Format.age(now.timeIntervalSince(last))) ago)"
                }
                text.line(line)
                continue
            }
            if user.stores.isEmpty && user.unreadable.isEmpty && user.skipped.isEmpty && user.problem == nil {
                var line: TextLine = "\(bold: user.id)  no store yet: nothing to back up"
                if let last = user.lastBackup {
                    line += "; last backup \(Format.time(last)) (\(Format.age(now.timeIntervalSince(last))) ago)"
                }
                text.line(line)
                continue
            }
            var line: TextLine =
                "\(bold: user.id)  \(user.stores.count) store\(user.stores.count == 1 ? "" : "s"), \(Format.bytes(user.size))"
            if let last = user.lastBackup {
                line += ", last backup \(Format.time(last)) (\(Format.age(now.timeIntervalSince(last))) ago)"
            } else if hasRepository {
                line += ", never backed up"
            }
            text.line(line)
            for store in user.stores {
                var detail: TextLine =
                    "  \(store.name, width: 24) \(store.journalMode, width: 8) \(Format.bytes(store.size))"
                if let wal = store.walSize { detail += ", -wal \(Format.bytes(wal))" }
                if store.shm { detail += ", -shm" }
                if store.journal { detail += ", -journal" }
                if store.externalData { detail += ", external data" }
                text.line(detail)
            }
        }
    }
}

/// Journal modes as every document and text names them: `wal` or `rollback`.
///
/// Only WAL is a property of a database file; the rollback modes (`delete`, `truncate`,
/// `persist`) belong to each connection, so the mode SQLite reports for granary's own
/// connection says nothing more about the store than "rollback".
enum JournalMode {
    static func name(_ mode: String) -> String { mode.lowercased() == "wal" ? "wal" : "rollback" }
}
