import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// With a local repository, `follow` makes the segments of a pass durable together: every file
/// synced, then each linked to its name, then each folder synced, and only then is any of them
/// claimed. Killed (SIGKILL) between those steps, nothing is lost and nothing unproven is
/// claimed: the next run resumes from the newest segment in the repository, complete or not
/// there at all, and ships what is missing from the `-wal` (docs/follow.md, "Grouped
/// durability").
@Suite("follow: grouped durability, killed between its steps", .serialized)
struct FollowGroupedPublishTests {
    let folder = TemporaryFolder("granary-follow-grouped")
    let repo: String
    var root: String { folder.child("root") }
    static let users = ["alice", "bob", "carol"]

    init() throws {
        repo = initializedRepository(folder.child("repo"))
        for user in Self.users {
            try FileSystem.makeDirectory(folder.child("root") + "/" + user)
            try FollowFixtures.makeWALStore(folder.child("root") + "/" + user + "/Local.sqlite", rows: ["one"])
        }
    }

    func generations(_ user: String) -> [FollowCatalogue.Generation] {
        FollowCatalogue.generations(in: repo, user: try! UserID(user), host: nil)
    }

    func segments(_ user: String) -> Int { generations(user).reduce(0) { $0 + $1.segments.count } }

    func write(_ user: String, _ body: String) throws {
        let db = try Database(path: root + "/" + user + "/Local.sqlite", mode: .readWrite)
        try db.execute("PRAGMA wal_autocheckpoint=0")
        try db.run("INSERT INTO items(body) VALUES (?)", [.text(body)])
        try db.keepWALOnClose()
    }

    func granary(_ arguments: [String]) throws -> GranaryProcess.Result {
        try GranaryProcess.run(arguments + ["--root", root, "--repo", repo])
    }

    @Test(
        "killed after the group's files are synced, or after they are linked: resumed, every commit restored, verify clean",
        arguments: ["followSynced", "followLinked"])
    func killedWhilePublishing(_ point: String) throws {
        let first = try FollowProcess(
            root: root, repo: repo, log: folder.child("follow-1.log"), environment: ["GRANARY_TEST_CRASH_AT": point])
        defer { first.stop(SIGKILL) }
        // Each generation's first segment is published on its own, before any group.
        try waitFor("every user's first segment", first) { Self.users.allSatisfy { segments($0) >= 1 } }
        for user in Self.users { try write(user, "two") }
        try waitFor("the follower killed at \(point)", first) { !first.process.isRunning }
        #expect(first.process.terminationReason == .uncaughtSignal, "\(first.journal)")
        let linked = Self.users.map { segments($0) }
        if point == "followSynced" {
            // Synced under temporary names, linked nowhere: nothing claimed.
            #expect(linked == [1, 1, 1], "\(first.journal)")
        } else {
            // Linked: complete (synced before the link), whether or not its folder was synced.
            #expect(linked.contains { $0 == 2 }, "\(first.journal)")
            let verified = try granary(["verify", "--all"])
            #expect(verified.status == 0, "\(verified.stdout) \(verified.stderr)")
        }

        let second = try FollowProcess(root: root, repo: repo, log: folder.child("follow-2.log"))
        defer { second.stop(SIGKILL) }
        try waitFor("every user resumed", second) {
            Self.users.allSatisfy { user in second.journal.contains("\(user): resuming") }
        }
        for user in Self.users { try write(user, "three") }
        try waitFor("every user's commits shipped", second) {
            Self.users.allSatisfy { user in
                (try? String(contentsOfFile: folder.child("follow-2.log"), encoding: .utf8))?.contains(
                    "\(user): segment") == true && segments(user) >= 2
            }
        }
        second.stop(SIGTERM)
        #expect(!second.journal.contains("new generation"), "resumed in the same generation: \(second.journal)")

        let verified = try granary(["verify", "--all"])
        #expect(verified.status == 0, "\(verified.stdout) \(verified.stderr)")
        for user in Self.users {
            let last = try #require(generations(user).last?.segments.last, "\(user)")
            let target = folder.child("at-\(point)-\(user)")
            #expect(mkdir(target, 0o700) == 0)
            let result = try granary([
                "restore", user, "--at", ArchiveName.stamp(micros: last.last, precise: true), "--to", target,
            ])
            #expect(result.status == 0, "\(result.stderr)")
            let rows = try Database(path: target + "/Local.sqlite", mode: .readOnly).rows(
                "SELECT body FROM items ORDER BY id"
            )
            .compactMap { $0[0].text }
            #expect(rows == ["one", "two", "three"], "\(user): \(second.journal)")
        }
    }
}

