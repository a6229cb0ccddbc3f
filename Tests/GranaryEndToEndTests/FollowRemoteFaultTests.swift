import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `follow --repo s3:…` behind a connection that stalls, slows and is cut (a ``FaultProxy``
/// between rclone and moto) while two users' ledger writers commit: one user's stalled uploads
/// do not stop the other's, a stall or a cut shows as lag (the segment is claimed once its
/// upload completed, never before), no segment of a generation is published after a missing
/// earlier one, and `restore --at T` at moments inside and around the faults holds every write
/// acknowledged by T − 1 s when T is claimed, and none acknowledged after T + 1 s.
@Suite(
    "follow: an S3 repository behind a connection that stalls, slows and is cut", .serialized,
    .enabled(if: S3Server.available, S3Server.unavailableReason)
)
struct FollowRemoteFaultTests {
    let folder = TemporaryFolder("granary-follow-faults")
    var root: String { folder.child("root") }
    let bucket: String
    let server: S3Server

    init() throws {
        (server, bucket) = try RemoteRepositoryTests.serverAndBucket("f")
    }

    var now: Int64 { ArchiveName.micros(Date()) }

    /// `user`'s ledger writer (``FollowMatrixTests/Owner``) on a WAL store made with `rows`,
    /// committing every `intervalMs`, started.
    func writer(
        _ user: String, intervalMs: Int, checkpointEvery: Int = 0, rows: [String], ledger: String? = nil
    ) throws -> FollowMatrixTests.Owner {
        try FileSystem.makeDirectory(root + "/" + user)
        let owner = FollowMatrixTests.Owner(
            user: user, root: root, ledger: folder.child(ledger ?? "ledger"), intervalMs: intervalMs,
            checkpointEvery: checkpointEvery, mode: "PASSIVE")
        try FollowFixtures.makeWALStore(owner.store, rows: rows, ledger: true)
        try owner.start()
        return owner
    }

    /// `follow` (a round every 200 ms) into `location` through a fresh ``FaultProxy`` to the server.
    func followBehindProxy(_ location: String) throws -> (proxy: FaultProxy, follow: FollowProcess) {
        let proxy = try FaultProxy(upstream: server.port)
        let follow = try FollowProcess(
            ["--root", root, "--repo", location], log: folder.child("follow.log"), interval: "200ms",
            environment: server.environment(endpointPort: proxy.port))
        return (proxy, follow)
    }

    /// `restore USER --at T --to DIR` (DIR a new folder `name`) audited against the user's ledger
    /// `rows`: it succeeds, and the store is a commit boundary (integrity check) holding a prefix of
    /// the ledger and nothing acknowledged after T + 1 s; when the restore says T is within the
    /// followed window (a claim), it holds every write acknowledged by T − 1 s. The restore's
    /// stderr, nil when it failed.
    func restoreAudited(
        _ user: String, at: Int64, rows: [(seq: Int64, at: Int64)], location: String, into name: String,
        detail: @autoclosure () -> String = ""
    ) throws -> String? {
        let target = folder.child(name)
        #expect(mkdir(target, 0o700) == 0)
        let stamp = ArchiveName.stamp(micros: at, precise: true)
        let result = try GranaryProcess.run(
            ["restore", user, "--at", stamp, "--to", target, "--root", root, "--repo", location],
            environment: server.environment())
        #expect(result.status == 0, "restore \(user) --at \(stamp): \(result.stderr)")
        guard result.status == 0 else { return nil }
        let path = target + "/Local.sqlite"
        let restored = try Database(path: path, mode: .readOnly)
        #expect(restored.integrityCheck(full: true) == ["ok"], "T=\(stamp) \(user)")
        let seqs = try LedgerAudit.ids(path, table: "ledger_writes")
        #expect(seqs == Set(rows.prefix(seqs.count).map(\.seq)), "T=\(stamp) \(user): not a prefix of the ledger")
        let late = rows.filter { $0.at > at + 1_000_000 }.map(\.seq).filter(seqs.contains).count
        #expect(late == 0, "T=\(stamp) \(user): \(late) rows acknowledged after T + 1 s")
        if result.stderr.contains("within the followed window") {
            let missing = rows.filter { $0.at <= at - 1_000_000 }.map(\.seq).filter { !seqs.contains($0) }
            #expect(
                missing.isEmpty,
                "T=\(stamp) \(user): claimed, yet \(missing.count) rows acknowledged by T - 1 s are missing (acknowledged \(rows.filter { missing.contains($0.seq) }.map { $0.at - at })) \(detail())"
            )
        }
        return result.stderr
    }

    @Test(
        "stall, slow, cut: other users go on, a fault is lag and never a false claim, restore --at holds what was acknowledged"
    )
    func stallSlowCut() throws {
        let location = initializedRepository("s3:\(bucket)/faults", environment: server.environment())
        let opened = try Repositories.open(location, environment: server.environment())
        func generations(_ user: String) -> [FollowCatalogue.Generation] {
            (try? FollowCatalogue.generations(in: opened, user: try UserID(user), host: nil)) ?? []
        }
        func segments(_ user: String) -> Int { generations(user).reduce(0) { $0 + $1.segments.count } }

        var owners: [FollowMatrixTests.Owner] = []
        // Ten commits a second each, alice with a PASSIVE checkpoint every 200 (and SQLite's own
        // every 1,000 pages): each -wal restart between two reads is a new generation, whose
        // base is a backup uploaded through the proxy too, so they are kept rare.
        defer { for owner in owners { owner.stop() } }
        for (user, every) in [("alice", 200), ("bob", 0)] {
            owners.append(
                try writer(
                    user, intervalMs: 100, checkpointEvery: every, rows: (1...20).map { "item \($0)" },
                    ledger: "ledger-" + user))
        }
        try waitFor("first writes") { owners.allSatisfy { $0.rows.count >= 5 } }

        let (proxy, follow) = try followBehindProxy(location)
        defer { proxy.stop() }
        defer { follow.stop(SIGKILL) }
        try waitFor("both users' first windows") { owners.allSatisfy { segments($0.user) >= 3 } }
        let began = owners.compactMap { generations($0.user).first?.window?.from }.max() ?? now

        // 1. alice's uploads stall (accepted, nothing passed on); bob's go on meanwhile.
        var spans: [(name: String, from: Int64, to: Int64)] = []
        let aliceBefore = segments("alice")
        let bobBefore = segments("bob")
        var from = now
        proxy.mode = .stall(matching: "/alice/follow/")
        try waitFor("an upload of alice held") { proxy.stalledRequests > 0 }
        let aliceStalled = segments("alice")
        let bobStalled = segments("bob")
        usleep(4_000_000)
        let aliceDuring = segments("alice")
        let bobDuring = segments("bob")
        // Her lag, as check reads it from the state follow writes (not through the proxy's stall).
        let checked = try GranaryProcess.run(
            ["check", "alice", "--json", "--root", root, "--repo", location], environment: server.environment())
        proxy.mode = .pass
        spans.append(("stall", from, now))
        #expect(bobDuring >= bobStalled + 2, "bob's segments went on: \(bobBefore), \(bobStalled) → \(bobDuring)")
        // Her segments go up one at a time, in order: with one held, none lands behind it.
        #expect(
            aliceDuring == aliceStalled, "alice's uploads were held: \(aliceBefore), \(aliceStalled) → \(aliceDuring)")
        if let report = ((try? JSONSerialization.jsonObject(with: Data(checked.stdout.utf8))) as? [String: Any])?[
            "users"] as? [[String: Any]], let lag = report.first?["followLagSeconds"] as? Double
        {
            #expect(lag >= 1.5, "alice's lag during the stall: \(lag) s")
        } else {
            Issue.record("check alice --json: \(checked.stdout) \(checked.stderr)")
        }
        try waitFor("alice's segments after the stall") { segments("alice") > aliceDuring + 1 }

        // 2. Every connection slowed to 16 KiB/s each way.
        from = now
        proxy.mode = .slow(bytesPerSecond: 16 << 10)
        usleep(3_000_000)
        proxy.mode = .pass
        spans.append(("slow", from, now))

        // 3. Every connection cut once 1 KiB went up (a request head and little more).
        from = now
        let cutBefore = owners.map { segments($0.user) }
        proxy.mode = .cutUpload(after: 1024)
        usleep(3_000_000)
        proxy.mode = .pass
        spans.append(("cut", from, now))
        try waitFor("segments after the cut") {
            zip(owners, cutBefore).allSatisfy { owner, before in segments(owner.user) > before + 1 }
        }
        usleep(1_000_000)
        for owner in owners { owner.stop() }
        follow.stop(SIGTERM)
        let once = try GranaryProcess.run(
            ["follow", "--once", "--root", root, "--repo", location], environment: server.environment())
        #expect(once.status == 0, "\(once.stderr)")
        let ended = now
        // Whether an upload was under way during the cut depends on the machine's pace.
        withKnownIssue("no segment upload may have been under way during the cut", isIntermittent: true) {
            #expect(follow.journal.contains("segment upload failed"), "\(follow.journal)")
        }

        // No hole: every generation's segments run from 1 without a gap.
        for owner in owners {
            for generation in generations(owner.user) {
                let numbers = generation.segments.map(\.sequence)
                #expect(numbers == Array(1...max(1, numbers.count)), "\(owner.user) \(generation.name): \(numbers)")
            }
        }

        // Moments at random over the run, and inside each fault.
        var rng = SplitMix(seed: 5151)
        var moments: [(at: Int64, user: Int)] = (0..<6).map { index in
            (began + Int64(rng.next() % UInt64(max(1, ended - began))), index % owners.count)
        }
        for span in spans {
            for user in owners.indices { moments.append((span.from + (span.to - span.from) / 2, user)) }
        }
        var claimed = 0
        for (index, moment) in moments.enumerated() {
            let owner = owners[moment.user]
            // With a false claim, the segments' first and last observations relative to T tell it
            // apart (one was found here: a segment given up and read again, its commits'
            // acknowledgements bounded by the later changes reported; UserFollower.rereading).
            guard
                let said = try restoreAudited(
                    owner.user, at: moment.at, rows: owner.rows, location: location, into: "at-\(index)",
                    detail:
                        "segments \(generations(owner.user).map { $0.segments.map { "\($0.sequence):\($0.first - moment.at)..\($0.last - moment.at)" } })"
                )
            else { continue }
            if said.contains("within the followed window") {
                claimed += 1
            } else {
                #expect(saysNoClaim(said), "\(said)")
                let windows = generations(owner.user).flatMap(\.windows)
                #expect(
                    !windows.contains { $0.from <= moment.at && moment.at <= $0.to },
                    "T=\(ArchiveName.stamp(micros: moment.at, precise: true)) \(owner.user)")
            }
        }
        print("follow through faults: \(moments.count) moments, \(claimed) claimed, spans \(spans.map(\.name))")
        #expect(claimed > 0)
    }
}

