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
            A delta archive (backup --delta, or delta = true) holds pages, not databases: inspect shows what it \
            carries, from its manifest, once its members are verified: its base and its place in the chain, per \
            store the pages carried of the page count, the page size and the state digest of the result, and the \
            external-data files added, changed and removed (added and changed told apart when its base is in the \
            repository); restore it with --to DIR to look inside the databases. \
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
                            temporaryFolder: try repository.prepareWorkFolder(), limits: limits
                        ).resolvingBase(in: repository, user: entry.user))
                }
                return InspectResult(
                    try Inspector.inspect(
                        path: entry.localFile ?? entry.path, expectedUser: entry.user.rawValue, limits: limits
                    ).resolvingBase(in: repository, user: entry.user))
            } catch let error as ArchiveNotFound where error.suggestions.isEmpty {}
        }
        let inspection = try Inspector.inspect(file: path, repository: repository, limits: limits)
        // A delta's base is looked for beside it when it lies in the repository.
        if let repository, let user = ArchiveLocator(repository: repository).folderUser(ofFile: path),
            let id = try? UserID(user)
        {
            return InspectResult(inspection.resolvingBase(in: repository, user: id))
        }
        return InspectResult(inspection)
    }
}

extension Inspection {
    /// A delta's contents with added and changed files told apart by its base's manifest.
    fileprivate func resolvingBase(in repository: any Repository, user: UserID) -> Inspection {
        var resolved = self
        resolved.delta = delta?.resolvingBase(in: repository, user: user)
        return resolved
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
    /// An archive: `full` or `delta` (issue 35); null for a store.
    @Null var type: String?
    /// An archive: whether it carries page hashes (a full deltas can be built on, or a delta).
    @Null var pageHashes: Bool?
    /// A delta: what it carries (its `stores` is empty: it holds pages, not databases).
    @Null var delta: Delta?

    struct Delta: Encodable {
        struct Store: Encodable {
            let name: String
            @Null var nameBase64: String?
            let pageSize: Int
            let pageCount: Int
            let pagesCarried: Int
            let stateDigest: String
            @Null var journalMode: String?
        }

        struct External: Encodable {
            struct Carried: Encodable {
                let path: String
                let size: Int64
                let sha256: String
            }
            /// Every file the delta carries (new or changed since its base).
            let carried: [Carried]
            /// Null when the base's manifest could not be read (`baseProblem`).
            @Null var added: [String]?
            @Null var changed: [String]?
            let removed: [String]
        }

        let base: String
        let baseManifestSHA256: String
        let chainLength: Int
        let fullCreated: Date
        let stores: [Store]
        let external: External
        /// Why the base's manifest could not be read to tell added files from changed ones.
        @Null var baseProblem: String?

        init(_ contents: DeltaContents) {
            base = contents.base
            baseManifestSHA256 = contents.baseManifestSHA256
            chainLength = contents.chainLength
            fullCreated = contents.fullCreated
            stores = contents.stores.map {
                Store(
                    name: $0.name, nameBase64: JSONName.base64($0.name), pageSize: $0.pageSize,
                    pageCount: $0.pageCount, pagesCarried: $0.pagesCarried, stateDigest: $0.stateDigest,
                    journalMode: $0.journalMode.map(JournalMode.name))
            }
            external = External(
                carried: contents.carried.map {
                    Delta.External.Carried(path: $0.path, size: $0.size, sha256: $0.sha256)
                },
                added: contents.added, changed: contents.changed, removed: contents.removed)
            baseProblem = contents.baseProblem
        }
    }

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
        type = inspection.kind == .archive ? (inspection.delta == nil ? "full" : "delta") : nil
        pageHashes = inspection.kind == .archive ? inspection.pageHashes : nil
        delta = inspection.delta.map(Delta.init)
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
        if let delta { renderDelta(delta, &text) }
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

extension InspectResult {
    /// What a delta carries: its base, each store's pages, the external data it changes.
    fileprivate func renderDelta(_ delta: Delta, _ text: inout TextOutput) {
        text.line(
            "delta of \(delta.base) (chain \(delta.chainLength), its full taken \(Format.time(delta.fullCreated)))")
        for store in delta.stores {
            text.line(
                "\(bold: store.name)  \(store.pagesCarried) of \(store.pageCount) pages carried (\(store.pageSize) bytes each), journal mode \(store.journalMode ?? "unknown"), state \(store.stateDigest)"
            )
        }
        let external = delta.external
        guard !external.carried.isEmpty || !external.removed.isEmpty else { return }
        if let added = external.added, let changed = external.changed {
            text.line(
                "external data: \(added.count) added, \(changed.count) changed, \(external.removed.count) removed")
            for path in added { text.line("  added    \(path)") }
            for path in changed { text.line("  changed  \(path)") }
        } else {
            text.line(
                "external data: \(external.carried.count) added or changed, \(external.removed.count) removed (\(delta.baseProblem ?? "its base was not looked for"))"
            )
            for file in external.carried { text.line("  carried  \(file.path)") }
        }
        for path in external.removed { text.line("  removed  \(path)") }
    }
}
