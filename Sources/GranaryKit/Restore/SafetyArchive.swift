import Crypto
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Packs what a restore or reset replaced into a safety archive of the user
/// (`…-pre-restore.tar.zst`, `…-pre-reset.tar.zst`), in the repository's normal format and marked
/// as such in its manifest (`"kind": "safety"`, with the archive that was restored), so that
/// an undo (`RestoreRequest.undo`) can put it back, and so that nothing that means "the user's
/// backups" (the default archive of a restore, a restore as of a time, the latest verified, `check`, the retention rules)
/// ever takes it for one.
///
/// It is complete: every replaced database and every external-data file the old stores had
/// (those removed by the restore and those kept), as they were kept aside by the swap — complete
/// databases nobody has open (checkpointed before they were set aside), archived as they are.
public enum SafetyArchive {
    /// One replaced store.
    public struct Item: Sendable {
        /// The store's name relative to the user's folder.
        public var name: String
        /// The replaced database file.
        public var database: String
        /// The replaced external-data files, if any.
        public var external: String?

        public init(name: String, database: String, external: String?) {
            self.name = name
            self.database = database
            self.external = external
        }
    }

    /// Writes the archive and returns its path. It appears under its final name only when complete
    /// and synced.
    public static func write(
        user: UserID, items: [Item], repository: any Repository, label: String?, kind: ArchiveKind = .safety,
        restoredFrom: String? = nil,
        compression: Compression = .zstd
    ) throws -> String {
        try repository.prepare()
        let folder = try repository.stagingFolder(for: user)
        var stores: [Manifest.Store] = []
        var files: [Manifest.File] = []
        var members: [(member: String, source: String)] = []
        for item in items {
            try Interruption.check()
            let member = Manifest.storesFolder + item.name
            let (size, digest) = try hash(item.database)
            files.append(Manifest.File(path: member, size: size, sha256: digest, kind: .store))
            members.append((member, item.database))
            let db = try Database(path: item.database, mode: .readOnly, limits: repository.context.limits)
            var externalMember: String?
            if let external = item.external, FileSystem.isDirectory(external) {
                let prefix = Manifest.storesFolder + StoreFile.externalDataName(for: item.name)
                externalMember = prefix
                for name in FileSystem.contents(of: external) where FileSystem.isRegularFile(external + "/" + name) {
                    let (size, digest) = try hash(external + "/" + name)
                    let mode = FileSystem.status(external + "/" + name).map { UInt32($0.st_mode & 0o7777) }
                    files.append(
                        Manifest.File(
                            path: prefix + "/" + name, size: size, sha256: digest, kind: .external, mode: mode))
                    members.append((prefix + "/" + name, external + "/" + name))
                }
            }
            let problems = db.integrityCheck(full: false)
            var store = Manifest.Store(
                name: item.name, path: member, pageSize: try db.pageSize(), pageCount: try db.pageCount(),
                journalMode: try db.journalMode(), sqliteVersion: Database.libraryVersion, check: "quick",
                integrity: problems == [Database.sound] ? Database.sound : problems.joined(separator: "; "),
                externalDataPath: externalMember, coreData: try CoreDataMetadata.read(db))
            store.owner = FileSystem.status(item.database).map {
                .of(uid: $0.st_uid, gid: $0.st_gid, mode: UInt32($0.st_mode))
            }
            stores.append(store)
        }
        let now = Date()
        var manifest = Manifest(
            user: user.rawValue, host: repository.context.host, created: now, label: label,
            compression: compression, stores: stores, files: files)
        manifest.kind = kind
        manifest.restoredFrom = restoredFrom
        let (fd, temporary) = try FileSystem.createTemporaryFile(in: folder, for: "safety")
        let file = Descriptor(fd, display: temporary)
        var published = false
        defer { if !published { unlink(temporary) } }
        let writer = try ArchiveWriter(
            fileDescriptor: file.raw, path: temporary, compression: compression, modificationTime: now,
            rawNames: ArchiveWriter.needsRawNames(members.map(\.0)))
        try writer.addManifest(manifest)
        for (member, source) in members { try writer.addFile(member: member, from: source) }
        try writer.finish()
        try file.sync()
        // Published without replacing anything: a second archive in the same second gets _2, _3, …
        let entry = try repository.publish(temporary, user: user) { sequence in
            ArchiveName(created: now, sequence: sequence, label: label, compression: compression)
        }
        published = repository.isLocal
        return entry.path
    }

    static func hash(_ path: String) throws -> (Int64, String) {
        let digest = try FileDigest.of(path)
        return (digest.size, digest.sha256)
    }
}
