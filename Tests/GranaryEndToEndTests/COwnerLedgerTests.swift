import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// An owner in C (Tests/Fixtures/owners/c-owner.c), written from granary-reopen(7) alone as a
/// developer of another application would write it, compiled by the test with the system's C
/// compiler against libsqlite3. Each mode breaks one rule on purpose (see the file's head):
/// conforming, silent, expired, late-resume, write-after-swap, idle-clock, crash-on-resume,
/// crash-after-swap.
///
/// It commits a row into demo_writes every `intervalMs` while the store is open and logs
/// `ACK <id>` once the COMMIT returned (`ACK <id> post-swap` for a row written into the new store
/// before RESUME).
final class COwner: OwnerLog {
    let process = Process()
    let log: String
    /// The store the owner writes.
    let store: String

    /// Compiles the owner into `folder` (once per folder) and returns the binary's path.
    static func build(into folder: String) throws -> String {
        let binary = folder + "/c-owner"
        if FileManager.default.isExecutableFile(atPath: binary) { return binary }
        let source = GranaryProcess.packageDirectory + "/Tests/Fixtures/owners/c-owner.c"
        let result = try GranaryProcess.runExecutable(
            "/usr/bin/cc", ["-O1", "-Wall", "-Werror", "-std=c11", "-o", binary, source, "-lsqlite3", "-lpthread"])
        guard result.status == 0 else { throw DemoOwnerError.timedOut("cc failed: \(result.stderr)") }
        return binary
    }

    init(
        binary: String, store: String, mode: String, log: String, intervalMs: Int = 2, startID: Int64 = 1,
        lateMs: Int = 1500
    ) throws {
        self.log = log
        self.store = store
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = [store, log, mode, String(intervalMs), String(startID), String(lateMs)]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        for _ in 0..<2000 where !lines.contains("READY") { usleep(5_000) }
        guard lines.contains("READY") else { throw DemoOwnerError.timedOut(lines.joined(separator: "\n")) }
    }

    deinit { stop() }

    /// Every id acknowledged (its COMMIT returned), post-swap writes included.
    var acked: Set<Int64> {
        Set(lines.compactMap { $0.hasPrefix("ACK ") ? Int64($0.split(separator: " ")[1]) : nil })
    }

    var isRunning: Bool { process.isRunning }

    /// Kills the owner and, as its next start would, lets SQLite roll back a transaction the kill
    /// cut short (a rollback store's hot journal), so the test reads the store as committed.
    func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        if FileManager.default.fileExists(atPath: store + "-journal") {
            _ = (try? Database(path: store, mode: .readWrite))?.integrityCheck(full: false)
        }
    }
}

