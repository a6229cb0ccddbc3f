import ArgumentParser
import Foundation
import GranaryKit

struct InspectCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "inspect",
        abstract: "Describe a store or an archive: page size, journal mode, tables, row counts, Core Data metadata.",
        discussion: """
            PATH is a SQLite store (opened read-only; its owner keeps running) or a granary archive (verified \
            member by member into a private temporary folder, which is always removed, and each store checked \
            with quick_check; inside the repository, the archive must belong to the user folder it lies in). With a \
            remote repository, PATH may also be one of its archives, USER/NAME, streamed from it. For Core Data stores, \
            the entities with their row counts and the model version hashes and store UUID from Z_METADATA. \
            Exit codes: 0, 65 not a store or a readable archive, 66 no such file.
            """
    )

    @OptionGroup var global: GlobalOptions

    @Argument(help: ArgumentHelp("A store file or an archive.", valueName: "path"), completion: .file())
    var path: String

    func run() throws {
        Interruption.installHandlers()
        let console = global.console()
        // Not a file here, and the repository is remote: an archive of it (USER/NAME), streamed.
        let settings = try? global.settings()
        if FileSystem.status(path) == nil, let location = settings?.repo?.value, Repositories.isRemote(location),
            let repository = try settings?.repository()
        {
            let entry = try ArchiveLocator(repository: repository).locate(path)
            let inspection = try Inspector.inspect(
                archive: try repository.open(entry), name: entry.path, expectedUser: entry.user.rawValue,
                temporaryFolder: try repository.prepareWorkFolder())
            return render(inspection, console: console)
        }
        // Inside the repository, the user folder an archive lies in says whose it must be.
        var expectedUser: String?
        if let repo = settings?.repo?.value {
            let absolute = ((path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path) as NSString).standardizingPath
            let folder = (absolute as NSString).deletingLastPathComponent
            if (folder as NSString).deletingLastPathComponent == (repo as NSString).standardizingPath {
                expectedUser = (folder as NSString).lastPathComponent
            }
        }
        let inspection = try Inspector.inspect(path: path, expectedUser: expectedUser)
        render(inspection, console: console)
    }

    func render(_ inspection: Inspection, console: Console) {
        if global.json {
            console.json(InspectDocument(inspection: inspection))
            return
        }
        if inspection.kind == "archive" {
            var line = "archive \(inspection.path)"
            if let user = inspection.user { line += " of \(user)" }
            if let created = inspection.created { line += ", taken \(Format.time(created))" }
            if let version = inspection.toolVersion { line += " by granary \(version)" }
            console.out(line)
        }
        for store in inspection.stores {
            console.out(console.bold(store.name) + "  \(Format.bytes(store.size)), \(store.pageCount) pages of \(store.pageSize) bytes, journal mode \(store.journalMode), SQLite \(store.sqliteVersion)")
            let width = max(12, (store.tables.map(\.name.count).max() ?? 0) + 2)
            console.out("  tables")
            for table in store.tables { console.out("    " + Format.pad(table.name, width) + "\(table.rows) rows") }
            if let coreData = store.coreData {
                console.out("  Core Data store \(coreData.storeUUID ?? "(no UUID)")")
                console.out("  entities")
                for entity in coreData.entities { console.out("    " + Format.pad(entity.name, width) + "\(entity.rows) rows") }
                console.out("  model version hashes")
                for (entity, hash) in coreData.modelVersionHashes.sorted(by: { $0.key < $1.key }) {
                    console.out("    " + Format.pad(entity, width) + hash)
                }
            }
        }
    }
}

/// `granary inspect --json`: format version 1.
struct InspectDocument: Encodable {
    let format = 1
    let inspection: Inspection

    enum CodingKeys: String, CodingKey { case format, kind, path, user, created, toolVersion, stores }

    func encode(to encoder: Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(format, forKey: .format)
        try container.encode(inspection.kind, forKey: .kind)
        try container.encode(inspection.path, forKey: .path)
        try container.encodeIfPresent(inspection.user, forKey: .user)
        try container.encodeIfPresent(inspection.created, forKey: .created)
        try container.encodeIfPresent(inspection.toolVersion, forKey: .toolVersion)
        try container.encode(inspection.stores, forKey: .stores)
    }
}
