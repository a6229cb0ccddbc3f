import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

/// `granary inspect` and `granary check` against the sample data and real archives.
@Suite("granary inspect and check")
struct InspectCheckCommandTests {
    final class Fixture: SampleSite {
        func json(_ arguments: [String]) throws -> [String: Any] {
            let result = try granary(arguments + ["--json"])
            return try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as! [String: Any]
        }
    }

    @Test("inspect on the Core Data store shows its entities with row counts, model version hashes and store UUID")
    func coreDataStore() throws {
        let fixture = try Fixture()
        let path = fixture.root + "/bob@example.com/Notes.sqlite"
        let document = try fixture.json(["inspect", path])
        #expect(document["kind"] as? String == "store")
        let store = (document["stores"] as! [[String: Any]])[0]
        #expect(store["journalMode"] as? String == "wal")
        #expect(store["pageSize"] as? Int == 4096)
        let coreData = store["coreData"] as! [String: Any]
        let entities = coreData["entities"] as! [[String: Any]]
        // The row counts are SQLite's, read independently here.
        let db = try Database(path: path, mode: .readOnly)
        for entity in entities {
            let name = entity["name"] as! String
            let rows = try db.scalar("SELECT count(*) FROM Z\(name.uppercased())")?.integer
            #expect(Int64(entity["rows"] as! Int) == rows)
        }
        #expect(entities.map { $0["name"] as! String } == ["Folder", "Note"])
        let hashes = coreData["modelVersionHashes"] as! [String: String]
        #expect(Set(hashes.keys) == ["Folder", "Note"])
        #expect(coreData["storeUUID"] as? String == (try db.scalar("SELECT Z_UUID FROM Z_METADATA")?.text))
        let text = try fixture.granary(["inspect", path])
        #expect(text.stdout.contains("model version hashes") && text.stdout.contains(hashes["Note"]!))
    }

    @Test(
        "inspect on an archive describes its stores; on a rollback store its journal mode; on junk it exits 65, on nothing 66"
    )
    func archiveAndErrors() throws {
        let fixture = try Fixture()
        #expect(try fixture.granary(["backup", "alice@example.com"]).status == 0)
        let archive =
            fixture.repo + "/alice@example.com/"
            + FileSystem.contents(of: fixture.repo + "/alice@example.com").filter { !$0.hasPrefix(".") }[0]
        let document = try fixture.json(["inspect", archive])
        #expect(document["kind"] as? String == "archive")
        #expect(document["user"] as? String == "alice@example.com")
        let stores = document["stores"] as! [[String: Any]]
        #expect(Set(stores.map { $0["name"] as! String }) == ["Local.sqlite", "Cloud.sqlite"])
        let local = stores.first { $0["name"] as? String == "Local.sqlite" }!
        let live = try Database(path: fixture.root + "/alice@example.com/Local.sqlite", mode: .readOnly)
        let rows = ((local["tables"] as! [[String: Any]]).first { $0["name"] as? String == "items" })!["rows"] as! Int
        #expect(Int64(rows) == (try live.scalar("SELECT count(*) FROM items")?.integer))
        let legacy = try fixture.json(["inspect", fixture.root + "/carol@example.com/Legacy.db"])
        #expect((legacy["stores"] as! [[String: Any]])[0]["journalMode"] as? String == "rollback")
        #expect(try fixture.granary(["inspect", fixture.root + "/carol@example.com/readme.txt"]).status == 65)
        #expect(try fixture.granary(["inspect", fixture.root + "/nothing.db"]).status == 66)
    }

    @Test(
        "check exits 1 naming each failing user on standard output (also with -q), 0 once every user has a fresh checked archive"
    )
    func check() throws {
        let fixture = try Fixture()
        // A typo in --repo must not look like an empty repository.
        var result = try GranaryProcess.run(["check", "--root", fixture.root, "--repo", fixture.folder.child("rpeo")])
        #expect(result.status == 66, "\(result.stderr)")
        #expect(result.stderr.contains("not a granary repository"), "\(result.stderr)")
        // Archives half a minute old (the test clock): fresh by default, over a one-second limit.
        let past = testClock(secondsAgo: 30)
        #expect(try fixture.granary(["backup", "dave@example.com"], environment: past).status == 0)
        result = try fixture.granary(["check"])
        #expect(result.status == 1)
        #expect(result.stdout.contains("FAIL  alice@example.com: has no archives"), "\(result.stdout)")
        #expect(result.stderr.isEmpty, "failures are results: \(result.stderr)")
        let quiet = try fixture.granary(["check", "-q"])
        #expect(quiet.status == 1 && quiet.stdout == result.stdout, "-q keeps the FAIL lines: \(quiet.stdout)")
        #expect(try fixture.granary(["backup", "--all", "--check", "none"], environment: past).status == 0)
        result = try fixture.granary(["check", "bob@example.com"])
        #expect(result.status == 1)
        #expect(result.stdout.contains("has no checked archive"), "\(result.stdout)")
        #expect(try fixture.granary(["verify", "--all"]).status == 0)
        result = try fixture.granary(["check"])
        #expect(result.status == 0, "\(result.stdout)")
        #expect(result.stdout.isEmpty, "silent without a terminal when all pass")
        let document = try fixture.json(["check"])
        #expect(document["ok"] as? Bool == true)
        #expect((document["users"] as! [[String: Any]]).count == 4)
        // Older than the limit: the archive's time comes from its name.
        result = try fixture.granary(["check", "--max-age", "1s", "dave@example.com"])
        #expect(result.status == 1)
        #expect(result.stdout.contains("over the 1s limit"), "\(result.stdout)")
        #expect(try fixture.granary(["check", "--max-age", "soon"]).status == 64)
    }
}