@Suite("ledger: an owner written in C from the page alone", .serialized)
struct COwnerLedgerTests {
    let folder: TemporaryFolder
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }
    let user = "alice@example.com"
    var local: String { root + "/alice@example.com/Local.sqlite" }
    var cloud: String { root + "/alice@example.com/Cloud.sqlite" }
    let binary: String

    init() throws {
        let folder = TemporaryFolder("granary-c-owner")
        self.folder = folder
        binary = try COwner.build(into: folder.path)
        try FileSystem.makeDirectory(root + "/alice@example.com")
        try FileSystem.makeDirectory(folder.child("scratch"))
    }

    /// `path` in `journal` mode with 40 items and the owner's table, archived; then items 21… are
    /// deleted, so that the archive's content can be told apart.
    func makeStore(_ path: String, journal: String) throws {
        let db = try Database(path: path, mode: .create)
        try db.execute("PRAGMA journal_mode=\(journal == "wal" ? "WAL" : "DELETE")")
        try db.execute("CREATE TABLE items(id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
        try db.execute("CREATE TABLE demo_writes(id INTEGER PRIMARY KEY, at REAL)")
        try db.execute("BEGIN")
        for id in 1...40 {
            try db.run("INSERT INTO items(id, body) VALUES (?, ?)", [.integer(Int64(id)), .text("item \(id)")])
        }
        try db.execute("COMMIT")
    }

    /// Archives the user's stores, then deletes items 21… of `paths`; returns the archive's name.
    @discardableResult
    func archiveThenDelete(_ paths: [String]) throws -> String {
        let archive = try RestoreFixtures.archive(root: root, repo: repo, user: user)
        for path in paths { try Database(path: path, mode: .readWrite).execute("DELETE FROM items WHERE id > 20") }
        return (archive as NSString).lastPathComponent
    }

    func restore(_ archive: String, _ environment: [String: String] = [:], _ options: [String] = []) throws
        -> GranaryProcess.Result
    {
        try GranaryProcess.run(
            ["restore", user, archive, "--method", "swap", "--owner-timeout", "1", "--root", root, "--repo", repo]
                + options,
            environment: environment)
    }

    /// Acknowledged writes of `owner` in neither the live store nor a safety archive.
    func lost(_ owner: COwner, _ path: String, committed: Bool = true) throws -> [Int64] {
        let name = (path as NSString).lastPathComponent
        let lost = try LedgerAudit.lost(
            [LedgerSource(name: "c-owner", table: "demo_writes", acknowledged: owner.acked)], live: path, repo: repo,
            user: user, storeName: name, scratch: folder.child("scratch"), archiveCounts: committed)
        return lost["c-owner"] ?? []
    }

    /// The milliseconds of `store`'s pause line.
    func pause(of store: String, in stdout: String) -> Double? {
        for line in stdout.split(separator: "\n") where line.hasPrefix(store + ": owner paused for ") {
            let words = line.split(separator: " ")
            if let index = words.firstIndex(of: "ms") ?? words.firstIndex(of: "ms,") { return Double(words[index - 1]) }
        }
        return nil
    }

    @Test(
        "restores into a conforming C owner writing all along (WAL and rollback) lose no acknowledged write",
        arguments: ["wal", "delete"])
    func conformingLosesNothing(journal: String) throws {
        try makeStore(local, journal: journal)
        let archive = try archiveThenDelete([local])
        let owner = try COwner(binary: binary, store: local, mode: "conforming", log: folder.child("owner.log"))
        defer { owner.stop() }
        for round in 1...3 {
            try owner.waitForMoreWrites(20)
            let result = try restore(archive)
            #expect(result.status == 0, "\(journal) round \(round): \(result.stdout)\(result.stderr)")
            #expect(
                result.stdout.contains("Local.sqlite: owner paused for")
                    && result.stdout.contains("to RESUMED received)"),
                "\(result.stdout)")
            #expect(try RestoreFixtures.ids(local, table: "items") == Set(1...40))
            try owner.waitForMoreWrites(20)
            try Database(path: local, mode: .readWrite, busyTimeout: .seconds(5)).execute(
                "DELETE FROM items WHERE id > 20")
        }
        owner.stop()
        #expect(owner.lines.filter { $0 == "REOPENED resume" }.count == 3, "\(owner.lines.suffix(5))")
        let missing = try lost(owner, local)
        #expect(missing.isEmpty, "\(journal): \(missing.count) of \(owner.acked.count) acknowledged writes lost")
        #expect(try Database(path: local, mode: .readOnly).integrityCheck(full: true) == ["ok"])
    }

    @Test(
        "a C owner that writes into the new store before RESUME: exit 65 naming the store, and what it wrote stays live",
        arguments: ["wal", "delete"])
    func postSwapWriteKept(journal: String) throws {
        try makeStore(local, journal: journal)
        let archive = try archiveThenDelete([local])
        let owner = try COwner(binary: binary, store: local, mode: "write-after-swap", log: folder.child("owner.log"))
        defer { owner.stop() }
        try owner.waitForMoreWrites(20)
        // granary stalls 400 ms right after the rename, before it takes the new store's lock.
        let result = try restore(archive, ["GRANARY_TEST_STALL_AT": "switched:400"], ["--json"])
        #expect(result.status == 65, "\(result.stdout)\(result.stderr)")
        #expect(result.stderr.contains("restored, but the owner wrote to \(local)"), "\(result.stderr)")
        #expect(!result.stderr.contains("belonged to the replaced store"), "\(result.stderr)")
        let document = try #require(
            try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any], "\(result.stdout)")
        let written = document["writtenWhilePaused"] as? [String] ?? []
        #expect(written == [local], "\(result.stdout)")
        try owner.waitForMoreWrites(20)
        owner.stop()
        let live = try RestoreFixtures.ids(local)
        #expect(!owner.ackedAfterSwap.isEmpty, "no write after the swap: \(owner.lines.suffix(5))")
        #expect(owner.ackedAfterSwap.isSubset(of: live), "writes made after the swap are not live")
        let missing = try lost(owner, local)
        #expect(missing.isEmpty, "\(journal): acknowledged writes lost: \(missing.prefix(10))")
        #expect(try RestoreFixtures.ids(local, table: "items") == Set(1...40))
        #expect(try Database(path: local, mode: .readOnly).integrityCheck(full: true) == ["ok"])
    }

    @Test(
        "a silent C owner (no answer to RESUME) keeps the conforming one paused no longer than its own swap, and is reported as not answering; an expired one as expired; a late one as late"
    )
    func resumedTogether() throws {
        try makeStore(local, journal: "wal")
        try makeStore(cloud, journal: "delete")
        let archive = try archiveThenDelete([local, cloud])
        for (index, (mode, reported, pauseLine)) in [
            ("silent", "did not answer RESUME", "owner paused for at least"),
            ("expired", "reopened by itself (it sent EXPIRED)", ", expired (from PAUSE sent to EXPIRED received"),
            ("late-resume", "resumed late", "received, late)"),
        ].enumerated() {
            let round = folder.child("round-\(index)")
            try FileSystem.makeDirectory(round)
            let good = try COwner(
                binary: binary, store: local, mode: "conforming", log: round + "/good.log",
                startID: Int64(index + 1) * 10_000_000)
            let other = try COwner(
                binary: binary, store: cloud, mode: mode, log: round + "/other.log",
                startID: Int64(index + 1) * 10_000_000 + 5_000_000)
            defer {
                good.stop()
                other.stop()
            }
            try good.waitForMoreWrites(20)
            try other.waitForMoreWrites(20)
            // A lease of 4 s: the silent and the expired owner reopen at its end.
            let result = try restore(archive, ["GRANARY_TEST_LEASE_MS": "4000"])
            #expect(result.status == 0, "\(mode): \(result.stdout)\(result.stderr)")
            let goodPause = try #require(pause(of: "Local.sqlite", in: result.stdout), "\(result.stdout)")
            #expect(goodPause < 1500, "\(mode): the conforming store stayed paused \(goodPause) ms: \(result.stdout)")
            #expect(!result.stderr.contains("the owner of Local.sqlite"), "\(mode): \(result.stderr)")
            #expect(result.stderr.contains("the owner of Cloud.sqlite"), "\(mode): \(result.stderr)")
            #expect(result.stderr.contains(reported), "\(mode): \(result.stderr)")
            let cloudLine = result.stdout.split(separator: "\n").first { $0.hasPrefix("Cloud.sqlite: owner paused") }
            #expect(cloudLine?.contains(pauseLine) == true, "\(mode): \(result.stdout)")
            try good.waitForMoreWrites(20)
            try other.waitForMoreWrites(20)
            good.stop()
            other.stop()
            for (owner, path) in [(good, local), (other, cloud)] {
                let missing = try lost(owner, path)
                #expect(missing.isEmpty, "\(mode) \(path): acknowledged writes lost: \(missing.prefix(10))")
                #expect(try Database(path: path, mode: .readOnly).integrityCheck(full: true) == ["ok"])
                try Database(path: path, mode: .readWrite).execute("DELETE FROM items WHERE id > 20")
            }
        }
    }

    @Test(
        "a C owner that crashes on RESUME: restored (0), one warning naming the owner once and saying what to do, and a pause line"
    )
    func crashMidReopen() throws {
        try makeStore(local, journal: "wal")
        let archive = try archiveThenDelete([local])
        let owner = try COwner(binary: binary, store: local, mode: "crash-on-resume", log: folder.child("owner.log"))
        defer { owner.stop() }
        try owner.waitForMoreWrites(20)
        let result = try restore(archive)
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(owner.lines.contains("CRASHED"), "\(owner.lines.suffix(5))")
        let warnings = result.stderr.split(separator: "\n").filter { $0.contains("Local.sqlite") }
        #expect(warnings.count == 1, "\(result.stderr)")
        let warning = String(warnings.first ?? "")
        #expect(warning.components(separatedBy: "owner of").count == 2, "the owner named more than once: \(warning)")
        #expect(warning.contains("exited or crashed"), "\(warning)")
        #expect(warning.contains("holds the restored content"), "\(warning)")
        #expect(warning.contains("start the app that owns it again"), "\(warning)")
        #expect(
            result.stdout.contains("Local.sqlite: owner paused for at most ")
                && result.stdout.contains(", gone (from PAUSE sent until its connection closed without an answer"),
            "\(result.stdout)")
        #expect(try RestoreFixtures.ids(local, table: "items") == Set(1...40))
        let missing = try lost(owner, local)
        #expect(missing.isEmpty, "acknowledged writes lost: \(missing.prefix(10))")
        #expect(try Database(path: local, mode: .readOnly).integrityCheck(full: true) == ["ok"])
    }

    @Test(
        "a -wal a C owner left beside the untouched new store (it wrote, then crashed, before RESUME) is moved to a kept folder the message names, with every byte"
    )
    func companionOfUntouchedStoreKept() throws {
        try makeStore(local, journal: "wal")
        let archive = try archiveThenDelete([local])
        let owner = try COwner(binary: binary, store: local, mode: "crash-after-swap", log: folder.child("owner.log"))
        defer { owner.stop() }
        try owner.waitForMoreWrites(20)
        let result = try restore(archive, ["GRANARY_TEST_STALL_AT": "switched:400"])
        #expect(owner.lines.contains("CRASHED"), "\(owner.lines.suffix(5))")
        let postSwap = owner.ackedAfterSwap
        #expect(postSwap.count == 1, "\(owner.lines.suffix(5))")
        #expect(result.status == 65, "\(result.stdout)\(result.stderr)")
        #expect(result.stderr.contains("restored, but the owner wrote to \(local)"), "\(result.stderr)")
        #expect(result.stderr.contains("Where every byte is"), "\(result.stderr)")
        // The warning names where the -wal went; it is there, outside granary's work folder.
        let keptFolder = root + "/.granary/kept/" + user
        let marker = "\(local)-wal appeared while its owner was paused"
        #expect(result.stderr.contains(marker), "\(result.stderr)")
        let kept = FileSystem.contents(of: keptFolder).filter { $0.hasSuffix("Local.sqlite-wal") }
        #expect(kept.count == 1, "\(FileSystem.contents(of: keptFolder))")
        let keptWAL = keptFolder + "/" + (kept.first ?? "")
        // (The test's temporary folder may be spelt with a doubled slash; granary spells it plainly.)
        #expect(
            result.stderr.contains("moved to ")
                && result.stderr.contains("/.granary/kept/\(user)/\(kept.first ?? "-")"),
            "\(result.stderr)")
        // Every byte: the restored store with the kept -wal beside it holds the post-swap row.
        let scratch = folder.child("scratch/copy")
        try FileSystem.makeDirectory(scratch)
        try FileManager.default.copyItem(atPath: local, toPath: scratch + "/Local.sqlite")
        try FileManager.default.copyItem(atPath: keptWAL, toPath: scratch + "/Local.sqlite-wal")
        _ = try Database(path: scratch + "/Local.sqlite", mode: .readWrite).scalar("SELECT count(*) FROM sqlite_schema")
        let recovered = try RestoreFixtures.ids(scratch + "/Local.sqlite")
        #expect(postSwap.isSubset(of: recovered), "the kept -wal does not hold the post-swap row")
        // Everything else acknowledged is live or in the safety archive; the live store is sound.
        let lostRows = try lost(owner, local).filter { !postSwap.contains($0) }
        #expect(lostRows.isEmpty, "acknowledged writes lost: \(lostRows.prefix(10))")
        #expect(try RestoreFixtures.ids(local, table: "items") == Set(1...40))
        #expect(try Database(path: local, mode: .readOnly).integrityCheck(full: true) == ["ok"])
    }

    @Test(
        "granary-reopen-check passes the conforming C owner on every check and fails each broken variant on the rule it breaks"
    )
    func checkerJudgesEachVariant() throws {
        try makeStore(local, journal: "wal")
        let conforming = try COwner(binary: binary, store: local, mode: "conforming", log: folder.child("check.log"))
        try conforming.waitForMoreWrites(5)
        let full = try GranaryProcess.run(["--timeout", "2", local], tool: "granary-reopen-check")
        #expect(full.status == 0, "\(full.stdout)\(full.stderr)")
        #expect(!full.stdout.contains("FAIL"), "\(full.stdout)")
        conforming.stop()
        usleep(100_000)
        for (index, (mode, check)) in [
            ("silent", "pause-resume"), ("expired", "pause-resume"), ("late-resume", "pause-resume"),
            ("write-after-swap", "swap-untouched"), ("idle-clock", "idle-timeout"),
        ].enumerated() {
            let owner = try COwner(
                binary: binary, store: local, mode: mode, log: folder.child("check-\(index).log"),
                startID: Int64(index + 1) * 100_000, lateMs: 2500)
            defer { owner.stop() }
            try owner.waitForMoreWrites(5)
            let result = try GranaryProcess.run(
                ["--check", check, "--timeout", "2", local], tool: "granary-reopen-check")
            #expect(
                result.stdout.split(separator: "\n").contains {
                    $0.split(separator: " ").prefix(2) == ["FAIL", Substring(check)]
                },
                "\(mode): \(check) should fail: \(result.stdout)\(result.stderr)")
            #expect(result.status == 1, "\(mode): exit \(result.status)")
            owner.stop()
            usleep(100_000)
        }
    }
}

