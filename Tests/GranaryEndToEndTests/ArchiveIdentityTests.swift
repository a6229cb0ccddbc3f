import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// An archive's identity is its name: its user's folder, its time to the microsecond, its label
/// and its host. Archives of one second, of two hosts of one second, of an old repository, and
/// archives whose name lies: each command agrees on which archive is which, and in what order
/// they were taken. The test clock (`GRANARY_TEST_NOW`, debug builds) puts every archive of a
/// test into one second without waiting for the clock.
@Suite("archive identity: one name per archive, hosts in names, the order taken")
struct ArchiveIdentityTests {
    static let alice = "alice@example.com"
    /// The second every archive of these tests is taken in.
    static let second = testSecond
    static var clock: [String: String] { ["GRANARY_TEST_NOW": second] }
    /// `YYYYMMDDTHHMMSS.`: the names of the archives taken in ``second``.
    static var secondPrefix: String { String(second.dropLast()) + "." }

    /// `items.body` of row 3 in a store (what each step of a test writes).
    static func body(_ store: String) throws -> String {
        let db = try Database(path: store, mode: .readOnly)
        guard case .text(let text) = try db.rows("SELECT body FROM items WHERE id = 3").first?[0] else { return "" }
        return text
    }

    static func write(_ store: String, _ body: String) throws {
        let db = try Database(path: store, mode: .readWrite)
        try db.execute("UPDATE items SET body = '\(body)' WHERE id = 3")
    }

    struct Listed: Decodable {
        struct Archive: Decodable {
            let user: String
            let name: String
            let host: String?
            let hostMarked: Bool
            let base: String?
        }
        let archives: [Archive]
    }

    static func listed(_ result: GranaryProcess.Result) throws -> [Listed.Archive] {
        try JSONDecoder().decode(Listed.self, from: Data(result.stdout.utf8)).archives
    }

    /// The archive name a `backup --json` document reports.
    static func archive(_ result: GranaryProcess.Result) -> String? {
        struct Document: Decodable {
            struct User: Decodable { let archive: String? }
            let users: [User]
        }
        let path = (try? JSONDecoder().decode(Document.self, from: Data(result.stdout.utf8)))?.users.first?.archive
        return path.map(PathText.lastComponent)
    }

    @Test(
        "one host: a full, a delta, a full, a labelled delta and a safety archive in one second get names that sort in the order taken; list, restore, prune and the next delta's base agree"
    )
    func oneSecondOneHost() throws {
        let site = try SampleSite()
        let store = site.root + "/\(Self.alice)/Local.sqlite"
        func backup(_ extra: [String], _ body: String) throws -> String {
            try Self.write(store, body)
            let made = try site.granary(
                ["backup", Self.alice, "--json", "--host", "web-1"] + extra, environment: Self.clock)
            #expect(made.status == 0, "\(made.stderr)")
            return try #require(Self.archive(made), "\(made.stdout)")
        }
        let a = try backup(["--delta"], "a")
        let b = try backup(["--delta"], "b")
        let c = try backup(["--delta", "--full"], "c")
        let d = try backup(["--delta", "--label", "nightly"], "d")
        let taken = [a, b, c, d]
        #expect(taken.allSatisfy { $0.hasPrefix(Self.secondPrefix) && $0.hasSuffix(".web-1.tar.zst") }, "\(taken)")
        #expect(Set(taken).count == 4, "every name is its own: \(taken)")
        #expect(taken == taken.sorted(), "names sort in the order taken, whatever the labels: \(taken)")
        #expect(b.contains("-delta.") && !c.contains("delta") && d.contains("-nightly-delta."), "\(taken)")

        let list = try site.granary(["list", Self.alice, "--json", "--host", "web-1"])
        #expect(list.status == 0, "\(list.stderr)")
        let archives = try Self.listed(list)
        #expect(archives.map(\.name) == taken.reversed(), "list, newest first: \(archives.map(\.name))")
        #expect(archives.first?.base == c, "the labelled delta is built on the full before it")

        // restore's newest is the archive taken last: d (a delta), not a full of the same second.
        let dry = try site.granary(["restore", Self.alice, "--dry-run", "--host", "web-1"])
        #expect(dry.status == 0 && dry.stdout.contains(d), "\(dry.stdout)\(dry.stderr)")
        let drill = site.folder.child("drill")
        #expect(try site.granary(["restore", Self.alice, "--to", drill, "--host", "web-1"]).status == 0)
        #expect(try Self.body(drill + "/Local.sqlite") == "d")

        // prune keeps the last (d) and its base (c), and plans to remove the older ones.
        let prune = try site.granary([
            "prune", Self.alice, "--keep-last", "1", "--dry-run", "--no-merge", "--host", "web-1",
        ])
        #expect(prune.status == 0, "\(prune.stderr)")
        #expect(prune.stdout.contains("keep    \(d)") && prune.stdout.contains("keep    \(c)"), "\(prune.stdout)")
        #expect(prune.stdout.contains("remove  \(a)") && prune.stdout.contains("remove  \(b)"), "\(prune.stdout)")

        // The next delta is built on d, the newest.
        let e = try backup(["--delta"], "e")
        let after = try Self.listed(try site.granary(["list", Self.alice, "--json", "--host", "web-1"]))
        #expect(after.first?.name == e && after.first?.base == d, "\(after.map { ($0.name, $0.base ?? "-") })")

        // A restore in place in that same second: its safety archive comes after e, and is no backup.
        let restore = try site.granary(["restore", Self.alice, a, "--host", "web-1"], environment: Self.clock)
        #expect(restore.status == 0, "\(restore.stderr)")
        #expect(try Self.body(store) == "a")
        let names = site.archives(Self.alice)
        let safety = try #require(names.last, "\(names)")
        // (A delta on e, the newest backup: a sound base.)
        #expect(safety.contains("-pre-restore-delta.web-1.") && safety > e, "\(names)")
        let again = try site.granary(["restore", Self.alice, "--dry-run", "--host", "web-1"])
        #expect(again.stdout.contains(e), "the default archive is still the newest backup: \(again.stdout)")
    }

