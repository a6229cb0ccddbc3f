import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `granary follow`'s edges: rollback stores named and passed over, a bad interval, a `-wal`
/// swapped for a link, and `--once`'s first generation.
@Suite("follow: the command's edges", .serialized)
struct FollowCommandTests {
    let folder = TemporaryFolder("granary-follow-cmd")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }

    func makeStore(_ path: String, wal: Bool) throws {
        let db = try Database(path: path, mode: .create)
        try db.execute("PRAGMA journal_mode=\(wal ? "WAL" : "DELETE")")
        try db.execute("CREATE TABLE items(id INTEGER PRIMARY KEY, body TEXT)")
        try db.run("INSERT INTO items(body) VALUES ('one')")
        if wal { try db.keepWALOnClose() }
    }

    func follow(_ arguments: [String]) throws -> GranaryProcess.Result {
        try GranaryProcess.run(["follow"] + arguments + ["--root", root, "--repo", repo])
    }

    @Test("--once starts a generation per user with its first segment; a rollback store is named and passed over")
    func onceAndRollback() throws {
        try FileSystem.makeDirectory(root + "/alice")
        try makeStore(root + "/alice/Local.sqlite", wal: true)
        try makeStore(root + "/alice/Legacy.db", wal: false)
        let result = try follow(["--once"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.contains("Legacy.db not followed: rollback journal"), "\(result.stderr)")
        #expect(result.stderr.contains("new generation"), "\(result.stderr)")
        let generations = FollowCatalogue.generations(in: repo, user: try UserID("alice"), host: nil)
        #expect(generations.count == 1)
        #expect(generations.first?.segments.map(\.sequence) == [1])
        // Its base is an archive of the user in the repository.
        let base = try #require(generations.first).name
        #expect(FileSystem.isRegularFile(repo + "/alice/" + base))
        // list shows the window, in text and JSON.
        let listed = try GranaryProcess.run(["list", "alice", "--json", "--root", root, "--repo", repo])
        let document = try #require(
            try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [String: Any])
        let followed = try #require(document["followed"] as? [[String: Any]])
        #expect(followed.count == 1 && followed.first?["base"] as? String == base, "\(listed.stdout)")
        let text = try GranaryProcess.run(["list", "alice", "--root", root, "--repo", repo])
        #expect(text.stdout.contains("followed") && text.stdout.contains("base " + base), "\(text.stdout)")
        // A second --once resumes: no new generation while nothing changed.
        let again = try follow(["--once"])
        #expect(again.status == 0)
        #expect(again.stderr.contains("resuming"), "\(again.stderr)")
        #expect(FollowCatalogue.generations(in: repo, user: try UserID("alice"), host: nil).count == 1)
    }

    @Test("an interval out of range is a usage error; a remote repository that cannot be reached fails, named")
    func usage() throws {
        try FileSystem.makeDirectory(root)
        let bad = try follow(["--interval", "2h"])
        #expect(bad.status == 64, "\(bad.stderr)")
        let remote = try GranaryProcess.run(["follow", "--once", "--root", root, "--repo", "s3:bucket/prefix"])
        #expect(remote.status != 0)
        #expect(remote.stderr.contains("s3:bucket/prefix"), "\(remote.stderr)")
    }

    @Test("a -wal swapped for a link to another file is never read: the user's following pauses with the reason")
    func walLink() throws {
        try FileSystem.makeDirectory(root + "/bob")
        let store = root + "/bob/Local.sqlite"
        try makeStore(store, wal: true)
        let first = try follow(["--once"])
        #expect(first.status == 0, "\(first.stderr)")
        // Another store's -wal, outside bob's folder, with commits of its own.
        let outside = folder.child("other.sqlite")
        try makeStore(outside, wal: true)
        let db = try Database(path: outside, mode: .readWrite)
        try db.execute("PRAGMA wal_autocheckpoint=0")
        for _ in 0..<20 { try db.run("INSERT INTO items(body) VALUES (hex(randomblob(500)))") }
        try? FileManager.default.removeItem(atPath: store + "-wal")
        #expect(symlink(outside + "-wal", store + "-wal") == 0)
        let second = try follow(["--once"])
        #expect(second.status == 0, "\(second.stderr)")
        // And while follow runs: the -wal swapped back and forth between itself and the link.
        try? FileManager.default.removeItem(atPath: store + "-wal")
        let real = root + "/bob/.real-wal"
        let link = root + "/bob/.link-wal"
        FileManager.default.createFile(atPath: store + "-wal", contents: Data())
        let swapping = Swapper()
        let swapper = Thread {
            while !swapping.done {
                _ = Glibc.link(store + "-wal", real)
                unlink(link)
                _ = symlink(outside + "-wal", link)
                _ = rename(link, store + "-wal")
                usleep(200)
                _ = rename(real, store + "-wal")
                usleep(200)
            }
        }
        // The other store keeps committing: a follower that went through the link would ship it.
        let writer = Thread {
            guard let other = try? Database(path: outside, mode: .readWrite) else { return }
            while !swapping.done { try? other.run("INSERT INTO items(body) VALUES (hex(randomblob(300)))") }
        }
        swapper.start()
        writer.start()
        for _ in 0..<4 { _ = try follow(["--once"]) }
        swapping.done = true
        while !swapper.isFinished || !writer.isFinished { usleep(1000) }
        // No segment holds a commit read through the link.
        for generation in FollowCatalogue.generations(in: repo, user: try UserID("bob"), host: nil) {
            for segment in generation.segments {
                let (_, trailer) = try SegmentReader.check(segment.path)
                #expect(trailer.commits == 0, "\(segment.name) holds \(trailer.commits) commits")
            }
        }
    }
}

/// A flag the swapping thread reads.
final class Swapper: @unchecked Sendable {
    private let lock = NSLock()
    private var stopped = false
    var done: Bool {
        get { lock.withLock { stopped } }
        set { lock.withLock { stopped = newValue } }
    }
}
