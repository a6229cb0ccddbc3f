import Foundation
import GranaryTestSupport
import Testing

@Suite("granary users")
struct UsersCommandTests {
    @Test("lists the sample users with their stores, journal modes and companions")
    func listsSampleUsers() throws {
        let folder = TemporaryFolder()
        let root = folder.child("root")
        try GranaryProcess.run([root], tool: "granary-sample")
        let result = try GranaryProcess.run(["users", "--root", root])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("alice@example.com  2 stores"))
        #expect(result.stdout.contains("Local.sqlite"))
        #expect(result.stdout.contains("-wal"))
        #expect(result.stdout.contains("Legacy.db                rollback"))
        #expect(result.stdout.contains("Data/App.sqlite"))
        #expect(!result.stdout.contains("readme.txt"))
        #expect(!result.stdout.contains("old.sqlite"))
    }

    @Test("global options work before the command's name and after it")
    func globalOptionsFirst() throws {
        let folder = TemporaryFolder()
        let root = folder.child("root")
        try GranaryProcess.run([root], tool: "granary-sample")
        let before = try GranaryProcess.run(["--root", root, "--json", "users"])
        let after = try GranaryProcess.run(["users", "--root", root, "--json"])
        #expect(before.status == 0, "\(before.stderr)")
        #expect(before.stdout == after.stdout)
        #expect(
            try GranaryProcess.run([
                "--root=" + root, "--repo", initializedRepository(folder.child("repo")), "backup", "alice@example.com",
            ])
            .status == 0)
        #expect(
            try GranaryProcess.run(["--root=" + root, "--repo", folder.child("repo"), "check", "dave@example.com"])
                .stdout
                .contains("dave@example.com: has no archives"))
        #expect(try GranaryProcess.run(["--root", root]).status == 64)
    }

    @Test("--json gives a document with every user and store")
    func json() throws {
        let folder = TemporaryFolder()
        let root = folder.child("root")
        try GranaryProcess.run([root], tool: "granary-sample")
        let result = try GranaryProcess.run(["users", "--json"], environment: ["GRANARY_ROOT": root])
        #expect(result.status == 0)
        let document = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as! [String: Any]
        let users = document["users"] as! [[String: Any]]
        #expect(
            users.map { $0["id"] as! String } == [
                "alice@example.com", "bob@example.com", "carol@example.com", "dave@example.com",
            ])
        let alice = users[0]["stores"] as! [[String: Any]]
        #expect(alice.map { $0["name"] as! String } == ["Cloud.sqlite", "Local.sqlite"])
        #expect(alice[1]["journalMode"] as? String == "wal")
        #expect((alice[1]["walSize"] as? Int ?? 0) > 0)
    }

    @Test(
        "rejects user ids that could escape the root, with exit 64",
        arguments: ["..", ".", "a/b", "-rf", "bad\u{07}id", String(repeating: "x", count: 256)])
    func rejectsUnsafeIDs(id: String) throws {
        let folder = TemporaryFolder()
        let result = try GranaryProcess.run(["users", "--root", folder.path, "--", id])
        #expect(result.status == 64)
        #expect(result.stderr.contains("invalid user id"))
        #expect(!result.stderr.contains("\u{07}"))
    }

    @Test("an unknown user exits 66 and names the user")
    func unknownUser() throws {
        let folder = TemporaryFolder()
        let result = try GranaryProcess.run(["users", "--root", folder.path, "zoe@example.com"])
        #expect(result.status == 66)
        #expect(result.stderr.contains("no user zoe@example.com"))
    }

    @Test("a missing root exits 66 and says how to set one")
    func missingRoot() throws {
        let result = try GranaryProcess.run(["users", "--root", "/nonexistent/granary-root"])
        #expect(result.status == 66)
        #expect(result.stderr.contains("Hint: pass --root"))
        let unset = try GranaryProcess.run(["users"])
        #expect(unset.status == 64)
        #expect(unset.stderr.contains("no root is set"))
    }
}
