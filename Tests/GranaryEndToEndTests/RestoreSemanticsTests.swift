import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// What surrounds a restore: safety archives kept out of the way of backups and complete, a
/// user's stores committed as one unit, messages that say what happened.
@Suite("restore you can trust twice", .serialized)
struct RestoreSemanticsTests {
    let folder = TemporaryFolder("granary-semantics")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }
    var user: String { root + "/alice@example.com" }

    init() throws {
        try FileSystem.makeDirectory(user)
    }

    func granary(_ arguments: [String], environment: [String: String] = [:]) throws -> GranaryProcess.Result {
        try GranaryProcess.run(arguments + ["--root", root, "--repo", repo], environment: environment)
    }

    func archives() -> [String] { FileSystem.contents(of: repo + "/alice@example.com").filter { !$0.hasPrefix(".") } }

    @Test("a second restore puts back the newest regular backup, not what the first restore replaced")
    func secondRestoreIgnoresSafety() throws {
        let store = user + "/Local.sqlite"
        try SampleData.makeItemsStore(store, rows: 10, walOnlyTail: 0)
        #expect(try granary(["backup", "alice@example.com"]).status == 0)
        try Database(path: store, mode: .readWrite).execute("DELETE FROM items WHERE id > 5")
        var result = try granary(["restore", "alice@example.com"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(try RestoreFixtures.ids(store, table: "items") == Set(1...10))
        #expect(archives().contains { $0.contains("-pre-restore.") })
        try Database(path: store, mode: .readWrite).execute("INSERT INTO items VALUES (99, 'later', 0)")
        // Before: the newest archive was the pre-restore one (ids 1-5), and this put it back.
        result = try granary(["restore", "alice@example.com"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(try RestoreFixtures.ids(store, table: "items") == Set(1...10))
    }

    @Test("verify --latest, --at, check and prune's rules ignore safety archives, which have their own retention")
    func safetyArchivesOutOfTheWay() throws {
        let store = user + "/Local.sqlite"
        try SampleData.makeItemsStore(store, rows: 10, walOnlyTail: 0)
        // Both archives half a minute old (the test clock): past a one-second retention below.
        let past = testClock(secondsAgo: 30)
        #expect(try granary(["backup", "alice@example.com"], environment: past).status == 0)
        let backup = try #require(archives().first)
        #expect(try granary(["restore", "alice@example.com"], environment: past).status == 0)
        let safety = try #require(archives().first { $0.contains("pre-restore") })
        // verify --latest takes the newest regular backup.
        let verified = try granary(["verify", "--latest", "--user", "alice@example.com", "--json"])
        #expect(verified.status == 0, "\(verified.stderr)")
        #expect(verified.stdout.contains(backup) && !verified.stdout.contains(safety), "\(verified.stdout)")
        // --at now picks the backup, not the newer safety archive.
        let plan = try granary([
            "restore", "alice@example.com", "--at", ArchiveName.stamp(Date().addingTimeInterval(60)), "--dry-run",
        ])
        #expect(plan.stdout.contains(backup), "\(plan.stdout)")
        // check: a verified safety archive does not vouch for the user.
        for name in FileSystem.contents(of: repo + "/alice@example.com")
        where name.hasPrefix(".") && name.contains(backup) {
            try FileSystem.removeFile(repo + "/alice@example.com/" + name)
        }
        #expect(try granary(["verify", "alice@example.com/" + safety]).status == 0)
        var check = try granary(["check", "alice@example.com"])
        #expect(check.status == 1, "\(check.stdout)")
        #expect(try granary(["verify", "alice@example.com/" + backup]).status == 0)
        check = try granary(["check", "alice@example.com"])
        #expect(check.status == 0, "\(check.stdout) \(check.stderr)")
        // list marks it.
        #expect(try granary(["list", "alice@example.com"]).stdout.contains("(safety archive"))
        // prune --keep-daily 1: the backup is kept by the rule, the safety archive by its own.
        let pruned = try granary(["prune", "alice@example.com", "--keep-daily", "1", "--json"])
        #expect(pruned.status == 0, "\(pruned.stderr)")
        #expect(Set(archives()) == [backup, safety])
        // With a one-second safety retention, it goes and the backup stays.
        let config = folder.child("config.toml")
        try Data("[retention]\nkeep_last = 1\nsafety_keep_within = \"1s\"\n".utf8).write(
            to: URL(fileURLWithPath: config))
        #expect(try granary(["prune", "alice@example.com", "--config", config]).status == 0)
        #expect(archives() == [backup])
    }

    @Test("the labels of granary's own archives are refused for a backup")
    func reservedLabels() throws {
        try SampleData.makeItemsStore(user + "/Local.sqlite", rows: 3, walOnlyTail: 0)
        for label in ["pre-restore", "pre-reset", "final"] {
            let result = try granary(["backup", "alice@example.com", "--label", label])
            #expect(result.status == 64, "\(label): \(result.stderr)")
        }
        #expect(archives().isEmpty)
    }

    @Test("restore --undo puts back what the last restore replaced, attachments included")
    func undoRestoresEverything() throws {
        let store = user + "/Notes.sqlite"
        try SampleData.makeCoreDataStore(store, notes: 9)
        let external = RestoreFixtures.externalFolder(of: store)
        #expect(try granary(["backup", "alice@example.com"]).status == 0)
        // After the backup the app deletes one attachment and writes a new one.
        let attachments = FileSystem.contents(of: external)
        try FileSystem.removeFile(external + "/" + attachments[0])
        try Data("new attachment".utf8).write(to: URL(fileURLWithPath: external + "/NEW-ATTACHMENT"))
        let before = try RestoreFixtures.dump(store)
        let beforeFiles = FileSystem.contents(of: external)
        #expect(try granary(["restore", "alice@example.com"]).status == 0)
        #expect(FileSystem.contents(of: external) == attachments)
        let undo = try granary(["restore", "alice@example.com", "--undo"])
        #expect(undo.status == 0, "\(undo.stderr)")
        #expect(undo.stdout.contains("pre-restore"), "\(undo.stdout)")
        // Before: the safety archive held only the database, and the undo deleted every attachment.
        #expect(FileSystem.contents(of: external) == beforeFiles)
        #expect(try RestoreFixtures.dump(store) == before)
        let nothing = try GranaryProcess.run(["restore", "bob@example.com", "--undo", "--root", root, "--repo", repo])
        #expect(nothing.status == 66)
    }

    @Test(
        "a user with no store yet is nothing to back up (0); one whose only store is passed over fails with 65; backup --all over an empty root with 66; nothing is written"
    )
    func emptyIsNotSuccess() throws {
        let nothing = try granary(["backup", "alice@example.com"])
        #expect(nothing.status == 0, "\(nothing.stderr)")
        #expect(archives().isEmpty)
        #expect(!FileManager.default.fileExists(atPath: repo + "/alice@example.com"))
        try SampleData.makeRollbackStore(folder.child("elsewhere.sqlite"), rows: 1)
        try FileManager.default.createSymbolicLink(
            atPath: user + "/Linked.sqlite", withDestinationPath: folder.child("elsewhere.sqlite"))
        let result = try granary(["backup", "alice@example.com"])
        #expect(result.status == 65, "\(result.stderr)")
        #expect(result.stderr.contains("no SQLite store found"))
        #expect(archives().isEmpty)
        let empty = folder.child("empty-root")
        try FileSystem.makeDirectory(empty, mode: 0o755)
        let all = try GranaryProcess.run(["backup", "--all", "--root", empty, "--repo", repo])
        #expect(all.status == 66, "\(all.stderr)")
        #expect(all.stderr.contains("no user folders"))
    }

    @Test("a reset of a user with no store fails with 65, says nothing was reset, and writes nothing")
    func resetOfNothing() throws {
        let result = try granary(["reset", "alice@example.com", "--yes"])
        #expect(result.status == 65, "\(result.stderr)")
        #expect(result.stderr.contains("no SQLite store found") && result.stderr.contains("nothing was reset"))
        #expect(result.stderr.contains("granary users"), "the hint: \(result.stderr)")
        #expect(!result.stderr.contains("no archive was written"))
        #expect(archives().isEmpty)
    }

    /// Two stores of one user under one running owner: a run of `granary restore` with `environment`
    /// (a crash or a stall injected at `step`); returns whether it finished by itself.
    func twoStoreRun(step: String, environment: [String: String], tag: String) throws -> Bool {
        FileSystem.removeTree(root)
        FileSystem.removeTree(repo)
        try FileSystem.makeDirectory(user)
        let local = user + "/Local.sqlite", cloud = user + "/Cloud.sqlite"
        try SampleData.makeItemsStore(local, rows: 20, walOnlyTail: 0)
        try SampleData.makeItemsStore(cloud, rows: 20, walOnlyTail: 0)
        #expect(try granary(["backup", "alice@example.com"]).status == 0)
        // Old content differs from the archive's in both stores.
        for store in [local, cloud] {
            try Database(path: store, mode: .readWrite).execute("DELETE FROM items WHERE id % 2 = 0")
        }
        let owner = try DemoOwner(stores: [local, cloud], log: folder.child("owner-\(tag)-\(step).log"))
        try owner.waitForMoreWrites(10)
        let result = try granary(["restore", "alice@example.com"], environment: environment)
        try owner.waitForMoreWrites(10)
        owner.stop()
        if result.status != 0 {
            let recovered = try granary(["recover", "alice@example.com"])
            #expect(recovered.status == 0, "\(tag) step \(step): \(recovered.stderr)")
        }
        let items = try [local, cloud].map { try RestoreFixtures.ids($0, table: "items") }
        let allNew = items.allSatisfy { $0 == Set(1...20) }
        let allOld = items.allSatisfy { $0 == Set(stride(from: 1, through: 19, by: 2)) }
        #expect(
            allNew || allOld,
            "\(tag) step \(step): one store old and one new: \(items.map { $0.count }) — \(result.stderr)")
        for store in [local, cloud] {
            #expect(try Database(path: store, mode: .readOnly).integrityCheck(full: true) == ["ok"])
        }
        return result.status == 0
    }

    @Test("two stores under one owner: granary killed at any step of the restore leaves both old or both new")
    func twoStoresCrashAtEveryStep() throws {
        // Before: "rolled back 1, finished 1" left Cloud new and Local old.
        var crashes = 0
        for step in CrashPoints.plan(CrashPoint.Name.restoreCommit, times: 2) {
            if try !twoStoreRun(step: step, environment: ["GRANARY_TEST_CRASH_AT": step], tag: "crash") { crashes += 1 }
        }
        #expect(crashes > 5, "the restore had fewer points than expected")
    }

    @Test("two stores under one owner: a lease that runs out at any step leaves both old or both new")
    func twoStoresLeaseExpiresAtEveryStep() throws {
        for step in CrashPoints.plan(CrashPoint.Name.restoreCommit, times: 2) {
            _ = try twoStoreRun(
                step: step,
                environment: ["GRANARY_TEST_LEASE_MS": "2300", "GRANARY_TEST_STALL_AT": "\(step):2500"],
                tag: "lease")
        }
    }

    @Test(
        "a restore whose safety archive cannot be written after the commit says restored, exits 1, and blocks no backup"
    )
    func safetyArchiveAfterCommit() throws {
        let store = user + "/Local.sqlite"
        try SampleData.makeItemsStore(store, rows: 10, walOnlyTail: 0)
        #expect(try granary(["backup", "alice@example.com"]).status == 0)
        try Database(path: store, mode: .readWrite).execute("DELETE FROM items WHERE id > 5")
        let result = try granary(
            ["restore", "alice@example.com"], environment: ["GRANARY_TEST_FAIL_SAFETY_ARCHIVE": "1"])
        #expect(result.status == 1, "\(result.stderr)")
        #expect(result.stderr.contains("restored;"), "\(result.stderr)")
        #expect(result.stderr.contains("granary recover alice@example.com"), "\(result.stderr)")
        #expect(try RestoreFixtures.ids(store, table: "items") == Set(1...10))
        #expect(!archives().contains { $0.contains("pre-restore") })
        // Before: the journal stayed behind and every later backup of the user failed.
        let backup = try granary(["backup", "alice@example.com"])
        #expect(backup.status == 0, "\(backup.stderr)")
        // The backup's recovery wrote the pending safety archive once the repository could take it.
        let safety = try #require(archives().first { $0.contains("pre-restore") })
        let extracted = folder.child("safety")
        try RestoreFixtures.extract(repo + "/alice@example.com/" + safety, into: extracted)
        #expect(try RestoreFixtures.ids(extracted + "/stores/Local.sqlite", table: "items") == Set(1...5))
        #expect(FileSystem.status(root + "/.granary/safety-pending/alice@example.com") == nil, "nothing left pending")
    }

    @Test(
        "a user holding the commit lock of their own folder cannot hold a restore forever: 75 within the owner timeout, nothing changed"
    )
    func heldFolderLockIsBounded() throws {
        let store = user + "/Local.sqlite"
        try SampleData.makeItemsStore(store, rows: 10, walOnlyTail: 0)
        #expect(try granary(["backup", "alice@example.com"]).status == 0)
        try Database(path: store, mode: .readWrite).execute("DELETE FROM items WHERE id > 5")
        let fd = open(user, O_RDONLY | O_DIRECTORY)
        defer { close(fd) }
        #expect(flock(fd, LOCK_EX) == 0)
        // Before: the offline restore blocked in flock(2) for ever, holding granary's lock.
        let result = try granary(["restore", "alice@example.com", "--owner-timeout", "1"])
        #expect(result.status == 75, "\(result.stderr)")
        #expect(result.stderr.contains("commit lock"), "\(result.stderr)")
        #expect(try RestoreFixtures.ids(store, table: "items") == Set(1...5))
        #expect(!FileManager.default.fileExists(atPath: root + "/.granary/restore/alice@example.com/journal"))
    }

    @Test("a repository that cannot take the safety archive refuses the restore before anything live is touched")
    func readOnlyRepositoryRefusedFirst() throws {
        let store = user + "/Local.sqlite"
        try SampleData.makeItemsStore(store, rows: 10, walOnlyTail: 0)
        let disk = try FaultTests.SmallDisk(in: folder, name: "disk", kilobytes: 1024)
        guard disk.mounted else {
            Issue.record("cannot mount a tmpfs here (this test needs root)")
            return
        }
        #expect(
            try GranaryProcess.run(["backup", "alice@example.com", "--root", root, "--repo", disk.path]).status == 0)
        try Database(path: store, mode: .readWrite).execute("DELETE FROM items WHERE id > 5")
        try disk.readOnly()
        // Before: the restore swapped the stores, then failed with 73 and left its journal behind.
        let result = try GranaryProcess.run(["restore", "alice@example.com", "--root", root, "--repo", disk.path])
        #expect(result.status == 73, "\(result.stderr)")
        #expect(result.stderr.contains("nothing was changed"), "\(result.stderr)")
        #expect(try RestoreFixtures.ids(store, table: "items") == Set(1...5))
        #expect(!FileManager.default.fileExists(atPath: root + "/.granary/restore/alice@example.com"))
    }
}
