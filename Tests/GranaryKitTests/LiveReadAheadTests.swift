import CSQLite
import CSnapshotTee
import Foundation
import GranaryTestSupport
import Testing

@testable import GranaryKit

/// The tee's live read-ahead (job 7), with pages taken in place from its blocks: a real WAL
/// store, read through the tee by a read-only connection in one read transaction while another
/// connection commits and checkpoints, against SQLite's own reads of the same state.
@Suite("live read-ahead")
struct LiveReadAheadTests {
    static let rows = 20_000

    /// A WAL store of about 5 MiB (far more than the tee's 1 MiB of blocks): a table with an
    /// index, every row's body its id written with 200 digits.
    static func store(in folder: TemporaryFolder) throws -> String {
        let path = folder.child("live.db")
        let db = try Database(path: path, mode: .create)
        try db.execute(
            """
            PRAGMA page_size=4096; PRAGMA journal_mode=WAL;
            CREATE TABLE t(id INTEGER PRIMARY KEY, body TEXT NOT NULL);
            CREATE INDEX t_body ON t(body);
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < \(rows)) INSERT INTO t SELECT i, printf('%0200d', i) FROM n;
            PRAGMA wal_checkpoint(TRUNCATE);
            """)
        return path
    }

    /// A read-only connection through the tee, pages in place on, in a read transaction with
    /// the live read-ahead on.
    static func reader(_ path: String) throws -> Database {
        #expect(granary_tee_register() == SQLITE_OK)
        let db = try Database(path: path, mode: .readOnly, vfs: "granary-tee")
        try db.execute(Snapshotter.pagesInPlace)
        try db.execute("BEGIN")
        _ = try db.pageCount()
        var on: Int32 = 1
        #expect(sqlite3_file_control(db.handle, "main", SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &on) == SQLITE_OK)
        return db
    }

    static func fetched(_ db: Database) -> Int64 {
        var count: Int64 = 0
        #expect(sqlite3_file_control(db.handle, "main", SNAPSHOT_TEE_FCNTL_FETCHED, &count) == SQLITE_OK)
        return count
    }

    /// Whether this SQLite maps at all (a build with SQLITE_MAX_MMAP_SIZE=0 keeps mmap_size at 0
    /// and never asks for a page in place).
    static func sqliteMaps(_ path: String) throws -> Bool {
        let plain = try Database(path: path, mode: .readOnly)
        try plain.execute("PRAGMA mmap_size=1048576")
        return try plain.scalar("PRAGMA mmap_size")?.integer ?? 0 > 0
    }

    static let answer = "SELECT count(*) || ':' || sum(length(body)) || ':' || total(substr(body, 190) + 0) FROM t"

    @Test(
        "live read-ahead is refused (SQLITE_MISUSE) outside a read transaction, the tee's check of its caller's promise, and taken inside one"
    )
    func onlyInsideAReadTransaction() throws {
        let folder = TemporaryFolder()
        let path = try Self.store(in: folder)
        #expect(granary_tee_register() == SQLITE_OK)
        let db = try Database(path: path, mode: .readOnly, vfs: "granary-tee")
        var on: Int32 = 1
        var off: Int32 = 0
        // No transaction yet: no read mark, nothing the blocks may stand for.
        #expect(sqlite3_file_control(db.handle, "main", SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &on) == SQLITE_MISUSE)
        // BEGIN alone takes no read mark; the first read does.
        try db.execute("BEGIN")
        #expect(sqlite3_file_control(db.handle, "main", SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &on) == SQLITE_MISUSE)
        _ = try db.pageCount()
        #expect(sqlite3_file_control(db.handle, "main", SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &on) == SQLITE_OK)
        #expect(try db.scalar("SELECT count(*) FROM t")?.integer == Int64(Self.rows))
        #expect(sqlite3_file_control(db.handle, "main", SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &off) == SQLITE_OK)
        try db.execute("COMMIT")
        // The transaction ended, its read mark with it.
        #expect(sqlite3_file_control(db.handle, "main", SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &on) == SQLITE_MISUSE)
    }

    @Test(
        "pages in place from the blocks give the state the transaction began on, while a writer commits and checkpoints"
    )
    func stateUnderCheckpoints() throws {
        let folder = TemporaryFolder()
        let path = try Self.store(in: folder)
        let writer = try Database(path: path, mode: .readWrite)
        // A commit the reader's state holds, left in the WAL.
        try writer.execute("UPDATE t SET body = printf('%0200d', id * 7) WHERE id % 3 = 0")
        let expected = try Database(path: path, mode: .readOnly).scalar(Self.answer)?.text
        let reader = try Self.reader(path)
        #expect(try reader.scalar("SELECT body FROM t WHERE id = 3")?.text == String(repeating: "0", count: 198) + "21")
        // Meanwhile: the reader's commit is checkpointed into the database file (pages the reader
        // takes from the WAL), and more commits that the reader must not see.
        for round in 1...3 {
            try writer.execute("UPDATE t SET body = printf('%0200d', id + \(round)) WHERE id % 5 = \(round)")
            try writer.execute("PRAGMA wal_checkpoint(PASSIVE)")
            #expect(try reader.scalar(Self.answer)?.text == expected)
        }
        #expect(try reader.scalar(Self.answer)?.text == expected)
        #expect(reader.integrityCheck(full: false) == ["ok"])
        #expect(reader.integrityCheck(full: true) == ["ok"])
        if try Self.sqliteMaps(path) {
            let pages = Int64(try reader.pageCount())
            #expect(Self.fetched(reader) > 3 * pages, "pages were taken in place: \(Self.fetched(reader))")
        } else {
            #expect(Self.fetched(reader) == 0)
        }
        var off: Int32 = 0
        #expect(sqlite3_file_control(reader.handle, "main", SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &off) == SQLITE_OK)
        try reader.execute("COMMIT")
        // After the transaction, the writer's newest state.
        #expect(try reader.scalar(Self.answer)?.text == Database(path: path, mode: .readOnly).scalar(Self.answer)?.text)
        #expect(try reader.scalar(Self.answer)?.text != expected)
    }

