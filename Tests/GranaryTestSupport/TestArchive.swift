import Foundation
import GranaryKit

#if canImport(Glibc)
    import Glibc
#endif

/// Archives the tests write themselves through libarchive (`ArchiveWriter`), around a real
/// store, to give the reader shapes backup never writes: one small rollback store and whatever
/// external-data files and members a test chooses.
public enum TestArchive {
    /// Where the store's external-data files go in the archive.
    public static let external = "stores/.Notes_SUPPORT/_EXTERNAL_DATA/"

    /// A rollback store of 20 rows at `path`, and its manifest entry as `stores/<name>`.
    public static func store(at path: String, name: String = "Notes.sqlite") throws -> Manifest.File {
        try SampleData.makeRollbackStore(path, rows: 20)
        let digest = try FileDigest.of(path)
        return Manifest.File(path: "stores/" + name, size: digest.size, sha256: digest.sha256, kind: .store)
    }

    /// Writes an archive at `path` as backup lays one out: the manifest of `store` (from
    /// ``store(at:name:)``) and `files`, the stores folder, then what `members` writes. The
    /// manifest is alice@example.com's, taken at a fixed time, compressed with zstd.
    public static func write(
        to path: String, store: Manifest.File, files: [Manifest.File], members: (ArchiveWriter) throws -> Void
    ) throws {
        let name = String(store.path.dropFirst(Manifest.storesFolder.count))
        let manifest = Manifest(
            user: "alice@example.com", host: "test", created: Date(timeIntervalSince1970: 1_700_000_000), label: nil,
            compression: .zstd,
            stores: [
                Manifest.Store(
                    name: name, path: store.path, pageSize: 4096, pageCount: Int(store.size / 4096),
                    journalMode: "delete", sqliteVersion: Database.libraryVersion, check: "quick",
                    integrity: Database.sound,
                    externalDataPath: external)
            ], files: [store] + files)
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        defer { close(fd) }
        let writer = try ArchiveWriter(fileDescriptor: fd, path: path, compression: .zstd, threads: 2)
        try writer.addManifest(manifest)
        try writer.addDirectory(member: Manifest.storesFolder)
        try members(writer)
        try writer.finish()
    }
}
