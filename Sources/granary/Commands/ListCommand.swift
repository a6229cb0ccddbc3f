import ArgumentParser
import Foundation
import GranaryKit

struct ListCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List archives, newest first: time, age, size, compression, stores, label, verified state.",
        discussion: """
            Only the manifest at the head of each archive is read. The verified state comes from the last \
            granary verify: verified, bad (with the reason), or unverified (never verified, or the file changed \
            since). An archive whose head cannot be read is listed as unreadable. \
            Exit codes: 0, 65 when any archive listed is unreadable or failed its last verify (all are still listed), \
            66 unknown user.
            """
    )

    @OptionGroup var global: GlobalOptions

    @Argument(help: ArgumentHelp("Only these users.", valueName: "user"), completion: .custom(Completions.users))
    var users: [String] = []

    func run() throws {
        let console = global.console()
        let settings = try global.settings()
        let repository = try settings.requireRepository()
        let ids = try users.map { (id) throws(UserError) in try UserID(id) }
        let folders = ids.isEmpty ? [] : Set(try repository.folders())
        for id in ids where !folders.contains(id.rawValue) {
            // A user of the root that was never backed up has no archives; anyone else is unknown.
            let known = (try? settings.requireRoot().user(id)) != nil
            if !known { throw UserError.notFound(id.rawValue, root: repository.path) }
        }
        let items = try Catalogue(repository: repository).items(users: ids)
        // Everything is listed; the exit code then says whether any archive is known to be bad.
        let bad = items.filter { $0.problem != nil || $0.verified == .bad }
        defer {
            if !bad.isEmpty {
                if !global.json {
                    console.info("granary: \(bad.count) archive\(bad.count == 1 ? " is" : "s are") unreadable or failed verification: \(bad.map { "\($0.user)/\($0.name)" }.joined(separator: ", "))")
                }
            }
        }
        if global.json {
            console.json(ListDocument(repository: repository.path, items: items))
            if !bad.isEmpty { throw ExitCode(ExitStatus.dataError.rawValue) }
            return
        }
        if items.isEmpty { console.info("no archives in \(repository.path)") }
        let now = Date()
        var user: UserID?
        for item in items {
            if item.user != user {
                user = item.user
                console.out(console.bold(item.user.rawValue))
            }
            var line = "  " + Format.pad(item.name.fileName, 38)
            line += " " + Format.time(item.created)
            line += " " + Format.pad(Format.age(now.timeIntervalSince(item.created)) + " ago", 12)
            line += " " + Format.pad(Format.bytes(item.size), 10)
            line += " " + Format.pad(item.name.compression.rawValue, 5)
            if let problem = item.problem {
                line += " unreadable: " + problem
            } else {
                line += " " + Format.pad(item.verified.rawValue, 11)
                line += " " + item.stores.joined(separator: ", ")
                if let label = item.name.label { line += "  [\(label)]" }
                // Safety and final archives are not backups: say so where an operator looks.
                if item.kind != .backup { line += "  (\(item.kind.rawValue) archive\(item.manifest?.restoredFrom.map { ", replaced by the restore of \($0)" } ?? ""))" }
                if item.verified == .bad, let reason = item.record?.reason { line += "  (" + reason + ")" }
            }
            console.out(line)
        }
        if !bad.isEmpty { throw ExitCode(ExitStatus.dataError.rawValue) }
    }
}

/// `granary list --json`: format version 1.
struct ListDocument: Encodable {
    struct Archive: Encodable {
        let user: String
        let name: String
        let path: String
        let created: Date
        let size: Int64
        let compression: String
        let label: String?
        /// `backup`, `safety` (what a restore or reset replaced) or `final` (what a retired user left).
        let kind: String
        /// For a safety archive: the archive whose restore replaced this content.
        let restoredFrom: String?
        let stores: [String]
        /// `verified`, `bad`, `unverified`, or `unreadable`.
        let verified: String
        let verifiedAt: Date?
        let problem: String?
    }

    let format = 1
    let repository: String
    let archives: [Archive]

    init(repository: String, items: [Catalogue.Item]) {
        self.repository = repository
        archives = items.map { item in
            Archive(
                user: item.user.rawValue, name: item.name.fileName, path: item.path, created: item.created, size: item.size,
                compression: item.name.compression.rawValue, label: item.name.label, kind: item.kind.rawValue,
                restoredFrom: item.manifest?.restoredFrom, stores: item.stores,
                verified: item.problem != nil ? "unreadable" : item.verified.rawValue, verifiedAt: item.record?.verified,
                problem: item.problem ?? (item.verified == .bad ? item.record?.reason : nil))
        }
    }
}
