import CSQLite
import CSnapshotTee
import Foundation
import GranaryTestSupport
import Testing

@testable import GranaryKit

/// The first store of a `.tar.zst` compressed while SQLite's backup API writes its snapshot
/// (`OverlappedPack`, the `granary-tee` VFS): real sample stores, archives read back with
/// stock `tar` and `zstd` and with `ArchiveVerifier`.
@Suite("overlapped pack")
struct OverlappedPackTests {
    /// A sample root and a repository.
    struct Fixture {
        let folder = TemporaryFolder()
        var root: String { folder.child("root") }
        var repo: String { initializedRepository(folder.child("repo")) }
        init() throws { try SampleData.generate(in: folder.child("root")) }

        /// Backs `user` up with the overlap on for any store size (or off) and returns the archive.
        func backup(_ user: String, overlap: Bool = true, prefix: Int64? = nil) throws -> String {
            var options = BackupOperation.Options()
            options.overlap.enabled = overlap
            options.overlap.minimumSize = 0
            if let prefix { options.overlap.prefix = prefix }
            let operation = BackupOperation(
                root: Root(path: root), repository: LocalRepository(path: repo), options: options)
            return try operation.run(try UserID(user)).archive
        }

        /// Extracts `archive` with /usr/bin/tar into a new folder.
        func extract(_ archive: String) throws -> String {
            let out = folder.child("x-\(UUID().uuidString)")
            try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
            try run("/usr/bin/tar", ["-xf", archive, "-C", out])
            return out
        }
    }

    @discardableResult
    static func run(_ tool: String, _ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readAllRetryingInterrupts()
        process.waitUntilExit()
        let output = String(decoding: data, as: UTF8.self)
        #expect(process.terminationStatus == 0, "\(tool) \(arguments) failed: \(output)")
        return output
    }

    /// zstd's count of skippable frames in `archive` (`zstd -lv`).
    static func skippableFrames(_ archive: String) throws -> Int {
        let listing = try run("/usr/bin/zstd", ["-lv", archive])
        let line = listing.split(separator: "\n").first { $0.contains("Skippable Frames:") }
        return line.flatMap { Int($0.split(separator: ":").last!.trimmingCharacters(in: .whitespaces)) } ?? 0
    }

    /// Every regular file under `folder`, relative name → contents.
    static func files(_ folder: String) throws -> [String: Data] {
        var result: [String: Data] = [:]
        for name in FileManager.default.enumerator(atPath: folder)?.allObjects as? [String] ?? [] {
            var isFolder: ObjCBool = false
            if FileManager.default.fileExists(atPath: folder + "/" + name, isDirectory: &isFolder), !isFolder.boolValue
            {
                result[name] = try Data(contentsOf: URL(fileURLWithPath: folder + "/" + name))
            }
        }
        return result
    }

    @Test(
        "stores compressed during their snapshot come out exactly as the in-order path packs them",
        arguments: ["alice@example.com", "bob@example.com", "dave@example.com"])
    func sameAsInOrder(user: String) throws {
        let fixture = try Fixture()
        let overlapped = try fixture.backup(user)
        let inOrder = try fixture.backup(user, overlap: false)
        // The reserved region ends in a skippable frame: the overlapped path was taken.
        #expect(try Self.skippableFrames(overlapped) == 1)
        #expect(try Self.skippableFrames(inOrder) == 0)
        try Self.run("/usr/bin/zstd", ["-tq", overlapped])
        let members = try Self.run("/usr/bin/tar", ["-tf", overlapped]).split(separator: "\n")
        #expect(members.first == "MANIFEST.json")
        #expect(members.dropFirst().first == "stores/")
        let a = try Self.files(fixture.extract(overlapped) + "/stores")
        let b = try Self.files(fixture.extract(inOrder) + "/stores")
        #expect(!a.isEmpty)
        #expect(a == b, "the stores and external files differ between the two paths")
        let outcome = try ArchiveVerifier.verify(
            archive: overlapped, workFolder: fixture.repo + "/.granary-tmp", check: .full)
        #expect(outcome.checks.values.allSatisfy { $0 == "ok" })
        #expect(outcome.manifest.stores.count == (user == "alice@example.com" ? 2 : 1))
    }