/// A user's next segments are read and staged while an earlier one uploads, and claimed strictly
/// in order: with every upload of that user stalled, the follower goes on reading (several
/// segments staged), none of them reaches the repository, and nothing past the last published
/// segment is claimed. SIGTERM then exits with the uploads still stalled,
/// saying per user what it left; the next run ships those commits from the `-wal` in the same
/// generation, and `restore --at` holds the ledger.
extension FollowRemoteFaultTests {

    @Test("a stalled upload holds back its user's later segments; SIGTERM leaves them, said; the next run ships them")
    func stagedBehindStall() throws {
        let location = initializedRepository("s3:\(bucket)/staged", environment: server.environment())
        let opened = try Repositories.open(location, environment: server.environment())
        func generations() -> [FollowCatalogue.Generation] {
            (try? FollowCatalogue.generations(in: opened, user: try UserID("alice"), host: nil)) ?? []
        }
        func sequences() -> [Int] { generations().last?.segments.map(\.sequence) ?? [] }

        // Ten commits a second, no checkpoint of its own: the -wal keeps every commit for the
        // next run.
        let owner = try writer("alice", intervalMs: 100, rows: (1...20).map { "item \($0)" })
        defer { owner.stop() }
        try waitFor("first writes") { owner.rows.count >= 5 }

        let (proxy, follow) = try followBehindProxy(location)
        defer { proxy.stop() }
        defer { follow.stop(SIGKILL) }
        try waitFor("alice's first segments") { sequences().count >= 3 }
        let generation = generations().last?.name

        // Her uploads stall: the one under way is held, the next ones are read and staged behind it.
        let stallFrom = now
        proxy.mode = .stall(matching: "/alice/follow/")
        try waitFor("an upload of alice held") { proxy.stalledRequests > 0 }
        let held = sequences()
        let heldWindow = generations().last?.window
        usleep(3_000_000)
        #expect(sequences() == held, "no segment published behind the stalled one: \(held) → \(sequences())")
        #expect(generations().last?.window?.to == heldWindow?.to, "nothing more claimed during the stall")

        // A stop with the upload still stalled: it exits, and says what it left.
        follow.stop(SIGTERM)
        #expect(follow.process.terminationStatus == 0, "\(follow.journal)")
        let journal = follow.journal
        let leftLine = journal.split(separator: "\n").first { $0.contains("alice: stopping: segment") }
        #expect(leftLine != nil, "the stop says what alice's uploads left: \(journal)")
        // Several segments were staged behind the stalled one (read on while it uploaded).
        #expect(leftLine?.contains("–") == true, "more than one segment left: \(leftLine ?? "")")
        proxy.mode = .pass
        let stallTo = now
        // A request the proxy held whole lands when it lets it go, though rclone was killed (as a
        // request the network delivered whole would): then only as the prefix's next, never
        // after a hole.
        let landed = sequences()
        #expect(
            landed == Array(1...max(1, landed.count)) && landed.count <= held.count + 1,
            "at most the next of the segments left landed, in order: \(held) → \(landed)")

