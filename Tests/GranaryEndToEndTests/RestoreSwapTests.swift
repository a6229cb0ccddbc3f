import Foundation
import GranaryKit
import GranaryOwner
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `granary restore` and `granary reset` against a real `granary-demo-owner` that keeps writing.
@Suite("restore into a running owner", .serialized)
struct RestoreSwapTests {
    let folder = TemporaryFolder("granary-restore")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }
    var store: String { root + "/alice@example.com/Local.sqlite" }

    init() throws {
        try FileSystem.makeDirectory(root + "/alice@example.com")
        try SampleData.makeItemsStore(store, rows: 50, walOnlyTail: 5)
    }

    func granary(_ arguments: [String], environment: [String: String] = [:]) throws -> GranaryProcess.Result {
        try GranaryProcess.run(arguments + ["--root", root, "--repo", repo], environment: environment)
    }

    /// Each acknowledged id is in the live store or in the pre-restore archive; the live store has the
    /// archive's ids plus only ids acknowledged after the reopen.
    func checkNothingLost(owner: DemoOwner, archived: Set<Int64>, safetyArchive: String) throws {
        owner.stop()
        let lines = owner.lines
        guard let reopened = lines.firstIndex(where: { $0.hasPrefix("REOPENED") }) else {
            Issue.record("the owner never reopened")
            return
        }
        let afterResume = Set(lines[reopened...].compactMap { $0.hasPrefix("ACK ") ? Int64($0.dropFirst(4)) : nil })
        let acked = Set(lines.compactMap { $0.hasPrefix("ACK ") ? Int64($0.dropFirst(4)) : nil })
        let live = try RestoreFixtures.ids(store)
        let extracted = folder.child("safety")
        try RestoreFixtures.extract(safetyArchive, into: extracted)
        let replaced = try RestoreFixtures.ids(extracted + "/stores/Local.sqlite")
        #expect(acked.subtracting(live).subtracting(replaced).isEmpty, "acknowledged writes lost")
        #expect(archived.union(afterResume).isSubset(of: live), "the live store lacks archived or post-resume writes")
        // The one write in flight when the owner was killed may be committed without its ACK line.
        let extra = live.subtracting(archived.union(afterResume))
        #expect(
            extra.isSubset(of: [(acked.max() ?? 0) + 1]),
            "the live store holds writes from before the resume: \(extra.sorted())")
        let db = try Database(path: store, mode: .readOnly)
        #expect(db.integrityCheck(full: true) == ["ok"])
    }

    @Test("a restore swaps the store under a running owner, which keeps its pid and loses no acknowledged write")
    func swapUnderOwner() throws {
        let owner = try DemoOwner(stores: [store], log: folder.child("owner.log"))
        try owner.waitForMoreWrites(30)
        let archive = try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        let extracted = folder.child("archived")
        try RestoreFixtures.extract(archive, into: extracted)
        let archived = try RestoreFixtures.ids(extracted + "/stores/Local.sqlite")
        try owner.waitForMoreWrites(30)
        let pid = owner.pid

        let result = try granary(["restore", "alice@example.com"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("swap"))
        #expect(result.stdout.contains("owner pid \(pid)"))
        try owner.waitFor { $0.contains { $0.hasPrefix("REOPENED") } }
        try owner.waitForMoreWrites(30)
        #expect(owner.process.isRunning && owner.pid == pid)
        let safety = try #require(
            result.stdout.split(separator: " ").last.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) })
        #expect(safety.contains("-pre-restore."))
        try checkNothingLost(owner: owner, archived: archived, safetyArchive: safety)
        // The items table came back as archived (the restore did not mix in old pages).
        #expect(try RestoreFixtures.ids(store, table: "items").count == 50)
        #expect(!FileManager.default.fileExists(atPath: root + "/.granary/restore/alice@example.com"))
    }

    @Test("an owner of two stores is paused for both and both are swapped")
    func ownerOfTwoStores() throws {
        let cloud = root + "/alice@example.com/Cloud.sqlite"
        try SampleData.makeItemsStore(cloud, rows: 20, walOnlyTail: 3)
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        try Database(path: cloud, mode: .readWrite).execute("DELETE FROM items")
        let owner = try DemoOwner(stores: [store, cloud], log: folder.child("owner.log"))
        try owner.waitForMoreWrites(10)
        let result = try granary(["restore", "alice@example.com"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.components(separatedBy: "swap").count == 3)
        try owner.waitFor { $0.filter { $0.hasPrefix("REOPENED") }.count == 2 }
        try owner.waitForMoreWrites(10)
        owner.stop()
        #expect(try RestoreFixtures.ids(cloud, table: "items").count == 20)
    }

    @Test("a reset empties the stores under a running owner, keeping the schema and every acknowledged write somewhere")
    func resetUnderOwner() throws {
        let owner = try DemoOwner(stores: [store], log: folder.child("owner.log"))
        try owner.waitForMoreWrites(30)
        let result = try granary(["reset", "alice@example.com", "--yes"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("swap"))
        try owner.waitFor { $0.contains { $0.hasPrefix("REOPENED") } }
        try owner.waitForMoreWrites(20)
        let safety = try #require(
            result.stdout.split(separator: " ").last.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) })
        #expect(safety.contains("-pre-reset."))
        #expect(try RestoreFixtures.ids(store, table: "items").isEmpty)
        try checkNothingLost(owner: owner, archived: [], safetyArchive: safety)
    }

    @Test("an owner that never acknowledges makes restore exit 75 within the owner timeout and changes nothing")
    func ownerNeverAcknowledges() throws {
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        let before = try RestoreFixtures.dump(store)
        let owner = GranaryOwner()
        // A close callback that hangs: the pause is never acknowledged.
        try owner.register(store: store, close: { sleep(5) }, reopen: {})
        defer { owner.stop() }
        let result = try granary(["restore", "alice@example.com", "--owner-timeout", "0.5"])
        #expect(result.status == 75, "\(result.stderr)")
        #expect(result.stderr.contains("did not answer"))
        #expect(try RestoreFixtures.dump(store) == before)
        #expect(FileManager.default.fileExists(atPath: repo + "/alice@example.com"))
        #expect(!(FileSystem.contents(of: repo + "/alice@example.com").contains { $0.contains("pre-restore") }))
    }

    @Test("an owner that acknowledges without closing its connections is caught: exit 75, nothing changed")
    func ownerThatKeepsTheStoreOpen() throws {
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        // GranaryOwner would see the descriptor itself and refuse the pause (close-failed): this
        // owner keeps one and skips that check, so that granary's own check is what catches it.
        // One write, then none for an hour: the store stays as it is from here on.
        let owner = try DemoOwner(
            stores: [store], log: folder.child("owner-keeps.log"), intervalMs: 3_600_000,
            breaking: ["keep-descriptor"])
        try owner.waitFor { $0.contains("ACK 1") }
        let before = try RestoreFixtures.dump(store)
        let result = try granary(["restore", "alice@example.com"])
        #expect(result.status == 75, "\(result.stderr)")
        #expect(result.stderr.contains("still open by process \(owner.pid)"), "\(result.stderr)")
        #expect(try RestoreFixtures.dump(store) == before)
        // Paused, then reopened when granary gave the pause up.
        #expect(owner.lines.contains { $0.hasPrefix("HOSTILE kept descriptor") })
        try owner.waitFor { $0.contains { $0.hasPrefix("REOPENED") } }
        #expect(!FileManager.default.fileExists(atPath: root + "/.granary/restore/alice@example.com"))
    }

    @Test(
        "a backup that finishes an interrupted restore pauses the owner with the configured owner_timeout, not a default"
    )
    func backupRecoveryUsesConfiguredOwnerTimeout() throws {
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        final class Pauses: @unchecked Sendable {
            private let lock = NSLock()
            private var count = 0
            func next() -> Int {
                lock.withLock {
                    count += 1; return count
                }
            }
        }
        let pauses = Pauses()
        let owner = GranaryOwner()
        // The restore's pause is acknowledged; every later one (the recovery's) hangs.
        try owner.register(store: store, close: { if pauses.next() > 1 { sleep(5) } }, reopen: {})
        defer { owner.stop() }
        let crashed = try granary(
            ["restore", "alice@example.com"], environment: ["GRANARY_TEST_CRASH_AT": "committed"])
        #expect(crashed.status != 0)
        #expect(FileManager.default.fileExists(atPath: root + "/.granary/restore/alice@example.com/journal"))
        let config = folder.child("owner-timeout.toml")
        try "owner_timeout = \"700ms\"\n".write(toFile: config, atomically: true, encoding: .utf8)
        let backup = try granary(["backup", "alice@example.com", "--config", config])
        #expect(backup.status == 75, "\(backup.stderr)")
        // The recovery's pause waited the configured 700 ms (a hard-coded default would say 10000 ms).
        #expect(backup.stderr.contains("within 700 ms"), "\(backup.stderr)")
    }

    @Test("granary killed while the owner is paused: the owner resumes by itself on the old store")
    func killedWhilePaused() throws {
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        let owner = try DemoOwner(stores: [store], log: folder.child("owner.log"), startID: 1_000_000)
        try owner.waitForMoreWrites(20)
        // Right after the pause is acknowledged, before anything is moved.
        let result = try granary(["restore", "alice@example.com"], environment: ["GRANARY_TEST_CRASH_AT": "paused"])
        #expect(result.status != 0)
        try owner.waitFor { $0.contains { $0.contains("peer-gone") } }
        try owner.waitForMoreWrites(20)
        let acked = Set(owner.acked)
        owner.stop()
        let recovered = try granary(["recover", "alice@example.com"])
        #expect(recovered.status == 0, "\(recovered.stderr)")
        #expect(recovered.stdout.contains("rolled back 1"))
        // Old store kept: every acknowledged write is still there, and the archive's content did not arrive.
        #expect(acked.subtracting(try RestoreFixtures.ids(store)).isEmpty)
    }

    @Test(
        "recover that switches a store again moves a companion that appeared meanwhile to the kept folder and says where, in text and JSON; a -shm is said to hold no transactions",
        arguments: [true, false])
    func recoverNamesWhereCompanionsAreKept(json: Bool) throws {
        let archive = try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        let extracted = folder.child("archived")
        try RestoreFixtures.extract(archive, into: extracted)
        let archived = try RestoreFixtures.ids(extracted + "/stores/Local.sqlite", table: "items")
        try Database(path: store, mode: .readWrite).execute("DELETE FROM items WHERE id % 2 = 0")
        // Killed after the commit record, before the store was renamed in: recover switches it.
        let crashed = try granary(
            ["restore", "alice@example.com", (archive as NSString).lastPathComponent],
            environment: ["GRANARY_TEST_CRASH_AT": "committed"])
        #expect(crashed.status != 0, "\(crashed.stdout)\(crashed.stderr)")
        var before = stat()
        #expect(stat(store, &before) == 0)
        // recover stalls right after its rename; meanwhile a -wal and a -shm appear beside the store.
        nonisolated(unsafe) var recovered: GranaryProcess.Result?
        let done = DispatchSemaphore(value: 0)
        let root = self.root
        let repo = self.repo
        DispatchQueue.global().async {
            recovered = try? GranaryProcess.run(
                ["recover", "alice@example.com", "--root", root, "--repo", repo] + (json ? ["--json"] : []),
                environment: ["GRANARY_TEST_STALL_AT": "switched:1500"])
            done.signal()
        }
        let deadline = Date().addingTimeInterval(30)
        var now = stat()
        while Date() < deadline, stat(store, &now) != 0 || now.st_ino == before.st_ino { usleep(2_000) }
        #expect(now.st_ino != before.st_ino, "recover never switched the store")
        let walBytes = Data("a -wal put back by hand".utf8)
        let shmBytes = Data(repeating: 7, count: 32_768)
        try walBytes.write(to: URL(fileURLWithPath: store + "-wal"))
        try shmBytes.write(to: URL(fileURLWithPath: store + "-shm"))
        done.wait()
        let result = try #require(recovered)
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        var warnings: [String]
        if json {
            let document = try #require(
                try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any], "\(result.stdout)")
            let users = document["users"] as? [[String: Any]] ?? []
            warnings = users.flatMap { $0["warnings"] as? [String] ?? [] }
        } else {
            warnings = result.stdout.split(separator: "\n").filter { $0.hasPrefix("warning: ") }.map(String.init)
        }
        let keptFolder = root + "/.granary/kept/alice@example.com"
        let kept = FileSystem.contents(of: keptFolder)
        #expect(kept.count == 2, "\(kept) \(result.stdout)")
        for (suffix, bytes) in [("-wal", walBytes), ("-shm", shmBytes)] {
            let name = try #require(kept.first { $0.hasSuffix("Local.sqlite" + suffix) }, "\(kept)")
            // Every byte is where the warning says.
            #expect(try Data(contentsOf: URL(fileURLWithPath: keptFolder + "/" + name)) == bytes)
            let warning = try #require(
                warnings.first { $0.contains("Local.sqlite\(suffix) appeared while its owner was paused") },
                "\(result.stdout)")
            #expect(warning.contains("/.granary/kept/alice@example.com/\(name)"), "\(warning)")
            if suffix == "-shm" {
                #expect(warning.contains("holds no transactions"), "\(warning)")
                #expect(!warning.contains("may hold transactions"), "\(warning)")
            } else {
                #expect(warning.contains("may hold transactions"), "\(warning)")
            }
            #expect(!FileManager.default.fileExists(atPath: store + suffix), "\(suffix) left beside the new store")
        }
        // The switched store is the archive's, whole.
        #expect(try RestoreFixtures.ids(store, table: "items") == archived)
        #expect(try Database(path: store, mode: .readOnly).integrityCheck(full: true) == ["ok"])
    }

    @Test(
        "granary killed at any step of a swap under a running owner: the owner resumes by itself and no acknowledged write is lost"
    )
    func crashAtEveryStepUnderOwner() throws {
        let archive = try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        let extracted = folder.child("archived")
        try RestoreFixtures.extract(archive, into: extracted)
        let archived = try RestoreFixtures.ids(extracted + "/stores/Local.sqlite", table: "items")
        // The live items differ from the archived ones, so "old" and "new" can be told apart.
        try Database(path: store, mode: .readWrite).execute("DELETE FROM items WHERE id % 2 = 0")
        var startID: Int64 = 1
        var crashes = 0
        for step in CrashPoints.plan(CrashPoint.Name.restoreCommit) {
            let before = try RestoreFixtures.ids(store, table: "items")
            let owner = try DemoOwner(stores: [store], log: folder.child("owner-\(step).log"), startID: startID)
            try owner.waitForMoreWrites(10)
            let result = try granary(
                ["restore", "alice@example.com", (archive as NSString).lastPathComponent],
                environment: ["GRANARY_TEST_CRASH_AT": step])
            let crashed = result.status != 0
            if crashed { crashes += 1 }
            // Crashed or not, the owner goes on writing (reopened, when it had been paused).
            if owner.lines.contains(where: { $0.hasPrefix("PAUSED") }) {
                try owner.waitFor { $0.contains { $0.hasPrefix("REOPENED") } }
            }
            try owner.waitForMoreWrites(10)
            owner.stop()
            let acked = Set(owner.acked)
            startID = (acked.max() ?? startID) + 1000
            if crashed {
                let recovered = try granary(["recover", "alice@example.com"])
                #expect(recovered.status == 0, "step \(step): \(recovered.stderr)")
            }
            let db = try Database(path: store, mode: .readOnly)
            #expect(db.integrityCheck(full: true) == ["ok"], "step \(step)")
            // Old or new: the items table is either the archived one or the one before this run.
            let items = try RestoreFixtures.ids(store, table: "items")
            #expect(items == archived || items == before, "step \(step): items table mixed")
            var kept = try RestoreFixtures.ids(store)
            for safety in FileSystem.contents(of: repo + "/alice@example.com")
            where safety.contains("-pre-restore.") {
                let out = folder.child("safety-\(step)-\(safety)")
                try RestoreFixtures.extract(repo + "/alice@example.com/" + safety, into: out)
                kept.formUnion(try RestoreFixtures.ids(out + "/stores/Local.sqlite"))
            }
            #expect(
                acked.subtracting(kept).isEmpty,
                "step \(step): acknowledged writes lost: \(acked.subtracting(kept).sorted().prefix(5))")
            if CrashPoints.untouched(step) { #expect(items == before, "step \(step): changed before the commit") }
        }
        #expect(crashes > 5)
    }

    @Test("a registration left by a killed owner is ignored: restore goes offline")
    func staleRegistration() throws {
        let owner = try DemoOwner(stores: [store], log: folder.child("owner.log"))
        try owner.waitForMoreWrites(5)
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        owner.stop()
        let result = try granary(["restore", "alice@example.com"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("offline"))
    }

    @Test("--dry-run prints the plan with the owner and changes nothing")
    func dryRun() throws {
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        let owner = try DemoOwner(stores: [store], log: folder.child("owner.log"))
        try owner.waitForMoreWrites(5)
        let result = try granary(["restore", "alice@example.com", "--dry-run"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("would restore"))
        #expect(result.stdout.contains("swap"))
        #expect(result.stdout.contains("owner pid \(owner.pid)"))
        #expect(!owner.lines.contains { $0.hasPrefix("PAUSED") })
        #expect(FileSystem.contents(of: repo + "/alice@example.com").filter { !$0.hasPrefix(".") }.count == 1)
    }
}
