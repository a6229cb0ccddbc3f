import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `follow`'s segments kept in order by the other commands: `verify` checks them (a damaged,
/// missing or orphaned segment is named, exit 65), `prune` keeps what a window needs and never a
/// segment without its base, `check` alarms on a lag or a gap (text, JSON, Nagios, text file),
/// `follow --textfile` exposes the lag, and `sync` carries segments to a mirror whose
/// `restore --at` works.
@Suite("follow: verify, prune, check and sync of segments", .serialized)
struct FollowMaintenanceTests {
    let folder = TemporaryFolder("granary-follow-upkeep")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }
    let user = "alice"
    var store: String { root + "/alice/Local.sqlite" }

    init() throws {
        try FileSystem.makeDirectory(root + "/alice")
        try FollowFixtures.makeWALStore(store)
    }

    func granary(_ arguments: [String], repo location: String? = nil) throws -> GranaryProcess.Result {
        try GranaryProcess.run(arguments + ["--root", root, "--repo", location ?? repo])
    }

    /// Commits `count` rows (the connection keeps its `-wal` when it closes: no new generation).
    func write(_ count: Int, tag: String) throws {
        let db = try Database(path: store, mode: .readWrite)
        try db.keepWALOnClose()
        for index in 0..<count { try db.run("INSERT INTO items(body) VALUES (?)", [.text("\(tag) \(index)")]) }
    }

    /// A generation with `segments` segments (a follow --once, then a commit and a --once each).
    func follow(segments: Int) throws -> FollowedGenerations.Generation {
        for index in 0..<segments {
            if index > 0 { try write(3, tag: "round \(index)") }
            let once = try granary(["follow", "--once"])
            #expect(once.status == 0, "\(once.stderr)")
        }
        return try #require(FollowedGenerations.list(in: repo, user: try UserID(user)).last)
    }

    func json(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    }

    @Test("verify checks every segment: good ones pass; a flipped byte, a hole and a lost base are named, exit 65")
    func verify() throws {
        let generation = try follow(segments: 3)
        #expect(generation.segments.map(\.sequence) == [1, 2, 3])
        let good = try granary(["verify", "--user", user, "--json"])
        #expect(good.status == 0, "\(good.stderr)")
        let followed = try #require(try json(good.stdout)["followed"] as? [[String: Any]])
        #expect(followed.count == 1)
        #expect(followed.first?["ok"] as? Bool == true)
        #expect(followed.first?["segments"] as? Int == 3)
        #expect((followed.first?["commits"] as? Int ?? 0) >= 2, "\(good.stdout)")
        #expect(followed.first?["to"] is String)

        let folderPath = repo + "/" + generation.object
        // A flipped byte in the middle segment.
        let middle = folderPath + "/" + generation.segments[1].name
        let original = try Data(contentsOf: URL(fileURLWithPath: middle))
        var bytes = [UInt8](original)
        bytes[bytes.count / 2] ^= 0x01
        try Data(bytes).write(to: URL(fileURLWithPath: middle))
        let flipped = try granary(["verify", "--user", user, "--json"])
        #expect(flipped.status == 65, "\(flipped.stderr)")
        #expect(flipped.stderr.contains(generation.segments[1].name), "\(flipped.stderr)")
        let errors = try #require(
            (try json(flipped.stdout)["followed"] as? [[String: Any]])?.first?["errors"] as? [[String: Any]])
        #expect(errors.first?["segment"] as? String == generation.segments[1].name, "\(flipped.stdout)")
        #expect(errors.first?["code"] as? Int == 65)
        try original.write(to: URL(fileURLWithPath: middle))

        // A segment gone: the hole is named.
        #expect(rename(middle, folder.child("held.seg")) == 0)
        let hole = try granary(["verify", "--user", user])
        #expect(hole.status == 65)
        #expect(hole.stderr.contains("segments missing from the sequence: 2"), "\(hole.stderr)")
        #expect(rename(folder.child("held.seg"), middle) == 0)
        #expect(try granary(["verify", "--user", user]).status == 0)

        // A segment whose trailer counts and name disagree: one copied under another sequence's name.
        let first = folderPath + "/" + generation.segments[0].name
        let misplaced = folderPath + "/" + generation.segments[2].name
        let held = try Data(contentsOf: URL(fileURLWithPath: misplaced))
        try Data(contentsOf: URL(fileURLWithPath: first)).write(to: URL(fileURLWithPath: misplaced))
        let moved = try granary(["verify", "--user", user])
        #expect(moved.status == 65)
        #expect(moved.stderr.contains(generation.segments[2].name + ": its header names"), "\(moved.stderr)")
        try held.write(to: URL(fileURLWithPath: misplaced))

        // The base archive gone (removed behind granary's back): named, and the window refused.
        let base = repo + "/alice/" + generation.base
        #expect(rename(base, folder.child("base.held")) == 0)
        let orphan = try granary(["verify", "--user", user])
        #expect(orphan.status == 65)
        #expect(
            orphan.stderr.contains("its base archive \(generation.base) is not in the repository"), "\(orphan.stderr)")
        #expect(rename(folder.child("base.held"), base) == 0)

        // Named archives: the generations built on them.
        let named = try granary(["verify", "alice/" + generation.base, "--json"])
        #expect(named.status == 0, "\(named.stderr)")
        #expect((try json(named.stdout)["followed"] as? [[String: Any]])?.count == 1)
    }

    @Test(
        "prune keeps a followed window's base within --followed-keep-within, removes older windows, and never leaves a segment without its base"
    )
    func prune() throws {
        let older = try follow(segments: 2)
        // An archive between the two generations that no rule here keeps.
        #expect(try granary(["backup", user]).status == 0)
        // A second store breaks continuity: a new generation on a new base.
        let other = try Database(path: root + "/alice/Other.sqlite", mode: .create)
        try other.execute("PRAGMA journal_mode=WAL")
        try other.execute("CREATE TABLE t(x)")
        try other.keepWALOnClose()
        let newer = try follow(segments: 1)
        #expect(newer.base != older.base)
        let archives = try LocalRepository(path: repo).archives(of: try UserID(user)).map(\.name.fileName)
        #expect(archives.count == 3)

        // Dry run: the older base is kept by its window.
        let plan = try granary([
            "prune", user, "--keep-last", "1", "--followed-keep-within", "1d", "--dry-run", "--json",
        ])
        #expect(plan.status == 0, "\(plan.stderr)")
        let users = try #require(try json(plan.stdout)["users"] as? [[String: Any]])
        let planned = try #require(users.first?["archives"] as? [[String: Any]])
        let olderItem = try #require(planned.first { $0["name"] as? String == older.base })
        #expect((olderItem["keptBy"] as? [String])?.contains(FollowedRetention.reason) == true, "\(plan.stdout)")
        #expect((users.first?["followed"] as? [Any])?.isEmpty == true)

        // An orphan generation (its base gone behind granary's back) goes with the next prune.
        let ghost = ArchiveName(fileName: older.base)!
        let ghostName = ArchiveName(
            micros: ghost.micros - 3_600_000_000, host: ghost.host, compression: ghost.compression
        ).fileName
        let ghostFolder = repo + "/alice/follow/" + older.host + "/" + ghostName
        try FileSystem.makeDirectory(ghostFolder)
        for segment in older.segments {
            #expect(link(repo + "/" + older.object + "/" + segment.name, ghostFolder + "/" + segment.name) == 0)
        }
        let kept = try granary(["prune", user, "--keep-last", "1", "--followed-keep-within", "1d", "--json"])
        #expect(kept.status == 0, "\(kept.stderr)")
        let removedFollowed = try #require(
            (try json(kept.stdout)["users"] as? [[String: Any]])?.first?["followed"] as? [[String: Any]])
        #expect(removedFollowed.map { $0["base"] as? String } == [ghostName], "\(kept.stdout)")
        #expect(removedFollowed.first?["why"] as? String == "its base is gone")
        #expect(!FileSystem.isDirectory(ghostFolder))
        let left = FollowedGenerations.list(in: repo, user: try UserID(user)).map(\.base)
        #expect(left == [older.base, newer.base])
        #expect(FileSystem.isRegularFile(repo + "/alice/" + older.base))

        // Without the window rule the older base goes, and its segments with it.
        let plain = try granary(["prune", user, "--keep-last", "1"])
        #expect(plain.status == 0, "\(plain.stderr)")
        #expect(!FileSystem.isRegularFile(repo + "/alice/" + older.base))
        #expect(FollowedGenerations.list(in: repo, user: try UserID(user)).map(\.base) == [newer.base])

        // The newest generation is the one a follower writes to: its window ended before the
        // span, yet it stays whole with its base (FollowedRetention.Followed.live).
        usleep(1_200_000)
        let expired = try granary(["prune", user, "--keep-last", "1", "--followed-keep-within", "1s", "--json"])
        #expect(expired.status == 0, "\(expired.stderr)")
        #expect(FollowedGenerations.list(in: repo, user: try UserID(user)).map(\.base) == [newer.base])
        #expect(FileSystem.isRegularFile(repo + "/alice/" + newer.base))
        #expect(expired.stdout.contains(FollowedRetention.liveReason), "\(expired.stdout)")
        // And verify has no window left to complain about.
        #expect(try granary(["verify", "--user", user]).status == 0)
    }

    @Test(
        "prune's segment step runs under the user's lock: a lock held elsewhere makes it refuse (exit 75) as for archives"
    )
    func pruneSegmentsUnderLock() throws {
        let generation = try follow(segments: 1)
        // A newer generation (a second store breaks continuity): the older one is no longer the
        // one a follower writes to, and its window is what the span removes.
        let other = try Database(path: root + "/alice/Other.sqlite", mode: .create)
        try other.execute("PRAGMA journal_mode=WAL")
        try other.execute("CREATE TABLE t(x)")
        try other.keepWALOnClose()
        let newer = try follow(segments: 1)
        #expect(newer.base != generation.base)
        usleep(1_200_000)
        let id = try UserID(user)
        let userRoot = Root(path: root)
        let folderPath = repo + "/" + generation.object
        #expect(FileSystem.isDirectory(folderPath))

        // Another run holds alice's lock: prune waits out --lock-timeout, then refuses; the
        // expired window is still whole.
        let held = try UserLock.acquire(root: userRoot, user: id, timeout: .zero)
        let refused = try granary([
            "prune", user, "--keep-last", "2", "--followed-keep-within", "1s", "--lock-timeout", "0.5",
        ])
        held.release()
        #expect(refused.status == 75, "\(refused.stderr)")
        #expect(refused.stderr.contains(user), "\(refused.stderr)")
        #expect(FileSystem.isDirectory(folderPath))
        #expect(FollowedGenerations.list(in: repo, user: id).map(\.segments.count) == [1, 1])

        // The step itself runs while prune holds the lock: another taker is refused at that moment,
        // and the lock is free again once prune returns.
        // Both bases kept by --keep-last 2: the older window goes by the span alone.
        var policy = RetentionPolicy(keepLast: 2)
        policy.followedKeepWithin = TimeSpan(seconds: 1)
        var lockedDuringStep: Bool?
        var removed: [FollowedRetention.Removal] = []
        _ = try ArchiveRemoval.prune(
            user: id, repository: LocalRepository(path: repo), policy: policy, root: userRoot,
            lockTimeout: .seconds(5),
            followed: { removals in
                removed = removals
                lockedDuringStep = !FileSystem.isDirectory(folderPath) && Self.isLocked(root: userRoot, user: id)
            })
        #expect(lockedDuringStep == true)
        #expect(removed.map(\.generation.base) == [generation.base])
        #expect(removed.first?.why == "its window ended before followed_keep_within")
        #expect(!Self.isLocked(root: userRoot, user: id))
        #expect(FollowedGenerations.list(in: repo, user: id).map(\.base) == [newer.base])
    }

    /// Whether another holder has `user`'s lock (a try that does not wait).
    static func isLocked(root: Root, user: UserID) -> Bool {
        do {
            try UserLock.acquire(root: root, user: user, timeout: .zero).release()
            return false
        } catch {
            if case .held = error { return true }
            return false
        }
    }

    @Test(
        "backup --prune applies followed_keep_within: an expired window's segments go though its base stays, a fresh one stays"
    )
    func backupPruneFollowed() throws {
        let id = try UserID(user)
        let older = try follow(segments: 2)
        // Past the span, a second store breaks continuity: a new generation on a new base.
        usleep(5_200_000)
        let other = try Database(path: root + "/alice/Other.sqlite", mode: .create)
        try other.execute("PRAGMA journal_mode=WAL")
        try other.execute("CREATE TABLE t(x)")
        try other.keepWALOnClose()
        let newer = try follow(segments: 1)
        #expect(newer.base != older.base)
        let config = folder.child("granary.toml")
        try "[retention]\nkeep_last = 3\nfollowed_keep_within = \"5s\"\n".write(
            toFile: config, atomically: true, encoding: .utf8)

        let backup = try granary(["backup", user, "--prune", "--config", config])
        #expect(backup.status == 0, "\(backup.stderr)")
        // keep_last = 3 keeps every archive (both bases and the new backup): the expired
        // window's segments go by followed_keep_within alone; the fresh one keeps its segments.
        #expect(try LocalRepository(path: repo).archives(of: id).count == 3)
        #expect(FollowedGenerations.list(in: repo, user: id).map(\.base) == [newer.base])
        #expect(FileSystem.isRegularFile(repo + "/alice/" + newer.base))
        #expect(FileSystem.isRegularFile(repo + "/alice/" + older.base))
        #expect(!FileSystem.isDirectory(repo + "/" + older.object))
        #expect(try granary(["verify", "--user", user]).status == 0)
    }

    @Test("check alarms on a follow lag and a gap (text, JSON, Nagios, text file); follow --textfile exposes the lag")
    func check() throws {
        let prom = folder.child("follow.prom")
        let once = try granary(["follow", "--once", "--textfile", prom])
        #expect(once.status == 0, "\(once.stderr)")
        let metrics = try String(contentsOfFile: prom, encoding: .utf8)
        #expect(metrics.contains("granary_follow_lag_seconds{user=\"alice\"} "), "\(metrics)")
        #expect(metrics.contains("granary_follow_paused{user=\"alice\"} 0"), "\(metrics)")
        try parsedByPrometheus(prom)
        let stateFiles = FileSystem.contents(of: repo + "/.granary-follow")
        #expect(stateFiles.count == 1 && stateFiles[0].hasSuffix(".json"), "\(stateFiles)")
        let state = try #require(FollowStatus.read(repository: repo, host: String(stateFiles[0].dropLast(5))))
        #expect(state.users["alice"]?.shippedThrough != nil)
        // A follower of another user keeps alice's entry as it was.
        try FileSystem.makeDirectory(root + "/bob")
        do {
            let db = try Database(path: root + "/bob/Notes.sqlite", mode: .create)
            try db.execute("PRAGMA journal_mode=WAL")
            try db.execute("CREATE TABLE notes(x)")
            try db.keepWALOnClose()
        }
        #expect(try granary(["follow", "--once", "bob"]).status == 0)
        let both = try #require(FollowStatus.read(repository: repo, host: String(stateFiles[0].dropLast(5))))
        #expect(both.users.keys.sorted() == ["alice", "bob"])
        // (Its unbroken stretch ended with the follower that had it: nobody followed alice since.)
        var kept = state.users["alice"]
        kept?.steadySince = nil
        #expect(both.users["alice"] == kept)

        let fresh = try granary(["check", user, "--json"])
        #expect(fresh.status == 0, "\(fresh.stdout)\(fresh.stderr)")
        let document = try #require((try json(fresh.stdout)["users"] as? [[String: Any]])?.first)
        #expect(document["followed"] as? Bool == true)
        #expect(document["followLagSeconds"] is Double, "\(fresh.stdout)")
        #expect(document["followGap"] is NSNull)

        // Follow stopped: the lag grows past --max-follow-lag.
        usleep(2_200_000)
        let lagging = try granary(["check", user, "--max-follow-lag", "1s"])
        #expect(lagging.status == 1)
        #expect(lagging.stdout.contains("FAIL  alice: follow lags"), "\(lagging.stdout)")
        let nagios = try granary(["check", user, "--max-follow-lag", "1s", "--nagios"])
        #expect(nagios.status == 2, "\(nagios.stdout)")
        let checkProm = folder.child("check.prom")
        _ = try granary(["check", user, "--max-follow-lag", "1s", "--textfile", checkProm])
        #expect(
            try String(contentsOfFile: checkProm, encoding: .utf8).contains("granary_follow_problem{user=\"alice\"} 1"))
        #expect(try granary(["check", user]).status == 0)

        // A gap: a segment of the newest window gone.
        try write(2, tag: "more")
        #expect(try granary(["follow", "--once"]).status == 0)
        let generation = try #require(FollowedGenerations.list(in: repo, user: try UserID(user)).last)
        #expect(generation.segments.count == 2)
        #expect(unlink(repo + "/" + generation.object + "/" + generation.segments[0].name) == 0)
        let gap = try granary(["check", user, "--json"])
        #expect(gap.status == 1)
        let gapUser = try #require((try json(gap.stdout)["users"] as? [[String: Any]])?.first)
        #expect((gapUser["followGap"] as? String)?.contains("segments 1 of") == true, "\(gap.stdout)")
        #expect((gapUser["reason"] as? String)?.contains("missing") == true)
    }

    @Test("sync carries segments to a mirror once their base is there; restore --at from the mirror replays them")
    func sync() throws {
        let mirror = initializedRepository(folder.child("mirror"))
        _ = try follow(segments: 2)
        try write(4, tag: "late")
        #expect(try granary(["follow", "--once"]).status == 0)
        let generation = try #require(FollowedGenerations.list(in: repo, user: try UserID(user)).last)
        #expect(generation.segments.count == 3)
        let dry = try granary(["sync", "--mirror", mirror, "--dry-run", "--json"])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(FollowedGenerations.list(in: mirror, user: try UserID(user)).isEmpty)
        let synced = try granary(["sync", "--mirror", mirror, "--json"])
        #expect(synced.status == 0, "\(synced.stderr)")
        let sent = try #require(
            ((try json(synced.stdout)["mirrors"] as? [[String: Any]])?.first?["users"] as? [[String: Any]])?.first?[
                "segments"] as? [String])
        #expect(sent.count == 3, "\(synced.stdout)")
        let copied = try #require(FollowedGenerations.list(in: mirror, user: try UserID(user)).last)
        #expect(copied.segments == generation.segments)
        // Nothing new: nothing sent again.
        let again = try granary(["sync", "--mirror", mirror, "--json"])
        #expect(
            ((try json(again.stdout)["mirrors"] as? [[String: Any]])?.first?["users"] as? [[String: Any]])?.first?[
                "segments"] as? [String] == [])
        // The mirror verifies, and restores the newest moment of the window with every row.
        #expect(try granary(["verify", "--user", user], repo: mirror).status == 0)
        let target = folder.child("restored")
        #expect(mkdir(target, 0o700) == 0)
        let at = ArchiveName.stamp(micros: copied.segments.last!.last, precise: true)
        let restored = try granary(["restore", user, "--at", at, "--to", target], repo: mirror)
        #expect(restored.status == 0, "\(restored.stderr)")
        #expect(restored.stderr.contains("within the followed window"), "\(restored.stderr)")
        let db = try Database(path: target + "/Local.sqlite", mode: .readOnly)
        #expect(try db.scalar("SELECT count(*) FROM items WHERE body LIKE 'late %'") == .integer(4))
    }

    @Test("bad input: an unwritable --textfile, an empty one, a window or a lag under 1 s, each refused in one line")
    func badInput() throws {
        let unwritable = try granary(["follow", "--once", "--textfile", folder.child("no-such-folder/follow.prom")])
        #expect(unwritable.status == 73, "\(unwritable.stderr)")
        #expect(unwritable.stderr.contains("cannot write --textfile"), "\(unwritable.stderr)")
        let empty = try granary(["follow", "--once", "--textfile", ""])
        #expect(empty.status == 64, "\(empty.stderr)")
        #expect(empty.stderr.contains("--textfile needs a file name"), "\(empty.stderr)")
        let window = try granary(["prune", user, "--keep-last", "1", "--followed-keep-within", "0s"])
        #expect(window.status == 64, "\(window.stderr)")
        #expect(window.stderr.contains("--followed-keep-within"), "\(window.stderr)")
        let lag = try granary(["check", user, "--max-follow-lag", "0"])
        #expect(lag.status == 64, "\(lag.stderr)")
        #expect(lag.stderr.contains("--max-follow-lag"), "\(lag.stderr)")
        // Nothing was lost or made by the refusals: the first --once still followed alice.
        #expect(FollowedGenerations.list(in: repo, user: try UserID(user)).count == 1)
    }

    @Test(
        "restore --at --dry-run places nothing; restore --at swaps the moment into a running owner, which goes on writing"
    )
    func restoreAtIntoRunningOwner() throws {
        // The test's own connection closes before the owner starts (restore waits for every other one).
        let moment: Int64
        do {
            let db = try Database(path: store, mode: .readWrite)
            try db.keepWALOnClose()
            try db.execute("CREATE TABLE demo_writes(id INTEGER PRIMARY KEY, at REAL)")
            try db.execute("BEGIN")
            for id in 2...40 {
                try db.run("INSERT INTO items(id, body) VALUES (?, ?)", [.integer(Int64(id)), .text("item \(id)")])
            }
            try db.execute("COMMIT")
            #expect(try granary(["follow", "--once"]).status == 0)
            try db.run("INSERT INTO items(id, body) VALUES (41, 'marker')")
            #expect(try granary(["follow", "--once"]).status == 0)
            moment = try #require(FollowedGenerations.list(in: repo, user: try UserID(user)).last?.segments.last).last
            try db.execute("DELETE FROM items WHERE id > 20")
            #expect(try granary(["follow", "--once"]).status == 0)
            #expect(FollowedGenerations.list(in: repo, user: try UserID(user)).last?.segments.count == 3)
            #expect(try RestoreFixtures.ids(store, table: "items") == Set(1...20))
        }
        let binary = try COwner.build(into: folder.path)
        let owner = try COwner(binary: binary, store: store, mode: "conforming", log: folder.child("owner.log"))
        defer { owner.stop() }
        try owner.waitForMoreWrites(20)
        let at = ArchiveName.stamp(micros: moment, precise: true)
        let dry = try granary(["restore", user, "--at", at, "--method", "swap", "--owner-timeout", "1", "--dry-run"])
        #expect(dry.status == 0, "\(dry.stdout)\(dry.stderr)")
        #expect(dry.stderr.contains("within the followed window"), "\(dry.stderr)")
        #expect(try RestoreFixtures.ids(store, table: "items") == Set(1...20))
        #expect(!owner.lines.contains("REOPENED resume"))

        let restored = try granary(["restore", user, "--at", at, "--method", "swap", "--owner-timeout", "1"])
        #expect(restored.status == 0, "\(restored.stdout)\(restored.stderr)")
        #expect(restored.stdout.contains("Local.sqlite: owner paused for"), "\(restored.stdout)")
        // The moment: every item, the marker, nothing of the deletion after it.
        #expect(try RestoreFixtures.ids(store, table: "items") == Set(1...41))
        try owner.waitForMoreWrites(20)
        #expect(owner.isRunning)
        #expect(owner.lines.contains("REOPENED resume"), "\(owner.lines.suffix(5))")
        owner.stop()
        #expect(try Database(path: store, mode: .readOnly).integrityCheck(full: true) == ["ok"])
    }

    /// Parses a text file with prometheus_client's own parser (skipped when it is not installed).
    func parsedByPrometheus(_ path: String) throws {
        let python = GranaryProcess.packageDirectory + "/.build-tools/prometheus/bin/python"
        guard FileManager.default.isExecutableFile(atPath: python),
            (try? GranaryProcess.runExecutable(python, ["-c", "import prometheus_client"]))?.status == 0
        else {
            print("skipped: prometheus_client is not installed (make prometheus installs it)")
            return
        }
        let parsed = try GranaryProcess.runExecutable(
            python,
            [
                "-c",
                """
                import sys
                from prometheus_client.parser import text_string_to_metric_families
                list(text_string_to_metric_families(open(sys.argv[1]).read()))
                """, path,
            ])
        #expect(parsed.status == 0, "prometheus_client refused the file: \(parsed.stderr)")
    }
}

