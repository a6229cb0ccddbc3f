import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Following's proof: a writer commits into a user's WAL store and logs each row it
/// got acknowledged with the moment, checkpointing as apps do (PASSIVE, RESTART, TRUNCATE);
/// `granary follow` runs, is killed with -9 and started again; then at random moments T of the
/// followed windows, `restore --at T --to DIR` holds every row acknowledged at or before T - 1 s,
/// none acknowledged after T + 1 s, exactly a prefix of the ledger, and passes integrity_check.
@Suite("follow: restore --at any moment of a followed window", .serialized)
struct FollowLedgerTests {
    let folder = TemporaryFolder("granary-follow")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }
    let user = "alice"
    var store: String { root + "/alice/Local.sqlite" }

    init() throws {
        try FileSystem.makeDirectory(root + "/alice")
        try FollowFixtures.makeWALStore(store, rows: (1...20).map { "item \($0)" }, ledger: true, keepWAL: false)
    }

    typealias Follow = FollowProcess

    /// The ledger: each acknowledged row and when COMMIT returned (microseconds).
    func ledger(_ path: String) -> [(seq: Int64, at: Int64)] {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").compactMap { line in
            let parts = line.split(separator: " ")
            guard parts.count == 2, let seq = Int64(parts[0]), let at = Int64(parts[1]) else { return nil }
            return (seq, at)
        }
    }

    func segments() -> Int {
        FollowCatalogue.generations(in: repo, user: try! UserID(user), host: nil).reduce(0) { $0 + $1.segments.count }
    }

    @Test("restore --at T holds what was acknowledged by T - 1 s and nothing after T + 1 s, across a kill -9")
    func ledgerProof() throws {
        let ledgerFile = folder.child("ledger")
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: GranaryProcess.binDirectory + "/granary-ledger-writer")
        writer.arguments = [
            "--ledger", ledgerFile, "--times", "--interval-ms", "4", "--checkpoint-every", "200", store,
        ]
        writer.standardError = FileHandle.nullDevice
        try writer.run()
        defer {
            if writer.isRunning { kill(writer.processIdentifier, SIGKILL) }
            writer.waitUntilExit()
        }
        var follow = try Follow(root: root, repo: repo, log: folder.child("follow-1.log"))
        try waitFor("segments and 400 rows") { segments() >= 8 && ledger(ledgerFile).count >= 400 }
        // Killed at any point: the next follow resumes or starts a new generation.
        follow.stop(SIGKILL)
        let before = ledger(ledgerFile).count
        follow = try Follow(root: root, repo: repo, log: folder.child("follow-2.log"))
        // ... and a window longer than 1.5 s (below): on a loaded machine the rows come slower than
        // the segments, or a generation starts late.
        let longWindow = {
            FollowCatalogue.generations(in: repo, user: try UserID(user), host: nil).compactMap(\.window).contains {
                $0.to - $0.from > 1_500_000
            }
        }
        try waitFor("400 more rows, more segments and a window of 1.5 s") {
            try ledger(ledgerFile).count >= before + 400 && segments() >= 16 && longWindow()
        }
        kill(writer.processIdentifier, SIGKILL)
        writer.waitUntilExit()
        // SIGTERM stops it; one more round (--once) reads the last commits.
        follow.stop(SIGTERM)
        #expect(follow.process.terminationReason == .exit)
        let once = try GranaryProcess.run(["follow", "--once", "--root", root, "--repo", repo])
        #expect(once.status == 0, "\(once.stderr)")

        let rows = ledger(ledgerFile)
        let generations = FollowCatalogue.generations(in: repo, user: try UserID(user), host: nil)
        let windows = generations.compactMap(\.window)
        #expect(!windows.isEmpty)
        // A window longer than 1.5 s: its restores need rows only the replay puts back
        // (acknowledged after the base was published, more than 1 s before T).
        #expect(
            windows.contains { $0.to - $0.from > 1_500_000 },
            "windows \(windows), generations \(generations.map { ($0.name, $0.segments.map(\.name)) })")
        let log = (try? String(contentsOfFile: folder.child("follow-1.log"), encoding: .utf8)) ?? ""
        #expect(log.contains("new generation"))

        // Moments: each window's first and last, and random ones inside, from a fixed seed.
        var moments: [Int64] = windows.flatMap { [$0.from, $0.to] }
        var rng = SplitMix(seed: 51)
        let total = windows.reduce(Int64(0)) { $0 + ($1.to - $1.from) }
        while moments.count < windows.count * 2 + 12 && total > 0 {
            var pick = Int64(rng.next() % UInt64(total))
            for window in windows {
                if pick <= window.to - window.from {
                    moments.append(window.from + pick)
                    break
                }
                pick -= window.to - window.from
            }
        }
        #expect(moments.count >= 10)
        var counts: [Int] = []
        for (index, moment) in moments.enumerated() {
            let target = folder.child("at-\(index)")
            #expect(mkdir(target, 0o700) == 0)
            let result = try GranaryProcess.run([
                "restore", user, "--at", ArchiveName.stamp(micros: moment, precise: true), "--to", target, "--root",
                root, "--repo", repo,
            ])
            #expect(result.status == 0, "restore --at failed: \(result.stderr)")
            #expect(result.stderr.contains("within the followed window"), "\(result.stderr)")
            let restored = try Database(path: target + "/Local.sqlite", mode: .readOnly)
            #expect(restored.integrityCheck(full: true) == ["ok"])
            let seqs = Set(
                try restored.rows("SELECT seq FROM ledger_writes").compactMap { row -> Int64? in
                    if case .integer(let n) = row[0] { return n }
                    return nil
                })
            let mustHave = rows.filter { $0.at <= moment - 1_000_000 }.map(\.seq)
            let mustNot = rows.filter { $0.at > moment + 1_000_000 }.map(\.seq)
            #expect(mustHave.allSatisfy(seqs.contains), "T=\(moment): an acknowledged row is missing")
            #expect(!mustNot.contains(where: seqs.contains), "T=\(moment): a row from after T + 1 s is there")
            // A commit boundary: exactly the ledger's first rows (the writer commits one row at a time).
            counts.append(seqs.count)
            let acknowledged = rows.map(\.seq)
            let prefix = Set(acknowledged.prefix(seqs.count))
            let unacknowledged = seqs.subtracting(acknowledged)
            #expect(
                seqs == prefix
                    || (unacknowledged.count == 1
                        && seqs.subtracting(unacknowledged) == Set(acknowledged.prefix(seqs.count - 1))),
                "T=\(moment): not a prefix of the ledger")
        }

        // Different moments, different states.
        #expect(Set(counts).count >= 8)
        // Outside every window: the archive alone, and said so.
        let early = try #require(windows.first).from - 60_000_000
        let target = folder.child("early")
        #expect(mkdir(target, 0o700) == 0)
        let fallback = try GranaryProcess.run([
            "restore", user, "--at", ArchiveName.stamp(micros: early, precise: true), "--to", target, "--root", root,
            "--repo", repo,
        ])
        #expect(fallback.stderr.contains("within the followed window") == false)

        // A damaged segment: restore --at inside its window refuses (65), naming it, and places nothing.
        let damaged = try #require(generations.last { ($0.window.map { $0.to > $0.from }) ?? false })
        let segment = try #require(damaged.segments.last)
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: segment.path)))
        bytes[bytes.count / 2] ^= 0x20
        try Data(bytes).write(to: URL(fileURLWithPath: segment.path))
        let refused = folder.child("refused")
        #expect(mkdir(refused, 0o700) == 0)
        let refusal = try GranaryProcess.run([
            "restore", user, "--at", ArchiveName.stamp(micros: damaged.window!.to, precise: true), "--to", refused,
            "--root", root, "--repo", repo,
        ])
        #expect(refusal.status == 65, "\(refusal.stderr)")
        #expect(refusal.stderr.contains(segment.name), "\(refusal.stderr)")
        #expect((try FileManager.default.contentsOfDirectory(atPath: refused)).isEmpty)

        // A generation goes with its base: deleting the oldest base removes its segments too.
        let oldest = try #require(generations.first)
        let deleted = try GranaryProcess.run([
            "delete", user + "/" + oldest.name, "--force", "--root", root, "--repo", repo,
        ])
        #expect(deleted.status == 0, "\(deleted.stderr)")
        let after = FollowCatalogue.generations(in: repo, user: try UserID(user), host: nil)
        #expect(!after.contains { $0.name == oldest.name })
        #expect(after.count == generations.count - 1)
    }
}

/// A small seeded generator (the moments are the same on every run).
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49D5_8EB3_3111
        return z ^ (z >> 31)
    }
}
