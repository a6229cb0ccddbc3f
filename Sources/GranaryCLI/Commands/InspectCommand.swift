import ArgumentParser
import Foundation
import GranaryKit

struct InspectCommand: GranaryCommand {
    static let configuration = CommandConfiguration(
        commandName: "inspect",
        abstract: "Describe a store or an archive: page size, journal mode, tables, row counts, Core Data metadata.",
        discussion: """
            PATH is a SQLite store (opened read-only; its owner keeps running), a granary archive, or an archive \
            of the repository named as USER/NAME (or a unique prefix of NAME, such as its stamp), streamed from it \
            when the repository is remote. An archive is \
            verified member by member into a private temporary folder, which is always removed, and each store \
            checked with quick_check; inside the repository, the archive must belong to the user folder it lies \
            in. For Core Data stores: the entities with their row counts, the model version hashes and the \
            store UUID. \
            Exit codes: 0, 64 a name that matches several archives, 65 not a store or a readable archive, 66 not found.
            """
    )
    static let cleansUpOnSignals = true

    @OptionGroup(title: "Global Options") var global: GlobalOptions

    @Argument(
        help: ArgumentHelp("A store file, an archive file, or USER/NAME.", valueName: "path"),
        completion: .custom(Completions.filesOrArchives))
    var path: String

    func execute(_ console: Console) throws -> InspectResult {
        let settings = try? global.settings()
        let repository = try settings?.repository()
        let limits = settings?.context.limits ?? .defaults
        if FileSystem.status(path) == nil, !path.hasPrefix("/"), let repository {
            // Not a file here: an archive of the repository, as verify and delete take them (streamed
            // from a remote one). A name that matches nothing there either is reported as the
            // missing file it may be.
            do {
                let entry = try ArchiveLocator(repository: repository).locate(path)
                if let location = settings?.repo?.value, Repositories.isRemote(location) {
                    return InspectResult(
                        try Inspector.inspect(
                            archive: try repository.open(entry), name: entry.path, expectedUser: entry.user.rawValue,
                            temporaryFolder: try repository.prepareWorkFolder(), limits: limits))
                }
                return InspectResult(
                    try Inspector.inspect(
                        path: entry.localFile ?? entry.path, expectedUser: entry.user.rawValue, limits: limits))
            } catch let error as ArchiveNotFound where error.suggestions.isEmpty {}
        }
        return InspectResult(try Inspector.inspect(file: path, repository: repository, limits: limits))
    }
}

/// `granary inspect`: one store, or the stores of an archive.
struct InspectResult: CommandResult {
    /// A listing: shown with --quiet too.
    var isAnswer: Bool { true }
    struct Table: Encodable {
        let name: String
        let rows: Int64
    }

    struct CoreData: Encodable, Sendable {
        @Null var storeUUID: String?
        let modelVersionHashes: [String: String]
        let entities: [Entity]

        struct Entity: Encodable, Sendable {
            let name: String
            let rows: Int64
        }
    }

    struct Store: Encodable {
        let name: String
        @Null var nameBase64: String?
        let size: Int64
        let pageSize: Int
        let pageCount: Int
        /// `wal` or `rollback`.
        let journalMode: String
        let sqliteVersion: String
        let tables: [Table]
        @Null var coreData: CoreData?
    }

    /// `store` or `archive`.
    let kind: Inspection.Kind
    let path: String
    @Null var user: String?
    @Null var created: Date?
    @Null var toolVersion: String?
    let stores: [Store]
    /// An archive's other regular files (`files/`), by name relative to the user's folder.
    let files: [File]

    struct File: Encodable {
        let name: String
        let size: Int64
        let sha256: String
        @Null var uid: UInt32?
        @Null var gid: UInt32?
        /// Permission bits in octal, such as `0644`.
        @Null var mode: String?
    }

    init(_ inspection: Inspection) {
        kind = inspection.kind
        path = inspection.path
        user = inspection.user
        created = inspection.created
        toolVersion = inspection.toolVersion
        files = inspection.files.map {
            File(
                name: String($0.path.dropFirst(Manifest.plainFilesFolder.count)), size: $0.size, sha256: $0.sha256,
                uid: $0.owner?.uid, gid: $0.owner?.gid, mode: $0.mode.map { String(format: "%04o", $0) })
        }
        stores = inspection.stores.map { store in
            Store(
                name: store.name, nameBase64: JSONName.base64(store.name), size: store.size, pageSize: store.pageSize,
                pageCount: store.pageCount,
                journalMode: JournalMode.name(store.journalMode), sqliteVersion: store.sqliteVersion,
                tables: store.tables.map { Table(name: $0.name, rows: $0.rows) },
                coreData: store.coreData.map {
                    CoreData(
                        storeUUID: $0.storeUUID, modelVersionHashes: $0.modelVersionHashes,
                        entities: $0.entities.map { CoreData.Entity(name: $0.name, rows: $0.rows) })
                })
        }
    }

    func render(_ text: inout TextOutput, _ detail: TextDetail) {
        if kind == .archive {
            var line: TextLine = "archive \(path)"
            if let user { line += " of \(user)" }
            if let created { line += ", taken \(Format.time(created))" }
            if let toolVersion { line += " by granary \(toolVersion)" }
            text.line(line)
        }
        for store in stores {
            text.line(
                "\(bold: store.name)  \(Format.bytes(store.size)), \(store.pageCount) pages of \(store.pageSize) bytes, journal mode \(store.journalMode), SQLite \(store.sqliteVersion)"
            )
            let names = store.tables.map(\.name) + (store.coreData?.entities.map(\.name) ?? [])
            let width = max(12, (names.map { TerminalText.escape($0).count }.max() ?? 0) + 2)
            text.line("  tables")
            for table in store.tables {
                text.line("    \(table.name, width: width)\(table.rows) row\(table.rows == 1 ? "" : "s")")
            }
            if let coreData = store.coreData {
                text.line("  Core Data store \(coreData.storeUUID ?? "(no UUID)")")
                text.line("  entities")
                for entity in coreData.entities {
                    text.line("    \(entity.name, width: width)\(entity.rows) row\(entity.rows == 1 ? "" : "s")")
                }
                text.line("  model version hashes")
                for (entity, hash) in coreData.modelVersionHashes.sorted(by: { $0.key < $1.key }) {
                    text.line("    \(entity, width: width)\(hash)")
                }
            }
        }
        if !files.isEmpty {
            text.line("other files (files/)")
            for file in files {
                let owner = [file.uid, file.gid].map { $0.map(String.init) ?? "?" }.joined(separator: ":")
                text.line(
                    "  \(file.name, width: 24) \(Format.bytes(file.size)), owner \(owner), mode \(file.mode ?? "?")")
            }
        }
    }
}
