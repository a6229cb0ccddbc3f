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
            root: root, repository: settings.repo.map { Repository(path: $0.value) }, only: ids)
        if global.json {
            console.json(UsersDocument(root: root.path, users: summaries, ignored: ignored))
            return
        }
        if summaries.isEmpty { console.info("no users under \(root.path)") }
        let now = Date()
        for user in summaries {
            var line = console.bold(user.folder.id.rawValue)
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
                if store.externalDataPath != nil { detail += ", external data" }
                console.out(detail)
            }
            for path in user.folder.scan().unreadable {
                console.info("granary: \(user.folder.id): cannot read \(path), which may be a store (backup will refuse this user)")
            }
        }
        for folder in ignored {
            console.info("granary: ignored folder \(folder.name.debugDescription): not a valid user id (it \(folder.reason))")
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
                id: user.folder.id.rawValue, path: user.folder.path, size: user.totalSize,
                stores: user.stores.map {
                    Store(
                        name: $0.name, path: $0.path, size: $0.size, journalMode: $0.journalKind,
                        pageSize: $0.header.pageSize, walSize: $0.walSize, shm: $0.hasSHM, journal: $0.hasJournal,
                        externalData: $0.externalDataPath != nil)
                },
                lastBackup: user.lastBackup?.name.created, lastArchive: user.lastBackup?.path)
        }
        self.ignored = ignored.map { Ignored(name: $0.name, reason: $0.reason) }
    }
}
