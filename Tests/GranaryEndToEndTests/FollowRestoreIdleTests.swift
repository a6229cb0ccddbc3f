import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `restore --at` after a user went idle, and past a followed window's end: a writer commits
/// rows and logs each acknowledged one with its moment, then stops while `granary follow` keeps
/// running. A time after the last write that follow's state attests (caught up through it)
/// restores every acknowledged row, said to be within the window; a time past what it attests
/// restores to the window's end, said so, never claimed. A segment renamed to claim a longer
/// window is refused (65, naming it), never trusted. A folder with no store yet is no alarm.
@Suite("follow: restore --at an idle user's time and past a window's end", .serialized)
struct FollowRestoreIdleTests {
    let folder = TemporaryFolder("granary-follow-idle")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }
    let user = "alice"
    var store: String { root + "/alice/Local.sqlite" }

    init() throws {
        try FileSystem.makeDirectory(root + "/alice")
        try FollowFixtures.makeWALStore(store, rows: (1...20).map { "item \($0)" }, ledger: true, keepWAL: false)
    }

    /// The ledger: each acknowledged row and when COMMIT returned (microseconds).
    func ledger(_ path: String) -> [(seq: Int64, at: Int64)] {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").compactMap { line in
            let parts = line.split(separator: " ")
            guard parts.count == 2, let seq = Int64(parts[0]), let at = Int64(parts[1]) else { return nil }
            return (seq, at)
        }
    }

    func generations() -> [FollowCatalogue.Generation] {
        FollowCatalogue.generations(in: repo, user: try! UserID(user), host: nil)
    }

    /// What follow's state says of `name` (the one host's file).
    func state(_ name: String) -> FollowStatus.User? {
        let files = FileSystem.contents(of: repo + "/.granary-follow").filter { $0.hasSuffix(".json") }
        guard files.count == 1 else { return nil }
        return FollowStatus.read(repository: repo, host: String(files[0].dropLast(5)))?.users[name]
    }

    /// `restore --at AT --to` a new folder: the result and the ledger rows the restored store holds.
    func restore(_ at: String, _ name: String, _ extra: [String] = []) throws -> (
        GranaryProcess.Result, Set<Int64>?, String
    ) {
        let target = folder.child(name)
        #expect(mkdir(target, 0o700) == 0)
        let result = try GranaryProcess.run(
            ["restore", user, "--at", at, "--to", target, "--root", root, "--repo", repo] + extra)
        guard result.status == 0, extra.isEmpty else { return (result, nil, target) }
        let restored = try Database(path: target + "/Local.sqlite", mode: .readOnly)
        #expect(restored.integrityCheck(full: true) == ["ok"])
        let seqs = Set(
            try restored.rows("SELECT seq FROM ledger_writes").compactMap { row -> Int64? in
                if case .integer(let n) = row[0] { return n }
                return nil
            })
        return (result, seqs, target)
    }

    @Test(
        "an idle user: --at after the last write restores every acknowledged row (attested by follow), past it the window's end (said), a renamed segment is refused"
    )
    func idleUser() throws {
        // A date the calendar does not have is a usage error, not another day.
        let (impossible, _, _) = try restore("2026-02-30T10:00:00Z", "impossible")
        #expect(impossible.status == 64, "\(impossible.stderr)")
        #expect(impossible.stderr.contains("--at 2026-02-30T10:00:00Z is not a time"), "\(impossible.stderr)")

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
        let follow = try FollowProcess(root: root, repo: repo, log: folder.child("follow.log"))
        try waitFor("3 segments and 300 rows", follow) {
            (generations().last?.segments.count ?? 0) >= 3 && ledger(ledgerFile).count >= 300
        }
        // The user goes idle; follow keeps running. SIGTERM: the writer finishes the transaction
        // and ledger line under way, so the ledger holds every committed row (SIGKILL could
        // leave one committed row unlogged, which the exact comparisons below would count).
        kill(writer.processIdentifier, SIGTERM)
        writer.waitUntilExit()
        let rows = ledger(ledgerFile)
        let all = Set(rows.map(\.seq))
        let lastWrite = try #require(rows.map(\.at).max())
        // Follow ships the last commits, then its state says it was caught up well past them.
        var windowEnd: Int64 = 0
        try waitFor("follow caught up 2 s past the last write and the window's end", follow) {
            guard let generation = generations().last, let window = generation.window,
                let entry = state(user), entry.generation == generation.name,
                entry.sequence == generation.segments.last?.sequence, let through = entry.shippedThrough
            else { return false }
            windowEnd = window.to
            return through >= max(window.to, lastWrite) + 2_000_000
        }
        // A time 1 s after the window's end and the last write: within the window, as attested.
        let attestedAt = max(windowEnd, lastWrite) + 1_000_000
        let (within, rowsWithin, _) = try restore(ArchiveName.stamp(micros: attestedAt, precise: true), "attested")
        #expect(within.status == 0, "\(within.stderr)")
        #expect(within.stderr.contains("within the followed window"), "\(within.stderr)")
        #expect(within.stderr.contains("attested by follow through"), "\(within.stderr)")
        #expect(
            rowsWithin == all, "an acknowledged row is missing: \(all.subtracting(rowsWithin ?? []).sorted().prefix(5))"
        )
        // --dry-run replays too, and says the same.
        let (dry, _, _) = try restore(ArchiveName.stamp(micros: attestedAt, precise: true), "dry", ["--dry-run"])
        #expect(dry.status == 0 && dry.stderr.contains("attested by follow through"), "\(dry.stderr)")

        // Follow stopped: its state attests nothing after it; a later time restores to the
        // window's end, the newest point covered, and says so (never claiming the time).
        follow.stop(SIGTERM)
        let through = try #require(state(user)?.shippedThrough)
        let end = ArchiveName.stamp(micros: windowEnd, precise: true)
        for (index, at) in [ArchiveName.stamp(micros: through + 5_000_000, precise: true), "now"].enumerated() {
            let (past, rowsPast, _) = try restore(at, "past-\(index)")
            #expect(past.status == 0, "\(past.stderr)")
            #expect(!past.stderr.contains("within the followed window"), "\(at): \(past.stderr)")
            #expect(
                past.stderr.contains("is past the followed window's end \(end) of alice: restoring to \(end)"),
                "\(at): \(past.stderr)")
            #expect(past.stderr.contains("if any, were not shipped"), "\(at): \(past.stderr)")
            // Every row was shipped before the window's end: none lost.
            #expect(rowsPast == all, "\(at): \(all.subtracting(rowsPast ?? []).count) acknowledged rows missing")
        }
        // The same in the JSON document's warnings.
        let (json, _, _) = try restore("now", "json", ["--json", "--dry-run"])
        #expect(json.status == 0, "\(json.stderr)")
        let document = try #require(
            try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let warnings = document["warnings"] as? [String] ?? []
        #expect(warnings.contains { $0.contains("is past the followed window's end \(end)") }, "\(json.stdout)")

        // The last segment renamed to claim a window an hour longer: a time inside the claimed
        // window is refused, naming the segment, and nothing is placed.
        let generation = try #require(generations().last)
        let last = try #require(generation.segments.last)
        let folderPath = (last.path as NSString).deletingLastPathComponent
        for (index, shift) in [(Int64(0), Int64(3_600_000_000)), (3_600_000_000, 3_600_000_000)].enumerated() {
            let name = Segment.fileName(sequence: last.sequence, first: last.first + shift.0, last: last.last + shift.1)
            let current = FileSystem.contents(of: folderPath).first { $0.hasPrefix(String(last.name.prefix(10))) }
            #expect(rename(folderPath + "/" + (current ?? last.name), folderPath + "/" + name) == 0)
            let (tampered, _, target) = try restore(
                ArchiveName.stamp(micros: last.last + 600_000_000, precise: true), "tampered-\(index)")
            #expect(tampered.status == 65, "\(tampered.stderr)")
            #expect(tampered.stderr.contains(name), "\(tampered.stderr)")
            #expect(tampered.stderr.contains("not those its name gives"), "\(tampered.stderr)")
            #expect(FileSystem.contents(of: target).isEmpty)
        }
    }

    @Test("a followed user whose folder holds no store yet passes check: OK in text, JSON, Nagios and the text file")
    func newUser() throws {
        try FileSystem.makeDirectory(root + "/bob")
        let once = try GranaryProcess.run(["follow", "--once", "--root", root, "--repo", repo])
        #expect(once.status == 0, "\(once.stderr)")
        // Follow has no generation for bob, and says why.
        let entry = try #require(state("bob"))
        #expect(entry.generation == nil)
        #expect(entry.paused?.contains("holds no SQLite store yet") == true, "\(String(describing: entry.paused))")
        let base = ["--root", root, "--repo", repo]
        let text = try GranaryProcess.run(["check", "bob", "-v"] + base)
        #expect(text.status == 0, "\(text.stdout)\(text.stderr)")
        #expect(text.stdout.contains("OK    bob: nothing to back up"), "\(text.stdout)")
        let json = try GranaryProcess.run(["check", "bob", "--json"] + base)
        #expect(json.status == 0, "\(json.stdout)")
        let document = try #require(
            (try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])?["users"]
                as? [[String: Any]])
        let bob = try #require(document.first)
        #expect(bob["ok"] as? Bool == true, "\(json.stdout)")
        #expect(bob["nothingToBackUp"] as? Bool == true, "\(json.stdout)")
        #expect(bob["followed"] as? Bool == true, "\(json.stdout)")
        #expect(bob["followGap"] is NSNull, "\(json.stdout)")
        #expect(bob["problems"] as? Int == 0, "\(json.stdout)")
        let nagios = try GranaryProcess.run(["check", "bob", "--nagios"] + base)
        #expect(nagios.status == 0 && nagios.stdout.hasPrefix("GRANARY OK"), "\(nagios.stdout)")
        let prom = folder.child("check.prom")
        let textfile = try GranaryProcess.run(["check", "bob", "--textfile", prom] + base)
        #expect(textfile.status == 0, "\(textfile.stderr)")
        let metrics = try String(contentsOfFile: prom, encoding: .utf8)
        #expect(metrics.contains("granary_follow_problem{user=\"bob\"} 0"), "\(metrics)")
        #expect(metrics.contains("granary_check_ok 1"), "\(metrics)")
        // A store appears: following starts, and check still passes once follow shipped it.
        try FollowFixtures.makeWALStore(root + "/bob/Notes.sqlite")
        #expect(try GranaryProcess.run(["follow", "--once", "--root", root, "--repo", repo]).status == 0)
        #expect(state("bob")?.generation != nil)
        let started = try GranaryProcess.run(["check", "bob"] + base)
        #expect(started.status == 0, "\(started.stdout)")
    }
}