        // The next run, with the connection whole again, ships them in the same generation.
        usleep(500_000)
        owner.stop()
        let once = try GranaryProcess.run(
            ["follow", "--once", "--root", root, "--repo", location], environment: server.environment())
        #expect(once.status == 0, "\(once.stderr)")
        #expect(!once.stderr.contains("new generation"), "resumed, not started again: \(once.stderr)")
        #expect(generations().last?.name == generation)
        let after = sequences()
        #expect(after == Array(1...max(1, after.count)) && after.count > held.count, "\(held) → \(after)")
        let ended = now

        // restore --at inside the stall, around the stop, and at the end holds the ledger.
        let rows = owner.rows
        // The end of the window published before the stall (claimed), inside the stall, at the
        // stop, and the last observation of the next run's segment (claimed: every commit left at
        // the stop must be there).
        let last = generations().last?.segments.last?.last ?? ended
        let moments = [heldWindow?.to ?? stallFrom, stallFrom + (stallTo - stallFrom) / 2, stallTo, last]
        var claimed: [Int] = []
        for (index, at) in moments.enumerated() {
            let said = try restoreAudited("alice", at: at, rows: rows, location: location, into: "at-\(index)")
            if said?.contains("within the followed window") == true { claimed.append(index) }
        }
        #expect(
            claimed.contains(0) && claimed.contains(3),
            "the window's end before the stall and the next run's last are claimed: \(claimed); \(generations().last.map { $0.windows } ?? [])"
        )
    }

    @Test(
        "a store made, written and removed while the user's uploads stall: the generation whose continuity was lost ends once its staged segments settle; it is not read on"
    )
    func breakWhileStalled() throws {
        let location = initializedRepository("s3:\(bucket)/break", environment: server.environment())
        let opened = try Repositories.open(location, environment: server.environment())
        func generations() -> [FollowCatalogue.Generation] {
            (try? FollowCatalogue.generations(in: opened, user: try UserID("alice"), host: nil)) ?? []
        }
        // Two commits a second: her reads go on (fewer segments staged than a user may have)
        // while her uploads stall.
        let owner = try writer("alice", intervalMs: 500, rows: ["first"])
        defer { owner.stop() }
        let (proxy, follow) = try followBehindProxy(location)
        defer { proxy.stop() }
        defer { follow.stop(SIGKILL) }
        try waitFor("alice's first segments") { (generations().last?.segments.count ?? 0) >= 2 }
        let before = generations().map(\.name)

        // Her uploads stall; a store appears, is written and goes again while they do (an app's
        // cache): a read sees it (continuity lost), the next reads no longer can.
        proxy.mode = .stall(matching: "/alice/follow/")
        try waitFor("an upload of alice held") { proxy.stalledRequests > 0 }
        let cache = root + "/alice/Cache.sqlite"
        try FollowFixtures.makeWALStore(cache, rows: (1...50).map { "cached \($0)" })
        try waitFor("a read of alice that finds Cache.sqlite", follow, upTo: .seconds(60)) {
            follow.journal.contains("continuity lost (new store Cache.sqlite)")
        }
        for suffix in ["", "-wal", "-shm"] { FileSystem.removeTree(cache + suffix) }
        usleep(1_000_000)
        proxy.mode = .pass

        try waitFor("a new generation of alice once her staged segments settled", follow, upTo: .seconds(90)) {
            generations().map(\.name).count > before.count
        }
        #expect(
            follow.journal.contains("new store Cache.sqlite"),
            "the new generation names what lost continuity: \(follow.journal)")
    }
}

