import Foundation
import GranaryKit
import GranaryOwner
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Crashes at every step of the swap journal, online restores, verification and refusals.
@Suite("restore: crashes, methods and refusals", .serialized)
struct RestoreRecoveryTests {
    let folder = TemporaryFolder("granary-recover")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }
    var user: String { root + "/alice@example.com" }

    init() throws {
        try FileSystem.makeDirectory(user)
    }

    func granary(_ arguments: [String], environment: [String: String] = [:]) throws -> GranaryProcess.Result {
        try GranaryProcess.run(arguments + ["--root", root, "--repo", repo], environment: environment)
    }

    @Test("granary killed at every step of the swap leaves each store fully old or fully new after recover")
    func crashAtEveryStep() throws {
        var sawOld = false
        var sawNew = false
        var crashes = 0
        for step in CrashPoints.plan(CrashPoint.Name.restoreCommit, times: 2) {
            FileSystem.removeTree(root)
            FileSystem.removeTree(repo)
            try FileSystem.makeDirectory(user)
            try FileSystem.makeDirectory(user + "/Data")
            // New content: what the archive holds.
            try SampleData.makeItemsStore(user + "/Local.sqlite", rows: 30, walOnlyTail: 0)
            try SampleData.makeRollbackStore(user + "/Data/Legacy.db", rows: 10)
            let archive = try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
            let newDumps = try ["Local.sqlite", "Data/Legacy.db"].map { try RestoreFixtures.dump(user + "/" + $0) }
            // Old content: different rows, some only in the -wal.
            for name in ["Local.sqlite", "Data/Legacy.db"] {
                let db = try Database(path: user + "/" + name, mode: .readWrite)
                try db.execute("PRAGMA wal_autocheckpoint=0")
                try db.keepWALOnClose()
                try db.execute("DELETE FROM items WHERE id % 3 = 0; INSERT INTO items VALUES (999, 'old', 1)")
            }
            let oldDumps = try ["Local.sqlite", "Data/Legacy.db"].map { try RestoreFixtures.dump(user + "/" + $0) }
            let result = try granary(
                ["restore", "alice@example.com", (archive as NSString).lastPathComponent],
                environment: ["GRANARY_TEST_CRASH_AT": step])
            // Not reached (a point of a second store, or of external data this restore has none of).
            if result.status == 0 { continue }
            crashes += 1
            // Reached: the crash point killed granary with SIGKILL, nothing else ended it (an error
            // exit is a failure here). Foundation's Process reports a signal's death as the
            // signal's number (9), which is none of granary's exit statuses (0, 1, 64-75, 129, 130: ExitStatuses.swift).
            #expect(
                result.status == SIGKILL,
                "step \(step): not killed at the crash point: status \(result.status), \(result.stderr)")
            let recovered = try granary(["recover"])
            #expect(recovered.status == 0, "step \(step): \(recovered.stderr)")
            for (index, name) in ["Local.sqlite", "Data/Legacy.db"].enumerated() {
                let path = user + "/" + name
                let db = try Database(path: path, mode: .readOnly)
                #expect(db.integrityCheck(full: true) == ["ok"], "step \(step): \(name)")
                let dump = try RestoreFixtures.dump(path)
                #expect(dump == oldDumps[index] || dump == newDumps[index], "step \(step): \(name) is mixed")
                if CrashPoints.untouched(step) { #expect(dump == oldDumps[index], "step \(step): \(name) changed") }
                if dump == newDumps[index] {
                    sawNew = true
                    // Byte for byte the archived file.
                    let member = folder.child("check-\(step)")
                    try RestoreFixtures.extract(archive, into: member)
                    #expect(
                        RestoreFixtures.sha256(path) == RestoreFixtures.sha256(member + "/stores/" + name),
                        "step \(step): \(name)")
                } else {
                    sawOld = true
                }
            }
            #expect(!FileManager.default.fileExists(atPath: root + "/.granary/restore/alice@example.com"))
        }
        #expect(crashes > 10, "the swap should have more than ten points")
        #expect(sawOld && sawNew)
    }

    @Test(
        "SIGTERM at every step: before the commit record exit 130 with every live file untouched; after it the commit ends whole and recover finishes"
    )
    func signalAtEveryStep() throws {
        var stopped = 0
        var finished = 0
        for step in CrashPoints.plan(CrashPoint.Name.restoreCommit) {
            FileSystem.removeTree(root)
            FileSystem.removeTree(repo)
            try FileSystem.makeDirectory(user)
            try SampleData.makeItemsStore(user + "/Local.sqlite", rows: 30, walOnlyTail: 0)
            let archive = try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
            let newDump = try RestoreFixtures.dump(user + "/Local.sqlite")
            do {
                let db = try Database(path: user + "/Local.sqlite", mode: .readWrite)
                try db.execute("PRAGMA wal_autocheckpoint=0")
                try db.keepWALOnClose()
                try db.execute("DELETE FROM items WHERE id % 3 = 0; INSERT INTO items VALUES (999, 'old', 1)")
            }
            let oldDump = try RestoreFixtures.dump(user + "/Local.sqlite")
            let before = ["Local.sqlite", "Local.sqlite-wal"].map { FileSystem.status(user + "/" + $0)?.st_ino }
            let result = try granary(
                ["restore", "alice@example.com", (archive as NSString).lastPathComponent],
                environment: ["GRANARY_TEST_SIGNAL_AT": step])
            if CrashPoints.untouched(step) {
                stopped += 1
                #expect(result.status == 130, "step \(step): \(result.stderr)")
                #expect(result.stderr.contains("interrupted by SIGTERM"), "step \(step): \(result.stderr)")
                let after = ["Local.sqlite", "Local.sqlite-wal"].map {
                    FileSystem.status(user + "/" + $0)?.st_ino
                }
                #expect(after == before, "step \(step): a live file was replaced")
                #expect(try RestoreFixtures.dump(user + "/Local.sqlite") == oldDump, "step \(step)")
            } else {
                finished += 1
                // The commit is never cut: the run ends restored (0), or stops after the commit
                // saying that recover finishes it (130).
                #expect(result.status == 0 || result.status == 130, "step \(step): \(result.stderr)")
                if result.status == 130 {
                    #expect(result.stderr.contains("granary recover"), "step \(step): \(result.stderr)")
                }
                #expect(try RestoreFixtures.dump(user + "/Local.sqlite") == newDump, "step \(step)")
                let recovered = try granary(["recover"])
                #expect(recovered.status == 0, "step \(step): \(recovered.stderr)")
                let safety = try FileManager.default.contentsOfDirectory(atPath: repo + "/alice@example.com")
                    .filter { $0.contains("pre-restore") && !$0.hasPrefix(".") }
                #expect(safety.count == 1, "step \(step): \(safety)")
            }
            #expect(
                try RestoreFixtures.dump(user + "/Local.sqlite") == (CrashPoints.untouched(step) ? oldDump : newDump))
            #expect(
                !FileManager.default.fileExists(atPath: root + "/.granary/restore/alice@example.com"), "step \(step)")
        }
        #expect(stopped == 3 && finished > 5)

        // reset: the same request before its commit changes nothing.
        let before = try RestoreFixtures.dump(user + "/Local.sqlite")
        let reset = try granary(
            ["reset", "alice@example.com", "--yes"], environment: ["GRANARY_TEST_SIGNAL_AT": "checked"])
        #expect(reset.status == 130, "\(reset.stderr)")
        #expect(try RestoreFixtures.dump(user + "/Local.sqlite") == before)
    }

    @Test("online restore copies into a live WAL store held open by a writer, across different page sizes")
    func onlineWithForeignWriter() throws {
        let store = user + "/Local.sqlite"
        // The archive's store has 1024-byte pages; the live one 4096.
        let db0 = try Database(path: store, mode: .create)
        try db0.execute("PRAGMA page_size=1024; CREATE TABLE items(id INTEGER PRIMARY KEY, body TEXT)")
        try db0.execute("INSERT INTO items VALUES (1, 'archived'), (2, 'archived')")
        _ = db0
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        FileSystem.removeTree(user)
        try FileSystem.makeDirectory(user)
        let live = try Database(path: store, mode: .create)
        try live.execute(
            "PRAGMA page_size=4096; PRAGMA journal_mode=WAL; CREATE TABLE items(id INTEGER PRIMARY KEY, body TEXT)")
        try live.execute("INSERT INTO items VALUES (7, 'live')")
        // `live` stays open: a writer that knows nothing of the reopen protocol.
        let result = try granary(["restore", "alice@example.com"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("online"))
        #expect(try live.rows("SELECT body FROM items ORDER BY id").map { $0[0].text } == ["archived", "archived"])
        try live.execute("INSERT INTO items VALUES (3, 'after')")
        #expect(try live.journalMode() == "wal")
        #expect(try live.pageSize() == 4096)
        #expect(live.integrityCheck(full: true) == ["ok"])
        let safety = FileSystem.contents(of: repo + "/alice@example.com").filter {
            $0.contains("pre-restore") && !$0.hasPrefix(".")
        }
        #expect(safety.count == 1)
        let extracted = folder.child("safety")
        try RestoreFixtures.extract(repo + "/alice@example.com/" + safety[0], into: extracted)
        #expect(try RestoreFixtures.ids(extracted + "/stores/Local.sqlite", table: "items") == [7])
    }

    @Test(
        "a corrupt newest archive stops the restore with exit 65, names the newest archive that verifies, and changes nothing"
    )
    func corruptArchive() throws {
        try SampleData.makeItemsStore(user + "/Local.sqlite", rows: 20, walOnlyTail: 0)
        let good = try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        let bad = try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com", label: "bad")
        // Flip bytes in the middle of the compressed stream.
        var bytes = [UInt8](FileManager.default.contents(atPath: bad)!)
        for i in (bytes.count / 2)..<(bytes.count / 2 + 16) { bytes[i] ^= 0xFF }
        try Data(bytes).write(to: URL(fileURLWithPath: bad))
        let before = RestoreFixtures.sha256(user + "/Local.sqlite")
        let result = try granary(["restore", "alice@example.com"])
        #expect(result.status == 65, "\(result.stderr)")
        #expect(result.stderr.contains((good as NSString).lastPathComponent))
        #expect(RestoreFixtures.sha256(user + "/Local.sqlite") == before)
        #expect(FileSystem.contents(of: root + "/.granary/restore").isEmpty)
    }

    @Test("the hint after a failed verification trusts verify's records: an archive recorded bad is passed over")
    func corruptArchiveRecords() throws {
        try SampleData.makeItemsStore(user + "/Local.sqlite", rows: 20, walOnlyTail: 0)
        let oldest = try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com", label: "a")
        // A sound archive that a (pretend) earlier verify recorded as bad: probing it would pass.
        let recordedBad = try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com", label: "b")
        try #require(VerificationRecord(archive: recordedBad, good: false, reason: "test", check: .full)).write(
            for: recordedBad)
        let newest = try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com", label: "c")
        var bytes = [UInt8](FileManager.default.contents(atPath: newest)!)
        for i in (bytes.count / 2)..<(bytes.count / 2 + 16) { bytes[i] ^= 0xFF }
        try Data(bytes).write(to: URL(fileURLWithPath: newest))
        let result = try granary(["restore", "alice@example.com"])
        #expect(result.status == 65, "\(result.stderr)")
        #expect(result.stderr.contains((oldest as NSString).lastPathComponent), "\(result.stderr)")
        #expect(!result.stderr.contains((recordedBad as NSString).lastPathComponent), "\(result.stderr)")
        #expect(FileSystem.contents(of: root + "/.granary/restore").isEmpty)
    }

    @Test("a Core Data store with another model is refused without --force")
    func modelMismatch() throws {
        try SampleData.makeCoreDataStore(user + "/Notes.sqlite", notes: 5)
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        let db = try Database(path: user + "/Notes.sqlite", mode: .readWrite)
        let plist = CoreDataMetadata.makePlist(
            storeUUID: "X", modelVersionHashes: ["Note": Data([1, 2, 3]), "Folder": Data([4])])
        try db.run("UPDATE Z_METADATA SET Z_PLIST = ?", [.blob(plist)])
        let result = try granary(["restore", "alice@example.com"])
        #expect(result.status == 65)
        #expect(result.stderr.contains("Core Data model"))
        #expect(result.stderr.contains("--force"))
        let forced = try granary(["restore", "alice@example.com", "--force"])
        #expect(forced.status == 0, "\(forced.stderr)")
    }

    @Test("--to restores into another folder and touches nothing live")
    func restoreTo() throws {
        try SampleData.makeItemsStore(user + "/Local.sqlite", rows: 20, walOnlyTail: 0)
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        let before = RestoreFixtures.sha256(user + "/Local.sqlite")
        let target = folder.child("drill")
        let result = try granary(["restore", "alice@example.com", "--to", target])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(try RestoreFixtures.ids(target + "/Local.sqlite", table: "items").count == 20)
        #expect(RestoreFixtures.sha256(user + "/Local.sqlite") == before)
        #expect(FileSystem.contents(of: repo + "/alice@example.com").filter { !$0.hasPrefix(".") }.count == 1)
    }

    @Test("--method offline refuses a store another process has open")
    func offlineRefusesOpenStore() throws {
        try SampleData.makeItemsStore(user + "/Local.sqlite", rows: 20, walOnlyTail: 0)
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        let holder = try Database(path: user + "/Local.sqlite", mode: .readOnly)
        _ = try holder.scalar("SELECT count(*) FROM items")
        let result = try granary(["restore", "alice@example.com", "--method", "offline"])
        #expect(result.status == 75)
        #expect(result.stderr.contains("open by process \(getpid())"))
    }

    @Test("--method swap without an owner exits 75 and suggests online")
    func swapWithoutOwner() throws {
        try SampleData.makeItemsStore(user + "/Local.sqlite", rows: 20, walOnlyTail: 0)
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        let result = try granary(["restore", "alice@example.com", "--method", "swap"])
        #expect(result.status == 75)
        #expect(result.stderr.contains("--method online"))
    }
    @Test(
        "a Core Data store's external data files follow the restore, and the replaced ones go into the safety archive")
    func coreDataExternalData() throws {
        let store = user + "/Notes.sqlite"
        try SampleData.makeCoreDataStore(store, notes: 9)
        let external = RestoreFixtures.externalFolder(of: store)
        let archived = FileSystem.contents(of: external)
        #expect(archived.count == 3)
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        // After the backup: one attachment deleted, a new one written.
        try FileSystem.removeFile(external + "/" + archived[0])
        try Data("new attachment".utf8).write(to: URL(fileURLWithPath: external + "/NEW-ATTACHMENT"))
        let result = try granary(["restore", "alice@example.com"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("offline"))
        #expect(FileSystem.contents(of: external) == archived)
        let safety = try #require(
            FileSystem.contents(of: repo + "/alice@example.com").first {
                $0.contains("pre-restore") && !$0.hasPrefix(".")
            })
        let extracted = folder.child("safety")
        try RestoreFixtures.extract(repo + "/alice@example.com/" + safety, into: extracted)
        // The safety archive holds the replaced store's attachments complete (those the restore
        // removed and those it kept), so that restoring it gives back every attachment.
        #expect(
            FileSystem.contents(of: extracted + "/stores/.Notes_SUPPORT/_EXTERNAL_DATA")
                == (archived.dropFirst() + ["NEW-ATTACHMENT"]).sorted())
    }

    @Test("reset keeps a Core Data store's metadata, resets Z_MAX, and removes its external data")
    func resetCoreData() throws {
        let store = user + "/Notes.sqlite"
        try SampleData.makeCoreDataStore(store, notes: 9)
        let metadata = try RestoreFixtures.dump(store).components(separatedBy: "## ").first {
            $0.hasPrefix("Z_METADATA")
        }
        let result = try granary(["reset", "alice@example.com", "--yes"])
        #expect(result.status == 0, "\(result.stderr)")
        let db = try Database(path: store, mode: .readOnly)
        #expect(try db.scalar("SELECT count(*) FROM ZNOTE")?.integer == 0)
        #expect(try db.scalar("SELECT count(*) FROM ZFOLDER")?.integer == 0)
        #expect(try db.rows("SELECT Z_MAX FROM Z_PRIMARYKEY").map { $0[0].integer } == [0, 0])
        #expect(
            try RestoreFixtures.dump(store).components(separatedBy: "## ").first { $0.hasPrefix("Z_METADATA") }
                == metadata)
        #expect(FileSystem.contents(of: RestoreFixtures.externalFolder(of: store)).isEmpty)
        #expect(db.integrityCheck(full: true) == ["ok"])
        #expect(FileSystem.contents(of: repo + "/alice@example.com").contains { $0.contains("-pre-reset.") })
    }
    @Test("--at picks the newest archive at or before the time, and an earlier time than any archive is not found")
    func restoreAt() throws {
        let store = user + "/Local.sqlite"
        try SampleData.makeItemsStore(store, rows: 10, walOnlyTail: 0)
        let first = try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        try Database(path: store, mode: .readWrite).execute("DELETE FROM items WHERE id > 5")
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        let stamp = String((first as NSString).lastPathComponent.prefix(23))
        let result = try granary(["restore", "alice@example.com", "--at", stamp])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains((first as NSString).lastPathComponent))
        #expect(try RestoreFixtures.ids(store, table: "items").count == 10)
        let early = try granary(["restore", "alice@example.com", "--at", "2001-01-01T00:00:00Z"])
        #expect(early.status == 66)
        // yesterday is a time now (24 hours ago), before every archive here; a word that is no time is a usage error.
        #expect(try granary(["restore", "alice@example.com", "--at", "yesterday"]).status == 66)
        let bad = try granary(["restore", "alice@example.com", "--at", "someday"])
        #expect(bad.status == 64)
    }

    @Test("a restore after an interrupted one recovers it first")
    func restoreRecoversFirst() throws {
        try SampleData.makeItemsStore(user + "/Local.sqlite", rows: 10, walOnlyTail: 0)
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        let crashed = try granary(["restore", "alice@example.com"], environment: ["GRANARY_TEST_CRASH_AT": "checked"])
        #expect(crashed.status != 0)
        #expect(FileManager.default.fileExists(atPath: root + "/.granary/restore/alice@example.com/journal"))
        let result = try granary(["restore", "alice@example.com"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("recovered an interrupted swap of alice@example.com: rolled back 1"))
        #expect(!FileManager.default.fileExists(atPath: root + "/.granary/restore/alice@example.com"))
    }

    @Test("a backup after an interrupted restore recovers it first and snapshots a whole store")
    func backupRecoversFirst() throws {
        try SampleData.makeItemsStore(user + "/Local.sqlite", rows: 10, walOnlyTail: 0)
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        let crashed = try granary(["restore", "alice@example.com"], environment: ["GRANARY_TEST_CRASH_AT": "checked"])
        #expect(crashed.status != 0)
        #expect(FileManager.default.fileExists(atPath: root + "/.granary/restore/alice@example.com/journal"))
        let result = try granary(["backup", "alice@example.com"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: root + "/.granary/restore/alice@example.com"))
        let db = try Database(path: user + "/Local.sqlite", mode: .readOnly)
        #expect(try db.integrityCheck(full: true) == ["ok"])
    }

    @Test("a store in the archive that is not live is created, owned like the user's folder, with --force")
    func newStore() throws {
        try SampleData.makeItemsStore(user + "/Local.sqlite", rows: 10, walOnlyTail: 0)
        try SampleData.makeItemsStore(user + "/Extra.sqlite", rows: 3, walOnlyTail: 0)
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        try FileSystem.removeFile(user + "/Extra.sqlite")
        // Everything in a user's folder belongs to the folder's owner.
        for name in [""] + FileSystem.contents(of: user) {
            chown(name.isEmpty ? user : user + "/" + name, 65534, 65534)
        }
        let refused = try granary(["restore", "alice@example.com"])
        #expect(refused.status == 65)
        #expect(refused.stderr.contains("only in the archive: Extra.sqlite"))
        let result = try granary(["restore", "alice@example.com", "--force"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(try RestoreFixtures.ids(user + "/Extra.sqlite", table: "items").count == 3)
        #expect(FileSystem.status(user + "/Extra.sqlite")?.st_uid == 65534)
    }
    @Test("an archive whose manifest names a store outside the user's folder is refused with exit 65")
    func escapingStoreName() throws {
        try SampleData.makeItemsStore(user + "/Local.sqlite", rows: 3, walOnlyTail: 0)
        let folderPath = repo + "/alice@example.com"
        try FileSystem.makeDirectory(folderPath)
        let snapshot = folder.child("evil.sqlite")
        try SampleData.makeItemsStore(snapshot, rows: 1, walOnlyTail: 0)
        let bytes = [UInt8](FileManager.default.contents(atPath: snapshot)!)
        let digest = RestoreFixtures.sha256(snapshot)
        let manifest = Manifest(
            user: "alice@example.com", host: Hosts.machine,
            created: try #require(ArchiveName.parseStamp("20260101T000000Z")), label: nil, compression: .zstd,
            stores: [
                Manifest.Store(
                    name: "../../evil.sqlite", path: "stores/Local.sqlite", pageSize: 4096, pageCount: 1,
                    journalMode: "wal", sqliteVersion: "3", check: "quick", integrity: "ok")
            ],
            files: [Manifest.File(path: "stores/Local.sqlite", size: Int64(bytes.count), sha256: digest, kind: .store)])
        let path = folderPath + "/20260101T000000Z.\(Hosts.machine).tar.zst"
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        let writer = try ArchiveWriter(fileDescriptor: fd, path: path, compression: .zstd)
        try writer.addData(member: Manifest.memberName, bytes: manifest.encoded())
        try writer.addFile(member: "stores/Local.sqlite", from: snapshot)
        try writer.finish()
        close(fd)
        let result = try granary(["restore", "alice@example.com", "--force"])
        #expect(result.status == 65, "\(result.stderr)")
        #expect(result.stderr.contains("would leave the user's folder"))
        #expect(!FileManager.default.fileExists(atPath: root + "/evil.sqlite"))
    }
    @Test("a swapped store keeps the live store's journal mode whatever the archive's")
    func journalModeKept() throws {
        let store = user + "/Local.sqlite"
        try SampleData.makeRollbackStore(store, rows: 4)
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        try Database(path: store, mode: .readWrite).execute("PRAGMA journal_mode=WAL")
        #expect(StoreHeader.read(store)?.isWAL == true)
        let result = try granary(["restore", "alice@example.com"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(StoreHeader.read(store)?.isWAL == true)
        #expect(try RestoreFixtures.ids(store, table: "items").count == 4)
    }
    @Test("an online restore into a store whose writer keeps a transaction open exits 75 and changes nothing")
    func onlineBusy() throws {
        let store = user + "/Local.sqlite"
        try SampleData.makeItemsStore(store, rows: 10, walOnlyTail: 0)
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        try Database(path: store, mode: .readWrite).execute("DELETE FROM items WHERE id > 2")
        let writer = try Database(path: store, mode: .readWrite)
        try writer.execute("BEGIN IMMEDIATE; INSERT INTO items VALUES (100, 'pending', 1)")
        let result = try granary(["restore", "alice@example.com", "--method", "online", "--owner-timeout", "0.5"])
        #expect(result.status == 75, "\(result.stderr)")
        #expect(result.stderr.contains("busy"))
        try writer.execute("COMMIT")
        #expect(try RestoreFixtures.ids(store, table: "items") == [1, 2, 100])
        #expect(!FileSystem.contents(of: repo + "/alice@example.com").contains { $0.contains("pre-restore") })
        #expect(!FileManager.default.fileExists(atPath: root + "/.granary/restore/alice@example.com"))
    }
}
