import Foundation
import GranaryDigest
import GranaryKit
import GranaryTestSupport
import Testing

/// `backup --delta` (issue 35) with the built binary over granary-sample's users: generated
/// histories of changes, every archive of the chain restored and compared with the live store's
/// `.dump` at its backup time.
@Suite("delta archives")
struct DeltaArchiveTests {
    /// A small deterministic generator (SplitMix64), so that a failing history can be replayed.
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    static let alice = "alice@example.com"
    static let bob = "bob@example.com"

    /// `sqlite3 -readonly STORE .dump` (read-only: it checkpoints nothing away).
    static func dump(_ path: String) throws -> String {
        let result = try GranaryProcess.runExecutable("/usr/bin/sqlite3", ["-readonly", path, ".dump"])
        #expect(result.status == 0, "\(result.stderr)")
        return result.stdout
    }

    /// The archive of `user` a run made (the names it added to the user's folder).
    static func added(_ site: SampleSite, _ user: String, _ run: () throws -> Void) throws -> String {
        let before = Set(site.archives(user))
        try run()
        let new = site.archives(user).filter { !before.contains($0) }
        #expect(new.count == 1, "\(new)")
        return new.first ?? ""
    }

    /// Every file under a store's external-data folder, with its bytes.
    static func external(_ folder: String) -> [String: Data] {
        var files: [String: Data] = [:]
        for name in FileSystem.contents(of: folder) {
            files[name] = FileManager.default.contents(atPath: folder + "/" + name)
        }
        return files
    }

    /// One change of a generated history, applied to alice's Local.sqlite (WAL) or bob's
    /// Notes.sqlite (rollback, Core Data external data).
    static func change(_ site: SampleSite, _ random: inout Generator, step: Int) throws -> String {
        let local = try Database(path: site.root + "/\(alice)/Local.sqlite", mode: .readWrite)
        let choice = Int.random(in: 0..<8, using: &random)
        switch choice {
        case 0:
            let rows = Int.random(in: 1...400, using: &random)
            try local.execute(
                "INSERT INTO items(body, created) SELECT hex(randomblob(\(Int.random(in: 10...900, using: &random)))), \(step) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < \(rows)) SELECT x FROM c)"
            )
            return "insert \(rows)"
        case 1:
            try local.execute(
                "UPDATE items SET body = hex(randomblob(64)) WHERE id % \(Int.random(in: 3...40, using: &random)) = 0")
            return "update"
        case 2:
            try local.execute("DELETE FROM items WHERE id % \(Int.random(in: 2...6, using: &random)) = 1")
            return "delete"
        case 3:
            try local.execute("DELETE FROM items WHERE id % 2 = 0")
            try local.execute("VACUUM")
            return "shrink and vacuum"
        case 4:
            try local.execute(
                "CREATE TABLE IF NOT EXISTS big(id INTEGER PRIMARY KEY, blob BLOB); INSERT INTO big(blob) SELECT randomblob(3000) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200) SELECT x FROM c)"
            )
            return "grow"
        case 5:
            let notes = try Database(path: site.root + "/\(bob)/Notes.sqlite", mode: .readWrite)
            try notes.execute("UPDATE ZNOTE SET ZTITLE = 'step \(step)' WHERE Z_PK % 2 = \(step % 2)")
            return "notes update"
        case 6:
            let folder = site.root + "/\(bob)/.Notes_SUPPORT/_EXTERNAL_DATA"
            let names = FileSystem.contents(of: folder)
            if let first = names.first, Bool.random(using: &random) { try FileSystem.removeFile(folder + "/" + first) }
            let name = String(format: "ADDED-%04d", step)
            _ = FileManager.default.createFile(
                atPath: folder + "/" + name, contents: Data(repeating: UInt8(step & 0xFF), count: 100 + step))
            return "external data"
        default:
            return "nothing"
        }
    }

