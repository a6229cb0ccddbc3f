import Foundation
import GranaryTestSupport
import Testing

@testable import GranaryKit

/// The newest backup's page-hash lists kept in the repository's work folder (issue 35,
/// `PageHashCache`): used only while they are that archive's lists, equal to what reading the
/// archive (or rebuilding its chain) gives, and a damaged or stale entry is a miss.
@Suite("page-hash cache")
struct PageHashCacheTests {
    let folder = TemporaryFolder()
    var root: String { folder.child("root") }
    var repository: LocalRepository { LocalRepository(path: initializedRepository(folder.child("repo"))) }
    var cache: String { PageHashCache.folder(of: repository) }
    let user = try! UserID("alice@example.com")

    init() throws { try SampleData.generate(in: folder.child("root")) }

    /// `backup --delta` of alice, after a few new pages in her first store when `change`.
    func backup(change: Bool) throws -> BackupOperation.Result {
        if change {
            let store = try #require(try Root(path: root).user(user).scan().stores.first)
            let db = try Database(path: store.path, mode: .readWrite)
            try db.execute(
                "CREATE TABLE IF NOT EXISTS extra(x BLOB); INSERT INTO extra VALUES (randomblob(9000)), (randomblob(9000))"
            )
        }
        var options = BackupOperation.Options()
        options.delta = DeltaPolicy()
        return try BackupOperation(root: Root(path: root), repository: repository, options: options).run(user)
    }

    /// The lists of `entry` read from the repository (no cache): store name → bytes.
    func listsFromArchive(_ entry: RepositoryEntry) throws -> [String: Data] {
        let scratch = folder.child("scratch-\(UUID().uuidString)")
        try FileSystem.makeDirectory(scratch)
        guard case .success(let head) = BaseHead.read(entry, repository: repository, into: scratch) else {
            Issue.record("\(entry.name.fileName) gives no base")
            return [:]
        }
        return head.pages.mapValues { FileManager.default.contents(atPath: $0) ?? Data() }
    }

    /// The identity of `entry`'s whole chain, as a backup proves it (issue 46).
    func chain(_ entry: RepositoryEntry) throws -> [String] {
        try ChainLinks.walk(entry, repository: repository).get().identity
    }

    /// A new folder for the lists a lookup links (a backup's scratch folder).
    func scratch() throws -> String {
        let path = repository.workFolder + "/scratch-\(UUID().uuidString)"
        try FileSystem.makeDirectory(path)
        return path
    }

    func newest() throws -> RepositoryEntry { try #require(try repository.archives(of: user).last) }

    @Test(
        "each backup --delta keeps its lists, keyed by the names and manifest SHA-256s of its whole chain, equal to the archive's"
    )
    func keptAndEqual() throws {
        for (index, change) in [false, true, true].enumerated() {
            let result = try backup(change: change)
            #expect(result.delta?.isDelta == (index > 0), "\(String(describing: result.delta))")
            let entry = try newest()
            let head = try repository.head(of: entry)
            let (manifest, digest) = (head.manifest, head.sha256)
            // A full packs its stores with their SHA-256 (taken after the plan); a delta packs none.
            let storeMembers = manifest.files.filter { $0.kind == .store }
            #expect(index == 0 ? storeMembers.count == 2 : storeMembers.isEmpty)
            #expect(storeMembers.allSatisfy { $0.sha256.count == 64 })
            let key = try String(contentsOfFile: cache + "/" + user.rawValue + "/key", encoding: .utf8)
            #expect(key.hasPrefix(entry.name.fileName + " " + digest + " "))
            #expect(key.split(separator: "\n").count == index + 1)
            #expect(key == PageHashCache.key(try chain(entry)))
            let cached = try #require(
                PageHashCache.pages(
                    of: entry, manifest: manifest, chain: try chain(entry), in: cache, linkingInto: try scratch()))
            // For a delta, the archive's lists are rebuilt along its chain: the cache equals that.
            let read = try listsFromArchive(entry)
            #expect(!read.isEmpty)
            #expect(read == cached.mapValues { FileManager.default.contents(atPath: $0) ?? Data() })
        }
    }

