import Foundation

/// What `granary inspect` reports about one store.
public struct StoreInspection: Sendable, Codable {
    /// One table and its row count.
    public struct Table: Sendable, Codable {
        public var name: String
        public var rows: Int64
    }

    /// One Core Data entity and its row count (from `Z_PRIMARYKEY`).
    public struct Entity: Sendable, Codable {
        public var name: String
        public var rows: Int64
    }

    /// Core Data's store metadata.
    public struct CoreData: Sendable, Codable {
        public var storeUUID: String?
        public var modelVersionHashes: [String: String]
        public var entities: [Entity]
    }

    public var name: String
    public var size: Int64
    public var pageSize: Int
    public var pageCount: Int
    public var journalMode: String
    /// The SQLite version that last wrote the file (header offset 96).
    public var sqliteVersion: String
    public var tables: [Table]
    public var coreData: CoreData?
}

/// What `granary inspect` reports about a path: one store, or every store of an archive.
public struct Inspection: Sendable, Codable {
    /// What was inspected.
    public enum Kind: String, Sendable, Codable {
        case store, archive
    }

    public var kind: Kind
    public var path: String
    /// For an archive: whose, when, and by which granary.
    public var user: String?
    public var created: Date?
    public var toolVersion: String?
    public var stores: [StoreInspection]
    /// An archive's other regular files (a final archive's `files/`), as its manifest lists them.
    public var files: [Manifest.File] = []
    /// A delta archive (issue 35): what it carries. Its `stores` are then empty: it holds pages,
    /// not databases (`restore --to DIR` rebuilds them from its chain).
    public var delta: DeltaContents? = nil
    /// Whether an archive carries page hashes (a full a delta can be built on, or a delta).
    public var pageHashes = false
}

/// A path that `inspect` cannot read as a store or an archive.
public struct InspectError: GranaryError, Sendable {
    /// What kind of failure it is.
    public enum Kind: Sendable {
        /// There is no such file.
        case missing
        /// It is there, and it is not a store or an archive (or cannot be read).
        case unreadable
        /// It begins as a SQLite store, but SQLite cannot read it.
        case damagedStore
        /// Reading it went over a limit (`ContentLimits`).
        case overLimit(ContentLimit)
    }

    public let path: String
    public let reason: String
    public let kind: Kind
    public var description: String { "\(path): \(reason)" }

    public init(path: String, reason: String, kind: Kind) {
        self.path = path
        self.reason = reason
        self.kind = kind
    }

    /// A file that begins as a SQLite store but that SQLite cannot read.
    static func damagedStore(_ path: String, _ reason: String) -> InspectError {
        InspectError(path: path, reason: reason, kind: .damagedStore)
    }
}

/// Reads a store or an archive and describes it, without changing anything.
///
/// A store is opened read-only: its readers and writers go on (a read takes SQLite's shared
/// lock for the moment of each count). An archive is fully verified into a private temporary
/// folder first (the same `ArchiveVerifier` pass as `verify`, without the SQLite check), so a
/// hostile archive is refused exactly as `verify` refuses it; the folder is always removed.
public enum Inspector {
    /// Describes the file `text` names on the command line. It is named by its full path in what
    /// inspect says, so that a message or hint about it can be acted on from anywhere, made
    /// absolute by text alone: no link is resolved (a link in a user's folder is refused where it
    /// is, never followed). Inside `repository`, the user folder an archive lies in says whose it
    /// must be (``ArchiveLocator/folderUser(ofFile:)``).
    public static func inspect(
        file text: String, repository: (any Repository)?, limits: ContentLimits = .defaults
    ) throws -> Inspection {
        let full = ArchiveLocator.absolute(text)
        let absolute = "/" + full.split(separator: "/").filter { $0 != "." }.joined(separator: "/")
        return try inspect(
            path: absolute, expectedUser: ArchiveLocator(repository: repository).folderUser(ofFile: text),
            limits: limits)
    }