    @Test(
        "every backup of a generated history (inserts, updates, deletes, VACUUM, growth, shrink, uncheckpointed WAL frames, external data) restores to the live stores' .dump at its time"
    )
    func generatedHistories() throws {
        for seed in [UInt64(35), 1_235] {
            let site = try SampleSite()
            var random = Generator(state: seed)
            var expected: [(archive: String, dumps: [String], external: [String: Data])] = []
            let storeA = site.root + "/\(Self.alice)/Local.sqlite"
            let storeB = site.root + "/\(Self.bob)/Notes.sqlite"
            let folderB = site.root + "/\(Self.bob)/.Notes_SUPPORT/_EXTERNAL_DATA"
            var deltas = 0
            for step in 0..<10 {
                let what = try Self.change(site, &random, step: step)
                // A writer with frames no checkpoint has moved into the database file, open during the backup.
                let writer = try Database(path: storeA, mode: .readWrite)
                try writer.execute("PRAGMA wal_autocheckpoint = 0")
                try writer.execute("INSERT INTO items(body, created) VALUES ('frame \(step)', \(step))")
                let dumps = try [Self.dump(storeA), Self.dump(storeB)]
                let external = Self.external(folderB)
                let before = (site.archives(Self.alice), site.archives(Self.bob))
                let made = try site.granary(["backup", Self.alice, Self.bob, "--delta", "--json"])
                #expect(made.status == 0, "seed \(seed) step \(step) (\(what)): \(made.stderr)")
                _ = writer
                let newA = site.archives(Self.alice).filter { !before.0.contains($0) }
                let newB = site.archives(Self.bob).filter { !before.1.contains($0) }
                #expect(newA.count == 1 && newB.count == 1)
                deltas += newA.filter { $0.contains("-delta.") }.count
                expected.append((newA[0], [dumps[0]], [:]))
                expected.append((newB[0], [dumps[1]], external))
            }
            #expect(deltas >= 3, "seed \(seed): a history of 10 backups writes deltas (\(deltas))")
            for (index, item) in expected.enumerated() {
                let user = index % 2 == 0 ? Self.alice : Self.bob
                let target = site.folder.child("restored-\(index)")
                try FileSystem.makeDirectory(target)
                let restored = try site.granary(["restore", user, item.archive, "--to", target])
                #expect(restored.status == 0, "seed \(seed) \(item.archive): \(restored.stderr)")
                let store = target + "/" + (user == Self.alice ? "Local.sqlite" : "Notes.sqlite")
                #expect(try Self.dump(store) == item.dumps[0], "seed \(seed): \(user) \(item.archive)")
                if user == Self.bob {
                    #expect(
                        Self.external(target + "/.Notes_SUPPORT/_EXTERNAL_DATA") == item.external,
                        "seed \(seed): \(item.archive)")
                }
            }
            let verified = try site.granary(["verify", "--all", "--chain"])
            #expect(verified.status == 0, "\(verified.stdout) \(verified.stderr)")
        }
    }

    @Test("a delta carries only the changed pages and names its base; stock tar lists it")
    func deltaContent() throws {
        let site = try SampleSite()
        #expect(try site.granary(["backup", Self.alice, "--delta"]).status == 0)
        let full = site.archives(Self.alice)
        #expect(full.count == 1 && !full[0].contains("delta"))
        let listed = try GranaryProcess.runExecutable(
            "/usr/bin/tar", ["--zstd", "-tf", site.repo + "/\(Self.alice)/" + full[0]])
        #expect(listed.stdout.contains("stores/Local.sqlite.pages\nstores/Local.sqlite\n") == false)
        #expect(listed.stdout.contains("stores/Local.sqlite.pages") && listed.stdout.contains("stores/Local.sqlite\n"))
        let db = try Database(path: site.root + "/\(Self.alice)/Local.sqlite", mode: .readWrite)
        try db.execute("UPDATE items SET body = 'changed' WHERE id = 3")
        var made: GranaryProcess.Result?
        let delta = try Self.added(site, Self.alice) {
            made = try site.granary(["backup", Self.alice, "--delta", "--json"])
        }
        #expect(made?.status == 0, "\(made?.stderr ?? "")")
        #expect(made?.stdout.contains("\"kind\" : \"delta\"") == true, "\(made?.stdout ?? "")")
        #expect(made?.stdout.contains("\"base\" : \"\(full[0])\"") == true, "\(made?.stdout ?? "")")
        #expect(try ShellTools.schemaProblems(made?.stdout ?? "", schema: "backup").isEmpty)
        #expect(delta.contains("-delta."))
        let members = try GranaryProcess.runExecutable(
            "/usr/bin/tar", ["--zstd", "-tf", site.repo + "/\(Self.alice)/" + delta])
        #expect(members.status == 0)
        #expect(members.stdout.contains("stores/Local.sqlite.delta"), "\(members.stdout)")
        #expect(!members.stdout.contains(".pages"), "a delta's hash list is its base's: \(members.stdout)")
        #expect(!members.stdout.contains("stores/Local.sqlite\n"), "a delta holds no whole store: \(members.stdout)")
        let inspected = try site.granary(["inspect", "\(Self.alice)/\(delta)"])
        #expect(inspected.status == 0, "\(inspected.stderr)")
        #expect(inspected.stdout.contains("delta of \(full[0])"), "\(inspected.stdout)")
        // --full forces a full, still with page hashes; --full alone is a usage error.
        var forced: GranaryProcess.Result?
        let second = try Self.added(site, Self.alice) {
            forced = try site.granary(["backup", Self.alice, "--delta", "--full", "--json"])
        }
        #expect(forced?.stdout.contains("\"kind\" : \"full\"") == true, "\(forced?.stdout ?? "")")
        #expect(forced?.stdout.contains("a full was asked for (--full)") == true, "\(forced?.stdout ?? "")")
        #expect(try ShellTools.schemaProblems(forced?.stdout ?? "", schema: "backup").isEmpty)
        #expect(!second.contains("delta"))
        #expect(try site.granary(["backup", Self.alice, "--full"]).status == 64)
    }

    @Test(
        "restore USER puts the newest delta's state back into the live folder (offline), keeping a safety archive that is a delta on it"
    )
    func liveRestore() throws {
        let site = try SampleSite()
        let store = site.root + "/\(Self.bob)/Notes.sqlite"
        #expect(try site.granary(["backup", Self.bob, "--delta"]).status == 0)
        let notes = try Database(path: store, mode: .readWrite)
        try notes.execute("UPDATE ZNOTE SET ZTITLE = 'kept' WHERE Z_PK = 1")
        var made: GranaryProcess.Result?
        let delta = try Self.added(site, Self.bob) { made = try site.granary(["backup", Self.bob, "--delta"]) }
        #expect(made?.status == 0)
        #expect(delta.contains("-delta."))
        let expected = try Self.dump(store)
        try notes.execute("UPDATE ZNOTE SET ZTITLE = 'lost' WHERE Z_PK = 1")
        try notes.execute("DELETE FROM ZNOTE WHERE Z_PK = 2")
        let restored = try site.granary(["restore", Self.bob, "--json"])
        #expect(restored.status == 0, "\(restored.stderr)")
        #expect(restored.stdout.contains(delta), "\(restored.stdout)")
        #expect(try Self.dump(store) == expected)
        // The safety archive is a delta on the newest backup (a sound base): the pages replaced.
        let safety = try #require(site.archives(Self.bob).first { $0.contains("pre-restore") })
        #expect(safety.contains("-pre-restore-delta."), "\(safety)")
        let members = try GranaryProcess.runExecutable(
            "/usr/bin/tar", ["--zstd", "-tf", site.repo + "/\(Self.bob)/" + safety])
        #expect(!members.stdout.contains("stores/Notes.sqlite\n") && members.stdout.contains(".delta"))
    }

    @Test("a delta whose base is gone is refused with exit 65, naming the base, and nothing is restored")
    func missingBase() throws {
        let site = try SampleSite()
        #expect(try site.granary(["backup", Self.alice, "--delta"]).status == 0)
        let db = try Database(path: site.root + "/\(Self.alice)/Local.sqlite", mode: .readWrite)
        try db.execute("UPDATE items SET body = 'changed' WHERE id = 3")
        #expect(try site.granary(["backup", Self.alice, "--delta"]).status == 0)
        let names = site.archives(Self.alice)
        try FileSystem.removeFile(site.repo + "/\(Self.alice)/" + names[0])
        // The delta alone is sound; its chain is not, and verify (with --chain or not: issue 46)
        // verifies a delta with its chain, naming the missing base.
        for arguments in [[], ["--chain"]] {
            let chain = try site.granary(["verify", "\(Self.alice)/\(names[1])"] + arguments)
            #expect(chain.status == 65, "\(chain.stdout) \(chain.stderr)")
            #expect(
                chain.stderr.contains("does not restore: its chain") && chain.stderr.contains(names[0])
                    && chain.stderr.contains("not in the repository"),
                "\(chain.stderr)")
        }
        let target = site.folder.child("out")
        try FileSystem.makeDirectory(target)
        let restored = try site.granary(["restore", Self.alice, names[1], "--to", target])
        #expect(restored.status == 65, "\(restored.stderr)")
        #expect(restored.stderr.contains(names[0]), "\(restored.stderr)")
        #expect(FileSystem.contents(of: target).isEmpty)
    }

    @Test(
        "a delta whose base was replaced by another archive under its name is refused with exit 65: the chain is broken"
    )
    func replacedBase() throws {
        let site = try SampleSite()
        let db = try Database(path: site.root + "/\(Self.alice)/Local.sqlite", mode: .readWrite)
        for step in 0..<3 {
            try db.execute("UPDATE items SET body = 'step \(step)' WHERE id = 3")
            #expect(try site.granary(["backup", Self.alice, "--delta"] + (step == 2 ? ["--full"] : [])).status == 0)
        }
        let names = site.archives(Self.alice)
        #expect(names.count == 3 && names[1].contains("-delta.") && !names[2].contains("delta"), "\(names)")
        let folder = site.repo + "/\(Self.alice)/"
        try FileSystem.removeFile(folder + names[0])
        try FileManager.default.copyItem(atPath: folder + names[2], toPath: folder + names[0])
        let target = site.folder.child("out")
        try FileSystem.makeDirectory(target)
        let restored = try site.granary(["restore", Self.alice, names[1], "--to", target])
        #expect(restored.status == 65, "\(restored.stderr)")
        // Refused as what it is: the base's name and manifest disagree (another archive's time),
        // or, where they agree, its manifest is not the one the delta recorded.
        #expect(
            restored.stderr.contains("its chain is broken")
                || restored.stderr.contains("is not the archive its name says"),
            "\(restored.stderr)")
        #expect(FileSystem.contents(of: target).isEmpty)
    }

    @Test(
        "a delta whose changed page was altered (its member's SHA-256 and manifest made to agree) fails verify --chain and restore with exit 65"
    )
    func tamperedDelta() throws {
        let site = try SampleSite()
        #expect(try site.granary(["backup", Self.alice, "--delta", "--compression", "none"]).status == 0)
        let db = try Database(path: site.root + "/\(Self.alice)/Local.sqlite", mode: .readWrite)
        try db.execute("UPDATE items SET body = 'changed' WHERE id = 3")
        var made: GranaryProcess.Result?
        let name = try Self.added(site, Self.alice) {
            made = try site.granary(["backup", Self.alice, "--delta", "--compression", "none"])
        }
        #expect(made?.status == 0)
        let path = site.repo + "/\(Self.alice)/" + name
        #expect(try site.granary(["verify", path]).status == 0)
        // The last byte of the .delta member's last page, changed, and the manifest's size and
        // SHA-256 of that member made to agree: only the page-hash check can find it.
        var bytes = [UInt8](FileManager.default.contents(atPath: path)!)
        let marker = Array("GRDELTA1".utf8)
        func octal(_ at: Int) -> Int {
            Int(
                String(decoding: bytes[at..<at + 11], as: UTF8.self).trimmingCharacters(
                    in: .whitespaces.union(.init(charactersIn: "\0"))), radix: 8) ?? 0
        }
        // The member's size is in its tar header (512 bytes before), octal at offset 124: the
        // delta of Local.sqlite is the one that carries a page (Cloud.sqlite's is its header alone).
        let starts = (0...(bytes.count - marker.count)).filter { Array(bytes[$0..<$0 + marker.count]) == marker }
        let start = try #require(starts.first { octal($0 - 512 + 124) > 28 })
        let size = octal(start - 512 + 124)
        let oldDigest = SHA256Hex.of(bytes[start..<start + size])
        bytes[start + size - 1] ^= 0xFF
        let newDigest = SHA256Hex.of(bytes[start..<start + size])
        // The manifest is checksummed: rewrite it whole with granary's own encoder.
        let manifestStart = 512
        let manifestSize = octal(124)
        var manifest = try Manifest.decode(Array(bytes[manifestStart..<manifestStart + manifestSize]), source: path)
        for index in manifest.files.indices where manifest.files[index].sha256 == oldDigest {
            manifest.files[index].sha256 = newDigest
        }
        let encoded = manifest.encoded()
        #expect(encoded.count == manifestSize, "the same length: only a digest changed")
        bytes.replaceSubrange(manifestStart..<manifestStart + manifestSize, with: encoded)
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        // Its structure is intact, but rebuilt on its base the changed page gives another state
        // than the one recorded: verify (which rebuilds a delta's chain, issue 46) says so.
        for arguments in [[path], ["\(Self.alice)/\(name)", "--chain"]] {
            let verified = try site.granary(["verify"] + arguments)
            #expect(verified.status == 65, "\(verified.stdout) \(verified.stderr)")
            #expect(
                verified.stderr.contains("does not rebuild from its chain")
                    && verified.stderr.contains("rebuilds Local.sqlite with state digest"), "\(verified.stderr)")
        }
        let target = site.folder.child("out")
        try FileSystem.makeDirectory(target)
        #expect(try site.granary(["restore", Self.alice, name, "--to", target]).status == 65)
        #expect(FileSystem.contents(of: target).isEmpty)
    }

    @Test("prune --no-merge keeps every base a kept delta is built on")
    func pruneKeepsChains() throws {
        let site = try SampleSite()
        let db = try Database(path: site.root + "/\(Self.alice)/Local.sqlite", mode: .readWrite)
        for step in 0..<4 {
            try db.execute("UPDATE items SET body = 'step \(step)' WHERE id = 3")
            #expect(try site.granary(["backup", Self.alice, "--delta"]).status == 0)
        }
        let names = site.archives(Self.alice)
        #expect(names.count == 4 && names.dropFirst().allSatisfy { $0.contains("-delta.") }, "\(names)")
        let pruned = try site.granary(["prune", Self.alice, "--keep-last", "1", "--no-merge"])
        #expect(pruned.status == 0, "\(pruned.stderr)")
        #expect(site.archives(Self.alice) == names, "the whole chain stays: \(pruned.stdout)")
        let target = site.folder.child("out")
        try FileSystem.makeDirectory(target)
        #expect(try site.granary(["restore", Self.alice, "--to", target]).status == 0)
        // delete refuses a base of a delta that stays (64, naming the delta); the newest delta and
        // then its base may go, newest first.
        let refused = try site.granary(["delete", "\(Self.alice)/\(names[1])"])
        #expect(refused.status == 64, "\(refused.stderr)")
        #expect(refused.stderr.contains("the delta \(names[2]) is built on it"), "\(refused.stderr)")
        #expect(site.archives(Self.alice) == names)
        let both = try site.granary(["delete", "\(Self.alice)/\(names[2])", "\(Self.alice)/\(names[3])", "--force"])
        #expect(both.status == 0, "\(both.stderr)")
        #expect(site.archives(Self.alice) == Array(names.prefix(2)))
    }
}

/// SHA-256 in hex of some bytes.
enum SHA256Hex {
    static func of(_ bytes: ArraySlice<UInt8>) -> String { SHA256.hash(data: Array(bytes)).hex }
}