    @Test(
        "two hosts, one user id, several backups each in one second on one repository and one mirror: each host's list, restore, check, prune, delete and sync keep to their own, and both reach the mirror"
    )
    func twoHostsOneSecond() throws {
        let folder = TemporaryFolder("granary-identity")
        let repo = initializedRepository(folder.child("repo")), mirror = initializedRepository(folder.child("mirror"))
        let roots = ["web-1": folder.child("root1"), "web-2": folder.child("root2")]
        for (host, root) in roots {
            try GranaryProcess.run([root], tool: "granary-sample")
            try Self.write(root + "/\(Self.alice)/Local.sqlite", host)
        }
        func granary(_ host: String, _ arguments: [String]) throws -> GranaryProcess.Result {
            try GranaryProcess.run(
                arguments + ["--root", roots[host]!, "--repo", repo, "--host", host], environment: Self.clock)
        }
        // Interleaved, all in one second: three each.
        for _ in 0..<3 {
            for host in ["web-1", "web-2"] {
                let made = try granary(host, ["backup", Self.alice, "--mirror", mirror])
                #expect(made.status == 0, "\(host): \(made.stderr)")
            }
        }
        let names = FileSystem.contents(of: repo + "/\(Self.alice)").filter { !$0.hasPrefix(".") }
        #expect(names.count == 6 && names.allSatisfy { $0.hasPrefix(Self.secondPrefix) }, "\(names)")
        #expect(names.filter { $0.hasSuffix(".web-1.tar.zst") }.count == 3)
        #expect(!FileSystem.contents(of: repo + "/\(Self.alice)").contains { $0.contains(".host=") }, "no markers")
        let mirrored = FileSystem.contents(of: mirror + "/\(Self.alice)").filter { !$0.hasPrefix(".") }
        #expect(Set(mirrored) == Set(names), "both hosts' backups reached the shared mirror: \(mirrored)")

        for host in ["web-1", "web-2"] {
            let list = try Self.listed(try granary(host, ["list", "--json"]))
            #expect(list.count == 3 && list.allSatisfy { $0.host == host && $0.hostMarked }, "\(host): \(list)")
            let drill = folder.child("drill-" + host)
            #expect(try granary(host, ["restore", Self.alice, "--to", drill]).status == 0)
            #expect(try Self.body(drill + "/Local.sqlite") == host, "\(host) restores its own data")
            #expect(try granary(host, ["verify", "--all"]).status == 0)
            let check = try granary(host, ["check", Self.alice])
            #expect(check.status == 0, "\(host): \(check.stdout)\(check.stderr)")
            let sync = try granary(host, ["sync", "--mirror", mirror, "--json"])
            #expect(sync.status == 0, "\(host): \(sync.stderr)")
        }

        // web-2 cannot delete web-1's archive (66, naming --host); web-2's prune removes only its own.
        let theirs = try #require(names.sorted().first { $0.hasSuffix(".web-1.tar.zst") })
        let refused = try granary("web-2", ["delete", Self.alice + "/" + theirs])
        #expect(refused.status == 66 && refused.stderr.contains("--host web-1"), "\(refused.stderr)")
        #expect(try granary("web-2", ["prune", Self.alice, "--keep-last", "1"]).status == 0)
        let left = FileSystem.contents(of: repo + "/\(Self.alice)").filter { !$0.hasPrefix(".") }
        #expect(left.filter { $0.hasSuffix(".web-1.tar.zst") }.count == 3 && left.count == 4, "\(left)")
        for host in ["web-1", "web-2"] { #expect(try granary(host, ["sync", "--mirror", mirror]).status == 0) }
        let onMirror = FileSystem.contents(of: mirror + "/\(Self.alice)").filter { !$0.hasPrefix(".") }
        #expect(Set(onMirror) == Set(left), "the mirror follows each host's own prune: \(onMirror)")
    }

    /// Renames a new archive of `folder` to the name a granary before hosts in names gave it,
    /// with its host marker (`marked`) or none.
    static func makeLegacy(_ name: String, in folder: String, marked: String?) throws -> String {
        let parsed = try #require(ArchiveName(fileName: name))
        let legacy = ArchiveName(
            micros: parsed.micros, sequence: parsed.sequence, label: parsed.label, compression: parsed.compression,
            precise: false
        ).fileName
        #expect(rename(folder + "/" + name, folder + "/" + legacy) == 0)
        unlink(folder + "/." + name + ".verify.json")
        if let marked { try Data().write(to: URL(fileURLWithPath: folder + "/." + legacy + ".host=" + marked)) }
        return legacy
    }

    @Test(
        "an old repository: archives marked by host are that host's, and its first backup renames them; unmarked ones belong to no host until adopt names them by their manifests; a conversion stopped half-way counts each archive once"
    )
    func legacyConversion() throws {
        let site = try SampleSite()
        let store = site.root + "/\(Self.alice)/Local.sqlite"
        let folder = site.repo + "/\(Self.alice)"
        var made: [String] = []
        for (second, host) in [
            ("20261101T000000Z", "web-1"), ("20261102T000000Z", "web-1"), ("20261103T000000Z", "web-2"),
        ] {
            try Self.write(store, second)
            let backup = try site.granary(
                ["backup", Self.alice, "--json", "--host", host], environment: ["GRANARY_TEST_NOW": second])
            #expect(backup.status == 0, "\(backup.stderr)")
            made.append(try #require(Self.archive(backup)))
        }
        let first = try Self.makeLegacy(made[0], in: folder, marked: "web-1")
        let second = try Self.makeLegacy(made[1], in: folder, marked: "web-1")
        let unowned = try Self.makeLegacy(made[2], in: folder, marked: nil)
        #expect(first == "20261101T000000Z.tar.zst" && unowned == "20261103T000000Z.tar.zst")
        // A conversion stopped after the rename of `second`'s copy: both names there.
        #expect(
            link(folder + "/" + second, folder + "/" + made[1].replacingOccurrences(of: ".000000Z", with: "Z")) == 0)

        let web1 = try Self.listed(try site.granary(["list", Self.alice, "--json", "--host", "web-1"]))
        #expect(web1.count == 2 && web1.allSatisfy { $0.host == "web-1" }, "each archive once: \(web1.map(\.name))")
        let web2 = try site.granary(["list", Self.alice, "--json", "--host", "web-2"])
        #expect(try Self.listed(web2).isEmpty, "an unmarked archive is nobody's: \(web2.stdout)")
        let every = try Self.listed(try site.granary(["list", Self.alice, "--json", "--all-hosts"]))
        #expect(every.count == 3 && every.filter { !$0.hostMarked }.map(\.name) == [unowned], "\(every)")
        let restore2 = try site.granary(["restore", Self.alice, "--dry-run", "--host", "web-2"])
        #expect(restore2.status == 66, "web-2 has no archive until it adopts: \(restore2.stdout)\(restore2.stderr)")

        // web-1's first backup converts its marked archives and finishes the half-done one.
        try Self.write(store, "now")
        #expect(try site.granary(["backup", Self.alice, "--host", "web-1"], environment: Self.clock).status == 0)
        var names = site.archives(Self.alice)
        #expect(
            names == [
                "20261101T000000Z.web-1.tar.zst", "20261102T000000Z.web-1.tar.zst", unowned,
                Self.secondPrefix + "000000Z.web-1.tar.zst",
            ], "\(names)")
        #expect(!FileSystem.contents(of: folder).contains { $0.contains(".host=") }, "the markers went")
        #expect(try site.granary(["verify", "--all", "--host", "web-1"]).status == 0)

        // adopt: a dry run changes nothing; then the unmarked archive gets its manifest's host, once.
        let dry = try site.granary(["adopt", "--dry-run", "--host", "web-2"])
        #expect(dry.status == 0 && dry.stdout.contains("20261103T000000Z.web-2.tar.zst"), "\(dry.stdout)\(dry.stderr)")
        #expect(site.archives(Self.alice) == names)
        #expect(try site.granary(["adopt", "--host", "web-2"]).status == 0)
        names = site.archives(Self.alice)
        #expect(names.contains("20261103T000000Z.web-2.tar.zst") && !names.contains(unowned), "\(names)")
        let again = try site.granary(["adopt", "--json"])
        #expect(
            again.status == 0 && !again.stdout.contains(".tar.zst"), "adopting again changes nothing: \(again.stdout)")
        #expect(site.archives(Self.alice) == names)
        let drill = site.folder.child("drill")
        #expect(try site.granary(["restore", Self.alice, "--to", drill, "--host", "web-2"]).status == 0)
        #expect(try Self.body(drill + "/Local.sqlite") == "20261103T000000Z")
        #expect(try site.granary(["verify", "--all", "--host", "web-2"]).status == 0)
    }

    @Test(
        "a conversion killed at each of its steps, again and again: every list shows each archive once, and the run after converts them all, nothing lost"
    )
    func conversionKilled() throws {
        let site = try SampleSite()
        let store = site.root + "/\(Self.alice)/Local.sqlite"
        let folder = site.repo + "/\(Self.alice)"
        var made: [(String, String)] = []
        for day in 1...3 {
            let second = "2026110\(day)T000000Z"
            try Self.write(store, second)
            let backup = try site.granary(
                ["backup", Self.alice, "--json", "--host", "web-1"], environment: ["GRANARY_TEST_NOW": second])
            made.append((try #require(Self.archive(backup)), second))
        }
        // (After the backups: a backup converts its host's legacy archives first.)
        var bodies: [String: String] = [:]
        for (name, second) in made { bodies[try Self.makeLegacy(name, in: folder, marked: "web-1")] = second }
        func listed() throws -> [String] {
            let list = try site.granary(["list", Self.alice, "--json", "--host", "web-1"])
            #expect(list.status == 0, "\(list.stderr)")
            return try Self.listed(list).map(\.name)
        }
        for point in ["convertRecorded", "convertRenamed", "convertRecorded", "convertRenamed"] {
            let killed = try site.granary(
                ["adopt", "--host", "web-1"], environment: ["GRANARY_TEST_CRASH_AT": point])
            #expect(
                killed.status == 137 || killed.status == 9,
                "killed at \(point): \(killed.status) \(killed.stdout) \(killed.stderr)")
            let names = try listed()
            #expect(names.count == 3 && Set(names).count == 3, "after a kill at \(point): \(names)")
        }
        #expect(try site.granary(["adopt", "--host", "web-1"]).status == 0)
        let names = site.archives(Self.alice)
        #expect(names.count == 3 && names.allSatisfy { $0.hasSuffix("Z.web-1.tar.zst") }, "\(names)")
        #expect(!FileSystem.contents(of: folder).contains { $0.contains(".host=") }, "no marker left")
        #expect(try site.granary(["verify", "--all", "--host", "web-1"]).status == 0)
        for (legacy, body) in bodies {
            let converted = legacy.replacingOccurrences(of: ".tar.zst", with: ".web-1.tar.zst")
            let drill = site.folder.child("drill-" + body)
            #expect(try site.granary(["restore", Self.alice, converted, "--to", drill, "--host", "web-1"]).status == 0)
            #expect(try Self.body(drill + "/Local.sqlite") == body)
        }
    }

    @Test(
        "a mirror that is the repository, spelled four ways, on the command line or in the configuration, is refused with 64"
    )
    func mirrorIsTheRepository() throws {
        let site = try SampleSite(backup: [Self.alice])
        let spellings = [site.repo, site.repo + "/", site.repo + "/.", site.root + "/../repo"]
        for spelling in spellings {
            for command in [["backup", Self.alice], ["sync"]] {
                let result = try site.granary(command + ["--mirror", spelling])
                #expect(result.status == 64, "\(command[0]) --mirror \(spelling): \(result.stderr)")
                #expect(result.stderr.contains("is the repository"), "\(result.stderr)")
            }
        }
        #expect(site.archives(Self.alice).count == 1, "nothing was written")
        // In the configuration, beside the repository it is.
        let config = site.folder.child("config.toml")
        try "repo = \"\(site.repo)\"\n\n[[mirror]]\nrepo = \"\(site.repo)/.\"\n".write(
            toFile: config, atomically: true, encoding: .utf8)
        let configured = try GranaryProcess.run(["sync", "--root", site.root, "--config", config])
        #expect(configured.status == 64 && configured.stderr.contains("is the repository"), "\(configured.stderr)")
        // Working from the mirror (--repo naming it) is not refused: it is not its own mirror.
        let other = site.folder.child("other")
        try "repo = \"\(other)\"\n\n[[mirror]]\nrepo = \"\(site.repo)/\"\n".write(
            toFile: config, atomically: true, encoding: .utf8)
        let fromMirror = try GranaryProcess.run(
            ["list", "--root", site.root, "--config", config, "--repo", site.repo])
        #expect(fromMirror.status == 0, "\(fromMirror.stderr)")
    }

    @Test("an older archive copied under a newer name is refused by list, verify and restore, which name it")
    func impostor() throws {
        let site = try SampleSite()
        let store = site.root + "/\(Self.alice)/Local.sqlite"
        try Self.write(store, "old")
        #expect(
            try site.granary(["backup", Self.alice], environment: ["GRANARY_TEST_NOW": "20261101T000000Z"]).status == 0)
        try Self.write(store, "new")
        #expect(
            try site.granary(["backup", Self.alice], environment: ["GRANARY_TEST_NOW": "20261102T000000Z"]).status == 0)
        let names = site.archives(Self.alice)
        let newest = try #require(names.last)
        // The old archive's bytes under a name of a later time, this host's.
        let forged = newest.replacingOccurrences(of: "20261102T000000", with: "20261103T000000")
        try FileManager.default.copyItem(
            atPath: site.repo + "/\(Self.alice)/" + names[0], toPath: site.repo + "/\(Self.alice)/" + forged)
        let list = try site.granary(["list", Self.alice])
        #expect(list.status == 65 && list.stdout.contains("is not the archive its name says"), "\(list.stdout)")
        let verify = try site.granary(["verify", "--user", Self.alice, "--latest"])
        #expect(verify.status == 65 && verify.stderr.contains(forged), "\(verify.stderr)")
        let restore = try site.granary(["restore", Self.alice, "--dry-run"])
        #expect(restore.status == 65 && restore.stderr.contains(forged), "\(restore.stderr)")
        #expect(try Self.body(store) == "new", "nothing was restored")
        let drill = site.folder.child("drill")
        #expect(try site.granary(["restore", Self.alice, newest, "--to", drill]).status == 0)
        #expect(try Self.body(drill + "/Local.sqlite") == "new")
    }
}