/// `restore --method online` of a rollback-journal store under a writer outside the protocol that
/// commits 200 rows a second: the snapshot and the copy are one step under one exclusive lock, so
/// the writer cannot slip in between them and every try finishes (it gave up one time in six when
/// they were taken under two locks).
@Suite("ledger: online restore under a steady writer", .serialized)
struct OnlineUnderWriterTests {
    let folder = TemporaryFolder("granary-online-writer")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }
    let user = "alice@example.com"
    var store: String { root + "/alice@example.com/Local.sqlite" }

    @Test(
        "a rollback store restored online eight times under 200 writes a second: most tries finish, a refused one changes nothing, nothing lost"
    )
    func rollbackUnderSteadyWriter() throws {
        try FileSystem.makeDirectory(root + "/alice@example.com")
        try FileSystem.makeDirectory(folder.child("scratch"))
        let db = try Database(path: store, mode: .create)
        try db.execute("PRAGMA journal_mode=DELETE")
        try db.execute("CREATE TABLE items(id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
        try db.execute(
            "CREATE TABLE ledger_writes(seq INTEGER PRIMARY KEY, writer TEXT NOT NULL, at REAL NOT NULL)")
        // 2,000 rows of 200 bytes (0.9 MiB): snapshot and copy take long enough for the writer to
        // commit between them every time when they are taken under two locks (0 of 12 finished).
        try db.execute("BEGIN")
        for id in 1...2000 {
            try db.run(
                "INSERT INTO items(id, body) VALUES (?, ?)",
                [.integer(Int64(id)), .text(String(repeating: "item \(id) ", count: 200 / (6 + String(id).count)))])
        }
        try db.execute("COMMIT")
        let archive = (try RestoreFixtures.archive(root: root, repo: repo, user: user) as NSString).lastPathComponent
        try db.execute("DELETE FROM items WHERE id > 20")
        let writer = try LedgerWriter(store: store, ledger: folder.child("steady.ledger"), intervalMs: 5)
        defer { writer.stop() }
        try writer.waitForMoreWrites(50)
        var finished = 0
        for round in 1...8 {
            let result = try GranaryProcess.run([
                "restore", user, archive, "--method", "online", "--root", root, "--repo", repo,
            ])
            // A try finishes, or (when the machine starves the copy of the writer's gaps for
            // the whole owner timeout) gives the documented 75 and changes nothing.
            let ids = try RestoreFixtures.ids(store, table: "items")
            if result.status == 0 {
                finished += 1
                #expect(ids == Set(1...2000), "round \(round)")
            } else {
                #expect(result.status == 75, "round \(round): \(result.stderr)")
                #expect(result.stderr.contains("nothing was changed"), "round \(round): \(result.stderr)")
                #expect(ids == Set(1...20), "round \(round): a refused try changed the store")
            }
            try writer.waitForMoreWrites(20)
            try Database(path: store, mode: .readWrite, busyTimeout: .seconds(5)).execute(
                "DELETE FROM items WHERE id > 20")
        }
        writer.stop()
        print("online restores under 200 writes/s: \(finished) of 8 finished")
        // Under a writer the copy used to lose every time (0 of 12); holding SQLite's pending lock
        // while it waits, most tries finish even on a loaded machine.
        #expect(finished >= 4, "only \(finished) of 8 online restores finished under the writer")
        let lost = try LedgerAudit.lost(
            [LedgerSource(name: "steady", table: "ledger_writes", acknowledged: Set(writer.acknowledged))],
            live: store, repo: repo, user: user, storeName: "Local.sqlite", scratch: folder.child("scratch"),
            archiveCounts: true)
        #expect(lost.isEmpty, "\(LedgerAudit.describe(lost, []))")
        #expect(try Database(path: store, mode: .readOnly).integrityCheck(full: true) == ["ok"])
    }
}
