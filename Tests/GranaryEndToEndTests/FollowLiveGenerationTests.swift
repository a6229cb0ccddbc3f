import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The generation a follower is writing to is an identity other commands respect, not a
/// convention: one follower per repository and host (a second one, `follow --once` beside the
/// service among them, is refused with exit 75 naming the first); `prune` keeps the base of each
/// host's newest generation whatever its rules say, and a follower resumed onto a base removed
/// behind its back starts a new generation; a user whose round fails publishes nothing more into
/// the generation it had until a whole round succeeds, so no moment of the failure is claimed.
@Suite("follow: the generation being followed is kept, locked and never extended across a failure")
struct FollowLiveGenerationTests {
    let folder = TemporaryFolder("granary-follow-live")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }
    var store: String { root + "/alice/Local.sqlite" }
    let alice = try! UserID("alice")

    init() throws {
        try FileSystem.makeDirectory(root + "/alice")
        try FollowFixtures.makeWALStore(store)
    }

    func granary(_ arguments: [String]) throws -> GranaryProcess.Result {
        try GranaryProcess.run(arguments + ["--root", root, "--repo", repo])
    }

    /// Commits `count` rows tagged `tag` in one transaction (the `-wal` kept on close: no new
    /// generation).
    func write(_ count: Int, tag: String) throws {
        let db = try Database(path: store, mode: .readWrite)
        try db.keepWALOnClose()
        try db.execute("BEGIN")
        for index in 0..<count { try db.run("INSERT INTO items(body) VALUES (?)", [.text("\(tag) \(index)")]) }
        try db.execute("COMMIT")
    }

    func generations() -> [FollowedGenerations.Generation] {
        (try? FollowedGenerations.list(in: LocalRepository(path: repo), user: alice)) ?? []
    }

    @Test("a second follow of one repository and host, or follow --once beside it, is refused (75) naming the first")
    func oneFollowerPerRepository() throws {
        let follow = try FollowProcess(root: root, repo: repo, log: folder.child("follow.log"))
        try waitFor("the first generation", follow) { generations().first?.segments.isEmpty == false }

        let once = try granary(["follow", "--once"])
        #expect(once.status == 75, "\(once.stderr)")
        #expect(once.stderr.contains("another granary follow follows"), "\(once.stderr)")
        #expect(once.stderr.contains("pid \(follow.process.processIdentifier)"), "\(once.stderr)")
        let second = try GranaryProcess.run([
            "follow", "--interval", "100ms", "--root", root, "--repo", repo,
        ])
        #expect(second.status == 75, "\(second.stderr)")
        // The first one's generation is whole: one segment per number, verify clean.
        try write(3, tag: "after")
        try waitFor("a second segment", follow) { (generations().last?.segments.count ?? 0) >= 2 }
        #expect(generations().count == 1)
        #expect(generations().last?.missing == [])

        follow.stop()
        #expect(follow.process.terminationStatus == 0, "\(follow.journal)")
        // Once it has stopped, another may follow.
        let after = try granary(["follow", "--once"])
        #expect(after.status == 0, "\(after.stderr)")
        #expect(try granary(["verify", "--user", "alice"]).status == 0)
    }

    @Test("prune --keep-last 1 while follow runs keeps the followed generation's base; restore --at replays onto it")
    func pruneKeepsTheLiveBase() throws {
        let follow = try FollowProcess(root: root, repo: repo, log: folder.child("follow.log"))
        try waitFor("the first generation", follow) { generations().first?.segments.isEmpty == false }
        let base = try #require(generations().first?.base)

        // A newer archive, then a prune that by its rules alone would keep only that one.
        #expect(try granary(["backup", "alice"]).status == 0)
        let pruned = try granary(["prune", "alice", "--keep-last", "1", "--json"])
        #expect(pruned.status == 0, "\(pruned.stderr)")
        #expect(pruned.stdout.contains(FollowedRetention.liveReason), "\(pruned.stdout)")
        #expect(FileSystem.isRegularFile(repo + "/alice/" + base))
        #expect(generations().map(\.base) == [base])

        // The follower goes on in that generation, and a restore to a moment after the prune
        // holds what was committed by then.
        try write(5, tag: "after prune")
        try waitFor("a segment after the prune", follow) { (generations().last?.segments.count ?? 0) >= 2 }
        let last = try #require(generations().last?.segments.last?.last)
        let at = ArchiveName.stamp(micros: last, precise: true)
        let target = folder.child("restored")
        let restored = try granary(["restore", "alice", "--at", at, "--to", target])
        #expect(restored.status == 0, "\(restored.stderr)")
        #expect(restored.stderr.contains("within the followed window"), "\(restored.stderr)")
        let db = try Database(path: target + "/Local.sqlite", mode: .readOnly)
        #expect(try db.scalar("SELECT count(*) FROM items WHERE body LIKE 'after prune%'")?.integer == 5)
        follow.stop()
    }

    @Test("a follower resumed onto a base removed behind its back starts a new generation instead")
    func resumeNeedsItsBase() throws {
        #expect(try granary(["follow", "--once"]).status == 0)
        let first = try #require(generations().first)
        #expect(unlink(repo + "/alice/" + first.base) == 0)
        try write(2, tag: "later")
        let once = try granary(["follow", "--once"])
        #expect(once.status == 0, "\(once.stderr)")
        #expect(once.stderr.contains("new generation"), "\(once.stderr)")
        #expect(!once.stderr.contains("resuming \(first.base)"), "\(once.stderr)")
        #expect(generations().count == 2)
        #expect(generations().last?.base != first.base)
    }

    @Test(
        "a user whose round fails (a -wal made a FIFO) publishes nothing into its generation until a whole round succeeds: no moment of the failure is claimed"
    )
    func noClaimAcrossAFailedRound() throws {
        let stuck = root + "/alice/Stuck.sqlite"
        try FollowFixtures.makeWALStore(stuck)
        let follow = try FollowProcess(root: root, repo: repo, log: folder.child("follow.log"))
        try waitFor("the first generation", follow) { generations().first?.segments.isEmpty == false }

        // The owner makes one store's -wal a FIFO: that user's rounds fail.
        #expect(unlink(stuck + "-wal") == 0)
        #expect(mkfifo(stuck + "-wal", 0o600) == 0)
        try waitFor("following paused", follow) { follow.journal.contains("following paused") }
        // Meanwhile a new store with a commit, then a commit to the store followed all along.
        let fresh = root + "/alice/Fresh.sqlite"
        try FollowFixtures.makeWALStore(fresh, rows: ["fresh row"])
        let freshCommitted = ArchiveName.micros(Date())
        usleep(500_000)
        try write(3, tag: "during")
        usleep(2_000_000)
        follow.stop()

        // Every moment a restore claims holds the new store's row.
        for offset: Int64 in [300_000, 1_000_000, 2_000_000] {
            let at = ArchiveName.stamp(micros: freshCommitted + offset, precise: true)
            let target = folder.child("at-\(offset)")
            let restored = try granary(["restore", "alice", "--at", at, "--to", target])
            #expect(restored.status == 0, "\(restored.stderr)")
            if restored.stderr.contains("within the followed window") {
                #expect(
                    FileSystem.isRegularFile(target + "/Fresh.sqlite"),
                    "claimed \(at) without the store made before it: \(restored.stderr)\n\(follow.journal)")
            }
        }
        #expect(!follow.journal.contains("segment 2 of"), "\(follow.journal)")
    }

    @Test(
        "a user a stop leaves unread is not said shipped through its commit: restore --at after the commit claims nothing it lacks"
    )
    func stopLeavesAUserUnread() throws {
        try FileSystem.makeDirectory(root + "/bob")
        let bobStore = root + "/bob/Local.sqlite"
        try FollowFixtures.makeWALStore(bobStore)
        let bob = try UserID("bob")
        // A long interval (changes wait for the stop) and a stop that reads only the oldest user.
        let follow = try FollowProcess(
            root: root, repo: repo, log: folder.child("follow.log"), interval: "20s",
            environment: ["GRANARY_TEST_FOLLOW_STOP_MS": "0"])
        try waitFor("both first generations", follow) {
            try FollowedGenerations.list(in: LocalRepository(path: repo), user: bob).first?.segments.isEmpty == false
                && generations().first?.segments.isEmpty == false
        }
        usleep(500_000)
        try write(2, tag: "alice late")
        usleep(100_000)
        let bobCommitted = ArchiveName.micros(Date())
        do {
            let db = try Database(path: bobStore, mode: .readWrite)
            try db.keepWALOnClose()
            try db.run("INSERT INTO items(body) VALUES ('bob late')")
        }
        usleep(400_000)
        follow.stop()
        #expect(follow.journal.contains("stopping: 1 users with changes not read"), "\(follow.journal)")

        // The state never says bob shipped through a moment after his commit left in the -wal…
        let state = try #require(FollowStatus.read(repository: repo, host: HostName.machine))
        let through = state.users["bob"]?.shippedThrough ?? 0
        #expect(through < bobCommitted, "bob said shipped through \(through), after his commit at \(bobCommitted)")
        // …and a restore to a moment after it does not claim that moment.
        let at = ArchiveName.stamp(micros: max(through, bobCommitted + 1_000), precise: true)
        let target = folder.child("bob-restored")
        let restored = try granary(["restore", "bob", "--at", at, "--to", target])
        #expect(restored.status == 0, "\(restored.stderr)")
        if restored.stderr.contains("within the followed window") {
            let db = try Database(path: target + "/Local.sqlite", mode: .readOnly)
            #expect(
                try db.scalar("SELECT count(*) FROM items WHERE body = 'bob late'")?.integer == 1,
                "claimed \(at) without bob's commit: \(restored.stderr)")
        }
    }

    @Test(
        "the follow lock is held by the processes the follower starts too: killed first, it is not free until they end")
    func lockOutlivesTheFollowerInItsChildren() throws {
        let userRoot = Root(path: root)
        let repository = LocalRepository(path: repo)
        let lock = try FollowLock.acquire(root: userRoot, repository: repository)
        // A child started as rclone is (posix_spawn, the descriptor without close-on-exec).
        var pid: pid_t = 0
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/sleep"), strdup("2"), nil]
        defer { for pointer in argv { free(pointer) } }
        #expect(posix_spawn(&pid, "/bin/sleep", nil, nil, argv, environ) == 0)
        // The follower goes (as if killed: its own descriptor closed, the file left in place).
        lock.release()
        var refused = false
        do { try FollowLock.acquire(root: userRoot, repository: repository).release() } catch {
            if case .followHeld = error { refused = true }
        }
        #expect(refused, "the lock was free while the follower's child still ran")
        var status: Int32 = 0
        #expect(waitpid(pid, &status, 0) == pid)
        try FollowLock.acquire(root: userRoot, repository: repository).release()
    }
}
