import ArgumentParser
import Foundation
import GranaryKit

struct UsersCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "users",
        abstract: "List the users under the root: stores, sizes, last backup and its age."
    )

    @OptionGroup var global: GlobalOptions

    @Argument(help: ArgumentHelp("Only these users.", valueName: "user"), completion: .custom(Completions.users))
    var users: [String] = []

    func run() throws {
        let console = global.console()
        let settings = try global.settings()
        let root = try settings.requireRoot()
        let ids = try users.map { (id) throws(UserError) in try UserID(id) }
        let (summaries, ignored) = try Inventory.summarize(
            root: root, repository: try settings.repository(), only: ids)
        if global.json {
            console.json(UsersDocument(root: root.path, users: summaries, ignored: ignored))
            return
        }
        if summaries.isEmpty { console.info("no users under \(root.path)") }
        let now = Date()
        for user in summaries {
            var line = console.bold(user.id.rawValue)
            line += "  \(user.stores.count) store\(user.stores.count == 1 ? "" : "s"), \(Format.bytes(user.totalSize))"
            if let last = user.lastBackup {
                line += ", last backup \(Format.time(last.name.created)) (\(Format.age(now.timeIntervalSince(last.name.created))) ago)"
            } else if settings.repo != nil {
                line += ", never backed up"
            }
            console.out(line)
            for store in user.stores {
                var detail = "  " + Format.pad(store.name, 24) + " " + Format.pad(store.journalKind, 8)
                detail += " " + Format.bytes(store.size)
                if let wal = store.walSize { detail += ", -wal \(Format.bytes(wal))" }
                if store.hasSHM { detail += ", -shm" }
                if store.hasJournal { detail += ", -journal" }
                if store.hasExternalData { detail += ", external data" }
                console.out(detail)
            }
            if let problem = user.problem { console.info("granary: \(user.id): \(problem)") }
            for path in user.scan.unreadable {
                console.info("granary: \(user.id): cannot read \(path), which may be a store (backup will refuse this user)")
            }
            for skipped in user.scan.skipped {
                console.info("granary: \(user.id): skipped \(skipped.name): \(skipped.reason)")
            }
        }
        for folder in ignored {
            console.info("granary: ignored \(folder.name.debugDescription): \(folder.reason)")
        }
    }
}

/// `granary users --json`: format version 1.
struct UsersDocument: Encodable {
    struct Store: Encodable {
        let name: String
        let path: String
        let size: Int64
        let journalMode: String
        let pageSize: Int
        let walSize: Int64?
        let shm: Bool
        let journal: Bool
        let externalData: Bool
    }

    struct User: Encodable {
        let id: String
        let path: String
        let size: Int64
        let stores: [Store]
        let lastBackup: Date?
        let lastArchive: String?
        /// Entries of the folder that were passed over, with why.
        let skipped: [Ignored]
        let unreadable: [String]
        let problem: String?
    }

    struct Ignored: Encodable {
        let name: String
        let reason: String
    }

    let format = 1
    let root: String
    let users: [User]
    let ignored: [Ignored]

    init(root: String, users: [UserSummary], ignored: [Root.Ignored]) {
        self.root = root
        self.users = users.map { user in
            User(
                id: user.id.rawValue, path: user.path, size: user.totalSize,
                stores: user.stores.map {
                    Store(
                        name: $0.name, path: $0.path, size: $0.size, journalMode: $0.journalKind,
                        pageSize: $0.header.pageSize, walSize: $0.walSize, shm: $0.hasSHM, journal: $0.hasJournal,
                        externalData: $0.hasExternalData)
                },
                lastBackup: user.lastBackup?.name.created, lastArchive: user.lastBackup?.path,
                skipped: user.scan.skipped.map { Ignored(name: $0.name, reason: $0.reason) }, unreadable: user.scan.unreadable,
                problem: user.problem)
        }
        self.ignored = ignored.map { Ignored(name: $0.name, reason: $0.reason) }
    }
}
