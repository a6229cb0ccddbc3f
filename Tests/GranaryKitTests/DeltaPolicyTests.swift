import Foundation
import GranaryTestSupport
import Testing

@testable import GranaryKit

/// When `backup --delta` writes a full instead of a delta (`DeltaPolicy`), through the core's
/// `BackupOperation` on granary-sample's users, real stores and a local repository.
@Suite("delta policy")
struct DeltaPolicyTests {
    static let user = "alice@example.com"

    final class Site {
        let folder = TemporaryFolder()
        var root: String { folder.child("root") }
        let repository: LocalRepository
        init() throws {
            try SampleData.generate(in: folder.child("root"))
            repository = LocalRepository(path: initializedRepository(folder.child("repo")))
        }

        func backup(_ policy: DeltaPolicy) throws -> DeltaOutcome {
            var options = BackupOperation.Options()
            options.delta = policy
            let operation = BackupOperation(root: Root(path: root), repository: repository, options: options)
            let result = try operation.run(try UserID(DeltaPolicyTests.user))
            return try #require(result.delta)
        }

        func change(_ sql: String) throws {
            try Database(path: root + "/\(DeltaPolicyTests.user)/Local.sqlite", mode: .readWrite).execute(sql)
        }
    }

    @Test("a full after maxChain deltas, the chain counted from it again")
    func chainLength() throws {
        let site = try Site()
        var policy = DeltaPolicy()
        policy.maxChain = 2
        var kinds: [Bool] = []
        var reasons: [String] = []
        for step in 0..<5 {
            try site.change("UPDATE items SET body = 'step \(step)' WHERE id = 1")
            let outcome = try site.backup(policy)
            kinds.append(outcome.isDelta)
            reasons.append(outcome.reason ?? "")
        }
        #expect(kinds == [false, true, true, false, true], "\(reasons)")
        #expect(reasons[0] == "there is no earlier backup")
        #expect(reasons[3] == "the chain has 2 deltas already (at most 2)")
    }

    @Test("a full when more than maxChangedShare of the pages changed (a VACUUM after deletes), and its reason")
    func changedShare() throws {
        let site = try Site()
        try site.change(
            "INSERT INTO items(body, created) SELECT hex(randomblob(500)), 1 FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 2000) SELECT x FROM c)"
        )
        #expect(try !site.backup(DeltaPolicy()).isDelta)
        try site.change("DELETE FROM items WHERE id % 2 = 0")
        try site.change("VACUUM")
        let outcome = try site.backup(DeltaPolicy())
        #expect(!outcome.isDelta)
        #expect(outcome.reason?.contains("% of the pages changed (a full above 50 %)") == true, "\(outcome)")
        // A small change after it is a delta again, of a few pages.
        try site.change("UPDATE items SET body = 'small' WHERE id = 1")
        let small = try site.backup(DeltaPolicy())
        #expect(small.isDelta && small.changedPages < small.pages / 10, "\(small)")
    }

    @Test("a full when the newest backup has no page hashes, or a store's journal mode changed")
    func baseUnusable() throws {
        let site = try Site()
        var plain = BackupOperation.Options()
        plain.delta = nil
        _ = try BackupOperation(root: Root(path: site.root), repository: site.repository, options: plain).run(
            try UserID(Self.user))
        let first = try site.backup(DeltaPolicy())
        #expect(!first.isDelta && first.reason?.contains("has no page hashes") == true, "\(first)")
        try site.change("PRAGMA journal_mode = DELETE")
        let second = try site.backup(DeltaPolicy())
        #expect(!second.isDelta && second.reason?.contains("journal mode") == true, "\(second)")
    }
}
