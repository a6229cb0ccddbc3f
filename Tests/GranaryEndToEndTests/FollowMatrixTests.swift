import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Following's ledger matrix (docs/follow.md, "The ledger matrix"): several users' WAL stores,
/// each written by a `granary-ledger-writer` that logs every acknowledged transaction with the
/// moment COMMIT returned and checkpoints as apps do (PASSIVE, RESTART or TRUNCATE); `granary
/// follow` running through events that cost continuity — kill -9 of follow, the store replaced
/// (a new file renamed over it), VACUUM, a page-size change, WAL → DELETE → WAL, a `granary
/// restore` of the user. Then, at random moments T, `restore USER --at T --to DIR` either says T
/// is within a followed window and holds every write acknowledged at or before T − 1 s, none
/// acknowledged after T + 1 s, whole transactions only, exactly a prefix of the ledger, and
/// passes integrity_check; or says T is outside every window, restores an archive, and claims
/// nothing. The counts are printed. `make test` runs a small matrix (a handful of moments);
/// GRANARY_SLOW_TESTS=1 (`make test-slow`, run by CI) the whole one: three users, every event,
/// three kills of follow, 50 random moments.
@Suite("follow: the ledger matrix", .serialized)
struct FollowMatrixTests {
    static let full = ProcessInfo.processInfo.environment["GRANARY_SLOW_TESTS"] == "1"
    let folder = TemporaryFolder("granary-follow-matrix")
    var root: String { folder.child("root") }
    /// A remote repository the matrix runs against instead of the local one (an S3 bucket on
    /// loopback: `FollowRemoteMatrixTests`), with the environment that reaches it.
    var remote: (location: String, environment: [String: String])?
    var repo: String { remote?.location ?? initializedRepository(folder.child("repo")) }
    /// What granary and follow are run with (the remote's credentials and endpoint).
    var environment: [String: String] { remote?.environment ?? [:] }
    /// Rows each transaction writes into ledger_parts besides its ledger_writes row.
    static let parts = 3

    /// One user: the store, its writer (started again after events that need the store to
    /// itself) and its ledger.
    final class Owner {
        let user: String
        let store: String
        let ledger: String
        let intervalMs: Int
        let checkpointEvery: Int
        let mode: String
        var writer: Process?
        init(user: String, root: String, ledger: String, intervalMs: Int, checkpointEvery: Int, mode: String) {
            self.user = user
            self.store = root + "/" + user + "/Local.sqlite"
            self.ledger = ledger
            self.intervalMs = intervalMs
            self.checkpointEvery = checkpointEvery
            self.mode = mode
        }

        /// Each acknowledged row and the moment COMMIT returned (microseconds), in ledger order.
        var rows: [(seq: Int64, at: Int64)] {
            ((try? String(contentsOfFile: ledger, encoding: .utf8)) ?? "").split(separator: "\n").compactMap { line in
                let parts = line.split(separator: " ")
                guard parts.count == 2, let seq = Int64(parts[0]), let at = Int64(parts[1]) else { return nil }
                return (seq, at)
            }
        }

        func start() throws {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: GranaryProcess.binDirectory + "/granary-ledger-writer")
            // Numbers go on from the last acknowledged one (a number is never used twice).
            let next = (rows.last?.seq ?? 0) + 1
            process.arguments = [
                "--ledger", ledger, "--name", user, "--start", String(next), "--times", "--interval-ms",
                String(intervalMs), "--parts", String(FollowMatrixTests.parts), "--checkpoint-every",
                String(checkpointEvery), "--checkpoint-mode", mode, store,
            ]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            writer = process
        }

        /// SIGTERM: the writer ends between two transactions, every committed row in its ledger.
        func stop() {
            guard let writer else { return }
            if writer.isRunning { kill(writer.processIdentifier, SIGTERM) }
            writer.waitUntilExit()
            self.writer = nil
        }

