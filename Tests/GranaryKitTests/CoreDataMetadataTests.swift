import CSQLite
import Foundation
import Testing

@testable import GranaryKit

/// `CoreDataMetadata`: entity row counts in one pass per entity table.
@Suite("Core Data entity counts")
struct CoreDataMetadataTests {
    /// 20,000 entities and 20,000 rows: 10,000 root entities `E1…E10000`, each in its own table
    /// `ZE<n>` with one row (E1: 10,000 of its own), and 10,000 sub-entities `S1…S10000` of `E1`,
    /// which share its table `ZE1`, one row each.
    static func makeManyEntities(_ path: String) throws {
        let db = try Database(path: path, mode: .create)
        try db.execute("PRAGMA journal_mode=WAL")
        try db.execute(
            """
            CREATE TABLE Z_PRIMARYKEY (Z_ENT INTEGER PRIMARY KEY, Z_NAME VARCHAR, Z_SUPER INTEGER, Z_MAX INTEGER);
            CREATE TABLE Z_METADATA (Z_VERSION INTEGER PRIMARY KEY, Z_UUID VARCHAR(255), Z_PLIST BLOB);
            INSERT INTO Z_METADATA VALUES (1, 'UUID-1', NULL);
            """)
        try db.execute("BEGIN")
        for n in 1...10_000 {
            try db.execute("CREATE TABLE ZE\(n) (Z_PK INTEGER PRIMARY KEY, Z_ENT INTEGER, Z_OPT INTEGER)")
            try db.run("INSERT INTO Z_PRIMARYKEY VALUES (?, ?, 0, 0)", [.integer(Int64(n)), .text("E\(n)")])
            try db.run("INSERT INTO Z_PRIMARYKEY VALUES (?, ?, 1, 0)", [.integer(Int64(10_000 + n)), .text("S\(n)")])
            try db.run("INSERT INTO ZE1 (Z_ENT, Z_OPT) VALUES (?, 1)", [.integer(Int64(10_000 + n))])
            if n > 1 { try db.run("INSERT INTO ZE\(n) (Z_ENT, Z_OPT) VALUES (?, 1)", [.integer(Int64(n))]) }
        }
        for _ in 1...10_000 { try db.execute("INSERT INTO ZE1 (Z_ENT, Z_OPT) VALUES (1, 1)") }
        try db.execute("COMMIT")
    }

    @Test("20,000 entities: sub-entities are counted in their root's table, each table is read once, the schema once")
    func manyEntitiesOnePass() throws {
        let folder = TemporaryFolder()
        let path = folder.child("Many.sqlite")
        try Self.makeManyEntities(path)
        let db = try Database(path: path, mode: .readOnly)
        let trace = StatementTrace()
        let context = Unmanaged.passUnretained(trace).toOpaque()
        sqlite3_trace_v2(
            db.handle, UInt32(SQLITE_TRACE_STMT),
            { _, context, statement, _ in
                let trace = Unmanaged<StatementTrace>.fromOpaque(context!).takeUnretainedValue()
                if let sql = sqlite3_sql(OpaquePointer(statement)) { trace.statements.append(String(cString: sql)) }
                return 0
            }, context)
        let counts = try #require(try CoreDataMetadata.read(db)?.entityRowCounts)
        #expect(counts.count == 20_000)
        #expect(counts["E1"] == 10_000)
        #expect(counts["E2"] == 1 && counts["E10000"] == 1)
        #expect((1...10_000).allSatisfy { counts["S\($0)"] == 1 })
        #expect(counts.values.reduce(0, +) == 29_999)
        // One GROUP BY per table: ZE1 holds 10,001 entities and is read once, not 10,001 times.
        #expect(trace.statements.filter { $0.contains("FROM \"ZE1\" ") }.count == 1)
        #expect(trace.statements.filter { $0.contains("GROUP BY Z_ENT") }.count == 10_000)
        // The table names come from one read of sqlite_schema, not one per entity.
        #expect(trace.statements.filter { $0.contains("sqlite_schema") }.count == 1)
        #expect(trace.statements.count < 10_010)
    }

    @Test("a Z_SUPER cycle, a missing table and a table without Z_ENT give zero rows, not a hang or a failure")
    func oddMetadata() throws {
        let folder = TemporaryFolder()
        let path = folder.child("Odd.sqlite")
        let db = try Database(path: path, mode: .create)
        try db.execute(
            """
            CREATE TABLE Z_PRIMARYKEY (Z_ENT INTEGER PRIMARY KEY, Z_NAME VARCHAR, Z_SUPER INTEGER, Z_MAX INTEGER);
            CREATE TABLE Z_METADATA (Z_VERSION INTEGER PRIMARY KEY, Z_UUID VARCHAR(255), Z_PLIST BLOB);
            INSERT INTO Z_PRIMARYKEY VALUES (1, 'A', 2, 0), (2, 'B', 1, 0), (3, 'Gone', 0, 0), (4, 'Plain', 0, 0);
            CREATE TABLE ZA (Z_PK INTEGER PRIMARY KEY, Z_ENT INTEGER);
            CREATE TABLE ZB (Z_PK INTEGER PRIMARY KEY, Z_ENT INTEGER);
            INSERT INTO ZA VALUES (1, 1), (2, 2); INSERT INTO ZB VALUES (1, 2);
            CREATE TABLE ZPLAIN (Z_PK INTEGER PRIMARY KEY, name TEXT);
            INSERT INTO ZPLAIN VALUES (1, 'x');
            """)
        let counts = try #require(try CoreDataMetadata.read(db)?.entityRowCounts)
        #expect(counts["Gone"] == 0)
        #expect(counts["Plain"] == 0)
        #expect(Set(counts.keys) == ["A", "B", "Gone", "Plain"])
        // A and B are each other's parent: the walk stops, and both are counted in one table.
        #expect(counts["A"]! + counts["B"]! >= 1)
    }

    private final class StatementTrace { var statements: [String] = [] }
}
