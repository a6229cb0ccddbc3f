import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `follow`'s segments in a remote repository on a real S3 server (moto on loopback), read
/// through the repository interface as from a local one: a mirror that `sync` filled gives the
/// same `list` windows and the same `restore --at` as the repository, `verify` finds a damaged
/// segment there, `prune` removes a generation with its base; and `follow --repo s3:…` writes
/// its base and segments there directly, claiming a segment only once its upload completed.
@Suite(
    "follow: segments read from and written to an S3 repository", .serialized,
    .enabled(if: S3Server.available, S3Server.unavailableReason)
)
struct FollowRemoteTests {
    let folder = TemporaryFolder("granary-follow-remote")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }
    let bucket: String
    let server: S3Server
    var store: String { root + "/alice/Local.sqlite" }
    let user = "alice"

    init() throws {
        (server, bucket) = try RemoteRepositoryTests.serverAndBucket("r")
        try FileSystem.makeDirectory(root + "/alice")
        try FollowFixtures.makeWALStore(store)
    }

    func remote(_ prefix: String) -> String {
        initializedRepository("s3:\(bucket)/\(prefix)", environment: server.environment())
    }

    func granary(_ arguments: [String], repo location: String, port: Int? = nil) throws -> GranaryProcess.Result {
        try GranaryProcess.run(
            arguments + ["--root", root, "--repo", location], environment: server.environment(endpointPort: port))
    }

    /// Commits `bodies` (the connection keeps its `-wal` when it closes: no new generation).
    func write(_ bodies: [String], into path: String? = nil) throws {
        let db = try Database(path: path ?? store, mode: .readWrite)
        try db.keepWALOnClose()
        for body in bodies { try db.run("INSERT INTO items(body) VALUES (?)", [.text(body)]) }
    }

    /// `count` rows of incompressible text tagged `tag`.
    func bodies(_ tag: String, _ count: Int, bytes: Int = 16) -> [String] {
        (0..<count).map { index in
            tag + " " + String(index) + " "
                + (0..<bytes).map { _ in String(UInt8.random(in: 0...255), radix: 16) }.joined()
        }
    }

    func json(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    }

    /// `restore USER --at AT --to DIR` (a fresh folder) from `location`.
    func restore(at micros: Int64, from location: String, into name: String, user: String? = nil) throws -> (
        GranaryProcess.Result, String
    ) {
        let target = folder.child(name)
        #expect(mkdir(target, 0o700) == 0)
        let result = try granary(
            ["restore", user ?? self.user, "--at", ArchiveName.stamp(micros: micros, precise: true), "--to", target],
            repo: location)
        return (result, target + "/Local.sqlite")
    }

    /// The rows of a restored store, in order, after an integrity check.
    func rows(_ path: String) throws -> [String] {
        let db = try Database(path: path, mode: .readOnly)
        #expect(db.integrityCheck(full: true) == ["ok"])
        return try db.rows("SELECT body FROM items ORDER BY id").compactMap { $0[0].text }
    }

    func sha256(_ path: String) throws -> String { try FileDigest.of(path).sha256 }

    /// Replaces the object `object` of the server (`bucket/prefix/…`) with other bytes of the same size.
    func damage(_ object: String, size: Int64) throws {
        let scratch = folder.child("bad.seg")
        try Data((0..<Int(size)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }).write(
            to: URL(fileURLWithPath: scratch))
        let copied = try server.rclone(["copyto", scratch, "moto:" + object])
        #expect(copied.status == 0, "\(copied.stderr)")
    }

    @Test(
        "a mirror filled by sync: list shows the repository's windows; restore --at replays from it, byte for byte the repository's; verify names a damaged segment (65); prune removes a generation with its base"
    )
    func mirrorRoundTrip() throws {
        let mirror = remote("mirror")
        // Three segments: the generation's first, then two rounds of rows.
        var ledger = ["first"]
        #expect(try granary(["follow", "--once"], repo: repo).status == 0)
        let round1 = bodies("round 1", 3)
        try write(round1)
        #expect(try granary(["follow", "--once"], repo: repo).status == 0)
        ledger += round1
        let afterRound1 = ledger
        let round2 = bodies("round 2", 3)
        try write(round2)
        #expect(try granary(["follow", "--once"], repo: repo).status == 0)
        ledger += round2
        let id = try UserID(user)
        let generation = try #require(FollowCatalogue.generations(in: repo, user: id, host: nil).last)
        #expect(generation.segments.map(\.sequence) == [1, 2, 3])
        let synced = try granary(["sync", "--mirror", mirror], repo: repo)
        #expect(synced.status == 0, "\(synced.stderr)")

        // list: the same windows from the mirror as from the repository.
        let here = try json(try granary(["list", user, "--json"], repo: repo).stdout)["followed"] as? [[String: Any]]
        let listed = try granary(["list", user, "--json"], repo: mirror)
        #expect(listed.status == 0, "\(listed.stderr)")
        let there = try json(listed.stdout)["followed"] as? [[String: Any]]
        // (Each --once resumes the generation: its windows are the moments each segment ends.)
        #expect((there?.count ?? 0) >= 1 && there?.count == here?.count, "\(listed.stdout)")
        for (mine, theirs) in zip(there ?? [], here ?? []) {
            for key in ["base", "from", "to", "segments"] {
                #expect(mine[key].map { "\($0)" } == theirs[key].map { "\($0)" }, "\(key): \(listed.stdout)")
            }
        }

        // restore --at from the mirror: the repository's result, byte for byte, at two moments.
        for (moment, expected) in [(generation.segments[1].last, afterRound1), (generation.segments[2].last, ledger)] {
            let (local, localStore) = try restore(at: moment, from: repo, into: "local-\(moment)")
            #expect(local.status == 0, "\(local.stderr)")
            let (fromMirror, mirrorStore) = try restore(at: moment, from: mirror, into: "mirror-\(moment)")
            #expect(fromMirror.status == 0, "\(fromMirror.stderr)")
            #expect(
                (fromMirror.stdout + fromMirror.stderr).contains("within the followed window"),
                "\(fromMirror.stdout)\(fromMirror.stderr)")
            #expect(try sha256(mirrorStore) == sha256(localStore))
            #expect(try rows(mirrorStore) == expected)
        }
        // Nothing of the downloads is left in the work folder (shared with other runs: only the
        // names these restores make are looked for, and a replay folder only when the process
        // its name holds, `.replay.tmp-PID-…`, has ended: another suite's restore may be running).
        let work = try Repositories.open(mirror, environment: server.environment()).workFolder
        let leftovers = FileSystem.contents(of: work).filter { name in
            if name.hasPrefix(".replay.tmp-") {
                let pid = name.dropFirst(".replay.tmp-".count).split(separator: "-").first.flatMap { pid_t($0) }
                return pid.map { kill($0, 0) != 0 && errno == ESRCH } ?? true
            }
            return generation.segments.contains { name.contains($0.name) }
        }
        #expect(leftovers.isEmpty, "\(leftovers)")

        // verify from the mirror checks the segments.
        let good = try granary(["verify", "--user", user, "--json"], repo: mirror)
        #expect(good.status == 0, "\(good.stderr)")
        let followed = try #require(try json(good.stdout)["followed"] as? [[String: Any]])
        #expect(followed.first?["segments"] as? Int == 3, "\(good.stdout)")
        #expect(followed.first?["ok"] as? Bool == true)

        // A segment on the mirror overwritten with other bytes: verify names it (65); restore
        // --at a moment that needs it refuses (65); a moment no segment from it on can reach
        // (the first segment's end: the next one, resumed, begins there) still restores.
        let last = generation.segments[2]
        try damage(
            "\(bucket)/mirror/\(user)/follow/\(generation.host)/\(generation.name)/\(last.name)", size: last.size)
        let bad = try granary(["verify", "--user", user], repo: mirror)
        #expect(bad.status == 65, "\(bad.stderr)")
        #expect(bad.stderr.contains(last.name), "\(bad.stderr)")
        let (refused, _) = try restore(at: last.last, from: mirror, into: "refused")
        #expect(refused.status == 65, "\(refused.stderr)")
        #expect(refused.stderr.contains(last.name), "\(refused.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.child("refused")).isEmpty)
        let (earlier, earlierStore) = try restore(at: generation.segments[0].last, from: mirror, into: "earlier")
        #expect(earlier.status == 0, "\(earlier.stderr)")
        #expect(try rows(earlierStore) == ["first"])

        // A second generation (a second store breaks continuity), synced.
        let other = try Database(path: root + "/alice/Other.sqlite", mode: .create)
        try other.execute("PRAGMA journal_mode=WAL")
        try other.execute("CREATE TABLE t(x)")
        try other.keepWALOnClose()
        #expect(try granary(["follow", "--once"], repo: repo).status == 0)
        let newer = try #require(FollowCatalogue.generations(in: repo, user: id, host: nil).last)
        #expect(newer.name != generation.name)
        #expect(try granary(["sync", "--mirror", mirror], repo: repo).status == 0)
        let olderPrefix = "\(user)/follow/\(generation.host)/\(generation.name)/"
        let newerPrefix = "\(user)/follow/\(newer.host)/\(newer.name)/"

        // prune on the mirror: within --followed-keep-within the older base is kept by its window...
        let plan = try granary(
            ["prune", user, "--keep-last", "1", "--followed-keep-within", "1d", "--dry-run", "--json"], repo: mirror)
        #expect(plan.status == 0, "\(plan.stderr)")
        let planned = try #require(
            (try json(plan.stdout)["users"] as? [[String: Any]])?.first?["archives"] as? [[String: Any]])
        let olderItem = try #require(planned.first { $0["name"] as? String == generation.name }, "\(plan.stdout)")
        #expect((olderItem["keptBy"] as? [String])?.contains(FollowedRetention.reason) == true, "\(plan.stdout)")
        // ...and without it, the older base goes, and its segments with it; the newer stays whole.
        let pruned = try granary(["prune", user, "--keep-last", "1"], repo: mirror)
        #expect(pruned.status == 0, "\(pruned.stderr)")
        let objects = try server.objects(bucket + "/mirror")
        #expect(objects["\(user)/\(generation.name)"] == nil, "\(objects.keys.sorted())")
        #expect(!objects.keys.contains { $0.hasPrefix(olderPrefix) }, "\(objects.keys.sorted())")
        #expect(objects["\(user)/\(newer.name)"] != nil, "\(objects.keys.sorted())")
        #expect(
            objects.keys.filter { $0.hasPrefix(newerPrefix) }.count == newer.segments.count, "\(objects.keys.sorted())")
        #expect(try granary(["verify", "--user", user], repo: mirror).status == 0)
    }

    @Test(
        "follow --repo s3: base and segments go to the repository; a second run resumes the generation; list, check, verify and restore --at read them there"
    )
    func followIntoS3() throws {
        let repository = remote("direct")
        let first = try granary(["follow", "--once"], repo: repository)
        #expect(first.status == 0, "\(first.stderr)")
        let rows1 = bodies("round 1", 5)
        try write(rows1)
        let second = try granary(["follow", "--once"], repo: repository)
        #expect(second.status == 0, "\(second.stderr)")
        #expect(second.stderr.contains("resuming"), "\(second.stderr)")
        let opened = try Repositories.open(repository, environment: server.environment())
        let generations = try FollowCatalogue.generations(in: opened, user: try UserID(user), host: nil)
        #expect(generations.count == 1)
        let generation = try #require(generations.last)
        #expect(generation.segments.map(\.sequence) == [1, 2])
        let objects = try server.objects(bucket + "/direct")
        #expect(objects["\(user)/\(generation.name)"] != nil, "\(objects.keys.sorted())")
        #expect(objects.keys.contains { $0.hasPrefix(".granary-follow/") }, "\(objects.keys.sorted())")

        let listed = try json(try granary(["list", user, "--json"], repo: repository).stdout)
        #expect((listed["followed"] as? [[String: Any]])?.first?["segments"] as? Int == 2, "\(listed)")
        let checked = try granary(["check", user, "--json"], repo: repository)
        let report = (try json(checked.stdout)["users"] as? [[String: Any]])?.first
        #expect(report?["followed"] as? Bool == true, "\(checked.stdout)")
        #expect(report?["followLagSeconds"] is Double, "\(checked.stdout)")
        #expect(report?["followGap"] == nil || report?["followGap"] is NSNull, "\(checked.stdout)")
        let verified = try granary(["verify", "--user", user, "--json"], repo: repository)
        #expect(verified.status == 0, "\(verified.stderr)")
        #expect((try json(verified.stdout)["followed"] as? [[String: Any]])?.first?["segments"] as? Int == 2)

        let (restored, path) = try restore(at: try #require(generation.window).to, from: repository, into: "drill")
        #expect(restored.status == 0, "\(restored.stderr)")
        #expect(try rows(path) == ["first"] + rows1)
    }

    @Test(
        "follow --repo s3 whose segment upload is cut: no segment is claimed, nothing is left in the work folder; the next run ships every commit in the same generation"
    )
    func cutUpload() throws {
        // A user of this test's own, so that the follower's temporary name is this test's alone.
        let cutUser = "cut" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
        let cutStore = root + "/" + cutUser + "/Local.sqlite"
        try FileSystem.makeDirectory(root + "/" + cutUser)
        try FollowFixtures.makeWALStore(cutStore)
        let repository = remote("cut")
        let proxy = try FaultProxy(upstream: server.port)
        #expect(try granary(["follow", "--once"], repo: repository, port: proxy.port).status == 0)
        let opened = try Repositories.open(repository, environment: server.environment())
        let id = try UserID(cutUser)
        let before = try #require(try FollowCatalogue.generations(in: opened, user: id, host: nil).last)
        #expect(before.segments.count == 1)
        // Incompressible rows: the segment is far larger than what passes before the cut.
        let rows1 = bodies("cut", 200, bytes: 400)
        try write(rows1, into: cutStore)
        let workBefore = Set(FileSystem.contents(of: opened.workFolder))
        proxy.mode = .cutUpload(after: 64 << 10)
        let cut = try granary(["follow", "--once"], repo: repository, port: proxy.port)
        proxy.mode = .pass
        #expect(cut.stderr.contains("following paused") || cut.status != 0, "\(cut.status) \(cut.stderr)")
        let objects = try server.objects(bucket + "/cut")
        let prefix = "\(cutUser)/follow/\(before.host)/\(before.name)/"
        #expect(objects.keys.filter { $0.hasPrefix(prefix) }.count == 1, "\(objects.keys.sorted())")
        #expect(try FollowCatalogue.generations(in: opened, user: id, host: nil) == [before])
        // The work folder is shared: what appeared during that run, of a process now gone.
        let leftovers = Set(FileSystem.contents(of: opened.workFolder)).subtracting(workBefore).filter { name in
            guard name.contains(".seg"), let marker = name.range(of: FileSystem.temporaryMarker),
                let pid = Int32(name[marker.upperBound...].prefix { $0.isNumber })
            else { return false }
            return kill(pid, 0) != 0
        }
        #expect(leftovers.isEmpty, "\(leftovers)")

        let again = try granary(["follow", "--once"], repo: repository, port: proxy.port)
        #expect(again.status == 0, "\(again.stderr)")
        let after = try #require(try FollowCatalogue.generations(in: opened, user: id, host: nil).last)
        #expect(after.name == before.name)
        #expect(after.segments.map(\.sequence) == [1, 2])
        let (restored, path) = try restore(
            at: try #require(after.window).to, from: repository, into: "after-cut", user: cutUser)
        #expect(restored.status == 0, "\(restored.stderr)")
        #expect(try rows(path) == ["first"] + rows1)
    }

    @Test(
        "a segment download cut during verify and restore --at from S3: exit 74/75, the segment is not called damaged, nothing placed"
    )
    func cutSegmentDownload() throws {
        let repository = remote("cutdown")
        let proxy = try FaultProxy(upstream: server.port)
        #expect(try granary(["follow", "--once"], repo: repository, port: proxy.port).status == 0)
        // Incompressible rows (fewer than SQLite's automatic checkpoint would restart the -wal
        // for): the segment is far larger than what passes before the cut.
        try write(bodies("big", 400, bytes: 400))
        let shipped = try granary(["follow", "--once"], repo: repository, port: proxy.port)
        #expect(shipped.status == 0, "\(shipped.stderr)")
        let opened = try Repositories.open(repository, environment: server.environment())
        let generation = try #require(
            try FollowCatalogue.generations(in: opened, user: try UserID(user), host: nil).last)
        let big = try #require(generation.segments.last)
        #expect(big.size > 128 << 10, "\(big.size): \(shipped.stderr)")

        proxy.mode = .cutDownload(after: 64 << 10)
        let verify = try granary(["verify", "--user", user], repo: repository, port: proxy.port)
        #expect([74, 75].contains(verify.status), "exit \(verify.status): \(verify.stderr)")
        #expect(!verify.stderr.contains("SHA-256"), "a cut download is not a damaged segment: \(verify.stderr)")
        let target = folder.child("cut-restore")
        #expect(mkdir(target, 0o700) == 0)
        let restore = try granary(
            [
                "restore", user, "--at", ArchiveName.stamp(micros: big.last, precise: true), "--to", target,
            ], repo: repository, port: proxy.port)
        #expect([74, 75].contains(restore.status), "exit \(restore.status): \(restore.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: target).isEmpty)
        proxy.mode = .pass
        #expect(try granary(["verify", "--user", user], repo: repository, port: proxy.port).status == 0)
    }

    @Test(
        "a claimed segment lost behind granary's back in S3: the next run keeps every later segment (a mirror may repair it) and starts a new generation"
    )
    func lostClaimedSegmentKeepsTheRest() throws {
        let repository = remote("lost")
        #expect(try granary(["follow", "--once"], repo: repository).status == 0)
        for round in 1...6 {
            try write(bodies("round \(round)", 2))
            #expect(try granary(["follow", "--once"], repo: repository).status == 0)
        }
        let generation = try #require(
            FollowCatalogue.generations(
                in: try Repositories.open(repository, environment: server.environment()), user: try UserID(user),
                host: nil
            ).last)
        #expect(generation.segments.count == 7)
        // Segment 2 goes; 3 to 7 lie far past what uploads side by side could leave.
        let prefix = "\(bucket)/lost/\(user)/follow/\(generation.host)/\(generation.name)/"
        #expect(try server.rclone(["deletefile", "moto:" + prefix + generation.segments[1].name]).status == 0)

        try write(bodies("after the loss", 2))
        let next = try granary(["follow", "--once"], repo: repository)
        #expect(next.status == 0, "\(next.stderr)")
        #expect(next.stderr.contains("new generation"), "\(next.stderr)")
        let left = try server.objects(prefix)
        for segment in generation.segments.dropFirst(2) {
            #expect(left[segment.name] != nil, "\(segment.name) removed: \(left.keys.sorted())")
        }
    }
}
