import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// One user's generation storm (docs/follow.md, "Generation storms"): an owner whose store is
/// replaced by a new file in a loop makes every read of it lose continuity, and each new
/// generation is a base backup. The storm is bounded per user (``UserFollower/generationBurst``,
/// then one per ``UserFollower/generationEvery``; the user's following paused between, a gap),
/// and another user's ledger, written all the while, holds the ledger rule at random moments.
extension FollowMatrixTests {
    @Test(
        "a store replaced in a loop: that user's new generations are bounded and paused with the reason; another user's restore --at holds the ledger rule"
    )
    func generationStorm() throws {
        try FileSystem.makeDirectory(root + "/alice")
        try FileSystem.makeDirectory(root + "/mallory")
        let alice = Owner(
            user: "alice", root: root, ledger: folder.child("ledger-alice"), intervalMs: 10, checkpointEvery: 300,
            mode: "PASSIVE")
        try FollowFixtures.makeWALStore(alice.store, rows: (1...20).map { "item \($0)" }, ledger: true)
        try alice.start()
        defer { alice.stop() }
        let hostile = root + "/mallory/Local.sqlite"
        try FollowFixtures.makeWALStore(hostile, rows: ["mallory"])
        // The file mallory renames over the store each time: a WAL store of its own (a new inode).
        let template = folder.child("mallory-template.sqlite")
        try FollowFixtures.makeWALStore(template, rows: ["mallory"], keepWAL: false)
        try waitFor("alice's first writes") { alice.rows.count >= 5 }

        let follow = try FollowProcess(root: root, repo: repo, log: folder.child("follow-storm.log"))
        defer { follow.stop(SIGKILL) }
        try waitFor("both users' first windows") {
            generations("alice").contains { $0.segments.count >= 2 } && !generations("mallory").isEmpty
        }
        let began = generations("alice").first?.window?.from ?? now

        // The storm: mallory's store replaced by a new file every 0.2 s, a commit in it each time.
        let stormStart = ContinuousClock.now
        var replacements = 0
        var sawPaused = false
        while ContinuousClock.now - stormStart < .seconds(20) {
            let next = root + "/mallory/.next.sqlite"
            unlink(next)
            unlink(hostile + "-wal")
            unlink(hostile + "-shm")
            #expect(FileManager.default.fileExists(atPath: template))
            try FileManager.default.copyItem(atPath: template, toPath: next)
            #expect(rename(next, hostile) == 0)
            let db = try Database(path: hostile, mode: .readWrite)
            try db.keepWALOnClose()
            try db.run("INSERT INTO items(body) VALUES (?)", [.text("storm \(replacements)")])
            replacements += 1
            usleep(200_000)
            // What check reads: the state follow writes names mallory's pause while it lasts.
            if !sawPaused, let state = Self.followState(repo) {
                sawPaused = state.users["mallory"]?.paused?.contains("new generations lately") == true
            }
        }
        let stormSeconds = (ContinuousClock.now - stormStart) / .seconds(1)
        usleep(1_500_000)
        alice.stop()
        follow.stop(SIGTERM)
        let ended = now

        // Mallory: at most the burst, then one per generationEvery (and the first), whatever the
        // number of replacements; the journal says the pause and why.
        let bound = 1 + UserFollower.generationBurst + Int(stormSeconds / 10) + 1
        let storm = generations("mallory").count
        #expect(
            storm <= bound, "\(storm) generations of mallory for \(replacements) replacements (bound \(bound))")
        #expect(storm >= 2, "the replacements never started a new generation: \(follow.journal.suffix(2000))")
        #expect(
            follow.journal.contains(
                "mallory: following paused: more than \(UserFollower.generationBurst) new generations"),
            "\(follow.journal.suffix(3000))")
        #expect(sawPaused, "the state for check never said mallory's following was paused")
        #expect(!follow.journal.contains("alice: following paused"), "\(follow.journal.suffix(3000))")

        // Alice: random moments over the storm, each holding the ledger rule.
        var rng = SplitMix(seed: 61)
        let moments: [(at: Int64, user: Int)] = (0..<8).map { _ in
            (began + Int64(rng.next() % UInt64(max(1, ended - began))), 0)
        }
        let audit = try self.audit(moments, owners: [alice])
        let summary =
            "generation storm: \(replacements) replacements of mallory's store in \(Int(stormSeconds)) s, \(storm) generations of mallory; alice: \(moments.count) moments (\(audit.covered) within a window), writes checked \(audit.checked), lost \(audit.lost), after T + 1 s \(audit.extra), false claims \(audit.falseClaims)"
        print(summary)
        #expect(audit.lost == 0 && audit.falseClaims == 0 && audit.extra == 0, "\(summary)")
        #expect(audit.covered >= moments.count / 2, "alice's following suffered from mallory's storm: \(summary)")
    }

    /// The state the follower last wrote to the local repository at `repo` (whatever its host).
    static func followState(_ repo: String) -> FollowStatus? {
        for name in FileSystem.contents(of: repo + "/.granary-follow") where name.hasSuffix(".json") {
            if let state = FollowStatus.read(repository: repo, host: String(name.dropLast(5))) { return state }
        }
        return nil
    }
}