/// `sync` of segments to a mirror on a real S3 server (moto on loopback): each segment the mirror
/// lacks is uploaded under its name once its base is there, and a second sync sends nothing.
@Suite(
    "follow: segments synced to an S3 mirror", .serialized, .enabled(if: S3Server.available, S3Server.unavailableReason)
)
struct FollowS3MirrorTests {
    let folder = TemporaryFolder("granary-follow-s3")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }
    let bucket: String
    let server: S3Server
    var mirror: String { initializedRepository("s3:\(bucket)/mirror", environment: server.environment()) }
    var store: String { root + "/alice/Local.sqlite" }

    init() throws {
        (server, bucket) = try RemoteRepositoryTests.serverAndBucket("f")
        try FileSystem.makeDirectory(root + "/alice")
        try FollowFixtures.makeWALStore(store)
    }

    func granary(_ arguments: [String]) throws -> GranaryProcess.Result {
        try GranaryProcess.run(arguments + ["--root", root, "--repo", repo], environment: server.environment())
    }

    @Test("sync uploads the segments an S3 mirror lacks, after their base; a second sync sends none")
    func syncToS3() throws {
        #expect(try granary(["follow", "--once"]).status == 0)
        do {
            let db = try Database(path: store, mode: .readWrite)
            try db.keepWALOnClose()
            for index in 0..<5 { try db.run("INSERT INTO items(body) VALUES (?)", [.text("row \(index)")]) }
        }
        #expect(try granary(["follow", "--once"]).status == 0)
        let generation = try #require(FollowedGenerations.list(in: repo, user: try UserID("alice")).last)
        #expect(generation.segments.count == 2)
        let synced = try granary(["sync", "--mirror", mirror, "--json"])
        #expect(synced.status == 0, "\(synced.stderr)")
        let objects = try server.objects(bucket + "/mirror")
        #expect(objects["alice/" + generation.base] != nil, "\(objects.keys.sorted())")
        for segment in generation.segments {
            let local = FileSystem.size(repo + "/" + generation.object + "/" + segment.name)
            #expect(objects[generation.object + "/" + segment.name] == local, "\(objects.keys.sorted())")
        }
        let again = try granary(["sync", "--mirror", mirror, "--json"])
        #expect(again.status == 0, "\(again.stderr)")
        let document = try #require(try JSONSerialization.jsonObject(with: Data(again.stdout.utf8)) as? [String: Any])
        let users = (document["mirrors"] as? [[String: Any]])?.first?["users"] as? [[String: Any]]
        #expect(users?.first?["segments"] as? [String] == [], "\(again.stdout)")
        // restore --at from the S3 mirror replays its segments (FollowRemoteTests has the rest).
        let target = folder.child("drill")
        let restored = try GranaryProcess.run(
            [
                "restore", "alice", "--at", ArchiveName.stamp(micros: generation.segments[1].last, precise: true),
                "--to", target, "--root", root, "--repo", mirror,
            ],
            environment: server.environment())
        #expect(restored.status == 0, "\(restored.stdout)\(restored.stderr)")
        #expect(
            (restored.stdout + restored.stderr).contains("within the followed window"),
            "\(restored.stdout)\(restored.stderr)")
        let db = try Database(path: target + "/Local.sqlite", mode: .readOnly)
        #expect(db.integrityCheck(full: true) == ["ok"])
        #expect(try db.scalar("SELECT count(*) FROM items")?.integer == 6)
    }
}