/// The segments of users read in different passes are made durable together: a group is
/// published when its first segment has waited a tenth of the interval (100 ms at 1 s), not at
/// the end of each pass (passes come up to 40 times a second; each group costs two journal
/// commits, which the owners' own syncs wait behind). Every commit written is restored.
@Suite("follow: a group waits for segments of later passes", .serialized)
struct FollowGroupWaitTests {
    let folder = TemporaryFolder("granary-follow-group-wait")
    let repo: String
    var root: String { folder.child("root") }
    var trace: String { folder.child("trace") }
    static let users = (1...12).map { "user\($0)" }

    init() throws {
        repo = initializedRepository(folder.child("repo"))
        for user in Self.users {
            try FileSystem.makeDirectory(root + "/" + user)
            try FollowFixtures.makeWALStore(root + "/" + user + "/Local.sqlite", rows: ["0"])
        }
    }

    func segments(_ user: String) -> [FollowCatalogue.SegmentFile] {
        FollowCatalogue.generations(in: repo, user: try! UserID(user), host: nil).flatMap(\.segments)
    }

    @Test("twelve users writing in turn for 3 s: each group but the stop's waited 100 ms, most hold several segments")
    func groupsSpanPasses() throws {
        let follow = try FollowProcess(
            root: root, repo: repo, log: folder.child("follow.log"), interval: "1s",
            environment: ["GRANARY_TEST_READ_TRACE": trace])
        defer { follow.stop(SIGKILL) }
        // Each generation's first segment is published on its own, before any group.
        try waitFor("every user's first segment", follow) { Self.users.allSatisfy { !segments($0).isEmpty } }
        let stores = try Self.users.map { user in
            let db = try Database(path: root + "/" + user + "/Local.sqlite", mode: .readWrite)
            try db.execute("PRAGMA wal_autocheckpoint=0")
            return db
        }
        // One commit every 8 ms, round robin: each user commits about every 100 ms, and users
        // fall due one after another, in passes of their own.
        var written = 0
        let end = ContinuousClock.now + .seconds(3)
        while ContinuousClock.now < end {
            written += 1
            try stores[written % stores.count].run("INSERT INTO items(body) VALUES (?)", [.text("\(written)")])
            usleep(8_000)
        }
        for db in stores { try db.keepWALOnClose() }
        // Every commit shipped (each user's segments after its first hold one commit a row), then
        // stopped: the stop's last reads are bounded in time, and a slow machine may leave some.
        let rows = Dictionary(grouping: 1...written) { $0 % stores.count }.mapValues(\.count)
        try waitFor("every commit shipped", follow) {
            Self.users.indices.allSatisfy { index in
                let shipped = segments(Self.users[index]).filter { $0.sequence >= 2 }.reduce(0) {
                    $0 + ((try? SegmentReader.check($1.path).1.commits) ?? 0)
                }
                return shipped == rows[index, default: 0]
            }
        }
        follow.stop(SIGTERM)
        #expect(follow.process.terminationStatus == 0, "\(follow.journal)")
        // One generation each, the first: nothing was missed.
        #expect(
            follow.journal.components(separatedBy: "new generation").count == Self.users.count + 1, "\(follow.journal)")

        // publish COUNT waited MICROSECONDS at MICROSECONDS
        let groups = ((try? String(contentsOfFile: trace, encoding: .utf8)) ?? "").split(separator: "\n")
            .filter { $0.hasPrefix("publish ") }.map { line in line.split(separator: " ").compactMap { Int64($0) } }
        #expect(groups.count >= 3, "\(groups)")
        // The last may be the stop's, published at once.
        for (index, group) in groups.enumerated().dropLast() {
            #expect(group[1] >= 100_000, "group \(index) of \(groups.count): \(group)")
            if index > 0 { #expect(group[2] - groups[index - 1][2] >= 100_000, "\(groups)") }
        }
        let published = groups.reduce(0) { $0 + Int($1[0]) }
        #expect(published > groups.count, "segments of several users in one group: \(groups)")

        let verified = try GranaryProcess.run(["verify", "--all", "--repo", repo])
        #expect(verified.status == 0, "\(verified.stdout) \(verified.stderr)")
        // Every commit, in each user's restore at its last segment.
        for (index, user) in Self.users.enumerated() {
            let last = try #require(segments(user).last, "\(user)")
            let target = folder.child("at-\(user)")
            #expect(mkdir(target, 0o700) == 0)
            let result = try GranaryProcess.run([
                "restore", user, "--at", ArchiveName.stamp(micros: last.last, precise: true), "--to", target,
                "--root", root, "--repo", repo,
            ])
            #expect(result.status == 0, "\(result.stderr)")
            let rows = try Database(path: target + "/Local.sqlite", mode: .readOnly).rows(
                "SELECT body FROM items ORDER BY id"
            ).compactMap { $0[0].text }
            let expected = ["0"] + (1...written).filter { $0 % stores.count == index }.map { "\($0)" }
            #expect(rows == expected, "\(user)")
        }
    }
}
