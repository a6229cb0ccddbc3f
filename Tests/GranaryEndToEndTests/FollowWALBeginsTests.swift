import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A store followed while it had no `-wal` (its last connection closed): a `-wal` that begins
/// later continues the generation when the main file proves no checkpoint wrote into it since
/// (its change time and size), and only then; a store written and closed between two reads, a
/// checkpoint before the new `-wal` was read, or the store swapped for a link each start a new
/// generation (docs/follow.md, "Restarts").
@Suite("follow: a -wal that begins after follow started", .serialized)
struct FollowWALBeginsTests {
    let folder = TemporaryFolder("granary-follow-begins")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }
    var store: String { root + "/erin/Local.sqlite" }
    let user = try! UserID("erin")

    init() throws {
        try FileSystem.makeDirectory(root + "/erin")
        // Closed by its last connection: checkpointed, the -wal removed.
        try FollowFixtures.makeWALStore(store, rows: ["first"], keepWAL: false)
    }

    func follow() throws -> GranaryProcess.Result {
        let result = try GranaryProcess.run(["follow", "--once", "--root", root, "--repo", repo])
        #expect(result.status == 0, "\(result.stderr)")
        return result
    }

    var generations: [FollowCatalogue.Generation] { FollowCatalogue.generations(in: repo, user: user, host: nil) }

    /// The rows of `items` that `restore --at` the newest window's end puts back.
    func restoredRows(_ name: String) throws -> [String] {
        let window = try #require(generations.last?.window)
        let target = folder.child(name)
        #expect(mkdir(target, 0o700) == 0)
        let restored = try GranaryProcess.run([
            "restore", "erin", "--at", ArchiveName.stamp(micros: window.to, precise: true), "--to", target,
            "--root", root, "--repo", repo,
        ])
        #expect(restored.status == 0, "\(restored.stderr)")
        #expect(restored.stderr.contains("replayed") || restored.stdout.contains("replayed"), "\(restored.stderr)")
        let copy = try Database(path: target + "/Local.sqlite", mode: .readOnly)
        #expect(try copy.scalar("PRAGMA integrity_check") == .text("ok"))
        return try copy.rows("SELECT body FROM items ORDER BY id").compactMap { row -> String? in
            if case .text(let body) = row[0] { return body }
            return nil
        }
    }

    func assertNoWAL() {
        #expect(access(store + "-wal", F_OK) != 0, "the store should have no -wal")
    }

    @Test("the owner opens the store again and writes: the generation goes on, restore --at holds the rows")
    func walBeginsContinues() throws {
        assertNoWAL()
        let first = try follow()
        #expect(first.stderr.contains("new generation"), "\(first.stderr)")
        #expect(generations.count == 1)
        // The owner opens it again and commits; its connection stays open (the -wal with it).
        let db = try Database(path: store, mode: .readWrite)
        try db.execute("PRAGMA wal_autocheckpoint=0")
        for row in ["second", "third"] { try db.run("INSERT INTO items(body) VALUES (?)", [.text(row)]) }
        let second = try follow()
        #expect(!second.stderr.contains("new generation"), "\(second.stderr)")
        #expect(generations.count == 1, "\(second.stderr)")
        #expect(generations.last?.segments.map(\.sequence) == [1, 2], "\(second.stderr)")
        // And it goes on from there.
        try db.run("INSERT INTO items(body) VALUES ('fourth')")
        let third = try follow()
        #expect(!third.stderr.contains("new generation"), "\(third.stderr)")
        #expect(generations.count == 1)
        #expect(try restoredRows("at") == ["first", "second", "third", "fourth"])
    }

    @Test("a checkpoint copied frames into the store before its new -wal was read: a new generation")
    func checkpointBeforeReadStartsAgain() throws {
        _ = try follow()
        #expect(generations.count == 1)
        let db = try Database(path: store, mode: .readWrite)
        try db.execute("PRAGMA wal_autocheckpoint=0")
        try db.run("INSERT INTO items(body) VALUES ('second')")
        // Every frame copied into the store, then the -wal restarted from its first frame: the
        // chain there no longer holds 'second'.
        _ = try db.rows("PRAGMA wal_checkpoint(RESTART)")
        try db.run("INSERT INTO items(body) VALUES ('third')")
        let second = try follow()
        #expect(second.stderr.contains("new generation"), "\(second.stderr)")
        #expect(second.stderr.contains("a checkpoint wrote into the store"), "\(second.stderr)")
        #expect(generations.count == 2)
        #expect(try restoredRows("at") == ["first", "second", "third"])
    }

    @Test("written and closed between two reads (the -wal began and ended unread): a new generation")
    func writtenAndClosedBetweenReads() throws {
        _ = try follow()
        #expect(generations.count == 1)
        do {
            let db = try Database(path: store, mode: .readWrite)
            try db.run("INSERT INTO items(body) VALUES ('second')")
        }  // closed: checkpointed into the store, the -wal removed
        assertNoWAL()
        let second = try follow()
        #expect(second.stderr.contains("new generation"), "\(second.stderr)")
        #expect(second.stderr.contains("began and ended between two reads"), "\(second.stderr)")
        #expect(generations.count == 2)
        #expect(try restoredRows("at") == ["first", "second"])
    }

    @Test("the store swapped back and forth for a link while follow runs: nothing is read through it")
    func storeSwappedForLink() throws {
        let store = self.store
        _ = try follow()
        #expect(generations.count == 1)
        // Another store, outside erin's folder, with commits in its -wal (kept open).
        let outside = folder.child("other.sqlite")
        try FollowFixtures.makeWALStore(outside, rows: ["outside"])
        let other = try Database(path: outside, mode: .readWrite)
        try other.execute("PRAGMA wal_autocheckpoint=0")
        for _ in 0..<20 { try other.run("INSERT INTO items(body) VALUES (hex(randomblob(300)))") }
        // erin's store (no -wal, marked) swapped for a link to it and back, and a -wal that is a
        // link to the other store's, while follow reads erin again and again.
        unlink(store + "-wal")  // an empty one a connection of the base's backup may leave
        #expect(symlink(outside + "-wal", store + "-wal") == 0)
        let real = root + "/erin/.real"
        let link = root + "/erin/.link"
        let swapping = Swapper()
        let swapper = Thread {
            while !swapping.done {
                _ = Glibc.link(store, real)
                unlink(link)
                _ = symlink(outside, link)
                _ = rename(link, store)
                usleep(200)
                _ = rename(real, store)
                usleep(200)
            }
        }
        swapper.start()
        for _ in 0..<4 { _ = try GranaryProcess.run(["follow", "--once", "--root", root, "--repo", repo]) }
        swapping.done = true
        while !swapper.isFinished { usleep(1000) }
        // No segment of erin's holds a commit: nothing was read through the links.
        for generation in generations {
            for segment in generation.segments {
                #expect(try SegmentReader.check(segment.path).1.commits == 0, "\(segment.name)")
            }
        }
    }
}