    /// Describes `path`. For an archive, `expectedUser` (the user folder it lies in, inside the
    /// repository) must match its manifest, and each store must pass `quick_check`: inspect
    /// refuses whatever `verify` would refuse, bar the slower full `integrity_check`. `limits`: the
    /// time budget and memory ceiling of each store's reads (the run's, ``RunContext/limits``).
    public static func inspect(
        path: String, expectedUser: String? = nil, temporaryFolder: String = NSTemporaryDirectory(),
        limits: ContentLimits = .defaults
    ) throws -> Inspection {
        // A store is opened beneath the folder that holds it, with that folder's owner's rules and
        // permissions (the folder may be a user's): the name given is followed up to that folder,
        // never through its last component.
        let parentPath = PathText.parent(path)
        let fileName = PathText.lastComponent(path)
        let parentName = parentPath.isEmpty ? "." : parentPath
        let missing = InspectError(path: path, reason: "no such file", kind: .missing)
        let opened: Folder<GranaryOwned>
        let info: FolderEntry
        do {
            opened = try Folder<GranaryOwned>.open(path: parentName)
            info = try opened.status()
        } catch { throw missing }
        // granary's own folder when it is granary's uid's, else a user's: its owner's rules apply.
        if info.uid == geteuid() {
            return try inspect(
                fileName, in: opened, path: path, expectedUser: expectedUser, temporaryFolder: temporaryFolder,
                limits: limits)
        }
        let users: Folder<UserOwned>
        do { users = try Folder<UserOwned>.open(path: opened.display) } catch { throw missing }
        return try inspect(
            fileName, in: users, path: path, expectedUser: expectedUser, temporaryFolder: temporaryFolder,
            limits: limits)
    }

    /// ``inspect(path:expectedUser:temporaryFolder:limits:)`` of `fileName` in the open folder `parent`.
    private static func inspect<Trust>(
        _ fileName: String, in parent: Folder<Trust>, path: String, expectedUser: String?, temporaryFolder: String,
        limits: ContentLimits
    ) throws -> Inspection {
        guard let info = parent.entry(fileName) else {
            throw InspectError(path: path, reason: "no such file", kind: .missing)
        }
        guard info.kind == .file else {
            throw InspectError(
                path: path, reason: "is \(FolderError.phrase(info.kind)), not a regular file", kind: .unreadable)
        }
        let head: [UInt8]
        do { head = try parent.openFile(fileName).read(count: 16, at: 0) } catch {
            throw InspectError(path: path, reason: "cannot be read: \(error)", kind: .unreadable)
        }
        if head == StoreHeader.magic {
            return Inspection(
                kind: .store, path: path,
                stores: [try store(in: parent, fileName: fileName, name: fileName, limits: limits)])
        }
        guard
            ArchiveName(fileName: fileName) != nil || Self.compressionMagics.contains(where: { head.starts(with: $0) })
        else {
            throw InspectError(path: path, reason: "is neither a SQLite store nor a granary archive", kind: .unreadable)
        }
        let folder = try FileSystem.createTemporaryDirectory(in: temporaryFolder, for: "granary-inspect")
        defer { FileSystem.removeTree(folder) }
        let outcome = try ArchiveVerifier.extract(
            archive: path, into: folder, check: .quick, expectedUser: expectedUser, durable: false, limits: limits)
        return try describe(outcome.manifest, path: path, extracted: folder, limits: limits)
    }

    /// The inspection of an archive whose members (checked against `manifest`) are in `folder`. A
    /// delta (issue 35) holds pages, not stores: what it carries comes from its manifest.
    private static func describe(_ manifest: Manifest, path: String, extracted folder: String, limits: ContentLimits)
        throws -> Inspection
    {
        if let delta = DeltaContents(manifest) {
            var inspection = Inspection(
                kind: .archive, path: path, user: manifest.user, created: manifest.created,
                toolVersion: manifest.toolVersion, stores: [], files: manifest.files.filter { $0.kind == .plain })
            inspection.delta = delta
            inspection.pageHashes = true
            return inspection
        }
        let stores = try manifest.stores.map { entry in
            let (parent, file) = try Folder<GranaryOwned>.open(path: folder).parent(of: entry.path)
            return try store(in: parent, fileName: file, name: entry.name, limits: limits)
        }
        var inspection = Inspection(
            kind: .archive, path: path, user: manifest.user, created: manifest.created,
            toolVersion: manifest.toolVersion,
            stores: stores, files: manifest.files.filter { $0.kind == .plain })
        inspection.pageHashes = manifest.delta != nil
        return inspection
    }

