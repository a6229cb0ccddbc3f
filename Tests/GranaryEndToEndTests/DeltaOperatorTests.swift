import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

/// Delta archives as an operator meets them (issue 35): `delta = true` and the policy's knobs in
/// the configuration, `list` and `inspect` of deltas, mirrors and `sync` carrying chains whole,
/// a restore's safety archive a delta on a sound newest backup, final archives always full. The
/// built binary over granary-sample's users.
@Suite("delta archives: configuration, list, inspect, mirrors and sync")
struct DeltaOperatorTests {
    static let alice = "alice@example.com"
    static let bob = "bob@example.com"

    /// granary-sample's users, a repository, and a configuration file holding `config`.
    final class Site {
        let site: SampleSite
        let config: String
        var root: String { site.root }
        var repo: String { site.repo }

        init(config text: String = "delta = true\n") throws {
            site = try SampleSite()
            config = site.folder.child("config.toml")
            try text.write(toFile: config, atomically: true, encoding: .utf8)
        }

        func granary(_ arguments: [String], environment: [String: String] = [:]) throws -> GranaryProcess.Result {
            try site.granary(arguments + ["--config", config], environment: environment)
        }

        func archives(_ user: String, in repository: String? = nil) -> [String] {
            FileSystem.contents(of: (repository ?? repo) + "/" + user).filter { !$0.hasPrefix(".") }.sorted()
        }

        func manifest(_ user: String, _ name: String, in repository: String? = nil) throws -> Manifest {
            try ArchiveHead(file: (repository ?? repo) + "/" + user + "/" + name).manifest
        }

        /// Changes a row of alice's store (a few pages), so that the next backup has something to carry.
        func change(_ step: Int) throws {
            try Database(path: root + "/\(DeltaOperatorTests.alice)/Local.sqlite", mode: .readWrite).execute(
                "UPDATE items SET body = 'step \(step)' WHERE id = 3")
        }

        /// Backs up `user` with `arguments` and returns the archive it added and the run (names
        /// are stamped to the microsecond, after the newest of the user and host: in order).
        func backup(
            _ user: String, _ arguments: [String] = [], environment: [String: String] = [:]
        ) throws -> (name: String, run: GranaryProcess.Result) {
            let before = Set(archives(user))
            let run = try granary(["backup", user] + arguments, environment: environment)
            #expect(run.status == 0, "\(run.stderr)")
            let added = archives(user).filter { !before.contains($0) }
            #expect(added.count == 1, "\(added)")
            return (added.first ?? "", run)
        }
    }

    static func json(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    }

    @Test(
        "delta = true makes backup write deltas; --full forces a full with page hashes, --no-delta a plain full; --full without deltas on is a usage error (64)"
    )
    func deltaFromTheConfiguration() throws {
        let site = try Site()
        let first = try site.backup(Self.alice)
        #expect(try site.manifest(Self.alice, first.name).delta != nil, "a full with page hashes")
        #expect(try !site.manifest(Self.alice, first.name).isDelta)
        try site.change(1)
        let second = try site.backup(Self.alice, ["--json"])
        #expect(second.name.contains("-delta."), "\(second.name)")
        #expect(try site.manifest(Self.alice, second.name).delta?.base?.name == first.name)
        #expect(second.run.stdout.contains("\"kind\" : \"delta\""), "\(second.run.stdout)")
        // --full with deltas on by configuration: a full with page hashes, a new chain.
        try site.change(2)
        let forced = try site.backup(Self.alice, ["--full", "--json"])
        #expect(!forced.name.contains("delta"))
        #expect(try site.manifest(Self.alice, forced.name).delta != nil)
        #expect(forced.run.stdout.contains("a full was asked for (--full)"), "\(forced.run.stdout)")
        // --no-delta: the archive every backup made before deltas, no page hashes.
        try site.change(3)
        let plain = try site.backup(Self.alice, ["--no-delta"])
        #expect(!plain.name.contains("delta"))
        #expect(try site.manifest(Self.alice, plain.name).delta == nil)
        // Refusals: each a usage error naming what to do.
        let both = try site.granary(["backup", Self.alice, "--delta", "--no-delta"])
        #expect(both.status == 64 && both.stderr.contains("--delta or --no-delta, not both"), "\(both.stderr)")
        let fullPlain = try site.granary(["backup", Self.alice, "--full", "--no-delta"])
        #expect(fullPlain.status == 64 && fullPlain.stderr.contains("--full"), "\(fullPlain.stderr)")
        let off = try Site(config: "delta = false\n")
        let fullOff = try off.granary(["backup", Self.alice, "--full"])
        #expect(fullOff.status == 64, "\(fullOff.stderr)")
        #expect(fullOff.stderr.contains("--full goes with --delta or delta = true"), "\(fullOff.stderr)")
        #expect(off.archives(Self.alice).isEmpty, "a refusal writes nothing")
    }

