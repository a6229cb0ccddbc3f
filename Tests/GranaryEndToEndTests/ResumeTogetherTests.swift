import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Issue 48: granary resumes every store at once and measures each pause on its own, tells "late",
/// "expired" and "did not answer" apart, and catches an owner that writes into the new store
/// before RESUME without moving away or losing anything it wrote. The owners are real processes
/// (``MisbehavingOwner``, written from the page alone) committing rows while the restore runs;
/// every acknowledged row is afterwards in the live store or in the safety archive.
@Suite("resuming owners after a swap", .serialized)
struct ResumeTogetherTests {
    let folder = TemporaryFolder("granary-resume")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }
    let user = "alice@example.com"
    var local: String { root + "/alice@example.com/Local.sqlite" }
    var cloud: String { root + "/alice@example.com/Cloud.sqlite" }

    init() throws {
        try FileSystem.makeDirectory(root + "/alice@example.com")
        try SampleData.makeItemsStore(local, rows: 50, walOnlyTail: 5)
    }

    func restore(_ environment: [String: String], _ options: [String] = []) throws -> GranaryProcess.Result {
        try GranaryProcess.run(
            ["restore", user, "--owner-timeout", "1", "--root", root, "--repo", repo] + options,
            environment: environment)
    }

    /// The ids of `table` in the replaced `name`, from the safety archive the restore named last.
    func replacedIDs(_ result: GranaryProcess.Result, _ name: String) throws -> Set<Int64> {
        let safety = try #require(
            result.stdout.split(separator: " ").last.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) })
        let replaced = folder.child("replaced")
        if !FileManager.default.fileExists(atPath: replaced) { try RestoreFixtures.extract(safety, into: replaced) }
        return try RestoreFixtures.ids(replaced + "/stores/" + name)
    }

    /// The milliseconds of `store`'s pause line.
    func pause(of store: String, in stdout: String) -> Double? {
        for line in stdout.split(separator: "\n") where line.hasPrefix(store + ": owner paused for ") {
            let words = line.split(separator: " ")
            if let index = words.firstIndex(of: "ms") ?? words.firstIndex(of: "ms,") {
                return Double(words[index - 1])
            }
        }
        return nil
    }

    @Test(
        "one owner that ignores RESUME keeps no other store paused: the other's pause is its own swap's, and the silent one is reported expired"
    )
    func silentOwnerDelaysNoOther() throws {
        try SampleData.makeItemsStore(cloud, rows: 20, walOnlyTail: 3)
        try RestoreFixtures.archive(root: root, repo: repo, user: user)
        let good = try MisbehavingOwner(store: local, mode: "conforming", log: folder.child("good.log"))
        let silent = try MisbehavingOwner(
            store: cloud, mode: "ignore-resume", log: folder.child("silent.log"), startID: 1_000_000)
        defer {
            good.stop()
            silent.stop()
        }
        try good.waitForMoreWrites(20)
        try silent.waitForMoreWrites(20)
        let started = ContinuousClock.now
        // A lease of 4 s: the silent owner reopens by itself at its end and says EXPIRED, which
        // granary waits for (up to the lease's end plus the owner timeout).
        let result = try restore(["GRANARY_TEST_LEASE_MS": "4000"])
        let took = ContinuousClock.now - started
        #expect(result.status == 0, "\(result.stderr)")
        let goodPause = try #require(pause(of: "Local.sqlite", in: result.stdout), "\(result.stdout)")
        #expect(goodPause < 1500, "the well-behaved store stayed paused \(goodPause) ms: \(result.stdout)")
        #expect(
            result.stdout.contains("Local.sqlite: owner paused for") && result.stdout.contains("to RESUMED received)"),
            "\(result.stdout)")
        #expect(
            result.stdout.contains(", expired (from PAUSE sent to EXPIRED received: its lease ran out)"),
            "\(result.stdout)")
        #expect(result.stderr.contains("the owner of Cloud.sqlite reopened by itself"), "\(result.stderr)")
        #expect(!result.stderr.contains("the owner of Local.sqlite"), "\(result.stderr)")
        #expect(took < .seconds(30), "took \(took)")
        #expect(silent.lines.contains("IGNORED RESUME"))
        #expect(silent.lines.contains("REOPENED expired"))
        try good.waitForMoreWrites(20)
        try silent.waitForMoreWrites(20)
        good.stop()
        silent.stop()
        for (owner, path, name) in [(good, local, "Local.sqlite"), (silent, cloud, "Cloud.sqlite")] {
            let live = try RestoreFixtures.ids(path)
            let lost = owner.acked.subtracting(live).subtracting(try replacedIDs(result, name))
            #expect(lost.isEmpty, "\(name): acknowledged writes lost: \(lost.sorted().prefix(10))")
            #expect(try Database(path: path, mode: .readOnly).integrityCheck(full: true) == ["ok"])
        }
    }

    @Test(
        "an owner that writes into the new store between the switch and RESUME is caught (65), and what it wrote stays in the restored store"
    )
    func postSwapWriteCaughtAndKept() throws {
        try RestoreFixtures.archive(root: root, repo: repo, user: user)
        let owner = try MisbehavingOwner(store: local, mode: "write-after-swap", log: folder.child("owner.log"))
        defer { owner.stop() }
        try owner.waitForMoreWrites(20)
        // granary stalls 400 ms right after the rename (before it takes the new store's lock):
        // the owner's writes land in the new store first.
        let result = try restore(["GRANARY_TEST_STALL_AT": "switched:400"])
        #expect(result.status == 65, "\(result.stdout)\(result.stderr)")
        #expect(result.stderr.contains("restored, but the owner wrote to"), "\(result.stderr)")
        #expect(result.stderr.contains(local), "\(result.stderr)")
        #expect(result.stderr.contains("nothing was moved"), "\(result.stderr)")
        #expect(!result.stderr.contains("belonged to the replaced store"), "\(result.stderr)")
        try owner.waitForMoreWrites(20)
        owner.stop()
        let live = try RestoreFixtures.ids(local)
        #expect(!owner.ackedAfterSwap.isEmpty, "the owner wrote nothing after the swap: \(owner.lines.suffix(5))")
        #expect(owner.ackedAfterSwap.isSubset(of: live), "writes made after the swap were moved away")
        let lost = owner.acked.subtracting(live).subtracting(try replacedIDs(result, "Local.sqlite"))
        #expect(lost.isEmpty, "acknowledged writes lost: \(lost.sorted().prefix(10))")
        #expect(try RestoreFixtures.ids(local, table: "items") == Set(1...50))
        #expect(try Database(path: local, mode: .readOnly).integrityCheck(full: true) == ["ok"])
    }

    @Test(
        "an owner that tries to write into the new store before RESUME is held off by SQLite's lock until RESUME, and loses nothing"
    )
    func postSwapWriteHeldOff() throws {
        try RestoreFixtures.archive(root: root, repo: repo, user: user)
        let owner = try MisbehavingOwner(store: local, mode: "write-after-swap", log: folder.child("owner.log"))
        defer { owner.stop() }
        try owner.waitForMoreWrites(20)
        let result = try restore([:])
        #expect([0, 65].contains(result.status), "\(result.stdout)\(result.stderr)")
        if result.status == 65 { #expect(result.stderr.contains("restored, but the owner wrote to")) }
        try owner.waitForMoreWrites(20)
        owner.stop()
        let live = try RestoreFixtures.ids(local)
        #expect(owner.ackedAfterSwap.isSubset(of: live), "writes made after the swap were moved away")
        let lost = owner.acked.subtracting(live).subtracting(try replacedIDs(result, "Local.sqlite"))
        #expect(lost.isEmpty, "acknowledged writes lost: \(lost.sorted().prefix(10))")
        #expect(try RestoreFixtures.ids(local, table: "items") == Set(1...50))
        #expect(try Database(path: local, mode: .readOnly).integrityCheck(full: true) == ["ok"])
    }

    @Test(
        "granary-reopen-check fails the owner that writes after the swap (swap-untouched) and the one silent after RESUME (pause-resume), and passes the conforming one"
    )
    func checkerFailsEachVariant() throws {
        for (index, (mode, check, verdict)) in [
            ("conforming", "swap-untouched", "pass"), ("write-after-swap", "swap-untouched", "FAIL"),
            ("conforming", "pause-resume", "pass"), ("ignore-resume", "pause-resume", "FAIL"),
        ].enumerated() {
            let owner = try MisbehavingOwner(
                store: local, mode: mode, log: folder.child("check-\(index).log"), startID: Int64(index + 1) * 100_000)
            defer { owner.stop() }
            try owner.waitForMoreWrites(5)
            let result = try GranaryProcess.run(
                ["--check", check, "--timeout", "2", local], tool: "granary-reopen-check")
            #expect(
                result.stdout.split(separator: "\n").contains {
                    $0.split(separator: " ").prefix(2) == [Substring(verdict), Substring(check)]
                },
                "\(mode): \(check) should be \(verdict): \(result.stdout)\(result.stderr)")
            #expect(result.status == (verdict == "pass" ? 0 : 1), "\(mode): exit \(result.status)")
            owner.stop()
            usleep(200_000)
        }
    }
}
