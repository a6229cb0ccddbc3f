import Foundation
import GranaryTestSupport
import Testing

@testable import GranaryKit

/// The read mark `follow` takes while it reads a `-wal` (``UserFollower/takeReadMark(_:)``), on
/// real stores written by a second connection: it keeps a RESTART checkpoint from restarting the
/// `-wal` until it ends, and it takes no look at the schema (a store of many tables costs what one
/// of one table does, and a schema SQLite cannot parse does not stop it).
@Suite("follow: the read mark")
struct ReadMarkTests {
    let folder = TemporaryFolder("granary-read-mark")

    func store(_ name: String, tables: Int) throws -> (path: String, writer: Database) {
        let path = folder.path + "/" + name
        let writer = try Database(path: path, mode: .create)
        try writer.execute("PRAGMA journal_mode=WAL")
        try writer.execute("PRAGMA wal_autocheckpoint=0")
        for table in 0..<tables {
            try writer.execute("CREATE TABLE t\(table)(id INTEGER PRIMARY KEY, body TEXT)")
            try writer.execute("CREATE INDEX t\(table)_body ON t\(table)(body)")
        }
        try writer.run("INSERT INTO t0(body) VALUES ('one')")
        return (path, writer)
    }

    /// (busy, frames in the -wal, frames checkpointed) of a RESTART checkpoint that does not wait.
    func restart(_ writer: Database) throws -> [Int64] {
        try writer.execute("PRAGMA busy_timeout=0")
        let row = try writer.rows("PRAGMA wal_checkpoint(RESTART)")[0]
        return (0..<3).map { row[$0].integer ?? -1 }
    }

    @Test("while it is held a RESTART checkpoint cannot restart the -wal; once it ends it can")
    func holdsTheWAL() throws {
        let (path, writer) = try store("Mark.sqlite", tables: 1)
        let reader = try Database(path: path, mode: .readOnly)
        try UserFollower.takeReadMark(reader)
        #expect(reader.schemaMemory == 0)
        try writer.run("INSERT INTO t0(body) VALUES ('two')")
        let held = try restart(writer)
        #expect(held[0] == 1, "the checkpoint was not refused while the mark was held: \(held)")
        // The frames written after the mark was taken are still in the -wal, not copied back.
        #expect(held[2] < held[1], "\(held)")
        UserFollower.releaseReadMark(reader)
        #expect(reader.schemaMemory == 0)
        let after = try restart(writer)
        #expect(after[0] == 0, "\(after)")
        #expect(after[2] == after[1], "\(after)")
    }

    @Test("a schema SQLite cannot parse does not stop the mark (the schema is not read)")
    func schemaNotParsed() throws {
        let (path, writer) = try store("Broken.sqlite", tables: 40)
        try writer.execute("PRAGMA writable_schema=ON")
        try writer.run("UPDATE sqlite_schema SET sql = 'CREATE TABLE t1(' WHERE name = 't1'")
        try writer.execute("PRAGMA writable_schema=OFF")
        // A statement that reads the schema fails on it: the mark's old statement would have.
        let other = try Database(path: path, mode: .readOnly)
        #expect(throws: SQLiteError.self) { _ = try other.scalar("SELECT count(*) FROM sqlite_schema") }
        let reader = try Database(path: path, mode: .readOnly)
        try UserFollower.takeReadMark(reader)
        #expect(reader.schemaMemory == 0, "the schema was read: \(reader.schemaMemory) bytes")
        try writer.run("INSERT INTO t0(body) VALUES ('two')")
        #expect(try restart(writer)[0] == 1)
        UserFollower.releaseReadMark(reader)
        #expect(try restart(writer)[0] == 0)
    }

    @Test("a store of many tables: the mark reads no schema, a statement that needs one does")
    func manyTables() throws {
        let (path, _) = try store("Model.sqlite", tables: 60)
        let reader = try Database(path: path, mode: .readOnly)
        try UserFollower.takeReadMark(reader)
        #expect(reader.schemaMemory == 0, "\(reader.schemaMemory) bytes of schema")
        UserFollower.releaseReadMark(reader)
        #expect(reader.schemaMemory == 0, "\(reader.schemaMemory) bytes of schema after the mark")
        // The probe sees a schema once one is read (the test could not pass by reading 0 always).
        _ = try reader.scalar("SELECT count(*) FROM t0")
        #expect(reader.schemaMemory > 60 * 100, "\(reader.schemaMemory) bytes of schema")
    }
}