    @Test(
        "the policy's knobs come from the configuration: delta_max_chain = 1 makes every second backup a full, saying why; granary config shows every key and where it came from"
    )
    func policyKnobs() throws {
        let site = try Site(
            config: "delta = true\ndelta_max_chain = 1\ndelta_max_age = \"2d\"\ndelta_max_changed_percent = 90\n")
        let shown = try site.granary(["config", "--json"])
        #expect(shown.status == 0, "\(shown.stderr)")
        #expect(try ShellTools.schemaProblems(shown.stdout, schema: "config").isEmpty)
        let settings = try #require(try Self.json(shown.stdout)["settings"] as? [[String: Any]])
        func line(_ key: String) -> [String: Any]? { settings.first { $0["key"] as? String == key } }
        #expect(line("delta")?["value"] as? Bool == true && line("delta")?["source"] as? String == "file")
        #expect(line("delta_max_chain")?["value"] as? Int == 1)
        #expect(line("delta_max_age")?["value"] as? String == "2d")
        #expect(line("delta_max_changed_percent")?["value"] as? Int == 90)
        let defaults = try Site(config: "\n").granary(["config"])
        #expect(defaults.stdout.contains("delta_max_chain"), "\(defaults.stdout)")

        _ = try site.backup(Self.alice)
        try site.change(1)
        let delta = try site.backup(Self.alice)
        #expect(delta.name.contains("-delta."))
        try site.change(2)
        let full = try site.backup(Self.alice, ["--json"])
        #expect(!full.name.contains("delta"), "the chain has 1 delta already: \(full.name)")
        #expect(full.run.stdout.contains("the chain has 1 deltas already (at most 1)"), "\(full.run.stdout)")
    }

    @Test(
        "delta_max_age: a delta while the chain's full is younger, a full saying why once it is older (archives stamped by the test clock)"
    )
    func maxAgeStartsANewChain() throws {
        let site = try Site(config: "delta = true\ndelta_max_age = \"8s\"\n")
        // The archives' times come from the test clock, a minute ago onwards: the age is counted
        // between archive times (the full's, not the delta's), with no real clock to wait for.
        let start = Date(timeIntervalSinceNow: -60)
        let first = try site.backup(Self.alice, environment: testClock(start))
        try site.change(1)
        let young = try site.backup(Self.alice, environment: testClock(start + 7))
        #expect(young.name.contains("-delta."), "\(young.name)")
        // Past the age, counted from the full's time (the delta's own time does not count: it is
        // 2 s younger than the next backup).
        try site.change(2)
        let old = try site.backup(Self.alice, ["--json"], environment: testClock(start + 9))
        #expect(!old.name.contains("delta"), "\(old.name)")
        #expect(old.run.stdout.contains("the chain's full is older than 8s"), "\(old.run.stdout)")
        #expect(try site.manifest(Self.alice, old.name).delta?.chainLength == 0)
        #expect(try site.manifest(Self.alice, first.name).delta?.chainLength == 0)
        // The new chain's first delta.
        try site.change(3)
        let next = try site.backup(Self.alice, ["--json"], environment: testClock(start + 10))
        #expect(next.name.contains("-delta."), "\(next.name)")
        #expect(try site.manifest(Self.alice, next.name).delta?.base?.name == old.name)
    }

    @Test("a delta key of the wrong type or out of range is refused with 64, naming the file, the line and the key")
    func badKeys() throws {
        for (text, expected) in [
            ("delta = \"yes\"\n", "delta must be true or false"),
            ("delta_max_chain = 5000\n", "delta_max_chain: 5000 is out of range: it must be 0 to 1000"),
            ("delta_max_changed_percent = 0\n", "delta_max_changed_percent: 0 is out of range"),
            ("jobs = 1\ndelta_max_age = \"400d\"\n", ":2: delta_max_age: must be a duration from 0s to 366d"),
        ] {
            let site = try Site(config: text)
            let run = try site.granary(["backup", Self.alice])
            #expect(run.status == 64, "\(text): \(run.stderr)")
            #expect(run.stderr.contains(site.config) && run.stderr.contains(expected), "\(text): \(run.stderr)")
            #expect(site.archives(Self.alice).isEmpty)
        }
    }

