import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 30's proof: granary restores while it is not alone — an owner that misbehaves, a process
/// outside the reopen protocol writing to the same store — and every write any of them
/// acknowledged (its ledger: `granary-demo-owner --ledger`, `granary-ledger-writer`) is afterwards
/// in the live store or, only when the restore committed, in its safety archive; the store passes
/// integrity_check; a refusal ("nothing was changed") left the live files as they were.
@Suite("acknowledged writes survive a restore that is not alone", .serialized)
struct LedgerTests {
    let folder = TemporaryFolder("granary-ledger")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }
    let user = "alice@example.com"
    var store: String { root + "/alice@example.com/Local.sqlite" }

    init() throws {
        try FileSystem.makeDirectory(root + "/alice@example.com")
        try FileSystem.makeDirectory(folder.child("scratch"))
    }

    /// The store in `journal` mode ("wal" or "delete") with 40 items and both writers' tables, and an
    /// archive of it; then items 21… are deleted, so that the archive's content can be told apart.
    /// Returns the archive's file name.
    @discardableResult
    func makeStore(journal: String) throws -> String {
        let db = try Database(path: store, mode: .create)
        try db.execute("PRAGMA journal_mode=\(journal == "wal" ? "WAL" : "DELETE")")
        try db.execute("CREATE TABLE items(id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
        try db.execute("CREATE TABLE demo_writes(id INTEGER PRIMARY KEY, at REAL)")
        try db.execute(
            "CREATE TABLE ledger_writes(seq INTEGER PRIMARY KEY, writer TEXT NOT NULL, at REAL NOT NULL)")
        try db.execute("BEGIN")
        for id in 1...40 {
            try db.run("INSERT INTO items(id, body) VALUES (?, ?)", [.integer(Int64(id)), .text("item \(id)")])
        }
        try db.execute("COMMIT")
        let archive = try RestoreFixtures.archive(root: root, repo: repo, user: user)
        try db.execute("DELETE FROM items WHERE id > 20")
        return (archive as NSString).lastPathComponent
    }

    func granary(_ arguments: [String], environment: [String: String] = [:]) throws -> GranaryProcess.Result {
        try GranaryProcess.run(arguments + ["--root", root, "--repo", repo], environment: environment)
    }

    /// The audit after a restore (every writer stopped): (a) nothing acknowledged lost, (b)
    /// integrity_check, (c) after a refusal the live files kept their inodes (`inodes`: which
    /// suffixes; "" is the database) and, with `sameBytes`, their content, (d) "nothing was
    /// changed" only on a refusal.
    func audit(
        _ name: String, _ outcome: RestoreOutcome, sources: [LedgerSource], before: LiveFiles,
        inodes: [String] = LiveFiles.suffixes, sameBytes: Bool = false, mustRefuse: Bool = false,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let after = LiveFiles(store)
        try settle()
        let lost = try LedgerAudit.lost(
            sources, live: store, repo: repo, user: user, storeName: "Local.sqlite", scratch: folder.child("scratch"),
            archiveCounts: outcome.committed)
        #expect(
            lost.isEmpty,
            "\(name): exit \(outcome.status), \(LedgerAudit.describe(lost, sources)); granary said: \(outcome.text)",
            sourceLocation: sourceLocation)
        let check = try Database(path: store, mode: .readOnly).integrityCheck(full: true)
        #expect(check == ["ok"], "\(name): integrity_check: \(check)", sourceLocation: sourceLocation)
        if outcome.text.contains("nothing was changed") {
            #expect(outcome.status != 0, "\(name): exit 0 but \"nothing was changed\"", sourceLocation: sourceLocation)
        }
        if mustRefuse {
            #expect(
                outcome.refused, "\(name): not refused: exit \(outcome.status): \(outcome.text)",
                sourceLocation: sourceLocation)
        }
        if outcome.refused {
            for suffix in inodes where before.files[suffix] != nil || after.files[suffix] != nil {
                #expect(
                    before.files[suffix]?.inode == after.files[suffix]?.inode,
                    "\(name): refused, but store\(suffix) changed identity: before \(before), after \(after)",
                    sourceLocation: sourceLocation)
            }
            if sameBytes {
                #expect(
                    before == after, "\(name): refused, but the live files changed: before \(before), after \(after)",
                    sourceLocation: sourceLocation)
            }
            // Refused: the archive's items did not arrive.
            #expect(
                try RestoreFixtures.ids(store, table: "items") == Set(1...20), "\(name): refused, but items changed",
                sourceLocation: sourceLocation)
        }
        if outcome.committed {
            #expect(
                try RestoreFixtures.ids(store, table: "items") == Set(1...40),
                "\(name): restored, but not the archive's items", sourceLocation: sourceLocation)
        }
    }

    /// A writer killed inside a transaction of a rollback-journal store leaves a hot journal, which
    /// only a read-write connection rolls back (a read-only one fails with SQLITE_READONLY_ROLLBACK).
    func settle() throws {
        _ = try Database(path: store, mode: .readWrite).scalar("SELECT count(*) FROM sqlite_schema")
    }

    // MARK: A third process, outside the protocol

    @Test(
        "a third process writing through one open connection beside a conforming owner during restore --method swap: refused, nothing lost, the database's inode kept",
        arguments: ["wal", "delete"])
    func thirdProcessSwap(journal: String) throws {
        let archive = try makeStore(journal: journal)
        let owner = try DemoOwner(
            stores: [store], log: folder.child("owner.log"), intervalMs: 2, ledger: folder.child("owner.ledger"))
        let writer = try LedgerWriter(store: store, ledger: folder.child("third.ledger"))
        try owner.waitForMoreLedgered(10)
        try writer.waitForMoreWrites(20)
        let before = LiveFiles(store)
        let result = try granary(["restore", user, archive, "--method", "swap", "--owner-timeout", "2"])
        try writer.waitForMoreWrites(5)
        try owner.waitForMoreLedgered(5)
        owner.stop()
        writer.stop()
        // Both wrote throughout: the rows are compared (through the ledgers), not the bytes.
        try audit(
            "third process beside an owner (\(journal))", RestoreOutcome(result),
            sources: [
                LedgerSource(name: "third", table: "ledger_writes", acknowledged: Set(writer.acknowledged)),
                LedgerSource(name: "owner", table: "demo_writes", acknowledged: owner.ledgered),
            ],
            before: before, inodes: [""], mustRefuse: true)
    }

    @Test(
        "a third process holding the store open, idle, beside an idle owner during restore --method swap: refused, the database and -wal byte for byte as before",
        arguments: ["wal", "delete"])
    func idleThirdProcessSwap(journal: String) throws {
        let archive = try makeStore(journal: journal)
        // An owner that serves the protocol but does not write during the restore (one row, then a
        // minute's wait), and a holder that wrote 20 rows and keeps its connection open.
        let owner = try DemoOwner(stores: [store], log: folder.child("owner.log"), intervalMs: 60_000)
        try owner.waitFor { $0.contains { $0.hasPrefix("ACK") } }
        let writer = try LedgerWriter(store: store, ledger: folder.child("idle.ledger"), count: 20)
        try writer.waitForMoreWrites(20)
        usleep(50_000)
        let before = LiveFiles(store)
        let result = try granary(["restore", user, archive, "--method", "swap", "--owner-timeout", "2"])
        let after = LiveFiles(store)
        owner.stop()
        writer.stop()
        #expect(writer.acknowledged.count == 20)
        try audit(
            "idle third process (\(journal))", RestoreOutcome(result),
            sources: [LedgerSource(name: "idle", table: "ledger_writes", acknowledged: Set(writer.acknowledged))],
            before: before, sameBytes: false, mustRefuse: true)
        // Compared while the holder still had the store open (its close checkpoints and removes the
        // -wal). The -shm is compared by identity only: the owner's reader, reopened after the
        // refusal, writes its read mark into the wal-index, as any reader does.
        if RestoreOutcome(result).refused {
            for suffix in ["", "-wal", "-shm"] {
                #expect(
                    before.files[suffix]?.inode == after.files[suffix]?.inode,
                    "refused, but store\(suffix) is another file: before \(before), after \(after)")
            }
            for suffix in ["", "-wal"] {
                #expect(
                    before.files[suffix] == after.files[suffix],
                    "refused, but store\(suffix) changed: before \(before), after \(after)")
            }
        }
    }

    @Test(
        "a third process writing during restore --method auto: whatever granary chooses, nothing acknowledged is lost",
        arguments: ["wal", "delete"])
    func thirdProcessAuto(journal: String) throws {
        let archive = try makeStore(journal: journal)
        let writer = try LedgerWriter(store: store, ledger: folder.child("auto.ledger"))
        try writer.waitForMoreWrites(20)
        let before = LiveFiles(store)
        let result = try granary(["restore", user, archive, "--method", "auto", "--owner-timeout", "2"])
        try writer.waitForMoreWrites(5)
        writer.stop()
        try audit(
            "third process, auto (\(journal))", RestoreOutcome(result),
            sources: [LedgerSource(name: "third", table: "ledger_writes", acknowledged: Set(writer.acknowledged))],
            before: before, inodes: journal == "wal" ? LiveFiles.suffixes : [""])
    }

    @Test(
        "a command-line writer (open, write, close) during restore --method swap: nothing acknowledged is lost",
        arguments: ["wal", "delete"])
    func commandLineWriterSwap(journal: String) throws {
        let archive = try makeStore(journal: journal)
        let writer = try LedgerWriter(store: store, ledger: folder.child("cli.ledger"), connection: "per-write")
        try writer.waitForMoreWrites(20)
        let before = LiveFiles(store)
        let result = try granary(["restore", user, archive, "--method", "swap", "--owner-timeout", "2"])
        try writer.waitForMoreWrites(5)
        writer.stop()
        try audit(
            "command-line writer (\(journal))", RestoreOutcome(result),
            sources: [LedgerSource(name: "cli", table: "ledger_writes", acknowledged: Set(writer.acknowledged))],
            before: before, inodes: [""])
    }

    @Test(
        "a command-line writer that opens the store while granary switches it: the replaced file stays locked until the writer lets go, so it never writes the replaced database's pages into the new store's -wal"
    )
    func openerDuringSwitch() throws {
        let archive = try makeStore(journal: "wal")
        // The replaced database's ledger_writes is a tree of many pages (the archive's is one): a
        // page of one written into the other's WAL makes a store integrity_check rejects.
        do {
            let db = try Database(path: store, mode: .readWrite)
            try db.execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000) INSERT INTO ledger_writes SELECT 1000000 + i, printf('%.400c', 'x'), 0 FROM n"
            )
        }
        let owner = try DemoOwner(
            stores: [store], log: folder.child("owner.log"), intervalMs: 2, ledger: folder.child("owner.ledger"))
        try owner.waitForMoreLedgered(10)
        let before = LiveFiles(store)
        // granary stops (SIGSTOP) with the old store still at its name, locked, its -wal gone.
        let run = try Spawned(
            GranaryProcess.binDirectory + "/granary",
            [
                "restore", user, archive, "--method", "swap", "--owner-timeout", "1", "--root", root, "--repo",
                repo,
            ], environment: ["GRANARY_TEST_PAUSE_AT": "staleRemoved"])
        let deadline = Date().addingTimeInterval(30)
        while !run.isStopped && run.process.isRunning && Date() < deadline { usleep(1_000) }
        try #require(run.isStopped, "restore did not stop at staleRemoved: \(run.wait(timeout: 5))")
        let old = try #require(FileSystem.status(store)?.st_ino)
        // A writer outside the protocol opens the store by name now: the replaced inode.
        let writer = try LedgerWriter(store: store, ledger: folder.child("cli.ledger"), connection: "per-write")
        var holds = false
        for _ in 0..<200 where !holds {
            usleep(10_000)
            let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(writer.pid)/fd")) ?? []
            holds = fds.contains { fd in
                var info = stat()
                return stat("/proc/\(writer.pid)/fd/" + fd, &info) == 0 && info.st_ino == old
            }
        }
        try #require(holds, "the writer did not open the store")
        kill(run.pid, SIGCONT)
        let outcome = run.wait(timeout: 120)
        #expect(outcome.status == 0, "\(outcome)")
        // granary let go of the replaced file only once the writer had (its busy timeout ended,
        // and it opened the new store by name): it never wrote through the old inode.
        #expect(!outcome.stderr.contains("while it was being replaced"), "\(outcome)")
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(writer.pid)/fd")) ?? []
        #expect(
            !fds.contains { fd in
                var info = stat()
                return stat("/proc/\(writer.pid)/fd/" + fd, &info) == 0 && info.st_ino == old
            }, "the writer still holds the replaced store after granary let go of it")
        try writer.waitForMoreWrites(20)
        try owner.waitForMoreLedgered(5)
        owner.stop()
        writer.stop()
        try audit(
            "a writer that opened the replaced store",
            RestoreOutcome(status: outcome.status, text: outcome.stdout + outcome.stderr),
            sources: [
                LedgerSource(name: "cli", table: "ledger_writes", acknowledged: Set(writer.acknowledged)),
                LedgerSource(name: "owner", table: "demo_writes", acknowledged: owner.ledgered),
            ],
            before: before, inodes: [""])
    }

    // MARK: Owners that misbehave

    @Test(
        "an owner that breaks the protocol after PAUSED (hangs up, keeps writing, RESUMED or EXPIRED unasked): nothing acknowledged is lost",
        arguments: [
            ("hang-up-after-paused", "wal"), ("hang-up-after-paused", "delete"), ("keep-writing", "wal"),
            ("keep-writing", "delete"), ("early-resumed", "wal"), ("early-expired", "wal"),
            ("early-expired", "delete"),
        ])
    func misbehavingOwner(rule: String, journal: String) throws {
        let archive = try makeStore(journal: journal)
        let owner = try DemoOwner(
            stores: [store], log: folder.child("owner-\(rule).log"), intervalMs: 2, breaking: [rule],
            ledger: folder.child("owner-\(rule).ledger"))
        try owner.waitForMoreLedgered(20)
        let before = LiveFiles(store)
        let result = try granary(["restore", user, archive, "--owner-timeout", "2"])
        owner.goOn()
        owner.stop()
        // The owner's own close and reopen (the protocol) make new -wal and -shm files: only the
        // database's identity is compared, and the rows through the ledger.
        try audit(
            "owner \(rule) (\(journal))", RestoreOutcome(result),
            sources: [LedgerSource(name: "owner", table: "demo_writes", acknowledged: owner.ledgered)],
            before: before, inodes: [""])
    }

    @Test(
        "an owner whose lease runs out during the commit (granary stalled at a named point): refused before the commit, nothing acknowledged lost",
        arguments: [
            // (the owner's broken rule, journal mode, where granary stalls)
            ("conforming", "wal", "paused"), ("conforming", "delete", "paused"), ("no-commit-lock", "wal", "paused"),
            // Past the checks, with the commit lock held: a conforming owner waits for it and opens
            // the new store; one that skips the lock is the case the lock exists for.
            ("conforming", "wal", "committed"), ("no-commit-lock", "wal", "committed"),
            ("no-commit-lock", "delete", "committed"),
        ])
    func leaseRunsOut(rule: String, journal: String, point: String) throws {
        let archive = try makeStore(journal: journal)
        let owner = try DemoOwner(
            stores: [store], log: folder.child("owner-\(rule).log"), intervalMs: 2,
            breaking: rule == "conforming" ? [] : [rule], ledger: folder.child("owner-\(rule).ledger"))
        try owner.waitForMoreLedgered(20)
        let before = LiveFiles(store)
        // A lease of 3 s, and granary stalled 4.5 s at `point`: the lease runs out, the owner
        // reopens by itself and writes. (GRANARY_TEST_STALL_AT_STEP: the same moments on a build
        // from before the named points, steps 1 and 6.)
        let result = try granary(
            ["restore", user, archive, "--owner-timeout", "2"],
            environment: [
                "GRANARY_TEST_LEASE_MS": "3000", "GRANARY_TEST_STALL_AT": "\(point):4500",
                "GRANARY_TEST_STALL_AT_STEP": point == "paused" ? "1:4500" : "6:4500",
            ])
        // An owner that reopened without the commit lock while granary was past the commit has the
        // replaced file open: SQLite refuses its writes (SQLITE_READONLY_DBMOVED), none acknowledged.
        if rule == "conforming" || point == "paused" { try owner.waitForMoreLedgered(10) } else { owner.goOn() }
        owner.stop()
        // The lease ran out: the owner reopened (a conforming one after the commit, waiting for
        // the commit lock), or, skipping the lock past the commit, tried to reopen the replaced
        // file while granary still held SQLite's lock on it, and failed (it opens the new store on
        // its next try).
        let skippedLock = rule == "no-commit-lock" && point == "committed"
        #expect(
            owner.lines.contains {
                $0.contains("lease-expired") || (skippedLock && $0.contains("callback-failed"))
            }, "the lease did not run out: \(result.stderr)")
        try audit(
            "lease ran out at \(point), \(rule) owner (\(journal))", RestoreOutcome(result),
            sources: [LedgerSource(name: "owner", table: "demo_writes", acknowledged: owner.ledgered)],
            before: before, inodes: [""], mustRefuse: point == "paused")
    }

    // MARK: granary killed at every point of the commit

    /// Waits for 10 more acknowledged rows of `owner`, saying where it got stuck and what it logged last.
    func progress(_ owner: DemoOwner, _ label: String) throws {
        do {
            try owner.waitForMoreLedgered(10)
        } catch {
            let tail = owner.lines.filter { !$0.hasPrefix("READ") }.suffix(4).joined(separator: " | ")
            Issue.record("killed at \(label): the owner acknowledged nothing more: \(tail)")
            throw error
        }
    }

    /// The restore commit's crash points, in order.
    static let commitPoints = CrashPoint.Name.restoreCommit.map(\.rawValue)

    @Test(
        "granary killed (SIGKILL) at each point of the commit under a conforming owner and a command-line writer, then recover: nothing acknowledged is lost, the items old or new",
        arguments: ["wal", "delete"])
    func killedAtEveryPoint(journal: String) throws {
        let archive = try makeStore(journal: journal)
        var start: Int64 = 1
        for point in Self.commitPoints {
            // A point after the checks is missed when the check catches the command-line writer with
            // the store open (a refusal, nothing changed; it waits on granary's lock with the store
            // open): try again, at most six times. The writer writes every 300 ms, so that it has the
            // store open for a small part of the time.
            var killed = false
            var refusals: [String] = []
            for attempt in 1...6 where !killed {
                let label = "\(point)#\(attempt)"
                let itemsBefore = try RestoreFixtures.ids(store, table: "items")
                let owner = try DemoOwner(
                    stores: [store], log: folder.child("owner-\(label).log"), intervalMs: 3, startID: start,
                    ledger: folder.child("owner-\(label).ledger"))
                let writer = try LedgerWriter(
                    store: store, ledger: folder.child("cli-\(label).ledger"), start: start, intervalMs: 300,
                    connection: "per-write")
                try progress(owner, label)
                try writer.waitForMoreWrites(3)
                let result = try granary(
                    ["restore", user, archive, "--owner-timeout", "2"], environment: ["GRANARY_TEST_CRASH_AT": point])
                killed = result.status == SIGKILL && result.stderr.isEmpty
                if !killed { refusals.append("exit \(result.status): \(result.stderr)") }
                // Killed or not, the owner goes on (it reopens by itself when granary's connection
                // closes), and so does the writer; `recover` runs while both write, as an operator's would.
                try progress(owner, label)
                try writer.waitForMoreWrites(2)
                // recover refuses (75, "will finish when it can") while the writer has the store open
                // at its check, as a restore does: run it again, as an operator would, at most five times.
                var recovered: GranaryProcess.Result?
                if killed {
                    for _ in 1...5 {
                        recovered = try granary(["recover", user])
                        if recovered?.status == 0 { break }
                        usleep(100_000)
                    }
                }
                try progress(owner, label)
                try writer.waitForMoreWrites(2)
                owner.stop()
                writer.stop()
                let outcome: RestoreOutcome
                if let recovered {
                    #expect(recovered.status == 0, "\(label): recover: \(recovered.stderr)")
                    // Committed when the recovery finished the restore (it wrote the safety archive).
                    let committed = FileSystem.contents(of: repo + "/" + user).contains {
                        $0.contains("-pre-restore.")
                    }
                    outcome = RestoreOutcome(
                        GranaryProcess.Result(
                            status: committed ? 0 : 1, stdout: recovered.stdout, stderr: recovered.stderr))
                } else {
                    outcome = RestoreOutcome(result)
                }
                let sources = [
                    LedgerSource(name: "owner", table: "demo_writes", acknowledged: owner.ledgered),
                    LedgerSource(name: "cli", table: "ledger_writes", acknowledged: Set(writer.acknowledged)),
                ]
                try settle()
                let lost = try LedgerAudit.lost(
                    sources, live: store, repo: repo, user: user, storeName: "Local.sqlite",
                    scratch: folder.child("scratch"), archiveCounts: outcome.committed)
                #expect(lost.isEmpty, "killed at \(label): \(LedgerAudit.describe(lost, sources))")
                let check = try Database(path: store, mode: .readOnly).integrityCheck(full: true)
                #expect(check == ["ok"], "killed at \(label): integrity_check: \(check)")
                let items = try RestoreFixtures.ids(store, table: "items")
                #expect(items == itemsBefore || items == Set(1...40), "killed at \(label): items mixed: \(items.count)")
                #expect(!FileManager.default.fileExists(atPath: root + "/.granary/restore/\(user)/journal"))
                start = max(owner.ledgered.max() ?? 0, writer.acknowledged.max() ?? 0) + 1000
                // The next point starts from the live content again, not the archive's.
                try Database(path: store, mode: .readWrite).execute("DELETE FROM items WHERE id > 20")
                for name in FileSystem.contents(of: repo + "/" + user) where name.contains("-pre-restore.") {
                    try FileManager.default.removeItem(atPath: repo + "/" + user + "/" + name)
                }
            }
            #expect(killed, "granary was never killed at \(point): \(refusals.joined(separator: "; "))")
        }
    }
}