/// A user's segments upload beside each other, and the claim stays a prefix: with the upload of
/// one of alice's segments held at the proxy while her next ones land, the repository holds
/// segments after a hole, and none of them is claimed (the window, `restore --at`) until the
/// held one lands; then they all are. Held again and the follower killed (kill -9: the held
/// upload is cut with it), the next run resumes from the prefix in the same generation, the
/// segments after the hole removed, and `restore --at` holds the ledger.
extension FollowRemoteFaultTests {

    @Test("segments landed after a held one are claimed only once it lands; kill -9 in between resumes from the prefix")
    func pipelinedPrefix() throws {
        let location = initializedRepository("s3:\(bucket)/prefix", environment: server.environment())
        let opened = try Repositories.open(location, environment: server.environment())
        let alice = try UserID("alice")
        func generations() -> [FollowCatalogue.Generation] {
            (try? FollowCatalogue.generations(in: opened, user: alice, host: nil)) ?? []
        }
        // Every segment in the repository, claimed or not.
        func listed() -> FollowedGenerations.Generation? {
            (try? FollowedGenerations.list(in: opened, user: alice))?.last
        }
        func claimed() -> [Int] { generations().last?.segments.map(\.sequence) ?? [] }

        // Ten commits a second, no checkpoint of its own: the -wal keeps every commit for the
        // next run.
        let owner = try writer("alice", intervalMs: 100, rows: (1...20).map { "item \($0)" })
        defer { owner.stop() }
        try waitFor("first writes") { owner.rows.count >= 5 }

        let (proxy, follow) = try followBehindProxy(location)
        defer { proxy.stop() }
        defer { follow.stop(SIGKILL) }
        try waitFor("alice's first segments") { claimed().count >= 3 }
        let generation = generations().last?.name

        // 1. One upload held, the next ones land behind it: a hole, and nothing after it claimed.
        proxy.mode = .holdFirstPut(matching: "/alice/follow/")
        try waitFor("an upload of alice held") { proxy.stalledRequests > 0 }
        try waitFor("a segment of alice landed after the held one", follow, upTo: .seconds(60)) {
            guard let listed = listed() else { return false }
            return !listed.missing.isEmpty && listed.segments.count > listed.claimed.count
        }
        var prefix = claimed()
        let window = generations().last?.window
        let hole = listed()!
        let orphan = hole.segments.last!
        #expect(prefix == Array(1...prefix.count), "the claim is a prefix: \(prefix)")
        #expect(hole.missing.first == prefix.count + 1, "the hole is right after the claim: \(hole.missing)")
        #expect(
            orphan.sequence > prefix.count + 1 && (window?.to ?? .max) < orphan.last,
            "a segment after the hole (\(orphan.name)) is not in the window \(String(describing: window))")
        let early = folder.child("at-hole")
        #expect(mkdir(early, 0o700) == 0)
        let stamp = ArchiveName.stamp(micros: orphan.last, precise: true)
        let atHole = try GranaryProcess.run(
            ["restore", "alice", "--at", stamp, "--to", early, "--root", root, "--repo", location],
            environment: server.environment())
        #expect(saysNoClaim(atHole.stderr), "\(atHole.stdout) \(atHole.stderr)")

