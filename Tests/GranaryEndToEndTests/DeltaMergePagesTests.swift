import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

/// What a merge carries (``DeltaMerge``): the replaced deltas are read newest first and a page
/// counts only in the newest delta that carries it, so the merged delta must carry exactly the
/// pages in which the tip's state differs from its base's, whatever the deltas between did (a page
/// changed in every delta, one changed and changed back, the store grown, cut and grown again).
@Suite("delta merges: the pages a merged delta carries")
struct DeltaMergePagesTests {
    static let alice = DeltaArchiveTests.alice

    /// The pages of a database file (its page size from the header).
    static func pages(_ path: String) throws -> [Data] {
        let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        let size = Int(bytes[16]) << 8 | Int(bytes[17])
        let pageSize = size == 1 ? 65_536 : size
        return stride(from: 0, to: bytes.count, by: pageSize).map { bytes[$0..<min($0 + pageSize, bytes.count)] }
    }

    static func manifest(_ site: SampleSite, _ name: String) throws -> Manifest {
        try ArchiveHead(file: site.repo + "/\(alice)/" + name).manifest
    }

    /// Restores alice's `archive` into a new folder: the rebuilt Local.sqlite's path.
    static func restore(_ site: SampleSite, _ archive: String, _ tag: String) throws -> String {
        let target = site.folder.child("out-\(tag)")
        try FileSystem.makeDirectory(target)
        let result = try site.granary(["restore", alice, archive, "--to", target])
        #expect(result.status == 0, "\(result.stderr)")
        return target + "/Local.sqlite"
    }

    @Test(
        "a merge over a store grown, cut by incremental_vacuum and grown less again, with a row changed and changed back, carries exactly the pages the tip differs from the base in and restores the tip"
    )
    func survivingPages() throws {
        let site = try SampleSite()
        let store = site.root + "/\(Self.alice)/Local.sqlite"
        func connect() throws -> Database { try Database(path: store, mode: .readWrite) }
        try connect().execute("PRAGMA auto_vacuum = INCREMENTAL; VACUUM")
        try connect().execute(
            "INSERT INTO items(body, created) SELECT hex(randomblob(250)), 0 FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000) SELECT x FROM c); UPDATE items SET body = 'original' WHERE id = 5"
        )
        var dumps: [String] = []
        func backup() throws {
            dumps.append(try DeltaArchiveTests.dump(store))
            let made = try site.granary(["backup", Self.alice, "--delta"])
            #expect(made.status == 0, "\(made.stderr)")
        }
        try backup()  // the full
        // 1: the file grows; row 5 changes.
        try connect().execute(
            "INSERT INTO items(body, created) SELECT hex(randomblob(250)), 1 FROM items LIMIT 100; UPDATE items SET body = 'changed!' WHERE id = 5"
        )
        try backup()
        // 2: the rows just added go and the file is cut.
        try connect().execute("DELETE FROM items WHERE created = 1")
        try connect().execute("PRAGMA incremental_vacuum")
        try backup()
        // 3: it grows again, less than in 1; row 5 gets its first body back.
        try connect().execute("UPDATE items SET body = 'original' WHERE id = 5")
        try connect().execute("INSERT INTO items(body, created) SELECT hex(randomblob(250)), 3 FROM items LIMIT 30")
        try backup()
        // 4: the tip.
        try connect().execute("UPDATE items SET body = 'tip' WHERE id = (SELECT max(id) FROM items)")
        try backup()
        let names = DeltaMergeTests.archives(site)
        try #require(names.count == 5 && names.dropFirst().allSatisfy { $0.contains("-delta.") }, "\(names)")
        var counts: [Int] = []
        for name in names {
            let stores = try Self.manifest(site, name).stores
            counts.append(try #require(stores.first { $0.name.hasSuffix("Local.sqlite") }?.pageCount))
        }
        try #require(counts[2] < counts[1] && counts[3] > counts[2] && counts[3] < counts[1], "\(counts)")
        // What the tip differs from the full in, page by page, from the two rebuilt files.
        let base = try Self.pages(try Self.restore(site, names[0], "base"))
        let tip = try Self.pages(try Self.restore(site, names[4], "tip"))
        let differing = tip.indices.filter { $0 >= base.count || base[$0] != tip[$0] }.count
        #expect(differing > 0 && differing < tip.count, "\(differing) of \(tip.count)")
        // Row 5's page is the base's again: changed in the first delta, changed back in the third.
        let row5 = try #require(base.indices.first { base[$0].range(of: Data("original".utf8)) != nil })
        #expect(row5 < tip.count && base[row5] == tip[row5], "page \(row5 + 1)")

        let pruned = try site.granary(["prune", Self.alice, "--keep-last", "1"])
        #expect(pruned.status == 0, "\(pruned.stdout) \(pruned.stderr)")
        let after = DeltaMergeTests.archives(site)
        #expect(after.count == 2 && after.first == names[0], "\(after)")
        let merged = after.last ?? ""
        let info = try #require(try Self.manifest(site, merged).delta)
        let carried = info.stores.first { $0.name.hasSuffix("Local.sqlite") }
        #expect(carried?.changedPages == differing, "\(String(describing: carried)) vs \(differing)")
        #expect(carried?.pageCount == counts[4])
        #expect(try DeltaMergeTests.restored(site, merged, "merged") == dumps[4])
        let verified = try site.granary(["verify", "--all", "--chain"])
        #expect(verified.status == 0, "\(verified.stdout) \(verified.stderr)")
    }
}
