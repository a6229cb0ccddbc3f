import CSQLite
import Foundation
import GranaryKit
import Testing

@testable import GranaryCLI

@Suite("SQLite wrapper")
struct SQLiteWrapperTests {
    @Test("a missing file gives a cannotOpen error with SQLite's code and the path")
    func missingFile() throws {
        let folder = TemporaryFolder()
        let path = folder.child("absent.sqlite")
        let error = #expect(throws: SQLiteError.self) { try Database(path: path, mode: .readOnly) }
        #expect(error?.kind == .cannotOpen)
        #expect(error?.primaryCode == SQLITE_CANTOPEN)
        #expect(error?.path == path)
        #expect(error?.status == .notFound)
        #expect(!FileManager.default.fileExists(atPath: path), "opening read-only must not create the file")
    }

    @Test("a file that is not SQLite gives notADatabase on first use")
    func notADatabase() throws {
        let folder = TemporaryFolder()
        let path = folder.child("notes.sqlite")
        try Data(String(repeating: "plain text, not a database\n", count: 200).utf8).write(
            to: URL(fileURLWithPath: path))
        let db = try Database(path: path, mode: .readOnly)
        let error = #expect(throws: SQLiteError.self) { try db.tableNames() }
        #expect(error?.kind == .notADatabase)
        #expect(error?.primaryCode == SQLITE_NOTADB)
        #expect(error?.status == .dataError)
    }

    @Test(
        "a WAL store another connection reads: a journal-mode change as a connection's first statement fails busy, with SQLite's code (not 0)"
    )
    func busyOnFirstStatement() throws {
        let folder = TemporaryFolder()
        let path = folder.child("Local.sqlite")
        do {
            let db = try Database(path: path, mode: .create)
            try db.execute("PRAGMA journal_mode=WAL")
            try db.execute("CREATE TABLE t(x); INSERT INTO t VALUES (1)")
        }
        let changer = try Database(path: path, mode: .readWrite, busyTimeout: .milliseconds(10))
        do {
            // A reader in the middle of a read transaction (as follow's read mark is).
            let reader = try Database(path: path, mode: .readOnly)
            try reader.execute("BEGIN")
            _ = try reader.rows("SELECT count(*) FROM t")
            let error = #expect(throws: SQLiteError.self) { try changer.execute("PRAGMA journal_mode=DELETE") }
            #expect(error?.kind == .busy, "\(String(describing: error))")
            #expect(error?.primaryCode == SQLITE_BUSY || error?.primaryCode == SQLITE_LOCKED)
            try reader.execute("COMMIT")
        }
        // The reader gone, the change goes through.
        try changer.execute("PRAGMA journal_mode=DELETE")
        #expect(try changer.rows("PRAGMA journal_mode").first?[0] == .text("delete"))
    }

    @Test("a database locked by another connection gives busy, distinct from the other errors")
    func locked() throws {
        let folder = TemporaryFolder()
        let path = folder.child("Legacy.db")
        try SampleData.makeRollbackStore(path, rows: 10)
        let holder = try Database(path: path, mode: .readWrite)
        try holder.execute("BEGIN EXCLUSIVE")
        let other = try Database(path: path, mode: .readWrite, busyTimeout: .zero)
        let error = #expect(throws: SQLiteError.self) { try other.scalar("SELECT count(*) FROM items") }
        #expect(error?.kind == .busy)
        #expect(error?.status == .temporaryFailure)
        try holder.execute("COMMIT")
        #expect(try other.scalar("SELECT count(*) FROM items")?.integer == 10)
    }

    @Test("a bad statement keeps SQLite's message and names the statement")
    func badStatement() throws {
        let db = try Database(path: ":memory:", mode: .create)
        let error = #expect(throws: SQLiteError.self) { try db.execute("SELEC 1") }
        #expect(error?.message.contains("syntax error") == true)
        #expect(error?.operation == "SELEC 1")
        #expect(error?.kind == .other)
    }

    @Test("the backup API copies a WAL database whose last commits are only in the -wal")
    func backupRoundTripIncludesWALOnlyCommits() throws {
        let folder = TemporaryFolder()
        let live = folder.child("Local.sqlite")
        try SampleData.makeItemsStore(live, rows: 120, walOnlyTail: 20)
        // The main file alone has 100 rows; the last 20 exist only as frames in the -wal.
        #expect(FileSystem.size(live + "-wal") > 0)
        let copy = folder.child("copy.sqlite")
        let source = try Database(path: live, mode: .readOnly)
        let destination = try Database(path: copy, mode: .create)
        let backup = try SQLiteBackup(from: source, to: destination)
        var steps = 0
        while try backup.step(pages: 2) != .done { steps += 1 }
        #expect(backup.remaining == 0)
        #expect(steps > 1, "a two-page step loop should take several steps")
        try backup.finish()
        #expect(try destination.scalar("SELECT count(*) FROM items")?.integer == 120)
        #expect(try destination.scalar("SELECT max(id) FROM items")?.integer == 120)
        #expect(destination.integrityCheck(full: true) == ["ok"])
        // The copy is self-contained: reopened alone, without any -wal, it still has every row.
        #expect(!FileManager.default.fileExists(atPath: copy + "-wal") || FileSystem.size(copy + "-wal") == 0)
        let reopened = try Database(path: copy, mode: .readOnly)
        #expect(try reopened.scalar("SELECT count(*) FROM items")?.integer == 120)
    }

    @Test("a WAL checkpoint moves -wal content into the database file")
    func checkpoint() throws {
        let folder = TemporaryFolder()
        let live = folder.child("Local.sqlite")
        try SampleData.makeItemsStore(live, rows: 50, walOnlyTail: 10)
        let db = try Database(path: live, mode: .readWrite)
        let result = try db.checkpoint(.truncate)
        #expect(result.logFrames >= 0)
        #expect(FileSystem.size(live + "-wal") == 0)
        #expect(try db.journalMode() == "wal")
    }

    @Test("Core Data metadata is read from Z_METADATA and Z_PRIMARYKEY")
    func coreDataMetadata() throws {
        let folder = TemporaryFolder()
        let path = folder.child("Notes.sqlite")
        try SampleData.makeCoreDataStore(path, notes: 9)
        let metadata = try #require(try CoreDataMetadata.read(Database(path: path, mode: .readOnly)))
        #expect(metadata.storeUUID == "6F1C2A44-93B1-4C1E-8E0B-5A7D2C9E1F00")
        #expect(metadata.entityRowCounts == ["Folder": 3, "Note": 9])
        #expect(metadata.modelVersionHashes["Note"] == SampleData.modelHash("Note").base64EncodedString())
        #expect(metadata.modelVersionHashes.count == 2)
        let plain = folder.child("plain.sqlite")
        try SampleData.makeRollbackStore(plain, rows: 1)
        #expect(try CoreDataMetadata.read(Database(path: plain, mode: .readOnly)) == nil)
    }
}
