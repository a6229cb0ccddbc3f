import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Nothing is passed over in silence: every entry of the root that is no user, and every entry of
/// a user's folder the scan does not take, is named with why by `users`, warned about by
/// `backup` (on standard error and in `--json`), and `check` fails on what may hold a user's data
/// (and on a user whose folder cannot be read).
@Suite("what granary passes over, it says")
struct PassedOverTests {
    let folder = TemporaryFolder("granary-passed-over")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }

    static let badName = FolderName.decode(Array("bad".utf8) + [0xFF] + Array("@example.com".utf8))

    func granary(_ arguments: [String]) throws -> GranaryProcess.Result {
        try GranaryProcess.run(arguments + ["--root", root, "--repo", repo])
    }

    /// A root with one good user (alice, whose folder holds every kind of store the scan passes
    /// over) and one of each kind of entry that is no user; as root, also a user whose folder
    /// its owner cannot read.
    func makeRoot() throws {
        let alice = root + "/alice@example.com"
        try FileSystem.makeDirectory(alice + "/.hidden")
        try SampleData.makeItemsStore(alice + "/Local.sqlite", rows: 3, walOnlyTail: 0)
        try FileManager.default.createSymbolicLink(
            atPath: alice + "/Linked.sqlite", withDestinationPath: "Local.sqlite")
        try SampleData.makeRollbackStore(alice + "/.hidden/Hidden.sqlite", rows: 1)
        let deep = alice + "/a/b/c/d/e/f/g"
        try FileSystem.makeDirectory(deep)
        try SampleData.makeRollbackStore(deep + "/Deep.sqlite", rows: 1)
        try SampleData.makeRollbackStore(alice + "/Orphan.sqlite-wal", rows: 1)

        try FileSystem.makeDirectory(folder.child("elsewhere"))
        try SampleData.makeRollbackStore(folder.child("elsewhere/Else.sqlite"), rows: 1)
        try FileManager.default.createSymbolicLink(
            atPath: root + "/linked@example.com", withDestinationPath: folder.child("elsewhere"))
        #expect(RawPath.mkdir(root + "/" + Self.badName, 0o755) == 0)
        try SampleData.makeRollbackStore(root + "/" + Self.badName + "/Bad.sqlite", rows: 1)
        try FileSystem.makeDirectory(root + "/-dash")
        try FileSystem.makeDirectory(root + "/.hidden@example.com")
        try FileSystem.makeDirectory(root + "/lost+found")
        try Data("not a user".utf8).write(to: URL(fileURLWithPath: root + "/README"))
        if geteuid() == 0 {
            // Its owner (nobody) cannot list it: a backup as that owner could not either.
            try FileSystem.makeDirectory(root + "/locked@example.com")
            try SampleData.makeRollbackStore(root + "/locked@example.com/Locked.sqlite", rows: 1)
            #expect(chown(root + "/locked@example.com", 65534, 65534) == 0)
            #expect(chmod(root + "/locked@example.com", 0) == 0)
        }
    }

    /// Root entries: shown name, whether `check` fails on it, what its reason says, and whether
    /// `backup --all` warns about it (not about what any root may hold: lost+found, hidden entries).
    static let rootEntries: [(shown: String, fails: Bool, reason: String, warned: Bool)] = [
        ("linked@example.com", true, "is a symbolic link", true),
        (
            "bad\\xff@example.com", true,
            "is not UTF-8 text in normal form C, which a user id must be; rename the folder", true
        ),
        ("-dash", true, "is not a valid user id: it starts with '-'", true),
        (".hidden@example.com", false, "is hidden", false),
        ("lost+found", false, "is the file system's lost+found, not a user", false),
        ("README", false, "is a file, not a folder", true),
    ]

    /// alice's entries the scan passes over, and what is said of each.
    static let aliceEntries: [(name: String, reason: String)] = [
        ("Linked.sqlite", "is a symbolic link"),
        (".hidden/Hidden.sqlite", "is in a hidden folder or hidden"),
        ("a/b/c/d/e/f/g/", "is deeper than 6 levels"),
        ("Orphan.sqlite-wal", "is a SQLite database named like a -wal file"),
    ]

    @Test("users lists every entry of the root that is no user and every store it passes over, with why")
    func users() throws {
        try makeRoot()
        let users = try granary(["users"])
        #expect(users.status == 0, "\(users.stderr)")
        for entry in Self.rootEntries {
            #expect(
                users.stderr.contains("ignored '\(entry.shown)': \(entry.reason)"), "\(entry.shown): \(users.stderr)")
        }
        for entry in Self.aliceEntries {
            #expect(
                users.stderr.contains("alice@example.com: skipped \(entry.name): \(entry.reason)"),
                "\(entry.name): \(users.stderr)")
        }
        #expect(!users.stderr.contains(".granary"))
        if geteuid() == 0 { #expect(users.stderr.contains("locked@example.com: "), "\(users.stderr)") }

        let json = try granary(["users", "--json"])
        #expect(try ShellTools.schemaProblems(json.stdout, schema: "users") == [])
        let document = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let ignored = try #require(document["ignored"] as? [[String: Any]])
        #expect(ignored.count == Self.rootEntries.count, "\(ignored)")
        let bad = try #require(ignored.first { ($0["nameBase64"] as? String) != nil })
        #expect(Data(base64Encoded: bad["nameBase64"] as! String).map(Array.init) == FolderName.encode(Self.badName))
        #expect(bad["name"] as? String == "bad\u{FFFD}@example.com")
    }

    @Test(
        "backup --all warns about each entry it passes over, on standard error and in --json, and backs up the users it can"
    )
    func backup() throws {
        try makeRoot()
        let backup = try granary(["backup", "--all"])
        #expect(backup.status == (geteuid() == 0 ? 1 : 0), "\(backup.stderr)")
        for entry in Self.rootEntries {
            #expect(
                backup.stderr.contains("warning: passed over \(root)/\(entry.shown): \(entry.reason)") == entry.warned,
                "\(entry.shown): \(backup.stderr)")
        }
        for entry in Self.aliceEntries {
            #expect(
                backup.stderr.contains("warning: alice@example.com: passed over \(entry.name): \(entry.reason)"),
                "\(entry.name): \(backup.stderr)")
        }
        if geteuid() == 0 { #expect(backup.stderr.contains("locked@example.com"), "\(backup.stderr)") }
        #expect(FileSystem.contents(of: repo + "/alice@example.com").contains { $0.hasSuffix(".tar.zst") })

        let json = try granary(["backup", "--all", "--json"])
        #expect(try ShellTools.schemaProblems(json.stdout, schema: "backup") == [])
        let document = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let ignored = try #require(document["ignored"] as? [[String: Any]])
        #expect(ignored.count == Self.rootEntries.count, "\(ignored)")
        let users = try #require(document["users"] as? [[String: Any]])
        let alice = try #require(users.first { $0["id"] as? String == "alice@example.com" })
        #expect(
            (alice["skipped"] as? [[String: Any]])?.compactMap { $0["name"] as? String }.sorted()
                == Self.aliceEntries.map(\.name).sorted())
    }

    @Test(
        "check fails on each entry of the root that may hold a user's data, and on a user whose folder cannot be read, saying why"
    )
    func check() throws {
        try makeRoot()
        _ = try granary(["backup", "alice@example.com"])
        _ = try granary(["verify", "--all"])
        let check = try granary(["check"])
        #expect(check.status == 1, "\(check.stderr)")
        for entry in Self.rootEntries {
            #expect(
                (check.stdout + check.stderr).contains("FAIL  \(root)/\(entry.shown): \(entry.reason)") == entry.fails,
                "\(entry.shown): \(check.stderr)")
        }
        if geteuid() == 0 {
            #expect(
                (check.stdout + check.stderr).contains("FAIL  locked@example.com: cannot read its folder: "),
                "\(check.stderr)")
        }
        #expect(!(check.stdout + check.stderr).contains("FAIL  alice@example.com"), "\(check.stderr)")
        // Named alone, alice passes; the locked user fails for its folder even when named.
        #expect(try granary(["check", "alice@example.com"]).status == 0)
        if geteuid() == 0 {
            let locked = try granary(["check", "locked@example.com"])
            #expect(
                locked.status == 1 && (locked.stdout + locked.stderr).contains("cannot read its folder"),
                "\(locked.stderr)")
        }
        let json = try granary(["check", "--json"])
        #expect(try ShellTools.schemaProblems(json.stdout, schema: "check") == [])
        let document = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        #expect((document["ignored"] as? [[String: Any]])?.count == Self.rootEntries.filter(\.fails).count)
        #expect(document["ok"] as? Bool == false)
    }
}
