import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

/// A root is a folder of users, and not everything in it is one: `lost+found`, hidden folders and
/// a user whose app has not written yet fail neither `backup --all` nor `check`, and each is
/// shown for what it is.
@Suite("a root holds more than users: lost+found, hidden folders, users with no store yet")
struct RootOfUsersTests {
    let folder = TemporaryFolder("granary-root-of-users")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }

    func granary(_ arguments: [String], environment: [String: String] = [:]) throws -> GranaryProcess.Result {
        try GranaryProcess.run(arguments + ["--root", root, "--repo", repo], environment: environment)
    }

    /// alice with a store; lost+found, a hidden folder with a store in it, and new@example.com
    /// with nothing but a text file.
    func makeRoot() throws {
        try FileSystem.makeDirectory(root + "/alice@example.com")
        try SampleData.makeRollbackStore(root + "/alice@example.com/Local.sqlite", rows: 3)
        try FileSystem.makeDirectory(root + "/lost+found")
        try FileSystem.makeDirectory(root + "/.snapshots")
        try SampleData.makeRollbackStore(root + "/.snapshots/Old.sqlite", rows: 1)
        try FileSystem.makeDirectory(root + "/new@example.com")
        try Data("not a store\n".utf8).write(to: URL(fileURLWithPath: root + "/new@example.com/notes.txt"))
    }

    @Test(
        "backup --all over lost+found, a hidden folder and a user with no store yet exits 0, silent, and leaves no folder for them in the repository"
    )
    func backupAll() throws {
        try makeRoot()
        let backup = try granary(["backup", "--all"])
        #expect(backup.status == 0, "\(backup.stderr)")
        #expect(backup.stdout.isEmpty && backup.stderr.isEmpty, "cron would mail: \(backup.stdout)\(backup.stderr)")
        #expect(FileSystem.contents(of: repo + "/alice@example.com").contains { $0.hasSuffix(".tar.zst") })
        for name in ["lost+found", "new@example.com", ".snapshots"] {
            #expect(
                !FileManager.default.fileExists(atPath: repo + "/" + name), "\(name) has a folder in the repository")
        }
        let json = try granary(["backup", "--all", "--json"])
        #expect(json.status == 0, "\(json.stderr)")
        #expect(try ShellTools.schemaProblems(json.stdout, schema: "backup") == [])
        let document = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let users = try #require(document["users"] as? [[String: Any]])
        let new = try #require(users.first { $0["id"] as? String == "new@example.com" })
        #expect(new["ok"] as? Bool == true && new["nothingToBackUp"] as? Bool == true, "\(new)")
        // Named alone, the user with no store yet is nothing to back up too: exit 0.
        let alone = try granary(["backup", "new@example.com", "-v"])
        #expect(alone.status == 0, "\(alone.stderr)")
        #expect(alone.stdout.contains("new@example.com: nothing to back up (no store yet)"), "\(alone.stdout)")
        #expect(!FileManager.default.fileExists(atPath: repo + "/new@example.com"))
    }

    @Test("users lists the user with no store yet as such, and lost+found and the hidden folder as no users")
    func users() throws {
        try makeRoot()
        let users = try granary(["users"])
        #expect(users.status == 0, "\(users.stderr)")
        #expect(users.stdout.contains("new@example.com  no store yet: nothing to back up"), "\(users.stdout)")
        #expect(users.stderr.contains("ignored 'lost+found': is the file system's lost+found, not a user"))
        #expect(users.stderr.contains("ignored '.snapshots': is hidden"), "\(users.stderr)")
        #expect(!users.stdout.contains("lost+found"))
    }

    @Test(
        "check passes a user with no store yet and a user with no folder and no archive, and shows them as nothing to back up"
    )
    func check() throws {
        try makeRoot()
        #expect(try granary(["backup", "--all"]).status == 0)
        let check = try granary(["check"])
        #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
        #expect(check.stdout.isEmpty, "\(check.stdout)")
        let verbose = try granary(["check", "-v"])
        #expect(verbose.stdout.contains("OK    new@example.com: nothing to back up: no store yet"), "\(verbose.stdout)")
        let json = try granary(["check", "--json"])
        #expect(try ShellTools.schemaProblems(json.stdout, schema: "check") == [])
        let document = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let users = try #require(document["users"] as? [[String: Any]])
        #expect(Set(users.compactMap { $0["id"] as? String }) == ["alice@example.com", "new@example.com"])
        let new = try #require(users.first { $0["id"] as? String == "new@example.com" })
        #expect(new["ok"] as? Bool == true && new["nothingToBackUp"] as? Bool == true, "\(new)")
        // A user with no folder and no archive, named: nothing to back up either.
        let gone = try granary(["check", "gone@example.com"])
        #expect(gone.status == 0, "\(gone.stdout)\(gone.stderr)")
        // An empty folder an older granary left in the repository for a user long gone fails nothing.
        try FileSystem.makeDirectory(repo + "/old@example.com")
        let old = try granary(["check"])
        #expect(old.status == 0, "\(old.stdout)\(old.stderr)")
        // Once the user has a store, no archive is a failure again.
        try SampleData.makeRollbackStore(root + "/new@example.com/Local.sqlite", rows: 1)
        let failing = try granary(["check"])
        #expect(
            failing.status == 1 && failing.stdout.contains("FAIL  new@example.com: has no archives"),
            "\(failing.stdout)")
    }

    @Test("check --exclude and the configuration's exclude leave a user out, as for backup --all")
    func exclude() throws {
        try makeRoot()
        try FileSystem.makeDirectory(root + "/bob@example.com")
        try SampleData.makeRollbackStore(root + "/bob@example.com/Local.sqlite", rows: 1)
        #expect(try granary(["backup", "--all", "--exclude", "bob@example.com"]).status == 0)
        #expect(!FileManager.default.fileExists(atPath: repo + "/bob@example.com"))
        let failing = try granary(["check"])
        #expect(failing.status == 1 && failing.stdout.contains("FAIL  bob@example.com"), "\(failing.stdout)")
        let flag = try granary(["check", "--exclude", "bob@example.com"])
        #expect(flag.status == 0, "\(flag.stdout)\(flag.stderr)")
        let typo = try granary(["check", "--exclude", "bobby@example.com"])
        #expect(typo.status == 66, "\(typo.stderr)")
        let config = folder.child("config.toml")
        try "exclude = [\"bob@example.com\", \"long-gone@example.com\"]\n".write(
            toFile: config, atomically: true, encoding: .utf8)
        let configured = try granary(["check", "--config", config])
        #expect(configured.status == 0, "\(configured.stdout)\(configured.stderr)")
        let backup = try granary(["backup", "--all", "--config", config])
        #expect(backup.status == 0, "\(backup.stderr)")
        #expect(!FileManager.default.fileExists(atPath: repo + "/bob@example.com"))
        let bad = folder.child("bad.toml")
        try "exclude = [\"../etc\"]\n".write(toFile: bad, atomically: true, encoding: .utf8)
        let refused = try granary(["check", "--config", bad])
        #expect(refused.status == 64 && refused.stderr.contains("exclude"), "\(refused.stderr)")
    }

    @Test("a backup that fails leaves no empty folder of the user in the repository")
    func noEmptyFolder() throws {
        try FileSystem.makeDirectory(root + "/broken@example.com")
        // SQLite's magic, then nothing SQLite can read: found as a store, refused by its snapshot.
        var bytes = Array("SQLite format 3\0".utf8)
        bytes += [UInt8](repeating: 0xEE, count: 4096 - bytes.count)
        try Data(bytes).write(to: URL(fileURLWithPath: root + "/broken@example.com/Local.sqlite"))
        try FileSystem.makeDirectory(repo)
        let backup = try granary(["backup", "broken@example.com"])
        #expect(backup.status != 0, "\(backup.stderr)")
        #expect(!FileManager.default.fileExists(atPath: repo + "/broken@example.com"), "\(backup.stderr)")
        let check = try granary(["check"])
        #expect(check.status == 1 && check.stdout.contains("FAIL  broken@example.com: has no archives"))
    }
}
