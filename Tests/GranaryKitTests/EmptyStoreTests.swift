import CSQLite
import Foundation
import GranaryKit
import Testing

@testable import GranaryCLI

/// `EmptyStore`: the new, empty database `granary reset` builds from a store's schema.
@Suite("reset builds an empty store from the schema")
struct EmptyStoreTests {
    /// A store with private notes, an audit trigger, FTS5 over the notes and an R-tree.
    static func makeNotesStore(_ path: String, wal: Bool) throws {
        let db = try Database(path: path, mode: .create)
        if wal { try db.execute("PRAGMA journal_mode=WAL") }
        try db.execute(
            """
            CREATE TABLE notes(id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL, body TEXT);
            CREATE TABLE deleted_log(id INTEGER PRIMARY KEY, note INTEGER, title TEXT, at TEXT);
            CREATE TRIGGER audit AFTER DELETE ON notes BEGIN
                INSERT INTO deleted_log(note, title, at) VALUES (old.id, old.title, 'now');
            END;
            CREATE VIRTUAL TABLE notes_fts USING fts5(title, body);
            CREATE TRIGGER notes_ai AFTER INSERT ON notes BEGIN
                INSERT INTO notes_fts(rowid, title, body) VALUES (new.id, new.title, new.body);
            END;
            CREATE VIRTUAL TABLE places USING rtree(id, minX, maxX, minY, maxY);
            CREATE INDEX notes_title ON notes(lower(title));
            CREATE VIEW recent AS SELECT id, title FROM notes ORDER BY id DESC LIMIT 10;
            """)
        try db.execute("BEGIN")
        for id in 1...200 {
            try db.run(
                "INSERT INTO notes(title, body) VALUES (?, ?)",
                [.text("private note \(id)"), .text("SECRET-BODY-\(id) diary")])
            try db.run(
                "INSERT INTO places VALUES (?, ?, ?, ?, ?)",
                [.integer(Int64(id)), .real(0), .real(Double(id)), .real(0), .real(1)])
        }
        try db.execute("COMMIT")
        // Some history in the audit log and in sqlite_sequence, as a used store has.
        try db.execute("DELETE FROM notes WHERE id > 190")
    }

    static func count(_ db: Database, _ table: String) throws -> Int64 {
        try db.scalar("SELECT count(*) FROM \(table)")?.integer ?? -1
    }

