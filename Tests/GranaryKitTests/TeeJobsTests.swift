import CSQLite
import CSnapshotTee
import Foundation
import GranaryTestSupport
import Testing

@testable import GranaryKit

/// The `granary-tee` VFS gives each job its own methods table and lets a file move between jobs
/// only as its list of moves says: which jobs exclude which is checked in one place, and a file
/// control that asks for another move is refused (SQLITE_MISUSE) with the file as it was. Real
/// database files, each opened through the tee.
@Suite("tee jobs")
struct TeeJobsTests {
    let folder = TemporaryFolder()

    func open(_ name: String) throws -> Database {
        #expect(granary_tee_register() == SQLITE_OK)
        return try Database(path: folder.child(name), mode: .create, vfs: "granary-tee")
    }

    static func control(_ db: Database, _ op: Int32, _ arg: UnsafeMutableRawPointer?) -> Int32 {
        sqlite3_file_control(db.handle, "main", op, arg)
    }

    /// A table of some 200 pages written through `db`, read back.
    static func fill(_ db: Database) throws -> Int64? {
        try db.execute(
            """
            PRAGMA page_size=4096; PRAGMA journal_mode=OFF;
            CREATE TABLE t(id INTEGER PRIMARY KEY, body BLOB);
            WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 400)
            INSERT INTO t(body) SELECT zeroblob(2000) FROM c;
            """)
        return try db.scalar("SELECT count(*) FROM t")?.integer
    }

    @Test("gathering (a track, or a file's own) excludes discarding, the read-aheads and a second track")
    func gatheringExcludes() throws {
        // The track outlives the connection (closing the file reads it): made first, freed last.
        let track = OverlappedPackTests.newTrack()
        defer { track.deallocate() }
        let db = try open("gathered.sqlite")
        #expect(Self.control(db, SNAPSHOT_TEE_FCNTL_TRACK, track) == SQLITE_OK)
        var page: Int64 = 4096
        var on: Int32 = 1
        #expect(Self.control(db, SNAPSHOT_TEE_FCNTL_TRACK, track) == SQLITE_MISUSE)
        #expect(Self.control(db, SNAPSHOT_TEE_FCNTL_COMBINE, &page) == SQLITE_MISUSE)
        #expect(Self.control(db, SNAPSHOT_TEE_FCNTL_DISCARD, &page) == SQLITE_MISUSE)
        #expect(Self.control(db, SNAPSHOT_TEE_FCNTL_READAHEAD, nil) == SQLITE_MISUSE)
        #expect(Self.control(db, SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &on) == SQLITE_MISUSE)
        // The hook comes before gathering starts, never after.
        var hook = granary_tee_hook(context: nil, write: { _, _, _, _ in }, truncate: { _, _ in }, stop: 0, reserved: 0)
        #expect(Self.control(db, SNAPSHOT_TEE_FCNTL_HOOK, &hook) == SQLITE_MISUSE)
        // Still gathering, as it was: the copy is whole, and the track saw its writes.
        #expect(try Self.fill(db) == 400)
        #expect(Self.control(db, SNAPSHOT_TEE_FCNTL_FLUSH, nil) == SQLITE_OK)
        #expect(granary_tee_writes(track) > 0)
        // A file that only gathers says its page size; one out of SQLite's range is refused.
        let other = try open("combined.sqlite")
        var zero: Int64 = 0
        #expect(Self.control(other, SNAPSHOT_TEE_FCNTL_COMBINE, &zero) == SQLITE_MISUSE)
        let badTrack = OverlappedPackTests.newTrack(pageSize: 0)
        defer { badTrack.deallocate() }
        #expect(Self.control(other, SNAPSHOT_TEE_FCNTL_TRACK, badTrack) == SQLITE_MISUSE)
        #expect(Self.control(other, SNAPSHOT_TEE_FCNTL_COMBINE, &page) == SQLITE_OK)
        #expect(try Self.fill(other) == 400)
    }

    @Test("discarding excludes gathering and the read-aheads; the hook comes first, once")
    func discardingExcludes() throws {
        // The VFS keeps the hook's address: it lives in memory of its own (not a `&` argument,
        // which is only good for the call), made before the connection and freed after it.
        final class Count: @unchecked Sendable { var writes = 0 }
        let count = Count()
        let hook = UnsafeMutablePointer<granary_tee_hook>.allocate(capacity: 1)
        hook.initialize(
            to: granary_tee_hook(
                context: Unmanaged.passUnretained(count).toOpaque(),
                write: { context, _, _, _ in Unmanaged<Count>.fromOpaque(context!).takeUnretainedValue().writes += 1 },
                truncate: { _, _ in }, stop: 0, reserved: 0))
        defer { hook.deallocate() }
        let db = try open("discarded.sqlite")
        #expect(Self.control(db, SNAPSHOT_TEE_FCNTL_HOOK, hook) == SQLITE_OK)
        #expect(Self.control(db, SNAPSHOT_TEE_FCNTL_HOOK, hook) == SQLITE_MISUSE, "one hook per file")
        var small: Int64 = 256
        #expect(Self.control(db, SNAPSHOT_TEE_FCNTL_DISCARD, &small) == SQLITE_MISUSE, "below SQLite's smallest page")
        var page: Int64 = 4096
        #expect(Self.control(db, SNAPSHOT_TEE_FCNTL_DISCARD, &page) == SQLITE_OK)
        #expect(Self.control(db, SNAPSHOT_TEE_FCNTL_DISCARD, &page) == SQLITE_MISUSE)
        #expect(Self.control(db, SNAPSHOT_TEE_FCNTL_COMBINE, &page) == SQLITE_MISUSE)
        #expect(Self.control(db, SNAPSHOT_TEE_FCNTL_READAHEAD, nil) == SQLITE_MISUSE)
        var on: Int32 = 1
        #expect(Self.control(db, SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &on) == SQLITE_MISUSE)
        // Still discarding, the hook still hearing every write: only page 1 reaches the file.
        _ = try? Self.fill(db)
        #expect(count.writes > 100)
        #expect((FileSystem.status(folder.child("discarded.sqlite")).map { Int64($0.st_size) } ?? -1) <= 4096)
        withExtendedLifetime(count) {}
    }

    @Test("the read-ahead of a finished file excludes every other job, and its file is read whole")
    func readAheadExcludes() throws {
        let path = folder.child("finished.sqlite")
        #expect(try Self.fill(Database(path: path, mode: .create)) == 400)
        #expect(granary_tee_register() == SQLITE_OK)
        let db = try Database(path: path, mode: .readOnly, vfs: "granary-tee")
        #expect(Self.control(db, SNAPSHOT_TEE_FCNTL_READAHEAD, nil) == SQLITE_OK)
        #expect(Self.control(db, SNAPSHOT_TEE_FCNTL_READAHEAD, nil) == SQLITE_MISUSE)
        var page: Int64 = 4096
        var on: Int32 = 1
        var off: Int32 = 0
        #expect(Self.control(db, SNAPSHOT_TEE_FCNTL_COMBINE, &page) == SQLITE_MISUSE)
        #expect(Self.control(db, SNAPSHOT_TEE_FCNTL_DISCARD, &page) == SQLITE_MISUSE)
        #expect(Self.control(db, SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &on) == SQLITE_MISUSE)
        #expect(Self.control(db, SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, &off) == SQLITE_MISUSE)
        #expect(try db.scalar("SELECT sum(length(body)) FROM t")?.integer == 400 * 2000)
        #expect(try db.scalar("PRAGMA quick_check")?.text == "ok")
    }
}
