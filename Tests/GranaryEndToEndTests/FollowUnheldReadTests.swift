import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A store whose `-wal` has not grown past its cursor, its chain the same, is read without a
/// SQLite read mark (no connection opened: `unheld` in the read trace); one whose `-wal` grew is
/// read holding one. The look at the `-wal` that decides it is made beneath the folder's
/// descriptor: a `-wal` swapped for a link to a copy of itself is refused, never read through.
@Suite("follow: reads without a read mark", .serialized)
struct FollowUnheldReadTests {
    let folder = TemporaryFolder("granary-follow-unheld")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }
    var trace: String { folder.child("trace") }

    init() throws {
        try FileSystem.makeDirectory(root + "/erin")
        try FollowFixtures.makeWALStore(root + "/erin/Busy.sqlite", rows: ["one"])
        try FollowFixtures.makeWALStore(root + "/erin/Quiet.sqlite", rows: ["one"])
    }

    func traced() -> [Substring] {
        ((try? String(contentsOfFile: trace, encoding: .utf8)) ?? "").split(separator: "\n")
    }

    func commits() throws -> Int {
        var total = 0
        for generation in FollowCatalogue.generations(in: repo, user: try UserID("erin"), host: nil) {
            for segment in generation.segments { total += try SegmentReader.check(segment.path).1.commits }
        }
        return total
    }

    func once() throws {
        let result = try GranaryProcess.run(
            ["follow", "--once", "--root", root, "--repo", repo], environment: ["GRANARY_TEST_READ_TRACE": trace])
        #expect(result.status == 0, "\(result.stderr)")
    }

    @Test("a whole read: the store written is read holding a mark, the one not written without")
    func unchangedStoreUnheld() throws {
        try once()
        let db = try Database(path: root + "/erin/Busy.sqlite", mode: .readWrite)
        try db.run("INSERT INTO items(body) VALUES ('two')")
        try db.run("INSERT INTO items(body) VALUES ('three')")
        try db.keepWALOnClose()
        #expect(truncate(trace, 0) == 0)
        try once()
        let lines = traced()
        #expect(lines.contains("read erin/Busy.sqlite"), "\(lines)")
        #expect(!lines.contains("unheld erin/Busy.sqlite"), "\(lines)")
        #expect(lines.contains("read erin/Quiet.sqlite"), "\(lines)")
        #expect(lines.contains("unheld erin/Quiet.sqlite"), "\(lines)")
        #expect(try commits() == 2)
        // Nothing written since: both read without a mark, nothing shipped.
        #expect(truncate(trace, 0) == 0)
        try once()
        #expect(traced().filter { $0.hasPrefix("unheld ") }.count == 2, "\(traced())")
        #expect(try commits() == 2)
    }

    @Test("a -wal swapped for a link to a copy of itself while follow runs is refused, not read through")
    func walSwappedForLink() throws {
        let follow = try FollowProcess(
            root: root, repo: repo, log: folder.child("follow.log"), environment: ["GRANARY_TEST_READ_TRACE": trace])
        defer { follow.stop(SIGKILL) }
        let deadline = ContinuousClock.now + .seconds(120)
        while FollowCatalogue.generations(in: repo, user: try UserID("erin"), host: nil).last?.segments.isEmpty ?? true
        {
            #expect(ContinuousClock.now < deadline, "no first segment: \(follow.journal)")
            if ContinuousClock.now >= deadline { return }
            usleep(20_000)
        }
        // Same bytes, same length, same salts: read through the link it would pass unheld.
        let outside = folder.child("outside")
        try FileSystem.makeDirectory(outside)
        let wal = root + "/erin/Quiet.sqlite-wal"
        let copy = try #require(FileManager.default.contents(atPath: wal))
        #expect(FileManager.default.createFile(atPath: outside + "/copy-wal", contents: copy))
        #expect(truncate(trace, 0) == 0)
        #expect(symlink(outside + "/copy-wal", root + "/erin/link") == 0)
        #expect(rename(root + "/erin/link", wal) == 0)
        while !follow.journal.contains("following paused") {
            #expect(ContinuousClock.now < deadline, "not refused: \(follow.journal)\n\(traced())")
            if ContinuousClock.now >= deadline { return }
            usleep(20_000)
        }
        #expect(traced().contains("read erin/Quiet.sqlite"), "\(traced())")
        #expect(!traced().contains("unheld erin/Quiet.sqlite"), "\(traced())")
        follow.stop(SIGTERM)
    }
}