    @Test("list shows each archive's type and a delta's base and place in its chain, in text and in --json")
    func listShowsKindAndBase() throws {
        let site = try Site()
        let plain = try site.backup(Self.alice, ["--no-delta"])
        let full = try site.backup(Self.alice, ["--full"])
        try site.change(1)
        let first = try site.backup(Self.alice)
        try site.change(2)
        let second = try site.backup(Self.alice)
        #expect(second.name.contains("-delta.") && first.name.contains("-delta."))
        let listed = try site.granary(["list", Self.alice, "--json"])
        #expect(listed.status == 0, "\(listed.stderr)")
        #expect(try ShellTools.schemaProblems(listed.stdout, schema: "list").isEmpty)
        let archives = try #require(try Self.json(listed.stdout)["archives"] as? [[String: Any]])
        let byName = Dictionary(uniqueKeysWithValues: archives.map { ($0["name"] as? String ?? "", $0) })
        #expect(byName[plain.name]?["type"] as? String == "full")
        #expect(byName[plain.name]?["pageHashes"] as? Bool == false)
        #expect(byName[plain.name]?["base"] is NSNull && byName[plain.name]?["chainLength"] is NSNull)
        #expect(byName[full.name]?["type"] as? String == "full" && byName[full.name]?["pageHashes"] as? Bool == true)
        #expect(byName[full.name]?["chainLength"] as? Int == 0)
        #expect(
            byName[first.name]?["type"] as? String == "delta" && byName[first.name]?["base"] as? String == full.name)
        #expect(byName[second.name]?["base"] as? String == first.name)
        #expect(byName[second.name]?["chainLength"] as? Int == 2)
        #expect(byName[second.name]?["kind"] as? String == "backup", "kind keeps its meaning")
        let text = try site.granary(["list", Self.alice]).stdout
        let lines = text.split(separator: "\n").map(String.init)
        #expect(
            lines.contains { $0.contains(second.name) && $0.contains("delta of \(first.name) (chain 2)") }, "\(text)")
        #expect(lines.contains { $0.contains(full.name) && $0.hasSuffix("full with page hashes") }, "\(text)")
        #expect(lines.contains { $0.contains(plain.name) && !$0.contains("delta") && !$0.contains("page hashes") })
    }

    @Test(
        "inspect of a delta shows what it carries: per store the pages carried of the page count, the page size and the state digest, and the external files added, changed and removed (exit 0)"
    )
    func inspectDelta() throws {
        let site = try Site()
        let full = try site.backup(Self.bob)
        let folder = site.root + "/\(Self.bob)/.Notes_SUPPORT/_EXTERNAL_DATA"
        let names = FileSystem.contents(of: folder).sorted()
        try #require(names.count >= 2)
        try Data(repeating: 7, count: 300).write(to: URL(fileURLWithPath: folder + "/" + names[0]))
        try FileSystem.removeFile(folder + "/" + names[1])
        try Data(repeating: 9, count: 200).write(to: URL(fileURLWithPath: folder + "/ADDED-1"))
        try Database(path: site.root + "/\(Self.bob)/Notes.sqlite", mode: .readWrite).execute(
            "UPDATE ZNOTE SET ZTITLE = 'inspected' WHERE Z_PK = 1")
        let delta = try site.backup(Self.bob)
        #expect(delta.name.contains("-delta."))
        let manifest = try site.manifest(Self.bob, delta.name)
        let recorded = try #require(manifest.delta?.stores.first)

        let inspected = try site.granary(["inspect", "\(Self.bob)/\(delta.name)", "--json"])
        #expect(inspected.status == 0, "\(inspected.stderr)")
        #expect(try ShellTools.schemaProblems(inspected.stdout, schema: "inspect").isEmpty)
        let document = try Self.json(inspected.stdout)
        #expect(document["type"] as? String == "delta" && (document["stores"] as? [Any])?.isEmpty == true)
        let info = try #require(document["delta"] as? [String: Any])
        #expect(info["base"] as? String == full.name && info["chainLength"] as? Int == 1)
        let store = try #require((info["stores"] as? [[String: Any]])?.first)
        #expect(store["name"] as? String == "Notes.sqlite")
        #expect(store["pagesCarried"] as? Int == recorded.changedPages && (recorded.changedPages ?? 0) >= 1)
        #expect(store["pageCount"] as? Int == recorded.pageCount && store["pageSize"] as? Int == recorded.pageSize)
        #expect(store["stateDigest"] as? String == recorded.stateDigest)
        let external = try #require(info["external"] as? [String: Any])
        let prefix = "stores/.Notes_SUPPORT/_EXTERNAL_DATA/"
        #expect(external["added"] as? [String] == [prefix + "ADDED-1"], "\(external)")
        #expect(external["changed"] as? [String] == [prefix + names[0]], "\(external)")
        #expect(external["removed"] as? [String] == [prefix + names[1]], "\(external)")
        #expect((external["carried"] as? [Any])?.count == 2)

        // The text says the same; the archive's file in the repository too.
        for path in ["\(Self.bob)/\(delta.name)", site.repo + "/\(Self.bob)/" + delta.name] {
            let text = try site.granary(["inspect", path])
            #expect(text.status == 0, "\(text.stderr)")
            #expect(text.stdout.contains("delta of \(full.name) (chain 1"), "\(text.stdout)")
            #expect(
                text.stdout.contains(
                    "Notes.sqlite  \(recorded.changedPages ?? 0) of \(recorded.pageCount) pages carried (\(recorded.pageSize) bytes each)"
                ), "\(text.stdout)")
            #expect(text.stdout.contains("external data: 1 added, 1 changed, 1 removed"), "\(text.stdout)")
        }
        // Its base gone: what it carries is still shown, added and changed no longer told apart.
        try FileSystem.removeFile(site.repo + "/\(Self.bob)/" + full.name)
        let orphan = try site.granary(["inspect", "\(Self.bob)/\(delta.name)", "--json"])
        #expect(orphan.status == 0, "\(orphan.stderr)")
        let alone = try #require(try Self.json(orphan.stdout)["delta"] as? [String: Any])
        #expect(alone["baseProblem"] as? String == "\(full.name) is not in \(site.repo)", "\(alone)")
        #expect((alone["external"] as? [String: Any])?["added"] is NSNull)
    }

    @Test(
        "a backup sends a mirror the links of a delta's chain it lacks first, oldest first; the mirror restores the delta"
    )
    func backupSendsTheChainFirst() throws {
        let site = try Site()
        let mirror = initializedRepository(site.site.folder.child("mirror"))
        let full = try site.backup(Self.alice)
        try site.change(1)
        let first = try site.backup(Self.alice)
        try site.change(2)
        let second = try site.backup(Self.alice, ["--mirror", mirror, "--json"])
        #expect(try ShellTools.schemaProblems(second.run.stdout, schema: "backup").isEmpty)
        let users = try #require(try Self.json(second.run.stdout)["users"] as? [[String: Any]])
        let sent = try #require((users.first?["mirrors"] as? [[String: Any]])?.first)
        #expect(sent["ok"] as? Bool == true)
        #expect(sent["sentFirst"] as? [String] == [full.name, first.name], "\(sent)")
        #expect(site.archives(Self.alice, in: mirror) == [full.name, first.name, second.name])
        // A second mirror run: nothing more to send first.
        try site.change(3)
        let third = try site.backup(Self.alice, ["--mirror", mirror, "--json"])
        let again = try #require(try Self.json(third.run.stdout)["users"] as? [[String: Any]])
        let thirdSent = try #require((again.first?["mirrors"] as? [[String: Any]])?.first)
        #expect(thirdSent["ok"] as? Bool == true && (thirdSent["sentFirst"] as? [String])?.isEmpty == true)
        // backup --all: the parent sends each worker's archive, a delta with its chain too.
        let other = initializedRepository(site.site.folder.child("other"))
        try site.change(4)
        let all = try site.granary(["backup", "--all", "--mirror", other, "--json"])
        #expect(all.status == 0, "\(all.stderr)")
        #expect(try ShellTools.schemaProblems(all.stdout, schema: "backup").isEmpty)
        let allUsers = try #require(try Self.json(all.stdout)["users"] as? [[String: Any]])
        let aliceEntry = try #require(allUsers.first { $0["id"] as? String == Self.alice })
        let fourth = try #require((aliceEntry["archive"] as? String).map { ($0 as NSString).lastPathComponent })
        #expect(fourth.contains("-delta."))
        let allSent = try #require((aliceEntry["mirrors"] as? [[String: Any]])?.first)
        #expect(allSent["sentFirst"] as? [String] == [full.name, first.name, second.name, third.name], "\(allSent)")
        #expect(site.archives(Self.alice, in: other) == [full.name, first.name, second.name, third.name, fourth])
        // The mirror alone restores the newest delta.
        let out = site.site.folder.child("out")
        let restored = try GranaryProcess.run([
            "restore", Self.alice, third.name, "--to", out, "--root", site.root, "--repo", mirror,
        ])
        #expect(restored.status == 0, "\(restored.stderr)")
    }

    @Test(
        "sync sends a delta only with its chain, and never one whose base is in neither place (exit 1, the user 65, naming the base); the rest is sent"
    )
    func syncCarriesChains() throws {
        let site = try Site()
        let mirror = initializedRepository(site.site.folder.child("mirror"))
        let full = try site.backup(Self.alice)
        try site.change(1)
        let first = try site.backup(Self.alice)
        try site.change(2)
        let second = try site.backup(Self.alice)
        let bob = try site.backup(Self.bob)
        // The repository lost the chain's full (removed by hand): its deltas cannot go alone.
        try FileSystem.removeFile(site.repo + "/\(Self.alice)/" + full.name)
        let sync = try site.granary(["sync", "--mirror", mirror, "--json"])
        #expect(sync.status == 1, "\(sync.stdout) \(sync.stderr)")
        #expect(try ShellTools.schemaProblems(sync.stdout, schema: "sync").isEmpty)
        #expect(sync.stderr.contains("\(Self.alice)/\(first.name) not sent to \(mirror)"), "\(sync.stderr)")
        #expect(sync.stderr.contains("which is in neither the repository nor the mirror"), "\(sync.stderr)")
        #expect(sync.stdout.contains("\"code\" : 65"), "\(sync.stdout)")
        #expect(site.archives(Self.alice, in: mirror).isEmpty, "no delta without its chain")
        #expect(site.archives(Self.bob, in: mirror) == [bob.name], "the other users are synced")
        let mirrors = try #require(try Self.json(sync.stdout)["mirrors"] as? [[String: Any]])
        let alice = try #require(
            (mirrors.first?["users"] as? [[String: Any]])?.first { $0["id"] as? String == Self.alice })
        #expect(alice["notSent"] as? [String] == [first.name, second.name])

        // With the full back, sync sends the whole chain, oldest first.
        let fresh = initializedRepository(site.site.folder.child("fresh"))
        try site.change(3)
        let full2 = try site.backup(Self.alice, ["--full"])
        try site.change(4)
        let delta2 = try site.backup(Self.alice)
        try FileSystem.removeFile(site.repo + "/\(Self.alice)/" + first.name)
        try FileSystem.removeFile(site.repo + "/\(Self.alice)/" + second.name)
        let whole = try site.granary(["sync", "--mirror", fresh, "-v"])
        #expect(whole.status == 0, "\(whole.stderr)")
        #expect(site.archives(Self.alice, in: fresh) == [full2.name, delta2.name])
        let order = whole.stdout.split(separator: "\n").filter { $0.hasPrefix("  send") }.map(String.init)
        #expect(
            order.firstIndex { $0.contains(full2.name) } ?? 99 < order.firstIndex { $0.contains(delta2.name) } ?? -1,
            "\(whole.stdout)")
    }

    @Test(
        "sync does not send a delta whose base in the repository was replaced by another archive under its name (65); the rest is sent"
    )
    func syncRefusesAReplacedBase() throws {
        let site = try Site()
        let full = try site.backup(Self.alice)
        try site.change(1)
        let delta = try site.backup(Self.alice)
        try site.change(2)
        let other = try site.backup(Self.alice, ["--full"])
        let folder = site.repo + "/\(Self.alice)/"
        try FileSystem.removeFile(folder + full.name)
        try FileManager.default.copyItem(atPath: folder + other.name, toPath: folder + full.name)
        let mirror = initializedRepository(site.site.folder.child("mirror"))
        let sync = try site.granary(["sync", "--mirror", mirror])
        #expect(sync.status == 1, "\(sync.stderr)")
        // The replaced base's name and manifest disagree (another archive's time): it is refused
        // as what it is, naming it; where they agree, the chain check names the delta.
        #expect(
            sync.stderr.contains(
                "\(Self.alice)/\(delta.name) not sent to \(mirror): it is a delta of \(full.name), and the repository's \(full.name) is not the archive it was built on"
            ) || sync.stderr.contains("\(full.name): MANIFEST.json is not the archive its name says"), "\(sync.stderr)")
        #expect(!site.archives(Self.alice, in: mirror).contains(delta.name))
        #expect(site.archives(Self.alice, in: mirror).contains(other.name), "the rest is sent")
    }

    @Test(
        "a delta whose base on the mirror is another archive under its name is not sent there, by backup --mirror or by sync (65, naming the mirror's base)"
    )
    func mirrorBaseReplaced() throws {
        let site = try Site()
        let mirror = initializedRepository(site.site.folder.child("mirror"))
        let plain = try site.backup(Self.alice, ["--no-delta"])
        let full = try site.backup(Self.alice)
        #expect(try site.granary(["sync", "--mirror", mirror]).status == 0)
        // On the mirror, the base's name now holds another archive of the user (a valid one).
        let folder = mirror + "/\(Self.alice)/"
        try FileSystem.removeFile(folder + full.name)
        try FileManager.default.copyItem(atPath: folder + plain.name, toPath: folder + full.name)
        try site.change(1)
        let said =
            "\(Self.alice)/%@ not sent to \(mirror): it is a delta of \(full.name), and the mirror's \(full.name) is not the archive it was built on"
        let backup = try site.granary(["backup", Self.alice, "--mirror", mirror, "--json"])
        #expect(backup.status == 1, "\(backup.stderr)")
        let delta = try #require(site.archives(Self.alice).last)
        #expect(delta.contains("delta"), "the delta is in the repository: \(delta)")
        #expect(backup.stderr.contains(said.replacingOccurrences(of: "%@", with: delta)), "\(backup.stderr)")
        #expect(!site.archives(Self.alice, in: mirror).contains(delta))
        let sync = try site.granary(["sync", "--mirror", mirror, "--json"])
        #expect(sync.status == 1, "\(sync.stderr)")
        #expect(sync.stderr.contains(said.replacingOccurrences(of: "%@", with: delta)), "\(sync.stderr)")
        #expect(!site.archives(Self.alice, in: mirror).contains(delta))
        #expect(try ShellTools.schemaProblems(sync.stdout, schema: "sync").isEmpty)
    }

    @Test(
        "sync never removes from a mirror a base a delta there is built on, even when this host deleted it (--force); it says the base is kept"
    )
    func syncKeepsBasesOnTheMirror() throws {
        let site = try Site()
        let mirror = initializedRepository(site.site.folder.child("mirror"))
        let old = try site.backup(Self.alice, ["--no-delta"])
        let full = try site.backup(Self.alice)
        try site.change(1)
        let delta = try site.backup(Self.alice)
        #expect(try site.granary(["sync", "--mirror", mirror]).status == 0)
        #expect(site.archives(Self.alice, in: mirror) == [old.name, full.name, delta.name])
        // The base deleted here (delete refuses it without --force), the plain full too.
        let refused = try site.granary(["delete", "\(Self.alice)/\(full.name)"])
        #expect(refused.status == 64, "\(refused.stderr)")
        #expect(try site.granary(["delete", "\(Self.alice)/\(full.name)", "--force"]).status == 0)
        #expect(try site.granary(["delete", "\(Self.alice)/\(old.name)", "--force"]).status == 0)
        let sync = try site.granary(["sync", "--mirror", mirror, "--json"])
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(try ShellTools.schemaProblems(sync.stdout, schema: "sync").isEmpty)
        #expect(site.archives(Self.alice, in: mirror) == [full.name, delta.name], "the delta keeps its base")
        let mirrors = try #require(try Self.json(sync.stdout)["mirrors"] as? [[String: Any]])
        let user = try #require((mirrors.first?["users"] as? [[String: Any]])?.first)
        #expect(user["kept"] as? [String] == [full.name] && user["removed"] as? [String] == [old.name], "\(user)")
        let text = try site.granary(["sync", "--mirror", mirror, "-v"])
        #expect(text.stdout.contains("kept    \(full.name)"), "\(text.stdout)")
        // The mirror restores the delta.
        let out = site.site.folder.child("out")
        let restored = try GranaryProcess.run([
            "restore", Self.alice, delta.name, "--to", out, "--root", site.root, "--repo", mirror,
        ])
        #expect(restored.status == 0, "\(restored.stderr)")
        // Once the delta is deleted too, the next sync removes both.
        #expect(try site.granary(["delete", "\(Self.alice)/\(delta.name)", "--force"]).status == 0)
        #expect(try site.granary(["sync", "--mirror", mirror]).status == 0)
        #expect(site.archives(Self.alice, in: mirror).isEmpty)
    }

    @Test(
        "sync --dry-run shows as kept a base that a delta it would send is built on, as the real run then keeps it"
    )
    func dryRunKeepsTheBaseOfADeltaItSends() throws {
        let site = try Site()
        let mirror = initializedRepository(site.site.folder.child("mirror"))
        let old = try site.backup(Self.alice, ["--no-delta"])
        let full = try site.backup(Self.alice)
        #expect(try site.granary(["sync", "--mirror", mirror]).status == 0)
        try site.change(1)
        let delta = try site.backup(Self.alice)
        // The mirror has the base but not the delta; this host deleted the base and the plain full.
        #expect(try site.granary(["delete", "\(Self.alice)/\(full.name)", "--force"]).status == 0)
        #expect(try site.granary(["delete", "\(Self.alice)/\(old.name)", "--force"]).status == 0)
        func said(_ arguments: [String]) throws -> (uploaded: [String], kept: [String], removed: [String]) {
            let run = try site.granary(["sync", "--mirror", mirror, "--json"] + arguments)
            #expect(run.status == 0, "\(run.stderr)")
            let mirrors = try #require(try Self.json(run.stdout)["mirrors"] as? [[String: Any]])
            let user = try #require((mirrors.first?["users"] as? [[String: Any]])?.first, "\(run.stdout)")
            return (
                user["uploaded"] as? [String] ?? [], user["kept"] as? [String] ?? [], user["removed"] as? [String] ?? []
            )
        }
        let dry = try said(["--dry-run"])
        #expect(site.archives(Self.alice, in: mirror) == [old.name, full.name], "a dry run changes nothing")
        let real = try said([])
        #expect(real.uploaded == [delta.name] && real.kept == [full.name] && real.removed == [old.name], "\(real)")
        #expect(dry.uploaded == real.uploaded && dry.kept == real.kept && dry.removed == real.removed, "\(dry)")
        #expect(site.archives(Self.alice, in: mirror) == [full.name, delta.name])
    }

    @Test(
        "after a restore, a reset, a store replaced by another program, or a Core Data store UUID or model changed, the next backup is a full saying why; a delta otherwise"
    )
    func fullAfterRestoreResetOrReplace() throws {
        let site = try Site()
        func reason(_ run: GranaryProcess.Result) throws -> (kind: String, reason: String) {
            let users = try #require(try Self.json(run.stdout)["users"] as? [[String: Any]])
            let delta = try #require(users.first?["delta"] as? [String: Any], "\(run.stdout)")
            return (delta["kind"] as? String ?? "", delta["reason"] as? String ?? "")
        }
        func expectDelta(_ step: Int, _ user: String = Self.alice) throws {
            if user == Self.alice { try site.change(step) }
            let next = try site.backup(user, ["--json"])
            #expect(try reason(next.run).kind == "delta", "\(next.run.stdout)")
        }
        func expectFull(_ user: String, saying words: String) throws {
            let next = try site.backup(user, ["--json"])
            let (kind, why) = try reason(next.run)
            #expect(kind == "full" && why.contains(words), "\(kind): \(why)")
            #expect(try site.manifest(user, next.name).delta?.stores.allSatisfy { $0.liveFile != nil } == true)
        }
        _ = try site.backup(Self.alice)
        try expectDelta(1)
        // A restore in place (its safety archive is newer than the base).
        let restored = try site.granary(["restore", Self.alice])
        #expect(restored.status == 0, "\(restored.stderr)")
        try expectFull(Self.alice, saying: "restored or reset after")
        try expectDelta(2)
        // A restore without a safety archive: the stores are other files.
        let quiet = try site.granary(["restore", Self.alice, "--no-safety-archive"])
        #expect(quiet.status == 0, "\(quiet.stderr)")
        try expectFull(Self.alice, saying: "is another file than in")
        try expectDelta(3)
        // A reset.
        let reset = try site.granary(["reset", Self.alice, "--yes"])
        #expect(reset.status == 0, "\(reset.stderr)")
        try expectFull(Self.alice, saying: "restored or reset after")
        // Another program writes a copy of the store and renames it over the store.
        try expectDelta(4)
        let store = site.root + "/\(Self.alice)/Local.sqlite"
        try Database(path: store, mode: .readWrite).execute("VACUUM INTO '\(store).new'")
        for suffix in ["-wal", "-shm"] { unlink(store + suffix) }
        #expect(rename(store + ".new", store) == 0)
        try expectFull(Self.alice, saying: "is another file than in")
        // bob's Core Data-shaped store: a new store UUID, then another model.
        _ = try site.backup(Self.bob)
        try expectDelta(0, Self.bob)
        let notes = site.root + "/\(Self.bob)/Notes.sqlite"
        try Database(path: notes, mode: .readWrite).execute(
            "UPDATE Z_METADATA SET Z_UUID = 'AAAAAAAA-0000-0000-0000-000000000001'")
        try expectFull(Self.bob, saying: "another Core Data store UUID")
        let plist = CoreDataMetadata.makePlist(
            storeUUID: "AAAAAAAA-0000-0000-0000-000000000001", modelVersionHashes: ["Note": Data([1, 2, 3])])
        let db = try Database(path: notes, mode: .readWrite)
        try db.execute("UPDATE Z_METADATA SET Z_PLIST = X'\(plist.map { String(format: "%02x", $0) }.joined())'")
        try expectFull(Self.bob, saying: "Core Data model changed")
        try expectDelta(0, Self.bob)
    }

    @Test(
        "with delta = true configured, a restore's safety archive is a delta on the newest backup; a reset after it (a safety archive newer than the newest backup) and retire's final archive are plain fulls"
    )
    func safetyAndFinalArchives() throws {
        let site = try Site()
        _ = try site.backup(Self.alice)
        try site.change(1)
        let delta = try site.backup(Self.alice)
        #expect(delta.name.contains("-delta."))
        try site.change(2)
        let restored = try site.granary(["restore", Self.alice])
        #expect(restored.status == 0, "\(restored.stderr)")
        let reset = try site.granary(["reset", Self.alice, "--yes"])
        #expect(reset.status == 0, "\(reset.stderr)")
        _ = try site.backup(Self.bob)
        let retired = try site.granary(["retire", Self.bob, "--yes"])
        #expect(retired.status == 0, "\(retired.stderr)")
        var safety = 0
        for user in [Self.alice, Self.bob] {
            for name in site.archives(user)
            where name.contains("pre-restore") || name.contains("pre-reset") || name.contains("final") {
                let manifest = try site.manifest(user, name)
                if name.contains("pre-restore") {
                    #expect(name.contains("-pre-restore-delta.") && manifest.delta?.base?.name == delta.name)
                    #expect(manifest.kind == .safety)
                    safety += 1
                    continue
                }
                #expect(manifest.delta == nil && !name.contains("delta"), "\(user)/\(name) is not a plain full")
                #expect(manifest.kind != .backup)
                let members = try GranaryProcess.runExecutable(
                    "/usr/bin/tar", ["--zstd", "-tf", site.repo + "/\(user)/\(name)"])
                #expect(!members.stdout.contains(".delta") && !members.stdout.contains(".pages"), "\(members.stdout)")
                safety += 1
            }
        }
        #expect(safety == 3, "\(site.archives(Self.alice)) \(site.archives(Self.bob))")
    }
}

