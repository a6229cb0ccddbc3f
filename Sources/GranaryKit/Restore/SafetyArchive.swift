import Crypto
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Packs the database files a restore or reset replaced into a labelled archive of the user
/// (`…-pre-restore.tar.zst`), in the repository's normal format, so that an unwanted restore
/// can itself be undone with `granary restore USER …-pre-restore.tar.zst`.
///
/// The files are complete databases nobody has open (the swap checkpointed them before setting
/// them aside), so they are archived as they are, without another snapshot.
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

    /// Writes the archive and returns its path. It appears under its final name only when complete and synced.
    public static func write(user: UserID, items: [Item], repository: Repository, label: String?, compression: Compression = .zstd) throws -> String {
        let folder = repository.folder(for: user)
        try FileSystem.makeDirectory(folder)
        var stores: [Manifest.Store] = []
        var files: [Manifest.File] = []
        var members: [(member: String, source: String)] = []
        for item in items {
            let member = Manifest.storesFolder + item.name
            let (size, digest) = try hash(item.database)
            files.append(Manifest.File(path: member, size: size, sha256: digest, kind: "store"))
            members.append((member, item.database))
            let db = try Database(path: item.database, mode: .readWrite)
            var externalMember: String?
            if let external = item.external {
                let base = (member as NSString).deletingLastPathComponent
                let storeBase = ((item.name as NSString).lastPathComponent as NSString).deletingPathExtension
                let prefix = (base.isEmpty ? "" : base + "/") + "." + storeBase + "_SUPPORT/_EXTERNAL_DATA"
                externalMember = prefix + "/"
                for name in FileSystem.contents(of: external) where FileSystem.isRegularFile(external + "/" + name) {
                    let (size, digest) = try hash(external + "/" + name)
                    files.append(Manifest.File(path: prefix + "/" + name, size: size, sha256: digest, kind: "external"))
                    members.append((prefix + "/" + name, external + "/" + name))
                }
            }
            let problems = db.integrityCheck(full: false)
            stores.append(
                Manifest.Store(
                    name: item.name, path: member, pageSize: try db.pageSize(), pageCount: try db.pageCount(),
                    journalMode: try db.journalMode(), sqliteVersion: Database.libraryVersion, check: "quick",
                    integrity: problems == ["ok"] ? "ok" : problems.joined(separator: "; "),
                    externalDataPath: externalMember, coreData: try CoreDataMetadata.read(db)))
        }
        let now = Date()
        let manifest = Manifest(
            user: user.rawValue, host: ProcessInfo.processInfo.hostName, created: now, label: label,
            compression: compression, stores: stores, files: files)
        let (fd, temporary) = try FileSystem.createTemporaryFile(in: folder, for: "safety")
        do {
            let writer = try ArchiveWriter(fileDescriptor: fd, path: temporary, compression: compression, modificationTime: now)
            try writer.addData(member: Manifest.memberName, bytes: manifest.encoded())
            for (member, source) in members { try writer.addFile(member: member, from: source) }
            try writer.finish()
            if fsync(fd) != 0 { throw FileSystemError("fsync", path: temporary) }
            close(fd)
            var sequence = 1
            while true {
                let name = ArchiveName(created: now, sequence: sequence, label: label, compression: compression)
                let path = folder + "/" + name.fileName
                // link(2) refuses an existing name: a second archive in the same second gets _2, _3, …
                if link(temporary, path) != 0 {
                    if errno == EEXIST { sequence += 1; continue }
                    throw FileSystemError("publish", path: path)
                }
                unlink(temporary)
                try FileSystem.syncParent(of: path)
                return path
            }
        } catch {
            close(fd)
            unlink(temporary)
            throw error
        }
    }

    static func hash(_ path: String) throws -> (Int64, String) {
        let digest = try FileDigest.of(path)
        return (digest.size, digest.sha256)
    }
}
