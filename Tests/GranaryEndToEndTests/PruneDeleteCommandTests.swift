import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

/// `granary prune`, `granary delete` and `backup --prune` on real archives.
@Suite("granary prune and delete")
struct PruneDeleteCommandTests {
    final class Fixture {
        let folder = TemporaryFolder()
        var root: String { folder.child("root") }
        var repo: String { initializedRepository(folder.child("repo")) }
        var dave: String { repo + "/dave@example.com" }

        /// 48 hourly backups of dave, 2025-03-01T00:00Z to 2025-03-02T23:00Z (the test clock,
        /// GRANARY_TEST_NOW, stamps them), as host `h1`.
        init(hourly: Bool = true) throws {
            try GranaryProcess.run([root], tool: "granary-sample")
            guard hourly else {
                #expect(try granary(["backup", "dave@example.com"]).status == 0)
                return
            }
            for hour in 0..<48 {
                let stamp = String(format: "202503%02dT%02d0000Z", 1 + hour / 24, hour % 24)
                let backup = try granary(
                    ["backup", "dave@example.com", "--check", "none"], environment: ["GRANARY_TEST_NOW": stamp])
                #expect(backup.status == 0, "\(backup.stderr)")
            }
        }

        /// The archive name of an hour of the fixture (`20250301T050000Z` → its file name).
        static func name(_ stamp: String) -> String {
            String(stamp.dropLast()) + ".000000Z.h1.tar.zst"
        }

        func granary(_ arguments: [String], environment: [String: String] = [:]) throws -> GranaryProcess.Result {
            try GranaryProcess.run(
                arguments + ["--root", root, "--repo", repo, "--host", "h1"], environment: environment)
        }

        func names() -> [String] { FileSystem.contents(of: dave).filter { !$0.hasPrefix(".") }.sorted() }
    }

    @Test("prune refuses an empty policy with exit 64 and removes nothing")
    func emptyPolicy() throws {
        let fixture = try Fixture()
        let result = try fixture.granary(["prune", "dave@example.com"])
        #expect(result.status == 64)
        #expect(result.stderr.contains("retention policy is empty"), "\(result.stderr)")
        #expect(fixture.names().count == 48)
    }

    @Test(
        "prune --dry-run shows keep and remove with the rule that kept each; prune keeps the newest verified archive whatever the policy"
    )
    func pruneKeepsNewestVerified() throws {
        let fixture = try Fixture()
        let dry = try fixture.granary([
            "prune", "dave@example.com", "--keep-daily", "1", "--keep-last", "2", "--dry-run",
        ])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains("keep 2, remove 46"), "\(dry.stdout)")
        #expect(
            dry.stdout.contains("keep    20250302T230000.000000Z.h1.tar.zst") && dry.stdout.contains("last, daily"),
            "\(dry.stdout)")
        #expect(dry.stdout.contains("remove  20250301T230000.000000Z.h1.tar.zst"))
        #expect(fixture.names().count == 48, "a dry run removes nothing")
        // Two older archives are verified: the newer of them must survive the policy.
        #expect(try fixture.granary(["verify", "dave@example.com/20250301T050000.000000Z.h1.tar.zst"]).status == 0)
        #expect(try fixture.granary(["verify", fixture.dave + "/20250301T060000.000000Z.h1.tar.zst"]).status == 0)
        let json = try fixture.granary(["prune", "dave@example.com", "--keep-daily", "1", "--json"])
        #expect(json.status == 0, "\(json.stderr)")
        #expect(fixture.names() == ["20250301T060000.000000Z.h1.tar.zst", "20250302T230000.000000Z.h1.tar.zst"])
        let document = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as! [String: Any]
        let archives = ((document["users"] as! [[String: Any]])[0]["archives"] as! [[String: Any]])
        let kept = archives.filter { $0["keep"] as! Bool }.map { $0["keptBy"] as! [String] }
        #expect(kept == [["daily"], ["newest verified"]])
        // Removed archives take their verification records with them.
        #expect(!FileSystem.contents(of: fixture.dave).contains(".20250301T050000.000000Z.h1.tar.zst.verify.json"))
    }

    @Test(
        "delete refuses the newest verified archive without --force, removes nothing for an unknown name, and --dry-run removes nothing"
    )
    func delete() throws {
        let fixture = try Fixture()
        let newest = "dave@example.com/20250302T230000.000000Z.h1.tar.zst"
        #expect(try fixture.granary(["verify", newest]).status == 0)
        let refused = try fixture.granary(["delete", newest, "dave@example.com/20250301T000000.000000Z.h1.tar.zst"])
        #expect(refused.status == 64)
        #expect(refused.stderr.contains("newest verified"), "\(refused.stderr)")
        #expect(fixture.names().count == 48)
        let unknown = try fixture.granary([
            "delete", "dave@example.com/20250301T000000.000000Z.h1.tar.zst",
            "dave@example.com/20250399T000000.000000Z.h1.tar.zst",
        ])
        #expect(unknown.status == 66)
        #expect(fixture.names().count == 48)
        #expect(
            try fixture.granary(["delete", "--dry-run", "dave@example.com/20250301T000000.000000Z.h1.tar.zst"]).stdout
                .contains(
                    "would remove"))
        #expect(fixture.names().count == 48)
        #expect(
            try fixture.granary(["delete", "--user", "dave@example.com", "20250301T000000.000000Z.h1.tar.zst"]).status
                == 0)
        #expect(fixture.names().count == 47 && !fixture.names().contains("20250301T000000.000000Z.h1.tar.zst"))
        #expect(try fixture.granary(["delete", "--force", newest]).status == 0)
        #expect(!fixture.names().contains("20250302T230000.000000Z.h1.tar.zst"))
        #expect(!FileSystem.contents(of: fixture.dave).contains(".20250302T230000.000000Z.h1.tar.zst.verify.json"))
    }

    @Test("backup --prune applies the configured [retention] policy after a successful backup")
    func backupPrune() throws {
        let fixture = try Fixture(hourly: false)
        let config = fixture.folder.child("config.toml")
        try "[retention]\nkeep_last = 2\n".write(toFile: config, atomically: true, encoding: .utf8)
        for _ in 0..<3 {
            let result = try fixture.granary(
                ["backup", "--prune", "dave@example.com"], environment: ["GRANARY_CONFIG": config])
            #expect(result.status == 0, "\(result.stderr)")
        }
        #expect(fixture.names().count == 2)
        let empty = try fixture.granary(["backup", "--prune", "dave@example.com"])
        #expect(empty.status == 64)
    }
}
