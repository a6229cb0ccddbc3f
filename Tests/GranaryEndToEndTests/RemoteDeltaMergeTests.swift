import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

/// Prune's merge of deltas (issue 35) on a remote repository: a real S3 server (moto) through rclone.
@Suite(
    "delta merges on a real S3 server", .serialized, .enabled(if: S3Server.available, S3Server.unavailableReason))
struct RemoteDeltaMergeTests {
    static let shared: S3Server? = try? S3Server(
        log: NSTemporaryDirectory() + "/granary-moto-merge-\(getpid()).log")

    @Test(
        "s3: prune merges a chain into one archive uploaded and read back before any object it replaces is deleted; it restores the kept delta's state"
    )
    func remoteMerge() throws {
        let server = try #require(Self.shared)
        let bucket = "m" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
        try server.makeBucket(bucket)
        let site = try SampleSite()
        let repo = initializedRepository("s3:\(bucket)/granary", environment: server.environment())
        func granary(_ arguments: [String]) throws -> GranaryProcess.Result {
            try GranaryProcess.run(
                arguments + ["--root", site.root, "--repo", repo], environment: server.environment())
        }
        let alice = DeltaArchiveTests.alice
        let store = site.root + "/\(alice)/Local.sqlite"
        let db = try Database(path: store, mode: .readWrite)
        try db.execute(
            "INSERT INTO items(body, created) SELECT hex(randomblob(250)), 0 FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000) SELECT x FROM c)"
        )
        var dump = ""
        for step in 0..<4 {
            try db.execute("UPDATE items SET body = 'remote \(step)' WHERE id IN (3, \(7 * step + 7))")
            dump = try DeltaArchiveTests.dump(store)
            let made = try granary(["backup", alice, "--delta"])
            #expect(made.status == 0, "\(made.stderr)")
        }
        func archives() throws -> [String] {
            try server.objects(bucket + "/granary").keys.filter {
                $0.hasPrefix(alice + "/2") && $0.hasSuffix(".tar.zst")
            }.sorted()
        }
        let before = try archives()
        #expect(before.count == 4 && before.filter { $0.contains("-delta") }.count == 3, "\(before)")
        let pruned = try granary(["prune", alice, "--keep-last", "1", "-v"])
        #expect(pruned.status == 0, "\(pruned.stderr)")
        #expect(pruned.stdout.contains("merged"), "\(pruned.stdout)")
        let after = try archives()
        // The full stays; the three deltas become one merged delta on it.
        #expect(after.count == 2 && after.first == before.first && !before.contains(after.last ?? ""), "\(after)")
        let target = site.folder.child("out")
        try FileSystem.makeDirectory(target)
        let name = ((after.last ?? "") as NSString).lastPathComponent
        let restored = try granary(["restore", alice, name, "--to", target])
        #expect(restored.status == 0, "\(restored.stderr)")
        #expect(try DeltaArchiveTests.dump(target + "/Local.sqlite") == dump)
        let verified = try granary(["verify", "--all", "--chain"])
        #expect(verified.status == 0, "\(verified.stderr)")
    }
}