    @Test(
        "the blocks never serve a later read transaction: turned off and on again, or left on as the transaction ends",
        arguments: [true, false])
    func nextTransaction(turnedOff: Bool) throws {
        let folder = TemporaryFolder()
        let path = try Self.store(in: folder)
        let reader = try Self.reader(path)
        let before = try reader.scalar(Self.answer)?.text
        var off: Int32 = 0
        if turnedOff {
            #expect(sqlite3_file_control(reader.handle, "main", SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &off) == SQLITE_OK)
        }
        try reader.execute("COMMIT")
        // Every row rewritten and checkpointed into the database file: the blocks' bytes are stale.
        let writer = try Database(path: path, mode: .readWrite)
        try writer.execute("UPDATE t SET body = printf('%0200d', id * 3)")
        try writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        let after = try Database(path: path, mode: .readOnly).scalar(Self.answer)?.text
        #expect(after != before)
        if turnedOff {
            try reader.execute("BEGIN")
            _ = try reader.pageCount()
            var on: Int32 = 1
            #expect(sqlite3_file_control(reader.handle, "main", SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &on) == SQLITE_OK)
            #expect(try reader.scalar(Self.answer)?.text == after)
            #expect(reader.integrityCheck(full: false) == ["ok"])
            #expect(sqlite3_file_control(reader.handle, "main", SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &off) == SQLITE_OK)
            try reader.execute("COMMIT")
        } else {
            // Left on: the transaction's end (its read mark released) ended the serving.
            let fetched = Self.fetched(reader)
            #expect(try reader.scalar(Self.answer)?.text == after)
            #expect(reader.integrityCheck(full: false) == ["ok"])
            #expect(Self.fetched(reader) == fetched, "no page in place once the transaction ended")
        }
    }

    @Test(
        "a block SQLite holds a page of is not read over: cursors all over the file keep their pages while others come and go"
    )
    func heldBlocks() throws {
        let folder = TemporaryFolder()
        let path = try Self.store(in: folder)
        let reader = try Self.reader(path)
        // 24 cursors (more than the tee's 16 blocks), each on a leaf page at least 64 KiB from
        // the next one's: each holds a page of its own block, or reads through xRead when every
        // block is held.
        let ids = stride(from: 1, to: Self.rows - 2, by: Self.rows / 24).map { $0 }
        #expect(ids.count >= 24)
        var cursors: [Statement] = []
        for id in ids {
            let cursor = try reader.prepare("SELECT id, body FROM t WHERE id >= ?1 ORDER BY id")
            try cursor.bind([.integer(Int64(id))])
            let row = try #require(try cursor.step())
            #expect(row[0].integer == Int64(id))
            cursors.append(cursor)
        }
        // A full scan in between, through whatever blocks are left.
        #expect(try reader.scalar("SELECT count(*) FROM t")?.integer == Int64(Self.rows))
        // Each cursor's next rows come from the page it holds.
        for (cursor, id) in zip(cursors, ids) {
            for next in 1...3 {
                let row = try #require(try cursor.step())
                #expect(row[0].integer == Int64(id + next))
                #expect(row[1].text == String(format: "%0200d", id + next))
            }
        }
        // Turned off while the cursors still hold pages: it says so, and what they hold stays.
        var off: Int32 = 0
        if try Self.sqliteMaps(path) {
            #expect(Self.fetched(reader) > 0)
            #expect(sqlite3_file_control(reader.handle, "main", SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &off) == SQLITE_BUSY)
            // Nothing is served any more: a scan reads every page through xRead.
            let fetched = Self.fetched(reader)
            #expect(try reader.scalar("SELECT count(*) FROM t")?.integer == Int64(Self.rows))
            #expect(Self.fetched(reader) == fetched)
            var on: Int32 = 1
            #expect(
                sqlite3_file_control(reader.handle, "main", SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &on) == SQLITE_BUSY,
                "not on again before the held pages are released")
        }
        for (cursor, id) in zip(cursors, ids) {
            let row = try #require(try cursor.step())
            #expect(row[1].text == String(format: "%0200d", id + 4))
        }
        cursors.removeAll()
        // Every page released: the blocks are gone, and the read-ahead can start again.
        #expect(sqlite3_file_control(reader.handle, "main", SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &off) == SQLITE_OK)
        var on: Int32 = 1
        #expect(sqlite3_file_control(reader.handle, "main", SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &on) == SQLITE_OK)
        #expect(try reader.scalar(Self.answer)?.text == Database(path: path, mode: .readOnly).scalar(Self.answer)?.text)
        #expect(sqlite3_file_control(reader.handle, "main", SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &off) == SQLITE_OK)
        try reader.execute("COMMIT")
    }
}