    @Test("a first frame too large for its reserved region: the archive is rewritten without the region, and verifies")
    func relocated() throws {
        let fixture = try Fixture()
        let archive = try fixture.backup("alice@example.com", prefix: 16)
        #expect(try Self.skippableFrames(archive) == 0)
        try Self.run("/usr/bin/zstd", ["-tq", archive])
        let inOrder = try fixture.backup("alice@example.com", overlap: false)
        #expect(
            try Self.files(fixture.extract(archive) + "/stores") == Self.files(fixture.extract(inOrder) + "/stores"))
        // Nothing is left behind: the first temporary archive is gone with the rewrite.
        try Self.expectVerifiedAlone(archive, fixture: fixture, user: "alice@example.com")
    }

    /// `archive` passes a full verification, and no temporary file is left beside it.
    static func expectVerifiedAlone(_ archive: String, fixture: Fixture, user: String) throws {
        _ = try ArchiveVerifier.verify(archive: archive, workFolder: fixture.repo + "/.granary-tmp", check: .full)
        let names = try FileManager.default.contentsOfDirectory(atPath: fixture.repo + "/" + user)
        #expect(names.filter { $0.contains(".tmp-") }.isEmpty, "\(names)")
    }

    @Test("a rollback-journal store is not followed: its archive is packed in order")
    func rollbackInOrder() throws {
        let fixture = try Fixture()
        let archive = try fixture.backup("carol@example.com")
        #expect(try Self.skippableFrames(archive) == 0)
        try Self.expectVerifiedAlone(archive, fixture: fixture, user: "carol@example.com")
    }

    @Test("the tee VFS publishes a WAL snapshot's pages in order, and marks a rollback store's copy broken")
    func snapshotTrack() throws {
        let fixture = try Fixture()
        for (user, name, wal) in [
            ("alice@example.com", "Local.sqlite", true), ("carol@example.com", "Legacy.db", false),
        ] {
            let store = try #require(
                try Root(path: fixture.root).user(UserID(user)).scan().stores.first { $0.name == name })
            let track = SnapshotTrack()
            let copy = fixture.folder.child(UUID().uuidString)
            _ = try Snapshotter().snapshot(store, to: copy, track: track)
            if wal {
                #expect(!track.isBroken)
                #expect(track.writes > 0)
                #expect(track.high == FileSystem.size(copy), "everything beyond page 1 was published")
                #expect(track.pageSize == 4096)
            } else {
                #expect(track.isBroken)
            }
            let db = try Database(path: copy, mode: .readOnly)
            #expect(db.integrityCheck(full: true) == ["ok"])
        }
    }

    /// A track for a file with `pageSize`-byte pages, nothing published yet (the caller deallocates it).
    static func newTrack(pageSize: Int64 = 4096) -> UnsafeMutablePointer<granary_tee_track> {
        let track = UnsafeMutablePointer<granary_tee_track>.allocate(capacity: 1)
        track.initialize(
            to: granary_tee_track(page_size: pageSize, high: 0, broken: 0, writes: 0, reading: 0, waiting: 0))
        return track
    }

    /// A new database at `path` written through the tee with `track` attached: a table `t` of
    /// 2000 rows, inserted in one transaction (its pages are written in order).
    static func trackedTable(_ path: String, track: UnsafeMutablePointer<granary_tee_track>) throws -> Database {
        #expect(granary_tee_register() == SQLITE_OK)
        let db = try Database(path: path, mode: .create, vfs: "granary-tee")
        try db.execute("PRAGMA page_size=4096; PRAGMA journal_mode=OFF; PRAGMA locking_mode=EXCLUSIVE")
        #expect(sqlite3_file_control(db.handle, "main", SNAPSHOT_TEE_FCNTL_TRACK, track) == SQLITE_OK)
        try db.execute(
            """
            BEGIN;
            CREATE TABLE t(id INTEGER PRIMARY KEY, body TEXT);
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000) INSERT INTO t SELECT i, hex(randomblob(100)) FROM n;
            COMMIT;
            """)
        return db
    }

    @Test("the tee VFS notices a write that goes behind what it published")
    func writeBehind() throws {
        let folder = TemporaryFolder()
        let track = Self.newTrack()
        defer { track.deallocate() }
        let db = try Self.trackedTable(folder.child("t.db"), track: track)
        #expect(granary_tee_broken(track) == 0, "one transaction writes its pages in order")
        // Row 1 lives on an early page: rewriting it writes behind what was published.
        try db.execute("UPDATE t SET body = 'changed' WHERE id = 1")
        #expect(granary_tee_broken(track) == 1)
        #expect(db.integrityCheck(full: true) == ["ok"])
    }

    @Test("a truncate below what the tee published waits until the follower has let go of its mapping")
    func truncateWaitsForFollower() throws {
        let folder = TemporaryFolder()
        let track = Self.newTrack()
        defer { track.deallocate() }
        let path = folder.child("t.db")
        // The connection lives in a box the thread shares, and is closed before the track is
        // freed: a `Thread` keeps its closure (and what it captured) until the thread object goes,
        // which may be after this function has returned, and closing the file reads the track.
        let box = ConnectionBox(try Self.trackedTable(path, track: track))
        defer { box.db = nil }
        let db = try #require(box.db)
        let before = FileSystem.size(path)
        #expect(granary_tee_high(track) == before)
        // The follower holds a mapping: a VACUUM that shrinks the file must not cut under it.
        #expect(granary_tee_enter(track) == 1)
        let finished = DispatchSemaphore(value: 0)
        // The connection is used by one thread at a time: the test's waits order them.
        let shrink = Thread {
            try? box.db?.execute("DELETE FROM t WHERE id > 10; VACUUM")
            finished.signal()
        }
        shrink.start()
        let waited = finished.wait(timeout: .now() + 1) == .timedOut
        #expect(waited, "the truncate waits for the mapping")
        #expect(granary_tee_broken(track) == 1, "the track broke before the truncate")
        #expect(FileSystem.size(path) == before || !waited, "the file was not cut while mapped")
        granary_tee_leave(track)
        if waited { finished.wait() }
        #expect(FileSystem.size(path) < before)
        #expect(granary_tee_enter(track) == 0, "a broken track is not mapped again")
        #expect(try db.scalar("SELECT count(*) FROM t")?.integer == 10)
    }

    @Test(
        "a finished file is checked through mapped pages with the same answers, and a damaged page is still found",
        arguments: ["wal", "delete"])
    func mappedCheck(journalMode: String) throws {
        let folder = TemporaryFolder()
        let path = folder.child("finished.db")
        do {
            let db = try Database(path: path, mode: .create)
            try db.execute(
                """
                PRAGMA page_size=4096; PRAGMA journal_mode=\(journalMode);
                CREATE TABLE t(id INTEGER PRIMARY KEY, body TEXT NOT NULL);
                CREATE INDEX t_body ON t(body);
                WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000) INSERT INTO t SELECT i, printf('%0200d', i) FROM n;
                """)
            try db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        }
        let pageCount = try Database(path: path, mode: .readOnly).pageCount()
        #expect(pageCount * 4096 > 8 << 20, "more than the tee's 2 MiB of windows")
        let plain = try Database(path: path, mode: .readOnly)
        let sql = "SELECT count(*) || ':' || sum(length(body)) || ':' || max(body) FROM t"
        do {
            let mapped = try Database.openFinished(path: path)
            #expect(mapped.integrityCheck(full: false) == ["ok"])
            #expect(mapped.integrityCheck(full: true) == ["ok"])
            let answer = try plain.scalar(sql)?.text
            #expect(answer?.hasPrefix("20000:4000000:") == true)
            #expect(try mapped.scalar(sql)?.text == answer)
            var fetched: Int64 = 0
            #expect(sqlite3_file_control(mapped.handle, "main", SNAPSHOT_TEE_FCNTL_FETCHED, &fetched) == SQLITE_OK)
            // A SQLite built without memory mapping (SQLITE_MAX_MMAP_SIZE=0) keeps every mmap_size
            // at 0 and reads each page through xRead: the answers above must hold all the same.
            try plain.execute("PRAGMA mmap_size=1048576")
            if try plain.scalar("PRAGMA mmap_size")?.integer ?? 0 > 0 {
                #expect(
                    fetched > Int64(pageCount), "pages were taken in place, not read: \(fetched) for \(pageCount) pages"
                )
            } else {
                #expect(fetched == 0)
            }
        }
        // A leaf page in the middle of the table, overwritten with garbage.
        let fd = open(path, O_WRONLY)
        let garbage = [UInt8](repeating: 0xA5, count: 4096)
        #expect(pwrite(fd, garbage, garbage.count, off_t(pageCount / 2) * 4096) == 4096)
        close(fd)
        let mapped = try Database.openFinished(path: path)
        let problems = mapped.integrityCheck(full: false)
        #expect(problems != ["ok"])
        #expect(
            try problems == Database(path: path, mode: .readOnly).integrityCheck(full: false),
            "the same answer as SQLite's own reads")
    }

    @Test(
        "a file that only gathers writes ends byte for byte as SQLite wrote it, through rewrites behind, reads and a vacuum"
    )
    func combineOnly() throws {
        let folder = TemporaryFolder()
        #expect(granary_tee_register() == SQLITE_OK)
        let work = """
            BEGIN;
            CREATE TABLE t(id INTEGER PRIMARY KEY, body TEXT);
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000) INSERT INTO t SELECT i, printf('%0200d', i) FROM n;
            COMMIT;
            UPDATE t SET body = 'changed' WHERE id = 1;
            DELETE FROM t WHERE id % 3 = 0;
            VACUUM;
            INSERT INTO t(body) SELECT body || 'x' FROM t WHERE id < 500;
            """
        var files: [String] = []
        for combine in [true, false] {
            let path = folder.child(combine ? "combined.db" : "plain.db")
            do {
                let db = try Database(path: path, mode: .create, vfs: combine ? "granary-tee" : nil)
                try db.execute(
                    "PRAGMA page_size=4096; PRAGMA synchronous=OFF; PRAGMA journal_mode=OFF; PRAGMA locking_mode=EXCLUSIVE; PRAGMA cache_size=10"
                )
                if combine {
                    var pageSize: Int64 = 4096
                    #expect(sqlite3_file_control(db.handle, "main", SNAPSHOT_TEE_FCNTL_COMBINE, &pageSize) == SQLITE_OK)
                }
                try db.execute(work)
                #expect(try db.scalar("SELECT count(*) FROM t")?.integer == 2333)
                #expect(db.integrityCheck(full: true) == ["ok"])
            }
            files.append(path)
        }
        #expect(FileSystem.size(files[0]) > 500_000)
        #expect(
            FileManager.default.contentsEqual(atPath: files[0], andPath: files[1]),
            "the gathered file differs from the plain one")
    }
}

/// A connection two threads share in turn, closed when `db` is set to nil.
private final class ConnectionBox: @unchecked Sendable {
    var db: Database?
    init(_ db: Database) { self.db = db }
}