        deinit {
            if let writer, writer.isRunning { kill(writer.processIdentifier, SIGKILL) }
        }
    }

    typealias Follow = FollowProcess

    enum Event: String {
        case killFollow = "kill -9 of follow"
        case replaced = "store replaced (new file renamed over it)"
        case vacuum = "VACUUM"
        case pageSize = "page size changed (+ VACUUM)"
        case journalMode = "journal mode WAL -> DELETE -> WAL"
        case restored = "granary restore of the user"
    }

    var now: Int64 { ArchiveName.micros(Date()) }

    func generations(_ user: String) -> [FollowCatalogue.Generation] {
        guard let remote else { return FollowCatalogue.generations(in: repo, user: try! UserID(user), host: nil) }
        guard let opened = try? Repositories.open(remote.location, environment: remote.environment) else { return [] }
        return (try? FollowCatalogue.generations(in: opened, user: try UserID(user), host: nil)) ?? []
    }

    /// Runs granary, again while another command holds the user's lock (exit 75).
    func granary(_ arguments: [String]) throws -> GranaryProcess.Result {
        var result = try GranaryProcess.run(arguments + ["--root", root, "--repo", repo], environment: environment)
        for _ in 0..<20 where result.status == 75 {
            usleep(200_000)
            result = try GranaryProcess.run(arguments + ["--root", root, "--repo", repo], environment: environment)
        }
        return result
    }

    /// Opens the store as its app would (the writer stopped), runs `body`, closes it.
    func withStore(_ owner: Owner, _ body: (Database) throws -> Void) throws {
        let db = try Database(path: owner.store, mode: .readWrite)
        try body(db)
    }

    /// Changes the journal mode of `db` as an app would: a change out of WAL needs the file to
    /// itself, and SQLite does not wait for that (no busy handler): while follow reads the store
    /// (its read mark held for the moments of a read) the change is refused, and tried again.
    func setJournalMode(_ db: Database, _ mode: String) throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            do {
                try db.execute("PRAGMA journal_mode=\(mode)")
                return
            } catch {
                guard error.kind == .busy, ContinuousClock.now < deadline else { throw error }
                usleep(20_000)
            }
        }
    }

    /// Performs `event` on `owner`'s store (or on follow); returns when it is done.
    func perform(_ event: Event, on owner: Owner, follow: inout Follow, run: inout Int, sleeper: inout SplitMix)
        throws -> (from: Int64, to: Int64)
    {
        let from = now
        switch event {
        case .killFollow:
            follow.stop(SIGKILL)
            // Down for 0.5 to 2.5 s (a service manager's restart delay), then started again.
            usleep(useconds_t(500_000 + sleeper.next() % 2_000_000))
            run += 1
            follow = try Follow(
                root: root, repo: repo, log: folder.child("follow-\(run).log"), interval: followInterval,
                environment: environment)
        case .replaced:
            owner.stop()
            // The new file is written outside the user's folder (no store appears there), then
            // renamed over the store: a new inode with the same content.
            let replacement = folder.child("replacement-\(owner.user)-\(from).sqlite")
            try withStore(owner) { db in try db.execute("VACUUM INTO '\(replacement)'") }
            // Its -wal goes with the last connection that read (follow's read mark may be open when
            // the owner's or VACUUM INTO's closes, and follow's read-only connection never removes
            // it): each try reads the header, so that its close, the last, checkpoints and removes
            // it. An app renames over a store whose -wal is gone, or SQLite would apply it to the
            // new file.
            try waitFor("the -wal of \(owner.user) gone", upTo: .seconds(10)) {
                (try? withStore(owner) { db in _ = try db.scalar("PRAGMA schema_version") }) != nil
                    && access(owner.store + "-wal", F_OK) != 0
            }
            do {
                let copy = try Database(path: replacement, mode: .readWrite)
                try copy.execute("PRAGMA journal_mode=WAL")
            }
            #expect(rename(replacement, owner.store) == 0)
            try owner.start()
        case .vacuum:
            // With the writer running, as an app's maintenance does.
            try withStore(owner) { db in try db.execute("VACUUM") }
        case .pageSize:
            owner.stop()
            try withStore(owner) { db in
                let size = try db.pageSize() == 4096 ? 8192 : 4096
                try setJournalMode(db, "DELETE")
                try db.execute("PRAGMA page_size=\(size)")
                try db.execute("VACUUM")
                try setJournalMode(db, "WAL")
                #expect(try db.pageSize() == size)
            }
            try owner.start()
        case .journalMode:
            owner.stop()
            try withStore(owner) { db in try setJournalMode(db, "DELETE") }
            // Writes in rollback mode for a while: not followed, the archive's point in time.
            try owner.start()
            usleep(1_000_000)
            owner.stop()
            try withStore(owner) { db in try setJournalMode(db, "WAL") }
            try owner.start()
        case .restored:
            owner.stop()
            // Restored to an archive of the state the writer left: its ledger stays the truth.
            let backup = try granary(["backup", owner.user])
            #expect(backup.status == 0, "\(backup.stderr)")
            let restore = try granary(["restore", owner.user, "--method", "offline"])
            #expect(restore.status == 0, "\(restore.stderr)")
            try owner.start()
        }
        return (from, now)
    }

    /// What ``audit(_:owners:)`` counted.
    struct Audit {
        var acknowledged = 0
        var checked = 0
        var lost = 0
        var extra = 0
        var falseClaims = 0
        var covered = 0
        var outside = 0
        var states: Set<Int> = []
    }

    /// `restore USER --at T --to DIR` at each moment (T, the index of its owner in `owners`),
    /// each checked against the owner's ledger (the rule in the type's comment); the counts.
    func audit(_ moments: [(at: Int64, user: Int)], owners: [Owner]) throws -> Audit {
        var audit = Audit()
        for owner in owners { audit.acknowledged += owner.rows.count }
        for (index, moment) in moments.enumerated() {
            let owner = owners[moment.user]
            let rows = owner.rows
            let target = folder.child("at-\(index)")
            #expect(mkdir(target, 0o700) == 0)
            let stamp = ArchiveName.stamp(micros: moment.at, precise: true)
            let result = try granary(["restore", owner.user, "--at", stamp, "--to", target])
            #expect(result.status == 0, "restore \(owner.user) --at \(stamp): \(result.stderr)")
            guard result.status == 0 else { continue }
            let claimed = result.stderr.contains("within the followed window")
            let path = target + "/Local.sqlite"
            let restored = try Database(path: path, mode: .readOnly)
            #expect(restored.integrityCheck(full: true) == ["ok"], "T=\(stamp) \(owner.user): integrity_check")
            let seqs = try LedgerAudit.ids(path, table: "ledger_writes")
            // Whole transactions: every row has its parts, and no part is without its row.
            let whole = try restored.rows(
                """
                SELECT count(*) FROM ledger_writes w WHERE (SELECT count(*) FROM ledger_parts p WHERE p.seq = w.seq) != \(Self.parts)
                """
            ).first?[0].integer
            let orphans = try restored.rows(
                "SELECT count(*) FROM ledger_parts p WHERE NOT EXISTS (SELECT 1 FROM ledger_writes w WHERE w.seq = p.seq)"
            ).first?[0].integer
            #expect(whole == 0 && orphans == 0, "T=\(stamp) \(owner.user): a transaction restored in part")
            #expect(try restored.scalar("SELECT count(*) FROM items")?.integer == 20)
            // Exactly the ledger's first rows (a replay of the ledger up to its last row).
            let prefix = Set(rows.prefix(seqs.count).map(\.seq))
            #expect(seqs == prefix, "T=\(stamp) \(owner.user): not a prefix of the ledger")
            let mustNot = rows.filter { $0.at > moment.at + 1_000_000 }.map(\.seq)
            let late = mustNot.filter(seqs.contains).count
            audit.extra += late
            #expect(late == 0, "T=\(stamp) \(owner.user): \(late) rows acknowledged after T + 1 s")
            audit.checked += mustNot.count
            if claimed {
                audit.covered += 1
                let mustHave = rows.filter { $0.at <= moment.at - 1_000_000 }.map(\.seq)
                let missing = mustHave.filter { !seqs.contains($0) }.count
                audit.checked += mustHave.count
                audit.lost += missing
                if missing > 0 { audit.falseClaims += 1 }
                #expect(
                    missing == 0,
                    "T=\(stamp) \(owner.user): within a followed window, yet \(missing) rows acknowledged by T - 1 s are missing"
                )
                audit.states.insert(seqs.count)
            } else {
                audit.outside += 1
                // A gap: the newest archive or the gap's start, said so; never a moment inside a window.
                #expect(saysNoClaim(result.stderr), "\(result.stderr)")
                let windows = generations(owner.user).flatMap(\.windows)
                #expect(
                    !windows.contains { $0.from <= moment.at && moment.at <= $0.to },
                    "T=\(stamp) \(owner.user): inside a window, yet restored as outside")
            }
        }
        return audit
    }

    /// The case the matrix found: a follower started again resumes the generation from its last
    /// segment, and its first read ships what was committed while none ran. Those commits were
    /// observed only then, so the moments from the last segment before to that first one after
    /// are a gap (a restore there would lack writes acknowledged long before it), not window.
    @Test("commits made while follow was not running: the moments in between are a gap, said so")
    func resumedAfterDowntime() throws {
        let store = root + "/alice/Local.sqlite"
        try FileSystem.makeDirectory(root + "/alice")
        try FollowFixtures.makeWALStore(store, rows: ["before"])
        #expect(try granary(["follow", "--once"]).status == 0)
        // Committed while no follower runs, then a moment more than a second later.
        do {
            let db = try Database(path: store, mode: .readWrite)
            try db.keepWALOnClose()
            try db.run("INSERT INTO items(body) VALUES ('while down')")
        }
        usleep(1_500_000)
        let moment = now
        usleep(300_000)
        let again = try granary(["follow", "--once"])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.stderr.contains("resuming"), "\(again.stderr)")
        let generation = try #require(generations("alice").last)
        #expect(generations("alice").count == 1 && generation.segments.count == 2)
        let windows = generation.windows
        #expect(windows.count == 2, "\(windows)")
        #expect(!windows.contains { $0.from <= moment && moment <= $0.to })

        func restore(_ at: Int64, _ name: String) throws -> (text: String, rows: [String]) {
            let target = folder.child(name)
            #expect(mkdir(target, 0o700) == 0)
            let result = try granary([
                "restore", "alice", "--at", ArchiveName.stamp(micros: at, precise: true), "--to", target,
            ])
            #expect(result.status == 0, "\(result.stderr)")
            let db = try Database(path: target + "/Local.sqlite", mode: .readOnly)
            return (result.stderr, try db.rows("SELECT body FROM items ORDER BY id").compactMap { $0[0].text })
        }
        // In the gap: restored to where it begins (the last observation before the downtime), and
        // said so (never claimed as the moment itself).
        let gap = try restore(moment, "gap")
        #expect(saysNoClaim(gap.text), "\(gap.text)")
        #expect(gap.rows == ["before"])
        // At the resumed segment's last observation: the commit is there.
        let after = try restore(try #require(generation.segments.last).last, "after")
        #expect(after.text.contains("within the followed window"), "\(after.text)")
        #expect(after.rows == ["before", "while down"])
        // list shows the two windows, the gap between them.
        let listed = try granary(["list", "alice", "--json"])
        let document = try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [String: Any]
        #expect((document?["followed"] as? [Any])?.count == 2, "\(listed.stdout)")
        // verify says the same: the generation checks out, as two windows with the gap between.
        let verified = try granary(["verify", "--user", "alice", "--json"])
        #expect(verified.status == 0, "\(verified.stdout) \(verified.stderr)")
        let report = try JSONSerialization.jsonObject(with: Data(verified.stdout.utf8)) as? [String: Any]
        let followed = try #require((report?["followed"] as? [[String: Any]])?.first, "\(verified.stdout)")
        let pieces = try #require(followed["windows"] as? [[String: Any]], "\(verified.stdout)")
        #expect(pieces.count == 2, "\(verified.stdout)")
        let text = try granary(["verify", "--user", "alice", "--verbose"])
        #expect(text.stdout.contains("windows "), "\(text.stdout)")
    }

    @Test("a follower that lags more than a second behind a change does not claim the moments of its lag")
    func lagIsAGap() throws {
        let store = root + "/alice/Local.sqlite"
        try FileSystem.makeDirectory(root + "/alice")
        try FollowFixtures.makeWALStore(store, rows: ["before"])
        let db = try Database(path: store, mode: .readWrite)
        try db.keepWALOnClose()
        // The first read after the generation began stalls 2 s before it reads: the commit that
        // made it waits that long to be observed.
        let follow = try Follow(
            root: root, repo: repo, log: folder.child("follow.log"),
            environment: ["GRANARY_TEST_STALL_AT": "followRead:1:2000"])
        try waitFor("the generation's first segment") { generations("alice").last?.segments.count == 1 }
        try db.run("INSERT INTO items(body) VALUES ('late')")
        let acknowledged = now
        try waitFor("the late segment") { generations("alice").last?.segments.count == 2 }
        // Not lagging: observed within the interval, the window goes on.
        try db.run("INSERT INTO items(body) VALUES ('prompt')")
        try waitFor("the prompt segment") { generations("alice").last?.segments.count == 3 }
        follow.stop(SIGTERM)

        let generation = try #require(generations("alice").last)
        let late = generation.segments[1]
        #expect(late.last - acknowledged >= 1_900_000, "the stall: \(late.last - acknowledged) µs")
        // Acknowledged by moment - 1 s, observed after it: the moment is not claimed.
        let moment = acknowledged + 1_300_000
        let windows = generation.windows
        #expect(windows.count == 2, "\(windows)")
        #expect(!windows.contains { $0.from <= moment && moment <= $0.to }, "\(windows)")
        #expect(windows.last?.to == generation.segments[2].last)
        let target = folder.child("at")
        #expect(mkdir(target, 0o700) == 0)
        let result = try granary([
            "restore", "alice", "--at", ArchiveName.stamp(micros: moment, precise: true), "--to", target,
        ])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(saysNoClaim(result.stderr), "\(result.stderr)")
        // From the late segment's last observation on, the moments are claimed again, the write there.
        let after = folder.child("after")
        #expect(mkdir(after, 0o700) == 0)
        let claimed = try granary([
            "restore", "alice", "--at", ArchiveName.stamp(micros: late.last, precise: true), "--to", after,
        ])
        #expect(claimed.stderr.contains("within the followed window"), "\(claimed.stderr)")
        let rows = try Database(path: after + "/Local.sqlite", mode: .readOnly).rows(
            "SELECT body FROM items ORDER BY id"
        )
        .compactMap { $0[0].text }
        #expect(rows == ["before", "late"])
    }

    @Test("restore --at T at random moments across follow's hard cases: nothing lost, no false claim")
    func matrix() throws {
        let full = Self.full
        try runMatrix(
            specs: full
                ? [("alice", 20, 400, "PASSIVE"), ("bob", 5, 60, "RESTART"), ("carol", 5, 250, "TRUNCATE")]
                : [("alice", 20, 400, "PASSIVE"), ("bob", 5, 250, "TRUNCATE")],
            events: full
                ? [
                    .killFollow, .replaced, .vacuum, .killFollow, .pageSize, .journalMode, .restored, .vacuum,
                    .killFollow, .replaced, .restored, .pageSize,
                ]
                : [.killFollow, .replaced, .vacuum],
            count: full ? 50 : 6)
    }

    /// `follow`'s interval in the matrix (a remote repository's uploads take longer).
    var followInterval: String { remote == nil ? "100ms" : "200ms" }

    /// The matrix: owners as `specs` say (user, ms between transactions, checkpoint every N rows,
    /// its mode), `events` on them in turn, then `count` random moments and one in each event,
    /// each checked against the ledger.
    func runMatrix(specs: [(String, Int, Int, String)], events: [Event], count: Int, least: Int? = nil) throws {
        // alice: a slow writer with PASSIVE checkpoints (its -wal rarely restarts: a follow killed
        // and started again resumes it); bob RESTART and carol TRUNCATE, busier (each TRUNCATE
        // that shrinks the -wal between two reads costs a new generation: docs/follow.md).
        var owners: [Owner] = []
        for (user, interval, every, mode) in specs {
            try FileSystem.makeDirectory(root + "/" + user)
            let owner = Owner(
                user: user, root: root, ledger: folder.child("ledger-" + user), intervalMs: interval,
                checkpointEvery: every, mode: mode)
            try FollowFixtures.makeWALStore(owner.store, rows: (1...20).map { "item \($0)" }, ledger: true)
            try owner.start()
            owners.append(owner)
        }
        defer { for owner in owners { owner.stop() } }
        // Every writer has a -wal before follow starts (followed from its start).
        try waitFor("first writes") { owners.allSatisfy { $0.rows.count >= 5 } }

        var run = 1
        var follow = try Follow(
            root: root, repo: repo, log: folder.child("follow-1.log"), interval: followInterval,
            environment: environment)
        do {
            try waitFor("every user's first windows") {
                owners.allSatisfy { owner in generations(owner.user).contains { $0.segments.count >= 2 } }
            }
        } catch {
            Issue.record("follow's journal: \(follow.journal.suffix(3000))")
            throw error
        }
        // Moments are drawn from when every user's first window began (before it, no archive).
        let began = owners.compactMap { generations($0.user).first?.window?.from }.max() ?? now

        // The events, on users in turn, after a stretch of writes each.
        var rng = SplitMix(seed: 51)
        var disruptions: [(event: Event, user: String, from: Int64, to: Int64, generationsBefore: Int)] = []
        for (index, event) in events.enumerated() {
            // A stretch of 1 to 2.5 s of writes and following: the kill lands at a random point.
            usleep(useconds_t(1_000_000 + rng.next() % 1_500_000))
            let owner = owners[index % owners.count]
            let before = event == .killFollow ? 0 : generations(owner.user).count
            let span = try perform(event, on: owner, follow: &follow, run: &run, sleeper: &rng)
            disruptions.append((event, owner.user, span.from, span.to, before))
            if event != .killFollow && event != .vacuum {
                // A new generation (the store's continuity is lost), said in follow's journal.
                try waitFor("a new generation of \(owner.user) after \(event.rawValue)") {
                    generations(owner.user).count > before
                        && generations(owner.user).last.map { $0.segments.count >= 1 } == true
                }
            }
        }
        usleep(1_500_000)
        for owner in owners { owner.stop() }
        // The last commits shipped: SIGTERM ships what is held; one more round reads the rest.
        follow.stop(SIGTERM)
        let once = try GranaryProcess.run(
            ["follow", "--once", "--root", root, "--repo", repo], environment: environment)
        #expect(once.status == 0, "\(once.stderr)")
        let ended = now

        // Why each generation started, from follow's journals.
        var reasons: [String] = []
        for number in 1...run {
            let text = (try? String(contentsOfFile: folder.child("follow-\(number).log"), encoding: .utf8)) ?? ""
            reasons += text.split(separator: "\n").filter { $0.contains("new generation") || $0.contains("resuming") }
                .map(String.init)
        }
        // Each event that loses the store's continuity: a journal line saying why, besides the first.
        for owner in owners {
            let required = disruptions.filter {
                $0.user == owner.user && $0.event != .killFollow && $0.event != .vacuum
            }.count
            let said = reasons.filter { $0.contains(owner.user + ": new generation") }.count
            #expect(said >= 1 + required, "\(owner.user): \(said) journal lines for \(required) events")
        }

        // The moments: random ones over the whole run, and one inside each disruption (a follow
        // that was down, a store being replaced), where a false claim would hide.
        var moments: [(at: Int64, user: Int)] = (0..<count).map { index in
            (began + Int64(rng.next() % UInt64(ended - began)), index % owners.count)
        }
        for disruption in disruptions {
            let user = owners.firstIndex { $0.user == disruption.user } ?? 0
            let middle = disruption.from + (disruption.to - disruption.from) / 2
            if disruption.event == .killFollow {
                // Follow was down for every user: the slow writer's store is the one it may resume.
                moments.append((middle, 0))
                moments.append((middle, owners.count - 1))
            } else {
                moments.append((middle, user))
            }
        }

        let audit = try self.audit(moments, owners: owners)
        let (acknowledged, checked, lost, extra, falseClaims, covered, outside, states) = (
            audit.acknowledged, audit.checked, audit.lost, audit.extra, audit.falseClaims, audit.covered,
            audit.outside, audit.states
        )
        let summary =
            "follow ledger matrix: \(owners.count) users, \(events.count) events, \(run - 1) kills of follow, "
            + "\(moments.count) moments (\(covered) within a window, \(outside) in a gap): "
            + "writes acknowledged \(acknowledged), writes checked \(checked), lost \(lost), "
            + "after T + 1 s \(extra), false claims \(falseClaims)"
        print(summary)
        for line in reasons { print("  " + line) }
        #expect(lost == 0 && falseClaims == 0 && extra == 0, "\(summary)")
        #expect(covered >= (least ?? count / 3), "\(summary)")
        #expect(states.count >= min(covered, 4), "different moments, different states")
    }
}

/// What restore says of a time no window holds: the newest archive at or before it ("outside
/// every followed window"), or the end of the window (or gap's start) before it ("past the
/// followed window's end"); never that the time is within a window.
func saysNoClaim(_ text: String) -> Bool {
    (text.contains("outside every followed window") || text.contains("is past the followed window's end"))
        && !text.contains("within the followed window")
}
