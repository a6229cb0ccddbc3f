import Crypto
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Extracts an archive into a staging folder and verifies everything in it before anything
/// live is touched: every member must be listed in the manifest with the size and SHA-256 it
/// has, every listed file must be present, and every store must pass `PRAGMA integrity_check`.
public enum Staging {
    /// Extracts `archive` into `folder` (which must exist and be empty) and verifies it.
    /// Returns the manifest. Throws `RestoreError.verificationFailed` for anything wrong with the data.
    public static func extract(archive: String, into folder: String) throws -> Manifest {
        func fail(_ reason: String) -> RestoreError {
            .verificationFailed(archive: archive, reason: reason, newestGood: nil)
        }
        let reader: ArchiveReader
        do { reader = try ArchiveReader(path: archive) } catch { throw fail("\(error)") }
        let manifest: Manifest
        do {
            guard let first = try reader.next(), first.name == Manifest.memberName else {
                throw fail("the first member is not \(Manifest.memberName)")
            }
            manifest = try Manifest.decode(try reader.readAll(limit: Manifest.sizeLimit), source: archive)
        } catch let error as RestoreError {
            throw error
        } catch {
            throw fail("\(error)")
        }
        var expected: [String: Manifest.File] = [:]
        for file in manifest.files { expected[file.path] = file }
        var seen: Set<String> = []
        do {
            while let entry = try reader.next() {
                let name = entry.name.hasSuffix("/") ? String(entry.name.dropLast()) : entry.name
                guard name == "stores" || name.hasPrefix("stores/"), !name.split(separator: "/").contains(".."), !name.hasPrefix("/") else {
                    throw fail("unexpected member \(entry.name)")
                }
                let target = folder + "/" + name
                switch entry.kind {
                case .directory:
                    try FileSystem.makeDirectory(target)
                case .regular:
                    guard let file = expected[name] else { throw fail("member \(name) is not in the manifest") }
                    try FileSystem.makeDirectory((target as NSString).deletingLastPathComponent)
                    let fd = open(target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
                    if fd < 0 { throw FileSystemError("create", path: target) }
                    var hasher = SHA256()
                    var failure: FileSystemError?
                    let size = try reader.stream(limit: file.size) { chunk in
                        hasher.update(bufferPointer: chunk)
                        if failure == nil {
                            do throws(FileSystemError) { try FileSystem.writeAll(fd, chunk, path: target) } catch { failure = error }
                        }
                    }
                    let synced = fsync(fd)
                    close(fd)
                    if let failure { throw failure }
                    if synced != 0 { throw FileSystemError("fsync", path: target) }
                    guard size == file.size else { throw fail("\(name) has \(size) bytes, the manifest says \(file.size)") }
                    let digest = hasher.finalize().hex
                    guard digest == file.sha256 else { throw fail("\(name) has SHA-256 \(digest), the manifest says \(file.sha256)") }
                    seen.insert(name)
                default:
                    throw fail("member \(entry.name) is a \(entry.kind.rawValue), never found in granary's archives")
                }
            }
        } catch let error as ArchiveError {
            throw fail("\(error)")
        }
        if let missing = manifest.files.first(where: { !seen.contains($0.path) }) {
            throw fail("\(missing.path) is listed in the manifest but missing")
        }
        for store in manifest.stores {
            // The name decides where the store goes in the user's folder: it must stay inside it.
            let parts = store.name.split(separator: "/", omittingEmptySubsequences: false)
            guard !store.name.isEmpty, !store.name.hasPrefix("/"), !parts.contains(".."), !parts.contains("."),
                !parts.contains(""), store.name.utf8.allSatisfy({ $0 >= 0x20 }), store.path == Manifest.storesFolder + store.name
            else { throw fail("store name \(store.name.debugDescription) would leave the user's folder or does not match \(store.path)") }
            let path = folder + "/" + store.path
            guard seen.contains(store.path) else { throw fail("store \(store.name) has no member \(store.path)") }
            let problems: [String]
            do {
                let db = try Database(path: path, mode: .readWrite)
                problems = db.integrityCheck(full: true)
            } catch {
                throw fail("\(store.path) cannot be opened: \(error.message)")
            }
            guard problems == ["ok"] else { throw fail("\(store.path) fails integrity_check: \(problems.prefix(3).joined(separator: "; "))") }
            // Opening for the check may leave an empty -wal/-shm beside the staged copy.
            try FileSystem.removeFile(path + "-wal")
            try FileSystem.removeFile(path + "-shm")
        }
        return manifest
    }

    /// The staged path of a store of `manifest` inside `folder`.
    public static func stagedPath(of store: Manifest.Store, in folder: String) -> String {
        folder + "/" + store.path
    }

    /// The staged external-data folder of a store, when the archive has one.
    public static func stagedExternal(of store: Manifest.Store, in folder: String) -> String? {
        store.externalDataPath.map { folder + "/" + ($0.hasSuffix("/") ? String($0.dropLast()) : $0) }
    }
}
