import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Stores whose content is made to hurt root granary (issue 24): checks that never end, values
/// that need gigabytes, triggers that refill what a reset empties, and archives with a million
/// files. Every store here is made by the test with SQLite; every command runs the built binary.
@Suite("hostile store content", .serialized)
struct HostileContentTests {
    let folder = TemporaryFolder("granary-hostile")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }
    var config: String { folder.child("granary.toml") }

    func granary(_ arguments: [String]) throws -> GranaryProcess.Result {
        try GranaryProcess.run(arguments + ["--root", root, "--repo", repo, "--config", config])
    }

    /// A configuration with a 2 s budget per store (nothing more per GiB) and `extra` lines.
    func configure(_ extra: String = "") throws {
        try Data("\(extra)\n[limits]\ntime = \"2s\"\ntime_per_gib = \"0s\"\n".utf8).write(
            to: URL(fileURLWithPath: config))
    }

    /// A store of ~40 KiB whose every row costs SQLite ~0.1 s and 40 MB to check: a NOT NULL
    /// virtual generated column (`quick_check` evaluates it) or an expression index
    /// (`integrity_check` does). Written under a cheap expression of the same value that is then
    /// swapped for the expensive one (writable_schema), as the store's author could: the store
    /// is sound, and a check that ran to its end would pass.
    static func makeSlowStore(_ path: String, index: Bool, wal: Bool, bytes: Int = 20_000_000, rows: Int = 300) throws {
        let db = try Database(path: path, mode: .create, limits: .unlimited)
        if wal { try db.execute("PRAGMA journal_mode=WAL") }
        let cheap = "(2 * (\(bytes) + x))"
        try db.execute(
            index
                ? "CREATE TABLE t(x INTEGER); CREATE INDEX slow ON t(\(cheap))"
                : "CREATE TABLE t(x INTEGER, y INTEGER AS \(cheap) VIRTUAL NOT NULL)")
        try db.execute("BEGIN")
        for x in 1...rows { try db.run("INSERT INTO t(x) VALUES (?)", [.integer(Int64(x))]) }
        try db.execute("COMMIT")
        try db.execute("PRAGMA writable_schema=ON")
        try db.execute(
            "UPDATE sqlite_schema SET sql = replace(sql, '\(cheap)', '(length(hex(zeroblob(\(bytes) + x))))')")
        try db.execute("PRAGMA writable_schema=OFF")
    }

    func user(_ name: String) throws -> String {
        let path = root + "/" + name
        try FileSystem.makeDirectory(path)
        return path
    }

    @Test(
        "backup stops a store whose check never ends at its time budget (65, naming store and limit); backup --all goes on with the next user"
    )
    func backupStopsAtBudget() throws {
        try configure()
        try SampleData.makeItemsStore(try user("alice@example.com") + "/Local.sqlite", rows: 300, walOnlyTail: 20)
        try Self.makeSlowStore(try user("mallory@example.com") + "/Slow.sqlite", index: false, wal: false)
        try SampleData.makeRollbackStore(try user("zoe@example.com") + "/Legacy.db", rows: 100)
        let one = try granary(["backup", "mallory@example.com"])
        #expect(one.status == 65, "\(one.stderr)")
        #expect(
            one.stderr.contains(
                "mallory@example.com: store Slow.sqlite failed its check: quick_check stopped at its time budget of 2s")
        )
        // The hint runs as shown from anywhere: the store's full path.
        #expect(
            one.stderr.contains("Hint: granary inspect \(try user("mallory@example.com"))/Slow.sqlite;"),
            "\(one.stderr)"
        )
        #expect(
            !FileManager.default.fileExists(atPath: repo + "/mallory@example.com")
                || FileSystem.contents(of: repo + "/mallory@example.com").allSatisfy { $0.hasPrefix(".") })
        let all = try granary(["backup", "--all"])
        #expect(all.status == 1, "\(all.stderr)")
        #expect(
            all.stderr.contains(
                "mallory@example.com: store Slow.sqlite failed its check: quick_check stopped at its time budget of 2s")
        )
        for user in ["alice@example.com", "zoe@example.com"] {
            #expect(
                FileSystem.contents(of: repo + "/" + user).contains { $0.hasSuffix(".tar.zst") },
                "\(user) was backed up")
        }
    }

    @Test(
        "[limits] time bounds a user's checks across its stores: 80 stores each under the budget, over it together, fail that user (65); the next user is backed up"
    )
    func userTimeAcrossStores() throws {
        // 2 s per store and per user; each store costs its check about 4 rows x 25 ms (a twentieth
        // of its budget, so that a loaded machine stays under it), eighty of them several seconds.
        // Before, each connection had a budget of its own: every store passed, and the user
        // delayed the next one by the sum.
        try Data("[limits]\ntime = \"2s\"\ntime_per_gib = \"0s\"\n".utf8).write(to: URL(fileURLWithPath: config))
        let mallory = try user("mallory@example.com")
        for index in 0..<80 {
            try Self.makeSlowStore(
                mallory + "/Slow-\(index).sqlite", index: false, wal: false, bytes: 5_000_000, rows: 4)
        }
        try SampleData.makeRollbackStore(try user("zoe@example.com") + "/Legacy.db", rows: 100)
        let one = try granary(["backup", "mallory@example.com"])
        #expect(one.status == 65, "\(one.stderr)")
        #expect(one.stderr.contains("the user's time budget of 2s for all its stores"), "\(one.stderr)")
        #expect(!one.stderr.contains("stopped at its time budget"), "a store was over its own budget: \(one.stderr)")
        let all = try granary(["backup", "--all"])
        #expect(all.status == 1, "\(all.stderr)")
        #expect(all.stderr.contains("mallory@example.com: store Slow-"), "\(all.stderr)")
        #expect(FileSystem.contents(of: repo + "/zoe@example.com").contains { $0.hasSuffix(".tar.zst") })
    }

    @Test(
        "verify, restore and inspect of an archive holding such stores stop at the budget too (65, naming the member and the limit)"
    )
    func verifyAndInspectStopAtBudget() throws {
        // check = "none" lets the backup archive them, as a store that only turned slow later would be.
        try configure("check = \"none\"")
        try Self.makeSlowStore(try user("trudy@example.com") + "/Index.sqlite", index: true, wal: true)
        try Self.makeSlowStore(try user("mallory@example.com") + "/Column.sqlite", index: false, wal: true)
        #expect(try granary(["backup", "--all"]).status == 0)
        let indexArchive = try #require(
            FileSystem.contents(of: repo + "/trudy@example.com").first { $0.hasSuffix(".tar.zst") })
        let columnArchive = try #require(
            FileSystem.contents(of: repo + "/mallory@example.com").first { $0.hasSuffix(".tar.zst") })
        let verify = try granary(["verify", "trudy@example.com/" + indexArchive])
        #expect(verify.status == 65, "\(verify.stderr)")
        #expect(
            verify.stderr.contains(
                "stores/Index.sqlite integrity_check stopped at its time budget of 2s ([limits] time, time_per_gib)"))
        #expect(verify.stderr.contains("Hint: if the store is honest, raise time or time_per_gib under [limits]"))
        let inspect = try granary(["inspect", repo + "/mallory@example.com/" + columnArchive])
        #expect(inspect.status == 65, "\(inspect.stderr)")
        #expect(inspect.stderr.contains("stores/Column.sqlite quick_check stopped at its time budget of 2s"))
        // Restore's staging check stops there too, before anything live is touched.
        let restore = try granary(["restore", "trudy@example.com"])
        #expect(restore.status == 65, "\(restore.stderr)")
        #expect(restore.stderr.contains("integrity_check stopped at its time budget of 2s"))
        // A run over both users goes on past the first and reports both.
        let both = try granary(["verify", "--all"])
        #expect(both.status == 65)
        #expect(both.stderr.contains("Index.sqlite") && both.stderr.contains("Column.sqlite"))
    }

    @Test("a store whose check needs more memory than the ceiling fails at the ceiling (65), and granary stays small")
    func memoryCeiling() throws {
        try Data("[limits]\nmemory = \"64MiB\"\n".utf8).write(to: URL(fileURLWithPath: config))
        try Self.makeSlowStore(
            try user("mallory@example.com") + "/Big.sqlite", index: false, wal: true, bytes: 150_000_000, rows: 3)
        let result = try granary(["backup", "mallory@example.com"])
        #expect(result.status == 65, "\(result.stderr)")
        #expect(
            result.stderr.contains(
                "store Big.sqlite failed its check: quick_check stopped at its memory ceiling of 64 MiB ([limits] memory)"
            ))
    }

    /// A store with private notes, an audit trigger that copies every deleted note, FTS5 over the
    /// notes, an R-tree, Alembic's version table and an app's settings table.
    static func makeNotesApp(_ path: String) throws {
        let db = try Database(path: path, mode: .create)
        try db.execute(
            """
            PRAGMA journal_mode=WAL; PRAGMA user_version=7;
            CREATE TABLE notes(id INTEGER PRIMARY KEY, title TEXT, body TEXT);
            CREATE TABLE deleted_log(note INTEGER, title TEXT, body TEXT);
            CREATE TRIGGER keep_deleted AFTER DELETE ON notes BEGIN
                INSERT INTO deleted_log VALUES (old.id, old.title, old.body);
            END;
            CREATE VIRTUAL TABLE notes_fts USING fts5(title, body, content='notes', content_rowid='id');
            CREATE TRIGGER notes_ai AFTER INSERT ON notes BEGIN
                INSERT INTO notes_fts(rowid, title, body) VALUES (new.id, new.title, new.body);
            END;
            CREATE VIRTUAL TABLE pins USING rtree(id, lat0, lat1, lon0, lon1);
            CREATE TABLE alembic_version(version_num VARCHAR(32) NOT NULL PRIMARY KEY);
            INSERT INTO alembic_version VALUES ('ae1027a6acf');
            CREATE TABLE app_settings(key TEXT PRIMARY KEY, value TEXT);
            INSERT INTO app_settings VALUES ('schema', 'v7');
            """)
        for id in 1...100 {
            try db.run(
                "INSERT INTO notes(title, body) VALUES (?, ?)",
                [.text("diary \(id)"), .text("PRIVATE-\(id) do not keep")])
            try db.run("INSERT INTO pins VALUES (?, 1, 2, 3, 4)", [.integer(Int64(id))])
        }
    }

    @Test(
        "reset empties a store with an audit trigger, FTS5 and an R-tree: no note survives, the checks pass, schema state stays; --dry-run lists it all"
    )
    func resetHostileTriggers() throws {
        try configure("[reset]\nkeep_tables = [\"app_settings\"]")
        let store = try user("alice@example.com") + "/Notes.sqlite"
        try Self.makeNotesApp(store)
        let before = try Data(contentsOf: URL(fileURLWithPath: store))
        let dry = try granary(["reset", "alice@example.com", "--dry-run"])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(
            dry.stdout.contains(
                "Notes.sqlite: empties notes (100 rows), deleted_log (0 rows), notes_fts (100 rows, virtual), pins (100 rows, virtual)"
            ))
        #expect(dry.stdout.contains("keeps alembic_version (1 row), app_settings (1 row)"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: store)) == before)
        let result = try granary(["reset", "alice@example.com", "--yes"])
        #expect(result.status == 0, "\(result.stderr)")
        let db = try Database(path: store, mode: .readWrite)
        #expect(try db.scalar("SELECT count(*) FROM notes")?.integer == 0)
        #expect(try db.scalar("SELECT count(*) FROM deleted_log")?.integer == 0, "the audit trigger refilled its log")
        #expect(try db.scalar("SELECT count(*) FROM notes_fts")?.integer == 0)
        #expect(try db.scalar("SELECT count(*) FROM pins")?.integer == 0)
        #expect(try db.scalar("SELECT version_num FROM alembic_version")?.text == "ae1027a6acf")
        #expect(try db.scalar("SELECT value FROM app_settings")?.text == "v7")
        #expect(try db.scalar("PRAGMA user_version")?.integer == 7)
        #expect(db.integrityCheck(full: true) == ["ok"])
        try db.execute("INSERT INTO notes_fts(notes_fts) VALUES('integrity-check')")
        #expect(try db.scalar("SELECT rtreecheck('pins')")?.text == "ok")
        let bytes =
            try Data(contentsOf: URL(fileURLWithPath: store))
            + ((try? Data(contentsOf: URL(fileURLWithPath: store + "-wal"))) ?? Data())
        #expect(bytes.range(of: Data("PRIVATE-".utf8)) == nil)
        // The triggers are back and work.
        try db.run("INSERT INTO notes(title, body) VALUES ('new', 'hello')")
        #expect(try db.scalar("SELECT count(*) FROM notes_fts WHERE notes_fts MATCH 'hello'")?.integer == 1)
    }

    /// How many external-data files the many-files test makes: `GRANARY_MANY_FILES` (the issue's
    /// size is 1,000,000: about 10 minutes on 2 cores), else 20,000: past the 10,000 that make an
    /// archive format 2, so `make test` goes through the same path in seconds.
    static let manyFiles = Int(ProcessInfo.processInfo.environment["GRANARY_MANY_FILES"] ?? "") ?? 20_000

    @Test("a Core Data store with very many external-data files: backup, list, verify and restore --to all work")
    func manyExternalFiles() throws {
        try configure()
        let folder = try user("photos@example.com")
        let store = folder + "/Library.sqlite"
        try SampleData.makeCoreDataStore(store, notes: 30)
        let external = folder + "/" + StoreFile.externalDataName(for: "Library.sqlite")
        let before = FileSystem.contents(of: external).count
        for n in 0..<Self.manyFiles {
            let fd = open(
                external + "/" + String(format: "%08X-0000-4000-8000-%012d", n, n),
                O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            #expect(fd >= 0)
            close(fd)
        }
        // One attachment with a mode of its own: MANIFEST.files records it, as format 1 would.
        let shared = external + "/" + String(format: "%08X-0000-4000-8000-%012d", 7, 7)
        chmod(shared, 0o640)
        let backup = try granary(["backup", "photos@example.com"])
        #expect(backup.status == 0, "\(backup.stderr)")
        let list = try granary(["list", "photos@example.com", "--json"])
        #expect(list.status == 0, "\(list.stderr)")
        let archive = try #require(
            FileSystem.contents(of: repo + "/photos@example.com").first { $0.hasSuffix(".tar.zst") })
        let manifest = try ArchiveHead(file: repo + "/photos@example.com/" + archive).manifest
        #expect(manifest.format == .fileList)
        #expect(manifest.fileList?.count == Self.manyFiles + before)
        let listed = try GranaryProcess.runExecutable(
            "/usr/bin/tar", ["--zstd", "-xOf", repo + "/photos@example.com/" + archive, Manifest.fileListName])
        let line = listed.stdout.split(separator: "\n").first { $0.hasSuffix((shared as NSString).lastPathComponent) }
        #expect(line?.split(separator: " ")[2] == "640")
        let verify = try granary(["verify", "photos@example.com/" + archive])
        #expect(verify.status == 0, "\(verify.stderr)")
        let drill = self.folder.child("photos-drill")  // outside the root: a folder there would be a user
        let restore = try granary(["restore", "photos@example.com", "--to", drill])
        #expect(restore.status == 0, "\(restore.stderr)")
        let restored = drill + "/" + StoreFile.externalDataName(for: "Library.sqlite")
        #expect(FileSystem.contents(of: restored).count == Self.manyFiles + before)
        #expect(
            try Database(path: drill + "/Library.sqlite", mode: .readOnly).scalar("SELECT count(*) FROM ZNOTE")?.integer
                == 30)
    }
}