    @Test("a cached list that is damaged, or kept for another archive, is a miss; the next delta reads its base")
    func damagedIsMiss() throws {
        _ = try backup(change: false)
        let entry = try newest()
        let head = try repository.head(of: entry)
        let (manifest, digest) = (head.manifest, head.sha256)
        #expect(
            PageHashCache.pages(
                of: entry, manifest: manifest, chain: try chain(entry), in: cache, linkingInto: try scratch()) != nil)
        // Another manifest digest: a miss.
        #expect(
            PageHashCache.pages(
                of: entry, manifest: manifest, chain: [entry.name.fileName + " " + String(repeating: "0", count: 64)],
                in: cache, linkingInto: try scratch()) == nil)
        #expect(digest.count == 64)
        // One bit of one hash flipped: the state digest tells, a miss.
        let list = cache + "/" + user.rawValue + "/0.pages"
        var bytes = try #require(FileManager.default.contents(atPath: list))
        bytes[bytes.count - 1] ^= 1
        try bytes.write(to: URL(fileURLWithPath: list))
        #expect(
            PageHashCache.pages(
                of: entry, manifest: manifest, chain: try chain(entry), in: cache, linkingInto: try scratch()) == nil)
        // The next backup is a delta all the same (its base read from the archive), and keeps its own lists.
        let result = try backup(change: true)
        #expect(result.delta?.isDelta == true)
        #expect(result.delta?.base == entry.name.fileName)
        let delta = try newest()
        let deltaManifest = try repository.head(of: delta).manifest
        let cached = try #require(
            PageHashCache.pages(
                of: delta, manifest: deltaManifest, chain: try chain(delta), in: cache, linkingInto: try scratch()))
        #expect(try listsFromArchive(delta) == cached.mapValues { FileManager.default.contents(atPath: $0) ?? Data() })
    }

    @Test(
        "lists found are the backup's own: another backup replacing or removing the cache after the lookup changes nothing it reads"
    )
    func foundListsSurviveReplacement() throws {
        _ = try backup(change: false)
        let entry = try newest()
        let manifest = try repository.head(of: entry).manifest
        let found = try #require(
            PageHashCache.pages(
                of: entry, manifest: manifest, chain: try chain(entry), in: cache, linkingInto: try scratch()))
        let before = found.mapValues { FileManager.default.contents(atPath: $0) ?? Data() }
        // What a backup publishing meanwhile does: the user's lists removed, then others put in their place.
        FileSystem.removeTree(cache + "/" + user.rawValue)
        #expect(!FileManager.default.fileExists(atPath: cache + "/" + user.rawValue))
        #expect(found.mapValues { FileManager.default.contents(atPath: $0) ?? Data() } == before)
        #expect(!before.values.contains(Data()))
        // A lookup after the removal is a miss, not an error.
        #expect(
            PageHashCache.pages(
                of: entry, manifest: manifest, chain: try chain(entry), in: cache, linkingInto: try scratch())
                == nil)
    }

    @Test("a local repository's cache is in its own work folder; each remote repository has a folder of its own")
    func folderPerRepository() {
        #expect(PageHashCache.folder(workFolder: "/w", location: nil) == "/w/page-hashes")
        let one = PageHashCache.folder(workFolder: "/w", location: "s3:bucket/primary")
        let two = PageHashCache.folder(workFolder: "/w", location: "s3:bucket/other")
        #expect(one.hasPrefix("/w/page-hashes/") && two.hasPrefix("/w/page-hashes/"))
        #expect(one != two)
        #expect(one == PageHashCache.folder(workFolder: "/w", location: "s3:bucket/primary"))
    }
}