/// The same with an S3 mirror (moto) through rclone.
@Suite(
    "delta archives with an S3 mirror", .serialized, .enabled(if: S3Server.available, S3Server.unavailableReason))
struct DeltaMirrorS3Tests {
    @Test(
        "a backup sends an S3 mirror the chain it lacks first; sync of a fresh S3 mirror carries the chain whole and the mirror restores the delta"
    )
    func s3Mirror() throws {
        guard let server = RemoteRepositoryTests.shared else { throw S3ServerError.didNotStart("moto did not start") }
        let bucket = "d" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
        try server.makeBucket(bucket)
        let site = try DeltaOperatorTests.Site()
        let alice = DeltaOperatorTests.alice
        func granary(_ arguments: [String], repo: String? = nil) throws -> GranaryProcess.Result {
            try GranaryProcess.run(
                arguments + ["--root", site.root, "--repo", repo ?? site.repo, "--config", site.config],
                environment: server.environment())
        }
        let full = try site.backup(alice)
        try site.change(1)
        let first = try site.backup(alice)
        try site.change(2)
        let mirror = initializedRepository("s3:\(bucket)/mirror", environment: server.environment())
        let backup = try granary(["backup", alice, "--mirror", mirror, "--json"])
        #expect(backup.status == 0, "\(backup.stderr)")
        let users = try #require(try DeltaOperatorTests.json(backup.stdout)["users"] as? [[String: Any]])
        let sent = try #require((users.first?["mirrors"] as? [[String: Any]])?.first)
        #expect(sent["sentFirst"] as? [String] == [full.name, first.name], "\(sent)")
        let second = try #require((users.first?["archive"] as? String).map { ($0 as NSString).lastPathComponent })
        func names(_ location: String) throws -> [String] {
            let list = try granary(["list", alice, "--json"], repo: location)
            #expect(list.status == 0, "\(list.stderr)")
            let archives = try #require(try DeltaOperatorTests.json(list.stdout)["archives"] as? [[String: Any]])
            return archives.compactMap { $0["name"] as? String }.sorted()
        }
        #expect(try names(mirror) == [full.name, first.name, second])

        // A fresh S3 mirror: sync sends the chain, oldest first, and the mirror restores the newest delta.
        let fresh = initializedRepository("s3:\(bucket)/fresh", environment: server.environment())
        let sync = try granary(["sync", alice, "--mirror", fresh, "-v"])
        #expect(sync.status == 0, "\(sync.stderr)")
        let order = sync.stdout.split(separator: "\n").filter { $0.hasPrefix("  send") }.map {
            String($0.dropFirst("  send    ".count))
        }
        #expect(order == [full.name, first.name, second], "\(sync.stdout)")
        let out = site.site.folder.child("out")
        let restored = try granary(["restore", alice, second, "--to", out], repo: fresh)
        #expect(restored.status == 0, "\(restored.stderr)")
    }