        // 2. The held upload goes on: every segment after it is claimed, no hole.
        proxy.mode = .pass
        try waitFor("the held segment and those after it claimed", follow, upTo: .seconds(60)) {
            (generations().last?.window?.to ?? 0) >= orphan.last
        }
        // No hole up to the orphan (the claim runs through it). Later segments may be missing
        // for a moment: they upload side by side (up to 4 of alice's), and are claimed in order.
        let landed = listed()?.missing ?? [0]
        #expect(landed.allSatisfy { $0 > orphan.sequence }, "no hole up to \(orphan.name) once it landed: \(landed)")

        // 3. Held again, and the follower killed while segments lie after the hole.
        proxy.mode = .holdFirstPut(matching: "/alice/follow/")
        try waitFor("another upload of alice held") { proxy.stalledRequests > 1 }
        try waitFor("a segment of alice landed after the held one again", follow, upTo: .seconds(60)) {
            guard let listed = listed() else { return false }
            return !listed.missing.isEmpty && listed.segments.count > listed.claimed.count
        }
        follow.stop(SIGKILL)
        prefix = claimed()
        let left = listed()!.segments.filter { $0.sequence > prefix.count }.map(\.name)
        usleep(500_000)
        owner.stop()
        // The next run, straight to the server: it resumes from the prefix.
        let once = try GranaryProcess.run(
            ["follow", "--once", "--root", root, "--repo", location], environment: server.environment())
        #expect(once.status == 0, "\(once.stderr)")
        #expect(!once.stderr.contains("new generation"), "resumed, not started again: \(once.stderr)")
        #expect(generations().last?.name == generation)
        let after = listed()
        #expect(after?.missing == [], "no hole after the next run: \(after?.segments.map(\.name) ?? [])")
        #expect(
            Set(after?.segments.map(\.sequence) ?? []).count == after?.segments.count,
            "no sequence used twice: \(after?.segments.map(\.name) ?? [])")
        #expect(
            left.allSatisfy { name in after?.segments.contains { $0.name == name } == false },
            "the segments after the hole were removed: \(left)")
        #expect(claimed().count > prefix.count, "\(prefix) → \(claimed())")

        // restore --at over the whole run holds the ledger.
        let rows = owner.rows
        let windows = generations().last?.windows ?? []
        let from = windows.first?.from ?? 0
        let to = windows.last?.to ?? 0
        var claimedMoments = 0
        for (index, at) in [from, from + (to - from) / 3, from + 2 * (to - from) / 3, orphan.last, to].enumerated() {
            let said = try restoreAudited("alice", at: at, rows: rows, location: location, into: "at-\(index)")
            if said?.contains("within the followed window") == true { claimedMoments += 1 }
        }
        #expect(claimedMoments >= 3, "\(windows)")
    }
}

