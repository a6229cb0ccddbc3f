import Foundation
import GranaryDigest

#if canImport(Glibc)
    import Glibc
#endif

/// The page-hash lists of each user's newest backup made with `--delta`, kept in the repository's
/// work folder (issue 35), so that the next `backup --delta` reads only its base's manifest
/// instead of its `.pages` members (or, after a delta, the members of its whole chain).
///
/// ```
/// WORK/page-hashes/USER/key        "ARCHIVE-FILE-NAME MANIFEST-SHA256 SIZE MODIFIED\n" for each
///                                  archive of its chain, newest first, back to its full
/// WORK/page-hashes/USER/N.pages    the list of the manifest's N-th store (PageFiles format)
/// ```
///
/// A cached list is used only when the key is the identity of the newest backup's whole chain as
/// just proved whole (``ChainLinks``: each link's name, manifest SHA-256, size and stamp, issue 46) — a link
/// removed, replaced or rewritten since is a miss, and the chain is never trusted on a name — and
/// each list gives the page size, page count and state digest
/// that manifest records (the state digest is a SHA-256 over the list: a list that gives it is
/// the list). Anything else — no entry, another archive, a list damaged or cut short — is a miss,
/// and the base is read from the archive as before. The cache is only ever a shortcut.
public enum PageHashCache {
    static let folderName = "page-hashes"

    /// The cache's folder for `repository` (``folder(workFolder:location:)``).
    static func folder(of repository: any Repository) -> String {
        folder(workFolder: repository.workFolder, location: repository.localPath == nil ? repository.location : nil)
    }

    /// The cache's folder in `workFolder`. A local repository's work folder is its own; a remote
    /// one's (`location`) is shared by every remote repository this uid backs up to, so each
    /// has a folder of its own there, named by a digest of its location: two repositories never
    /// replace each other's lists.
    public static func folder(workFolder: String, location: String?) -> String {
        let base = workFolder + "/" + folderName
        guard let location else { return base }
        return base + "/" + String(SHA256.hash(data: Data(location.utf8)).hex.prefix(16))
    }

    /// The cached lists of `entry` (whose manifest is `manifest`, and whose whole chain has the
    /// identity `chain`, ``ChainLinks/identity``): store name → `.pages` file; nil on a miss.
    ///
    /// Each list is linked into `scratch` (the backup's own folder, on the same file system) and
    /// checked there: another granary may replace the cached lists at any moment (a backup of
    /// the same user published meanwhile), and a list that goes away or changes after the check
    /// must not fail the backup or be read as this chain's. What was linked is this backup's.
    static func pages(
        of entry: RepositoryEntry, manifest: Manifest, chain: [String], in cache: String, linkingInto scratch: String
    ) -> [String: String]? {
        guard let info = manifest.delta, !chain.isEmpty else { return nil }
        let folder = cache + "/" + entry.user.rawValue
        // Invariant D2 (docs/delta-invariants.md)
        guard let key = try? String(contentsOfFile: folder + "/key", encoding: .utf8), key == Self.key(chain)
        else { return nil }
        var pages: [String: String] = [:]
        for (index, store) in info.stores.enumerated() {
            let path = scratch + "/cached-\(index).pages"
            unlink(path)
            guard link(folder + "/\(index).pages", path) == 0 else { return nil }
            let expected = PageFiles.Summary(
                pageSize: store.pageSize, pageCount: store.pageCount, stateDigest: store.stateDigest)
            guard let summary = try? PageFiles.summary(ofPages: path), summary == expected else { return nil }
            pages[store.name] = path
        }
        return pages
    }

    /// Moves the lists of a backup being published (`pages`, in the manifest's store order) out of
    /// its work folder, to be kept by ``keep(_:entry:manifest:)``; nil when they cannot be (the
    /// backup goes on without the cache).
    static func stage(_ pages: [String], user: UserID, in cache: String) -> String? {
        let pending = cache + "/" + user.rawValue + ".pending"
        FileSystem.removeTree(pending)
        do {
            try FileSystem.makeDirectory(cache)
            try FileSystem.makeDirectory(pending)
            for (index, path) in pages.enumerated() where rename(path, pending + "/\(index).pages") != 0 {
                throw FileSystemError("rename", path: path)
            }
        } catch {
            FileSystem.removeTree(pending)
            return nil
        }
        return pending
    }

    /// Makes the staged lists at `pending` the cached lists of `entry`, whose manifest is
    /// `manifest`, built on the chain `base` (its base's ``ChainLinks/identity``; empty for a
    /// full). Failures leave no entry (a miss next time).
    static func keep(_ pending: String, entry: RepositoryEntry, manifest: Manifest, base: [String]) {
        let folder = String(pending.dropLast(".pending".count))
        FileSystem.removeTree(folder)
        guard let bytes = try? manifest.layout().manifest,
            (try? Data(Self.key([ChainLinks.line(entry, digest: SHA256.hash(data: bytes).hex)] + base).utf8).write(
                to: URL(fileURLWithPath: pending + "/key"))) != nil,
            rename(pending, folder) == 0
        else {
            FileSystem.removeTree(pending)
            return
        }
    }

    /// The key of a chain's identity: one line per link.
    static func key(_ chain: [String]) -> String { chain.map { $0 + "\n" }.joined() }
}