    @Test(
        "an S3 repository as the primary: backup reads its base from S3 (the cached hash lists, then with the cache gone the base's manifest and page hashes), writes deltas, verifies the chain and restores the newest delta to the live .dump"
    )
    func s3Primary() throws {
        guard let server = RemoteRepositoryTests.shared else { throw S3ServerError.didNotStart("moto did not start") }
        let bucket = "p" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
        try server.makeBucket(bucket)
        let site = try DeltaOperatorTests.Site()
        let alice = DeltaOperatorTests.alice
        let repo = initializedRepository("s3:\(bucket)/primary", environment: server.environment())
        func granary(_ arguments: [String]) throws -> GranaryProcess.Result {
            try GranaryProcess.run(
                arguments + ["--root", site.root, "--repo", repo, "--config", site.config],
                environment: server.environment())
        }
        func backup(_ step: Int) throws -> [String: Any] {
            if step > 0 { try site.change(step) }
            let run = try granary(["backup", alice, "--json"])
            #expect(run.status == 0, "\(run.stderr)")
            let users = try #require(try DeltaOperatorTests.json(run.stdout)["users"] as? [[String: Any]])
            return try #require(users.first?["delta"] as? [String: Any], "\(run.stdout)")
        }
        #expect(try backup(0)["kind"] as? String == "full")
        #expect(try backup(1)["kind"] as? String == "delta")
        // Without the local cache of hash lists (a new host, a lost work folder): the base's head
        // comes from S3, the chain followed back to its full.
        let cache =
            PageHashCache.folder(workFolder: RcloneRepository.rootWorkFolder, location: repo) + "/" + alice
        #expect(FileManager.default.fileExists(atPath: cache), "the first delta's lists were cached in \(cache)")
        FileSystem.removeTree(cache)
        let third = try backup(2)
        #expect(third["kind"] as? String == "delta", "\(third)")
        let list = try granary(["list", alice, "--json"])
        let archives = try #require(try DeltaOperatorTests.json(list.stdout)["archives"] as? [[String: Any]])
        let newest = try #require(archives.compactMap { $0["name"] as? String }.sorted().last)
        #expect(newest.contains("-delta."))
        let verify = try granary(["verify", "\(alice)/\(newest)", "--chain"])
        #expect(verify.status == 0, "\(verify.stdout) \(verify.stderr)")
        let out = site.site.folder.child("out")
        let restored = try granary(["restore", alice, newest, "--to", out])
        #expect(restored.status == 0, "\(restored.stderr)")
        let live = site.root + "/\(alice)/Local.sqlite"
        #expect(try DeltaArchiveTests.dump(out + "/Local.sqlite") == DeltaArchiveTests.dump(live))
    }
}