/// While a user's uploads lag, the rounds read meanwhile are merged into the user's newest
/// segment not yet uploading (one object for many rounds, under one sequence): with every upload
/// of alice's stalled for a few seconds, her reads go on, the journal says rounds were merged,
/// a landed segment spans many rounds, every segment checks out (`verify`), and `restore --at`
/// at moments inside a merged segment is claimed and holds every write acknowledged by T − 1 s
/// and none acknowledged after T + 1 s.
extension FollowRemoteFaultTests {

    @Test(
        "rounds read while uploads stall are merged into one segment; verify passes; restore --at inside it holds the ledger"
    )
    func mergedWhileStalled() throws {
        let location = initializedRepository("s3:\(bucket)/merged", environment: server.environment())
        let opened = try Repositories.open(location, environment: server.environment())
        func generations() -> [FollowCatalogue.Generation] {
            (try? FollowCatalogue.generations(in: opened, user: try UserID("alice"), host: nil)) ?? []
        }
        // Twenty commits a second, no checkpoint of its own.
        let owner = try writer("alice", intervalMs: 50, rows: (1...20).map { "item \($0)" })
        defer { owner.stop() }
        let (proxy, follow) = try followBehindProxy(location)
        defer { proxy.stop() }
        defer { follow.stop(SIGKILL) }
        try waitFor("alice's first segments") { (generations().last?.segments.count ?? 0) >= 3 }
        let generation = generations().last?.name

        proxy.mode = .stall(matching: "/alice/follow/")
        try waitFor("an upload of alice held") { proxy.stalledRequests > 0 }
        usleep(3_000_000)
        proxy.mode = .pass
        try waitFor("rounds merged while her uploads stalled", follow, upTo: .seconds(60)) {
            follow.journal.contains("rounds merged while uploads lagged")
        }
        usleep(1_000_000)
        owner.stop()
        usleep(500_000)
        follow.stop(SIGTERM)
        #expect(follow.process.terminationStatus == 0, "\(follow.journal)")
        #expect(generations().last?.name == generation, "merging started no generation: \(follow.journal)")

        // The segments run from 1 without a hole, and some landed segment holds many rounds: it
        // follows the one before it without a gap and spans more than a second.
        let segments = generations().last?.segments ?? []
        #expect(segments.map(\.sequence) == Array(1...max(1, segments.count)))
        let merged = zip(segments, segments.dropFirst()).map(\.1).filter { segment in
            let previous = segments.first { $0.sequence == segment.sequence - 1 }!
            return segment.first > previous.last && segment.last - segment.first > 1_000_000
        }
        #expect(!merged.isEmpty, "a merged segment landed: \(segments.map { "\($0.sequence):\($0.last - $0.first)" })")
        let verified = try GranaryProcess.run(
            ["verify", "--user", "alice", "--repo", location], environment: server.environment())
        #expect(verified.status == 0, "\(verified.stdout)\(verified.stderr)")

        let rows = owner.rows
        var index = 0
        for segment in merged.prefix(2) {
            for quarter in 1...3 {
                index += 1
                let at = segment.first + (segment.last - segment.first) * Int64(quarter) / 4
                // Claimed (inside a merged segment): every write acknowledged by T - 1 s is there.
                let said = try restoreAudited("alice", at: at, rows: rows, location: location, into: "at-\(index)")
                #expect(
                    said?.contains("within the followed window") != false,
                    "T=\(ArchiveName.stamp(micros: at, precise: true)): \(said ?? "")")
            }
        }
    }
}
