import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

/// The property tests of issue 35 that the first slice lacked: generated histories (seeded) with
/// the changes that must force a full (page-size change, journal-mode change, VACUUM by changed
/// share) and those a delta must carry exactly (incremental_vacuum shrinking the file, growth,
/// uncheckpointed WAL frames, external data added and removed, a full and then a delta after a
/// restore and after a reset). For every backup of the history, the restored stores' `.dump` equals the live stores'
/// at backup time.
@Suite("delta archives: property tests")
struct DeltaPropertyTests {
    static let alice = DeltaArchiveTests.alice
    static let bob = DeltaArchiveTests.bob

    /// What `backup --delta --json` said of one user: kind, reason, pages.
    struct Made {
        var archive: String
        var kind: String
        var reason: String?
        var pages: Int
    }

    static func backup(_ site: SampleSite, _ user: String, _ context: String) throws -> Made {
        let result = try site.granary(["backup", user, "--delta", "--json"])
        #expect(result.status == 0, "\(context): \(result.stderr)")
        let document = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        let users = document?["users"] as? [[String: Any]] ?? []
        let delta = users.first?["delta"] as? [String: Any] ?? [:]
        return Made(
            archive: ((users.first?["archive"] as? String ?? "") as NSString).lastPathComponent,
            kind: delta["kind"] as? String ?? "?", reason: delta["reason"] as? String,
            pages: delta["pages"] as? Int ?? 0)
    }

    /// Rows of random sizes, so that pages differ (`INSERT … SELECT` of `count` rows).
    static func insert(_ db: Database, _ random: inout DeltaArchiveTests.Generator, rows: Int, table: String = "items")
        throws
    {
        let size = Int.random(in: 100...900, using: &random)
        try db.execute(
            "INSERT INTO \(table)(body, created) SELECT hex(randomblob(\(size))), \(rows) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < \(rows)) SELECT x FROM c)"
        )
    }