    /// How a file compressed as granary compresses archives begins: zstd, gzip, xz.
    static let compressionMagics: [[UInt8]] = [
        [0x28, 0xB5, 0x2F, 0xFD], [0x1F, 0x8B], [0xFD, 0x37, 0x7A, 0x58, 0x5A, 0x00],
    ]

    /// Describes an archive read from `source` (a remote archive, streamed: no local copy is kept
    /// but the extracted stores, in a private temporary folder that is always removed). `name`
    /// names it; `expectedUser`, when given, must match its manifest.
    public static func inspect(
        archive source: ArchiveSource, name: String, expectedUser: String? = nil,
        temporaryFolder: String = NSTemporaryDirectory(), limits: ContentLimits = .defaults
    ) throws -> Inspection {
        let folder = try FileSystem.createTemporaryDirectory(in: temporaryFolder, for: "granary-inspect")
        defer { FileSystem.removeTree(folder) }
        let outcome = try ArchiveVerifier.extract(
            source: source, name: name, into: folder, check: .quick, expectedUser: expectedUser, durable: false,
            limits: limits)
        return try describe(outcome.manifest, path: name, extracted: folder, limits: limits)
    }

    /// Describes the store `fileName` of `folder`, opened read-only beneath the folder. Its table
    /// counts and Core Data metadata are read within the store's time budget and memory ceiling
    /// (`ContentLimits`).
    public static func store<Trust>(
        in folder: Folder<Trust>, fileName: String, name: String, limits: ContentLimits = .defaults
    ) throws -> StoreInspection {
        let path = folder.path(fileName)
        let db: Database
        do { db = try Database(try folder.sqliteName(fileName), mode: .readOnly, limits: limits) } catch {
            throw InspectError.damagedStore(path, "cannot be opened by SQLite: \(error)")
        }
        do {
            var tables: [StoreInspection.Table] = []
            for table in try db.tableNames() {
                let quoted = "\"" + table.replacingOccurrences(of: "\"", with: "\"\"") + "\""
                tables.append(.init(name: table, rows: try db.scalar("SELECT count(*) FROM \(quoted)")?.integer ?? 0))
            }
            var coreData: StoreInspection.CoreData?
            if let metadata = try CoreDataMetadata.read(db) {
                coreData = .init(
                    storeUUID: metadata.storeUUID, modelVersionHashes: metadata.modelVersionHashes,
                    entities: metadata.entityRowCounts.sorted { $0.key < $1.key }.map {
                        .init(name: $0.key, rows: $0.value)
                    })
            }
            let header = (try? folder.openFile(fileName).read(count: 100, at: 0)) ?? []
            return StoreInspection(
                name: name, size: folder.entry(fileName)?.size ?? 0, pageSize: try db.pageSize(),
                pageCount: try db.pageCount(),
                journalMode: try db.journalMode(), sqliteVersion: sqliteVersion(header: header), tables: tables,
                coreData: coreData)
        } catch {
            if let limit = error.limit {
                throw InspectError(path: path, reason: "reading it \(error.message)", kind: .overLimit(limit))
            }
            throw InspectError.damagedStore(path, "cannot be read by SQLite: \(error)")
        }
    }

    /// The `SQLITE_VERSION_NUMBER` in the header at offset 96, as `3.40.1`.
    static func sqliteVersion(header: [UInt8]) -> String {
        guard header.count == 100 else { return "unknown" }
        let number = header[96..<100].reduce(0) { $0 << 8 | Int($1) }
        return "\(number / 1_000_000).\(number / 1000 % 1000).\(number % 1000)"
    }
}