    @Test(
        "an audit trigger does not refill the emptied table: no note survives, and the trigger still works after",
        arguments: [true, false])
    func auditTriggerDoesNotFire(wal: Bool) throws {
        let folder = TemporaryFolder()
        let live = folder.child("Notes.sqlite")
        try Self.makeNotesStore(live, wal: wal)
        let source = try Database(path: live, mode: .readOnly)
        #expect(try Self.count(source, "deleted_log") == 10)
        let copy = folder.child("empty.sqlite")
        let plan = try EmptyStore.build(from: source, into: copy, keep: [])
        #expect(Set(plan.emptied.map(\.name)) == ["notes", "deleted_log", "notes_fts", "places"])
        #expect(plan.kept.isEmpty)
        let result = try Database(path: copy, mode: .readWrite)
        for table in ["notes", "deleted_log", "notes_fts", "places"] {
            #expect(try Self.count(result, table) == 0, "\(table)")
        }
        // Nothing of the notes is left in the file, in free pages or anywhere else.
        let bytes =
            try Data(contentsOf: URL(fileURLWithPath: copy))
            + ((try? Data(contentsOf: URL(fileURLWithPath: copy + "-wal"))) ?? Data())
        #expect(bytes.range(of: Data("SECRET-BODY".utf8)) == nil)
        #expect(bytes.range(of: Data("private note".utf8)) == nil)
        // The schema is all there and alive: the triggers fire on new rows, the index and view work.
        try result.run("INSERT INTO notes(title, body) VALUES ('new', 'fresh text')")
        #expect(
            try result.scalar("SELECT id FROM notes")?.integer == 1, "an emptied AUTOINCREMENT table starts again at 1")
        #expect(try result.scalar("SELECT count(*) FROM notes_fts WHERE notes_fts MATCH 'fresh'")?.integer == 1)
        try result.execute("DELETE FROM notes")
        #expect(try Self.count(result, "deleted_log") == 1)
        #expect(try result.scalar("SELECT count(*) FROM recent")?.integer == 0)
        #expect(try result.scalar("PRAGMA journal_mode")?.text == (wal ? "wal" : "delete"))
    }

    @Test(
        "FTS5, FTS4 and R-tree tables come back empty and pass their own checks; deleting every table's rows breaks the R-tree"
    )
    func virtualTablesRecreated() throws {
        let folder = TemporaryFolder()
        let live = folder.child("Search.sqlite")
        let db = try Database(path: live, mode: .create)
        try db.execute(
            """
            PRAGMA journal_mode=WAL;
            CREATE TABLE docs(id INTEGER PRIMARY KEY, text TEXT);
            CREATE VIRTUAL TABLE docs_ext USING fts5(text, content='docs', content_rowid='id');
            CREATE VIRTUAL TABLE legacy USING fts4(text);
            CREATE VIRTUAL TABLE contentless USING fts5(text, content='');
            CREATE VIRTUAL TABLE boxes USING rtree_i32(id, x0, x1);
            """)
        for id in 1...50 {
            try db.run("INSERT INTO docs VALUES (?, ?)", [.integer(Int64(id)), .text("word\(id) common")])
            try db.run("INSERT INTO legacy(text) VALUES (?)", [.text("legacy \(id)")])
            try db.run(
                "INSERT INTO contentless(rowid, text) VALUES (?, ?)", [.integer(Int64(id)), .text("gone \(id)")])
            try db.run("INSERT INTO boxes VALUES (?, 0, ?)", [.integer(Int64(id)), .integer(Int64(id))])
        }
        try db.execute("INSERT INTO docs_ext(docs_ext) VALUES('rebuild')")
        let copy = folder.child("empty.sqlite")
        try EmptyStore.build(from: try Database(path: live, mode: .readOnly), into: copy, keep: [])
        let result = try Database(path: copy, mode: .readWrite)
        #expect(result.integrityCheck(full: true) == ["ok"])
        for table in ["docs", "legacy", "boxes", "docs_ext", "contentless"] {
            #expect(try Self.count(result, table) == 0, "\(table)")
        }
        try result.execute("INSERT INTO docs_ext(docs_ext) VALUES('integrity-check')")
        try result.execute("INSERT INTO contentless(contentless) VALUES('integrity-check')")
        try result.execute("INSERT INTO legacy(legacy) VALUES('integrity-check')")
        #expect(try result.scalar("SELECT rtreecheck('boxes')")?.text == "ok")
        // What the old reset did, on a copy: deleting the rows of every table, shadow tables
        // included, leaves the R-tree without its root node.
        let deleted = folder.child("deleted.sqlite")
        try FileManager.default.copyItem(atPath: live, toPath: deleted)
        if FileSystem.isRegularFile(live + "-wal") {
            try FileManager.default.copyItem(atPath: live + "-wal", toPath: deleted + "-wal")
        }
        let old = try Database(path: deleted, mode: .readWrite)
        for table in try old.tableNames() { try? old.execute("DELETE FROM \"\(table)\"") }
        var broken = false
        do { broken = try old.scalar("SELECT rtreecheck('boxes')")?.text != "ok" } catch { broken = true }
        #expect(broken)
    }

    @Test("page size, auto-vacuum, text encoding, user_version, application_id and journal mode carry over")
    func headerFields() throws {
        let folder = TemporaryFolder()
        let live = folder.child("App.db")
        let db = try Database(path: live, mode: .create)
        try db.execute(
            """
            PRAGMA page_size=8192; PRAGMA auto_vacuum=INCREMENTAL; PRAGMA encoding='UTF-16le';
            CREATE TABLE t(a TEXT); INSERT INTO t VALUES ('x');
            PRAGMA user_version=42; PRAGMA application_id=1196575321; PRAGMA journal_mode=WAL;
            """)
        let copy = folder.child("empty.db")
        let plan = try EmptyStore.build(from: try Database(path: live, mode: .readOnly), into: copy, keep: [])
        #expect(plan.header.pageSize == 8192)
        let result = try Database(path: copy, mode: .readOnly)
        #expect(try result.pageSize() == 8192)
        #expect(try result.scalar("PRAGMA auto_vacuum")?.integer == 2)
        #expect(try result.scalar("PRAGMA encoding")?.text == "UTF-16le")
        #expect(try result.scalar("PRAGMA user_version")?.integer == 42)
        #expect(try result.scalar("PRAGMA application_id")?.integer == 1_196_575_321)
        #expect(try result.journalMode() == "wal")
        #expect(StoreHeader.read(copy)?.isWAL == true)
    }

    @Test(
        "schema-state tables keep their rows, Z_MAX goes back to 0, configured tables are kept, sqlite_sequence keeps only kept tables' counters"
    )
    func keptTables() throws {
        let folder = TemporaryFolder()
        let live = folder.child("Notes.sqlite")
        try SampleData.makeCoreDataStore(live, notes: 30)
        let db = try Database(path: live, mode: .readWrite)
        try db.execute(
            """
            CREATE TABLE alembic_version(version_num VARCHAR(32) NOT NULL PRIMARY KEY);
            INSERT INTO alembic_version VALUES ('3f2a9c');
            CREATE TABLE schema_migrations(version VARCHAR NOT NULL PRIMARY KEY);
            INSERT INTO schema_migrations VALUES ('20240101000000'), ('20240202000000');
            CREATE TABLE django_migrations(id INTEGER PRIMARY KEY AUTOINCREMENT, app TEXT, name TEXT, applied TEXT);
            INSERT INTO django_migrations(app, name, applied) VALUES ('notes', '0001_initial', 'x'), ('notes', '0002', 'y');
            CREATE TABLE "__EFMigrationsHistory"("MigrationId" TEXT PRIMARY KEY, "ProductVersion" TEXT) WITHOUT ROWID;
            INSERT INTO "__EFMigrationsHistory" VALUES ('20240101_Init', '8.0.0');
            CREATE TABLE grdb_migrations(identifier TEXT NOT NULL PRIMARY KEY);
            INSERT INTO grdb_migrations VALUES ('v1'), ('v2');
            CREATE TABLE App_Settings(k TEXT, v TEXT, size INTEGER AS (length(v)) STORED);
            INSERT INTO App_Settings(k, v) VALUES ('theme', 'dark');
            CREATE TABLE events(id INTEGER PRIMARY KEY AUTOINCREMENT, what TEXT);
            INSERT INTO events(what) VALUES ('a'), ('b'), ('c');
            CREATE TRIGGER settings_log AFTER INSERT ON App_Settings BEGIN INSERT INTO events(what) VALUES ('setting'); END;
            """)
        let source = try Database(path: live, mode: .readOnly)
        let copy = folder.child("empty.sqlite")
        let plan = try EmptyStore.build(from: source, into: copy, keep: EmptyStore.schemaStateTables + ["app_settings"])
        #expect(
            Set(plan.kept.map(\.name))
                == [
                    "Z_METADATA", "Z_PRIMARYKEY", "Z_MODELCACHE", "alembic_version", "schema_migrations",
                    "django_migrations",
                    "__EFMigrationsHistory", "grdb_migrations", "App_Settings",
                ])
        #expect(Set(plan.emptied.map(\.name)) == ["ZFOLDER", "ZNOTE", "events"])
        let result = try Database(path: copy, mode: .readOnly)
        for table in ["ZNOTE", "ZFOLDER", "events"] { #expect(try Self.count(result, table) == 0) }
        for table in [
            "Z_METADATA", "Z_PRIMARYKEY", "alembic_version", "schema_migrations", "django_migrations",
            "\"__EFMigrationsHistory\"", "grdb_migrations", "App_Settings",
        ] {
            #expect(try Self.count(result, table) == (try Self.count(source, table)), "\(table)")
        }
        #expect(try result.rows("SELECT Z_MAX FROM Z_PRIMARYKEY").allSatisfy { $0[0].integer == 0 })
        #expect(
            try result.scalar("SELECT Z_PLIST FROM Z_METADATA") == (try source.scalar("SELECT Z_PLIST FROM Z_METADATA"))
        )
        #expect(
            try result.scalar("SELECT size FROM App_Settings")?.integer == 4, "a generated column is computed again")
        #expect(
            try result.rows("SELECT name, seq FROM sqlite_sequence").map { $0[0].text ?? "" } == ["django_migrations"])
        #expect(try result.scalar("SELECT seq FROM sqlite_sequence")?.integer == 2)
        #expect(
            try CoreDataMetadata.read(result)?.modelVersionHashes
                == (try CoreDataMetadata.read(source)?.modelVersionHashes))
        // The trigger on a kept table did not fire while its rows were copied.
        #expect(try Self.count(result, "events") == 0)
        let dry = try EmptyStore.plan(of: source, keep: EmptyStore.schemaStateTables + ["app_settings"])
        #expect(dry.emptied.first { $0.name == "ZNOTE" }?.rows == 30)
        #expect(dry.kept.first { $0.name == "django_migrations" }?.rows == 2)
        #expect(dry.countersReset == ["Z_PRIMARYKEY.Z_MAX", "sqlite_sequence(events)"])
    }

    @Test(
        "every schema object comes back: views on views, expression and partial indexes, generated columns, WITHOUT ROWID, STRICT"
    )
    func schemaComesBack() throws {
        let folder = TemporaryFolder()
        let live = folder.child("Shapes.db")
        let db = try Database(path: live, mode: .create)
        try db.execute(
            """
            CREATE TABLE a(id INTEGER PRIMARY KEY, x TEXT UNIQUE, y REAL CHECK (y >= 0), z AS (x || '!') VIRTUAL);
            CREATE TABLE b(k TEXT PRIMARY KEY, a INTEGER REFERENCES a(id)) WITHOUT ROWID;
            CREATE TABLE c(n INTEGER NOT NULL, t TEXT) STRICT;
            CREATE VIEW v1 AS SELECT * FROM v2;
            CREATE VIEW v2 AS SELECT id, x FROM a;
            CREATE INDEX a_expr ON a(upper(x), y * 2);
            CREATE INDEX c_partial ON c(t) WHERE n > 10;
            CREATE TRIGGER b_guard BEFORE INSERT ON b WHEN new.k = '' BEGIN SELECT RAISE(ABORT, 'empty'); END;
            INSERT INTO a(x, y) VALUES ('p', 1), ('q', 2);
            INSERT INTO b VALUES ('one', 1);
            INSERT INTO c VALUES (11, 'eleven');
            ANALYZE;
            """)
        // Views in reverse order of what they need: v1 was created before v2 (SQLite allows it).
        let copy = folder.child("empty.db")
        let source = try Database(path: live, mode: .readOnly)
        let plan = try EmptyStore.build(from: source, into: copy, keep: [])
        #expect(plan.dropped == ["sqlite_stat1"])
        let schema = "SELECT type, name, sql FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
        let result = try Database(path: copy, mode: .readWrite)
        #expect(try result.rows(schema).map(\.values) == (try source.rows(schema).map(\.values)))
        #expect(try result.hasTable("sqlite_stat1") == false)
        try result.execute("INSERT INTO a(x, y) VALUES ('r', 3)")
        #expect(try result.scalar("SELECT x FROM v1")?.text == "r")
        #expect(throws: SQLiteError.self) { try result.execute("INSERT INTO b VALUES ('', 1)") }
    }

    @Test("a schema entry hiding a second statement behind the first is refused, and the second never runs")
    func hiddenStatementRefused() throws {
        let folder = TemporaryFolder()
        let live = folder.child("Evil.db")
        let attached = folder.child("written-by-root.db")
        let db = try Database(path: live, mode: .create)
        try db.execute("CREATE TABLE t(a); INSERT INTO t VALUES (1)")
        // Only the store's author could write this (PRAGMA writable_schema): SQLite reads the
        // first statement and ignores the rest, so the store opens and works as usual.
        try db.execute("PRAGMA writable_schema=ON")
        try db.run(
            "UPDATE sqlite_schema SET sql = sql || ?  WHERE name = 't'",
            [.text("; ATTACH '\(attached)' AS x; CREATE TABLE x.owned(a)")])
        try db.execute("PRAGMA writable_schema=OFF")
        let source = try Database(path: live, mode: .readOnly)
        #expect(try source.scalar("SELECT a FROM t")?.integer == 1)
        let error = #expect(throws: EmptyStoreError.self) {
            try EmptyStore.build(from: source, into: folder.child("empty.db"), keep: [])
        }
        #expect(error?.description.contains("holds more than one statement") == true)
        #expect(error?.status == .dataError)
        #expect(!FileManager.default.fileExists(atPath: attached))
    }

    @Test("a virtual table of a module reset cannot rebuild is refused, naming the table and the module")
    func unknownModuleRefused() throws {
        let folder = TemporaryFolder()
        let live = folder.child("Odd.db")
        let db = try Database(path: live, mode: .create)
        try db.execute("CREATE TABLE t(a)")
        try db.execute("PRAGMA writable_schema=ON")
        try db.run(
            "INSERT INTO sqlite_schema VALUES ('table', 'remote', 'remote', 0, ?)",
            [.text("CREATE VIRTUAL TABLE remote USING csvfile('/etc/shadow')")])
        try db.execute("PRAGMA writable_schema=OFF")
        let error = #expect(throws: EmptyStoreError.self) {
            try EmptyStore.build(
                from: try Database(path: live, mode: .readOnly), into: folder.child("empty.db"), keep: [])
        }
        #expect(error?.description.contains("\"remote\" of module csvfile") == true)
    }

    @Test("the module of a CREATE VIRTUAL TABLE is read past quotes, comments and IF NOT EXISTS")
    func moduleNames() throws {
        let folder = TemporaryFolder()
        let live = folder.child("Names.db")
        let db = try Database(path: live, mode: .create)
        try db.execute(
            """
            CREATE VIRTUAL TABLE IF NOT EXISTS "using fts5" USING fts5(a);
            CREATE VIRTUAL TABLE [x y] /* using rtree */ USING rtree(id, a, b);
            CREATE VIRTUAL TABLE `z``q` -- using
              USING fts4(t);
            """)
        let copy = folder.child("empty.db")
        let plan = try EmptyStore.build(from: try Database(path: live, mode: .readOnly), into: copy, keep: [])
        #expect(Set(plan.emptied.filter(\.virtual).map(\.name)) == ["using fts5", "x y", "z`q"])
    }
}