    @Test(
        "a history with page-size and journal-mode changes, VACUUM, incremental_vacuum, growth and shrink, uncheckpointed WAL frames, external data, a restore and a reset: every backup restores to the live .dump at its time, and the policy's fulls come where the rules say"
    )
    func history() throws {
        for seed in Self.slow ? [UInt64(8), 35_035, 4_242] : [UInt64(8)] {
            let site = try SampleSite()
            var random = DeltaArchiveTests.Generator(state: seed)
            let local = site.root + "/\(Self.alice)/Local.sqlite"
            let cloud = site.root + "/\(Self.alice)/Cloud.sqlite"
            let notes = site.root + "/\(Self.bob)/Notes.sqlite"
            let externalFolder = site.root + "/\(Self.bob)/.Notes_SUPPORT/_EXTERNAL_DATA"
            var expected: [(user: String, archive: String, dumps: [String], external: [String: Data])] = []
            var made: [String: Made] = [:]
            func record(_ what: String, user: String = Self.alice) throws {
                let context = "seed \(seed), \(what)"
                let dumps =
                    user == Self.alice
                    ? [try DeltaArchiveTests.dump(local), try DeltaArchiveTests.dump(cloud)]
                    : [try DeltaArchiveTests.dump(notes)]
                let external = user == Self.bob ? DeltaArchiveTests.external(externalFolder) : [:]
                let result = try Self.backup(site, user, context)
                made[what] = result
                expected.append((user, result.archive, dumps, external))
            }
            func connect() throws -> Database { try Database(path: local, mode: .readWrite) }

            try Self.insert(try connect(), &random, rows: 1500)
            try record("first")
            #expect(made["first"]?.kind == "full")
            try connect().execute(
                "UPDATE items SET body = 'one' WHERE id = \(Int.random(in: 1...1500, using: &random))")
            try record("small change")
            #expect(made["small change"]?.kind == "delta", "seed \(seed): \(String(describing: made["small change"]))")
            do {
                // A writer whose frames no checkpoint has moved into the database file, open during the backup.
                let writer = try connect()
                try writer.execute("PRAGMA wal_autocheckpoint = 0")
                try Self.insert(writer, &random, rows: 20)
                try writer.execute("UPDATE items SET body = 'in the wal' WHERE id % 97 = 0")
                try record("uncheckpointed wal frames")
                #expect(made["uncheckpointed wal frames"]?.kind == "delta")
                _ = writer
            }
            try Self.insert(try connect(), &random, rows: 150)
            try record("growth")
            let grown = made["growth"]?.pages ?? 0
            try connect().execute("DELETE FROM items WHERE id % 3 = 0")
            try record("deletes")
            // Journal mode, then page size (which SQLite changes only outside WAL, by VACUUM): fulls by rule.
            try connect().execute("PRAGMA journal_mode = DELETE")
            try record("journal mode")
            #expect(
                made["journal mode"]?.kind == "full" && made["journal mode"]?.reason?.contains("journal mode") == true,
                "seed \(seed): \(String(describing: made["journal mode"]))")
            try connect().execute("PRAGMA page_size = 8192; VACUUM")
            try record("page size")
            #expect(
                made["page size"]?.kind == "full" && made["page size"]?.reason?.contains("8192 bytes") == true,
                "seed \(seed): \(String(describing: made["page size"]))")
            try connect().execute("PRAGMA journal_mode = WAL")
            try record("back to wal")
            #expect(made["back to wal"]?.kind == "full")
            // incremental_vacuum: the file shrinks, a delta says so (fewer pages), and restores exactly.
            try connect().execute("PRAGMA auto_vacuum = INCREMENTAL; VACUUM")
            try record("auto_vacuum on")
            try Self.insert(try connect(), &random, rows: 200)
            try record("grow again")
            // The rows just added go: their pages, at the end of the file, join the freelist.
            try connect().execute("DELETE FROM items WHERE created = 200")
            try record("freelist")
            let before = made["freelist"]?.pages ?? 0
            try connect().execute("PRAGMA incremental_vacuum")
            try record("incremental_vacuum")
            #expect(
                (made["incremental_vacuum"]?.pages ?? 0) < before,
                "seed \(seed): the file shrank: \(before) pages before")
            #expect(made["incremental_vacuum"]?.kind == "delta", "\(String(describing: made["incremental_vacuum"]))")
            // Two interleaved tables, one dropped.
            let mixed = try connect()
            try mixed.execute("CREATE TABLE other(id INTEGER PRIMARY KEY, body TEXT, created INTEGER)")
            for _ in 0..<40 {
                try Self.insert(mixed, &random, rows: 10)
                try Self.insert(mixed, &random, rows: 10, table: "other")
            }
            try record("interleaved")
            try mixed.execute("DROP TABLE other")
            try record("dropped")
            // The oldest half of the rows go, then VACUUM: every page left moves down (a full by changed share).
            try mixed.execute("DELETE FROM items WHERE id <= (SELECT (min(id) + max(id)) / 2 FROM items)")
            try record("oldest half deleted")
            try mixed.execute("VACUUM")
            try record("vacuum")
            #expect(
                made["vacuum"]?.kind == "full" && made["vacuum"]?.reason?.contains("% of the pages changed") == true,
                "seed \(seed): \(String(describing: made["vacuum"]))")
            #expect(grown > 0)
            // External data added and removed (bob's Core Data store), with a change to the store.
            try record("bob first", user: Self.bob)
            let names = FileSystem.contents(of: externalFolder)
            if let first = names.first { try FileSystem.removeFile(externalFolder + "/" + first) }
            _ = FileManager.default.createFile(
                atPath: externalFolder + "/ADDED-\(seed)", contents: Data(repeating: UInt8(seed & 0xFF), count: 4000))
            try Database(path: notes, mode: .readWrite).execute("UPDATE ZNOTE SET ZTITLE = 'external' WHERE Z_PK = 1")
            try record("external data", user: Self.bob)
            #expect(made["external data"]?.kind == "delta")
            // A restore (of an older backup, live) and a reset: the next backup is a full by rule,
            // the one after a small change a delta again.
            let older = expected[1].archive
            let restored = try site.granary(["restore", Self.alice, older])
            #expect(restored.status == 0, "seed \(seed): \(restored.stderr)")
            #expect(try DeltaArchiveTests.dump(local) == expected[1].dumps[0])
            // Stamps are strictly ordered per user and host (to the microsecond): the full after
            // the restore is after the restore's safety archive, however soon it comes.
            try record("after restore")
            try connect().execute("UPDATE items SET body = 'after restore' WHERE id = 4")
            try record("change after restore")
            let reset = try site.granary(["reset", Self.alice, "--yes"])
            #expect(reset.status == 0, "seed \(seed): \(reset.stderr)")
            try record("after reset")
            try Self.insert(try connect(), &random, rows: 30)
            try record("change after reset")
            for what in ["after restore", "after reset"] {
                #expect(
                    made[what]?.kind == "full" && made[what]?.reason?.contains("restored or reset") == true,
                    "seed \(seed): \(String(describing: made[what]))")
            }
            // (After the reset, the 30 rows inserted into the empty store change most of its pages.)
            #expect(
                made["change after restore"]?.kind == "delta",
                "seed \(seed): \(String(describing: made["change after restore"]))")
            #expect(expected.filter { $0.archive.contains("-delta.") }.count >= 8, "seed \(seed)")

            for (index, item) in expected.enumerated() {
                let target = site.folder.child("restored-\(index)")
                try FileSystem.makeDirectory(target)
                let result = try site.granary(["restore", item.user, item.archive, "--to", target])
                #expect(result.status == 0, "seed \(seed) \(item.archive): \(result.stderr)")
                let stores =
                    item.user == Self.alice ? ["Local.sqlite", "Cloud.sqlite"] : ["Notes.sqlite"]
                for (store, dump) in zip(stores, item.dumps) {
                    #expect(
                        try DeltaArchiveTests.dump(target + "/" + store) == dump,
                        "seed \(seed): \(item.user) \(item.archive) \(store)")
                }
                if item.user == Self.bob {
                    #expect(
                        DeltaArchiveTests.external(target + "/.Notes_SUPPORT/_EXTERNAL_DATA") == item.external,
                        "seed \(seed): \(item.archive)")
                }
            }
            let verified = try site.granary(["verify", "--all", "--chain"])
            #expect(verified.status == 0, "seed \(seed): \(verified.stdout) \(verified.stderr)")
        }
    }

    /// Whether the slow proofs run (`make test-slow`, or GRANARY_SLOW_TESTS=1).
    static let slow = ProcessInfo.processInfo.environment["GRANARY_SLOW_TESTS"] == "1"

    @Test(
        "a store over 1 GiB (the lock-byte page inside it): a delta of changes on both sides of the lock-byte page restores to the live content",
        .enabled(if: slow, "over 1 GiB of I/O: make test-slow (GRANARY_SLOW_TESTS=1)"))
    func lockBytePage() throws {
        let site = try SampleSite()
        let path = site.root + "/\(Self.alice)/Large.sqlite"
        let db = try Database(path: path, mode: .create)
        // 64 KiB pages: the lock-byte page (bytes 2^30 … 2^30 + 65535) is page 16385.
        try db.execute("PRAGMA page_size = 65536; PRAGMA journal_mode = WAL")
        try db.execute("CREATE TABLE big(id INTEGER PRIMARY KEY, b BLOB)")
        try db.execute(
            "INSERT INTO big(b) SELECT zeroblob(1000000) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1100) SELECT x FROM c)"
        )
        try db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        #expect((FileSystem.status(path).map { Int64($0.st_size) } ?? 0) > 1 << 30)
        /// The content's digest: `.dump` would print gigabytes of hex; the shell's `.sha3sum`
        /// hashes every row of every table and the schema.
        func digest(_ store: String) throws -> String {
            let result = try GranaryProcess.runExecutable(
                "/usr/bin/sqlite3", ["-readonly", store, ".sha3sum --schema"])
            #expect(result.status == 0, "\(result.stderr)")
            return result.stdout
        }
        var expected: [(String, String)] = []
        let first = try DeltaPropertyTests.backup(site, Self.alice, "1 GiB full")
        expected.append((first.archive, try digest(path)))
        // Rows before and after the lock-byte page change; new rows go past it.
        try db.execute("UPDATE big SET b = randomblob(1000000) WHERE id IN (5, 1050, 1090)")
        try db.execute("INSERT INTO big(b) VALUES (randomblob(300000))")
        let second = try DeltaPropertyTests.backup(site, Self.alice, "1 GiB delta")
        #expect(second.kind == "delta", "\(second)")
        expected.append((second.archive, try digest(path)))
        for (index, (archive, sum)) in expected.enumerated() {
            let target = site.folder.child("big-\(index)")
            try FileSystem.makeDirectory(target)
            let result = try site.granary(["restore", Self.alice, archive, "--to", target])
            #expect(result.status == 0, "\(archive): \(result.stderr)")
            #expect(try digest(target + "/Large.sqlite") == sum, "\(archive)")
            FileSystem.removeTree(target)
        }
    }
}