/// Publishing settles what it cannot know by content: the same bytes under the name are the
/// archive published; other bytes are never overwritten.
@Suite("publishing under a taken name")
struct PublishSettlementTests {
    @Test("a publish that finds its name holding the same bytes is done; other bytes fail with nameTaken and stay")
    func settle() throws {
        let folder = TemporaryFolder("granary-settle")
        let repository = LocalRepository(path: initializedRepository(folder.child("repo")))
        try repository.prepare()
        let user = try UserID("bob@example.com")
        let staging = try repository.stagingFolder(for: user)
        let name = ArchiveName(created: Date(), host: "web-1", compression: .none)
        let object = user.rawValue + "/" + name.fileName
        let first = folder.child("first"), same = folder.child("same"), other = folder.child("other")
        try Data("archive bytes".utf8).write(to: URL(fileURLWithPath: first))
        try Data("archive bytes".utf8).write(to: URL(fileURLWithPath: same))
        try Data("other bytes!!".utf8).write(to: URL(fileURLWithPath: other))
        try repository.publishObject(object, from: first)
        // The answer was lost and the publish is tried again: the object is there, the same bytes.
        try repository.publishObject(object, from: same)
        #expect(throws: RepositoryError.self) { try repository.publishObject(object, from: other) }
        let stored = try Data(contentsOf: URL(fileURLWithPath: staging + "/" + name.fileName))
        #expect(String(decoding: stored, as: UTF8.self) == "archive bytes", "never overwritten")
        #expect(FileSystem.contents(of: staging).filter { !$0.hasPrefix(".") } == [name.fileName], "one archive")
    }
}
