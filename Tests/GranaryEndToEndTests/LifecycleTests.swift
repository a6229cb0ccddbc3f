import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A user's whole life, as root with an unprivileged owner: retired on one root ("host A") with a
/// final archive, created on another ("host B") from the same repository or from an S3 mirror,
/// and the app started there; retire refused while the app runs; retire killed at every step.
@Suite(
    "a user's life: retire on one root, restore --create on another", .serialized,
    .enabled(
        if: geteuid() == 0,
        "the lifecycle tests need root (CI runs make test as root): they create a user and run the app as it"))
struct LifecycleTests {
    /// Two roots, a repository, and one user on root A owned by an unprivileged account: a WAL
    /// store with Core Data external data and a rollback store in a sub-folder, each file and
    /// folder with a mode of its own, and a file that is not part of any store.
    final class World {
        let temporary = TemporaryFolder("granary-life")
        let owner: LabUser
        let id = "erin@example.com"
        let marker = "ERIN-" + UUID().uuidString
        var rootA: String { temporary.path + "/hostA" }
        var rootB: String { temporary.path + "/hostB" }
        var repo: String { initializedRepository(temporary.path + "/repo") }
        var homeA: String { rootA + "/" + id }
        var homeB: String { rootB + "/" + id }
        static let stores = ["Local.sqlite", "Data/Cloud.sqlite"]

        init() throws {
            owner = try LabUser.ensure("granary-life")
            chmod(temporary.path, 0o755)
            try Lab.makeFolder(rootA, mode: 0o755)
            try Lab.makeFolder(rootB, mode: 0o755)
            try Self.makeHome(homeA, owner: owner, marker: marker)
        }

        static func makeHome(_ home: String, owner: LabUser, marker: String) throws {
            try Lab.makeFolder(home, mode: 0o750)
            try SampleData.makeItemsStore(home + "/Local.sqlite", rows: 40, walOnlyTail: 4)
            chmod(home + "/Local.sqlite", 0o640)
            try Lab.makeFolder(home + "/.Local_SUPPORT", mode: 0o700)
            try Lab.makeFolder(home + "/.Local_SUPPORT/_EXTERNAL_DATA", mode: 0o750)
            try Lab.write(home + "/.Local_SUPPORT/_EXTERNAL_DATA/photo-1", "\(marker) photo one\n", mode: 0o600)
            try Lab.write(home + "/.Local_SUPPORT/_EXTERNAL_DATA/photo-2", "\(marker) photo two\n", mode: 0o644)
            try Lab.makeFolder(home + "/Data", mode: 0o710)
            try SampleData.makeRollbackStore(home + "/Data/Cloud.sqlite", rows: 25)
            chmod(home + "/Data/Cloud.sqlite", 0o600)
            try Lab.write(home + "/notes.txt", "\(marker) not a store\n", mode: 0o644)
            Lab.chownTree(home, to: owner)
        }

        /// Runs granary on `root` (A by default) and the repository; GRANARY_* variables are the test's.
        func granary(
            _ arguments: [String], root: String? = nil, repo: String? = nil, environment: [String: String] = [:]
        ) throws -> Outcome {
            try Spawned(
                GranaryProcess.binDirectory + "/granary",
                arguments + ["--root", root ?? rootA, "--repo", repo ?? self.repo],
                environment: environment
            ).wait(timeout: 120)
        }

        /// Each store's content (every table's rows).
        static func dumps(_ home: String) throws -> [String: String] {
            var result: [String: String] = [:]
            for store in stores { result[store] = try RestoreFixtures.dump(home + "/" + store) }
            return result
        }

        /// Owner, group and mode of the folder and of every file and folder an archive holds (the
        /// stores, their external data and the folders on the way), one line each.
        static func ownership(_ home: String) -> [String] {
            Lab.fingerprint(home).filter { line in
                let name = String(line.split(separator: " ")[0])
                return !name.hasSuffix("-wal") && !name.hasSuffix("-shm") && !name.hasSuffix("-journal")
                    && name != "notes.txt"
            }.map { line in
                // Name, type, uid, gid and mode: not the content (a store's bytes differ after a snapshot).
                line.split(separator: " ").prefix(5).joined(separator: " ")
            }
        }

        /// Everything in the folder, content included, but a store's -shm (which readers write).
        static func whole(_ home: String) -> [String] {
            Lab.fingerprint(home).filter { !$0.split(separator: " ")[0].hasSuffix("-shm") }
        }

        /// The user's archives in the repository, by name.
        func archives() -> [String] { FileSystem.contents(of: repo + "/" + id).filter { !$0.hasPrefix(".") }.sorted() }

        /// Starts the app as the owner: granary-demo-owner on the user's stores under `home`.
        func startApp(_ home: String, log: String) throws -> Spawned {
            _ = FileManager.default.createFile(atPath: log, contents: nil)
            chown(log, owner.uid, owner.gid)
            let app = try Spawned(
                "/usr/bin/setpriv",
                owner.setpriv + [
                    GranaryProcess.binDirectory + "/granary-demo-owner", "--log", log, "--interval-ms", "5",
                ]
                    + Self.stores.map { home + "/" + $0 })
            let deadline = Date().addingTimeInterval(20)
            while Date() < deadline {
                if Self.acked(log) > 0 { return app }
                if !app.process.isRunning { break }
                usleep(10_000)
            }
            throw LabError.setup(
                "the app did not start writing: \(app.stop()) \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")"
            )
        }

        /// Writes the app acknowledged so far.
        static func acked(_ log: String) -> Int {
            ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").filter {
                $0.hasPrefix("ACK ")
            }.count
        }
    }

    /// The JSON document of a run.
    static func document(_ outcome: Outcome) throws -> [String: Any] {
        try JSONSerialization.jsonObject(with: Data(outcome.stdout.utf8)) as? [String: Any] ?? [:]
    }

    /// Retires the user on A and checks what must hold there: the final archive verified, the
    /// folder gone, nothing left in the state folder, check quiet, users and list say retired.
    func retireOnA(_ world: World, environment: [String: String] = [:], repo: String? = nil) throws -> [String: Any] {
        let retired = try world.granary(["retire", world.id, "--yes", "--json"], repo: repo, environment: environment)
        try #require(retired.status == 0, "retire: \(retired)")
        #expect(try ShellTools.schemaProblems(retired.stdout, schema: "retire").isEmpty, "\(retired.stdout)")
        let document = try Self.document(retired)
        #expect(
            (document["stores"] as? [[String: Any]])?.map { $0["name"] as? String } == [
                "Data/Cloud.sqlite", "Local.sqlite",
            ])
        #expect(document["others"] as? [String] == ["notes.txt"], "\(document)")
        #expect(FileSystem.status(world.homeA) == nil, "the folder is still there")
        #expect(FileSystem.contents(of: world.rootA + "/.granary/retire").isEmpty, "the retire left its work behind")

        let list = try world.granary(["list", world.id, "--json"], repo: repo, environment: environment)
        #expect(list.status == 0, "\(list)")
        let listed = try Self.document(list)
        let final = (listed["archives"] as? [[String: Any]])?.first { $0["kind"] as? String == "final" }
        #expect(
            final?["verified"] as? String == "verified", "the final archive is not recorded verified: \(list.stdout)")
        #expect(listed["retiredUsers"] as? [String] == [world.id], "\(list.stdout)")
        let check = try world.granary(["check"], repo: repo, environment: environment)
        #expect(
            check.status == 0 && check.stderr.isEmpty && check.stdout.isEmpty,
            "check is not quiet about a retired user: \(check)")
        let users = try world.granary(["users", "--json"], repo: repo, environment: environment)
        let entry = ((try Self.document(users))["users"] as? [[String: Any]])?.first { $0["id"] as? String == world.id }
        #expect(entry?["retired"] as? Bool == true, "\(users.stdout)")
        return document
    }

    /// Creates the user on B and checks it is the user A had: same content, same owners and modes,
    /// and the app opens it and writes.
    func createOnB(
        _ world: World, dumps: [String: String], ownership: [String], repo: String? = nil,
        environment: [String: String] = [:]
    ) throws {
        let missing = try world.granary(["restore", world.id], root: world.rootB, repo: repo, environment: environment)
        #expect(missing.status == 66, "\(missing)")
        #expect(
            missing.stderr.contains("--create --owner granary-life:granary-life"),
            "the hint is not the --create command line: \(missing)")
        let created = try world.granary(
            ["restore", world.id, "--create", "--json"], root: world.rootB, repo: repo, environment: environment)
        try #require(created.status == 0, "restore --create: \(created)")
        #expect(try ShellTools.schemaProblems(created.stdout, schema: "restore").isEmpty, "\(created.stdout)")
        let folder = (try Self.document(created))["createdFolder"] as? [String: Any]
        #expect(
            folder?["user"] as? String == "granary-life" && folder?["mode"] as? String == "0750", "\(created.stdout)")
        #expect(try World.dumps(world.homeB) == dumps, "the stores on B differ from A's")
        #expect(World.ownership(world.homeB) == ownership, "owners or modes differ")
        let photo = try String(contentsOfFile: world.homeB + "/.Local_SUPPORT/_EXTERNAL_DATA/photo-1", encoding: .utf8)
        #expect(photo == "\(world.marker) photo one\n")
        let app = try world.startApp(world.homeB, log: world.temporary.path + "/app-B.log")
        let log = world.temporary.path + "/app-B.log"
        let before = World.acked(log)
        let deadline = Date().addingTimeInterval(20)
        while World.acked(log) < before + 20 && app.process.isRunning && Date() < deadline { usleep(10_000) }
        #expect(World.acked(log) >= before + 20, "the app on B did not keep writing: \(app.stdout)")
        app.stop()
        let db = try Database(path: world.homeB + "/Local.sqlite", mode: .readOnly)
        #expect(db.integrityCheck(full: true) == ["ok"])
        #expect(
            try RestoreFixtures.ids(world.homeB + "/Local.sqlite").count >= 20, "the app's writes are not in the store")
        let users = try world.granary(
            ["users", world.id, "--json"], root: world.rootB, repo: repo, environment: environment)
        #expect(
            ((try Self.document(users))["users"] as? [[String: Any]])?.first?["retired"] as? Bool == false, "\(users)")
    }

    @Test(
        "retired on root A (final archive verified, folder gone, check quiet), created on root B from the same repository: same content, owners and modes, and the app writes"
    )
    func moveBetweenRoots() throws {
        let world = try World()
        #expect(try world.granary(["backup", world.id]).status == 0)
        let dumps = try World.dumps(world.homeA)
        let ownership = World.ownership(world.homeA)
        let retired = try retireOnA(world)
        #expect(world.archives().contains { $0.contains("-final.") }, "\(world.archives())")
        #expect((retired["archive"] as? String)?.contains("-final.") == true)
        try createOnB(world, dumps: dumps, ownership: ownership)
        // And back on A too: a retired user comes back where they were.
        let back = try world.granary(["restore", world.id, "--create"])
        #expect(back.status == 0, "\(back)")
        #expect(try World.dumps(world.homeA) == dumps && World.ownership(world.homeA) == ownership)
    }

    @Test(
        "retired on root A with an S3 mirror, created on root B from the mirror alone",
        .enabled(if: S3Server.available, S3Server.unavailableReason))
    func moveThroughS3Mirror() throws {
        let server = try #require(RemoteRepositoryTests.shared, "moto did not start")
        let world = try World()
        let bucket = "life" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
        try server.makeBucket(bucket)
        let mirror = initializedRepository("s3:\(bucket)/mirror", environment: server.environment())
        let config = world.temporary.path + "/granary.toml"
        try "[[mirror]]\nrepo = \"\(mirror)\"\n".write(toFile: config, atomically: true, encoding: .utf8)
        let environment = server.environment()
        let dumps = try World.dumps(world.homeA)
        let ownership = World.ownership(world.homeA)
        let retired = try world.granary(
            ["retire", world.id, "--yes", "--json", "--config", config], environment: environment)
        try #require(retired.status == 0, "\(retired)")
        let mirrors = (try Self.document(retired))["mirrors"] as? [[String: Any]]
        #expect(mirrors?.count == 1 && mirrors?.first?["ok"] as? Bool == true, "\(retired.stdout)")
        #expect(FileSystem.status(world.homeA) == nil)
        // Host A and its repository are gone: host B has the mirror only.
        FileSystem.removeTree(world.repo)
        try createOnB(world, dumps: dumps, ownership: ownership, repo: mirror, environment: environment)

        // And retired again on B, with the S3 location as the repository itself.
        let again = try world.granary(
            ["retire", world.id, "--yes"], root: world.rootB, repo: mirror, environment: environment)
        #expect(again.status == 0, "\(again)")
        #expect(FileSystem.status(world.homeB) == nil)
        let list = try world.granary(
            ["list", world.id, "--json"], root: world.rootB, repo: mirror, environment: environment)
        let listed = try Self.document(list)
        #expect(listed["retiredUsers"] as? [String] == [world.id], "\(list)")
        let finals = (listed["archives"] as? [[String: Any]])?.filter { $0["kind"] as? String == "final" } ?? []
        #expect(finals.count == 2 && finals.allSatisfy { $0["verified"] as? String == "verified" }, "\(list.stdout)")
        let check = try world.granary(["check"], root: world.rootB, repo: mirror, environment: environment)
        #expect(check.status == 0 && check.stderr.isEmpty, "\(check)")
    }

    @Test("retire is refused (75, nothing removed) while the app serves the stores, or a process has one open")
    func refusedWhileInUse() throws {
        let world = try World()
        let log = world.temporary.path + "/app-A.log"
        let app = try world.startApp(world.homeA, log: log)
        let refused = try world.granary(["retire", world.id, "--yes"])
        #expect(refused.status == 75, "\(refused)")
        #expect(refused.stderr.contains("is in use") && refused.stderr.contains(world.homeA), "\(refused)")
        #expect(
            FileSystem.status(world.homeA + "/Local.sqlite") != nil
                && FileSystem.status(world.homeA + "/notes.txt") != nil)
        #expect(!world.archives().contains { $0.contains("final") }, "a final archive was left: \(world.archives())")
        #expect(FileSystem.status(world.rootA + "/.granary/retire/" + world.id) == nil)
        let writes = World.acked(log)
        usleep(200_000)
        #expect(app.process.isRunning && World.acked(log) > writes, "the app stopped writing")
        app.stop()

        // A process outside the reopen protocol with the rollback store open.
        let holder = try Spawned(
            "/usr/bin/setpriv",
            world.owner.setpriv + [
                AttackLab.python, "-c",
                "import sqlite3,sys,time; c=sqlite3.connect(sys.argv[1]); c.execute('select count(*) from items').fetchall(); print('ready', flush=True); time.sleep(60)",
                world.homeA + "/Data/Cloud.sqlite",
            ])
        #expect(holder.waitForLine("ready"))
        let busy = try world.granary(["retire", world.id, "--yes"])
        #expect(busy.status == 75 && busy.stderr.contains("Cloud.sqlite"), "\(busy)")
        // (Foundation starts children with SIGTERM blocked: python would sleep on.)
        kill(holder.pid, SIGKILL)
        _ = holder.wait(timeout: 10)
        #expect(FileSystem.status(world.homeA + "/Data/Cloud.sqlite") != nil)
        let done = try world.granary(["retire", world.id, "--yes"])
        #expect(done.status == 0, "once the app let go: \(done)")
    }

    @Test(
        "retire refused by the commit's checks leaves the folder untouched: a process outside the protocol holding a store, or only a -wal, gets 75 and every file keeps its inode and bytes"
    )
    func refusedLeavesTheFolderUntouched() throws {
        let world = try World()
        // A WAL store its last connection closed cleanly (no -wal): SQLite's lock, taken to check
        // it, opens an empty -wal, which must go again. Its name sorts first: it is checked first.
        let clean = world.homeA + "/A.sqlite"
        try SampleData.makeItemsStore(clean, rows: 5, walOnlyTail: 0)
        try Database(path: clean, mode: .readWrite).execute("PRAGMA wal_checkpoint(TRUNCATE)")
        Lab.chownTree(world.homeA, to: world.owner)
        #expect(FileSystem.status(clean + "-wal") == nil)
        /// Every entry's name, inode and (for files) bytes.
        func identities() -> [String] {
            World.whole(world.homeA).map { line in
                let name = String(line.split(separator: " ")[0])
                return line + " ino=\(FileSystem.status(world.homeA + "/" + name).map { UInt64($0.st_ino) } ?? 0)"
            }
        }
        let before = identities()
        for (what, held) in [("a store", "Data/Cloud.sqlite"), ("only a -wal", "Local.sqlite-wal")] {
            // Not an SQLite connection: a plain descriptor, which SQLite's lock does not see.
            let holder = try Spawned(
                "/usr/bin/setpriv",
                world.owner.setpriv + [
                    AttackLab.python, "-c",
                    "import sys,time; f=open(sys.argv[1],'rb'); print('ready', flush=True); time.sleep(60)",
                    world.homeA + "/" + held,
                ])
            #expect(holder.waitForLine("ready"))
            let refused = try world.granary(["retire", world.id, "--yes"])
            kill(holder.pid, SIGKILL)
            _ = holder.wait(timeout: 10)
            #expect(refused.status == 75, "\(what): \(refused)")
            #expect(
                refused.stderr.contains("is in use") && refused.stderr.contains("process \(holder.pid)"),
                "\(what): \(refused)")
            #expect(identities() == before, "\(what): the folder changed")
            #expect(!world.archives().contains { $0.contains("final") }, "\(what): \(world.archives())")
            #expect(FileSystem.status(world.rootA + "/.granary/retire/" + world.id) == nil)
        }
        let done = try world.granary(["retire", world.id, "--yes"])
        #expect(done.status == 0, "once nothing holds a store: \(done)")
    }

    @Test(
        "retire removes only what the owner could remove: a root-owned folder inside is kept aside in the state folder and named, not removed as root"
    )
    func ownerPermissionsOnly() throws {
        let world = try World()
        try Lab.makeFolder(world.homeA + "/Data/root-owned", mode: 0o755)
        try Lab.write(world.homeA + "/Data/root-owned/kept.txt", "root's\n", mode: 0o644)
        // A folder the owner closed to themselves is theirs to open again: it goes.
        try Lab.makeFolder(world.homeA + "/closed", mode: 0o700)
        try Lab.write(world.homeA + "/closed/inside.txt", "x\n", mode: 0o600)
        Lab.chownTree(world.homeA + "/closed", to: world.owner)
        chmod(world.homeA + "/closed", 0o500)
        // Root's folder is not the user's: no archive holds it, so retire refuses without --discard-others.
        let refused = try world.granary(["retire", world.id, "--yes"])
        #expect(refused.status == 65 && refused.stderr.contains("Data/root-owned/"), "\(refused)")
        let retired = try world.granary(["retire", world.id, "--yes", "--discard-others", "--json"])
        #expect(retired.status == 0, "\(retired)")
        let document = try Self.document(retired)
        #expect(document["discarded"] as? [String] == ["Data/root-owned/"], "\(retired.stdout)")
        #expect(document["plainFiles"] as? Int == 2, "notes.txt and closed/inside.txt: \(retired.stdout)")
        #expect(document["leftovers"] as? [String] == ["Data/root-owned/kept.txt"], "\(retired.stdout)")
        let kept = try #require(document["leftoversFolder"] as? String)
        #expect(kept.hasPrefix(world.rootA + "/.granary/retire-left/"), "\(kept)")
        #expect(FileSystem.isRegularFile(kept + "/Data/root-owned/kept.txt"))
        #expect(FileSystem.status(kept + "/closed") == nil && FileSystem.status(kept + "/Local.sqlite") == nil)
        #expect(retired.stderr.contains("could not be removed with its owner's permissions"), "\(retired.stderr)")
        #expect(
            FileSystem.status(world.homeA) == nil
                && FileSystem.status(world.rootA + "/.granary/retire/" + world.id) == nil)
    }

    @Test(
        "granary killed at every step of retire: recover leaves the folder fully there, or fully gone with its final archive verified"
    )
    func crashAtEveryStep() throws {
        var crashes = 0
        var sawThere = false
        var sawGone = false
        // And the commit's checks retire runs (UserCommit): `checked` is reached twice, at the question
        // before the final archive and at the move, each time with SQLite's locks held.
        for step in CrashPoints.plan(CrashPoint.Name.retire, times: 2) + ["checked", "checked:2"] {
            let world = try World()
            let before = World.whole(world.homeA)
            let run = try world.granary(
                ["retire", world.id, "--yes"], environment: ["GRANARY_TEST_CRASH_AT": step])
            if run.status == 0 { continue }
            crashes += 1
            #expect(run.signal == SIGKILL, "step \(step): \(run)")
            let recovered = try world.granary(["recover", "--json"])
            #expect(recovered.status == 0, "step \(step): recover: \(recovered)")
            #expect(try ShellTools.schemaProblems(recovered.stdout, schema: "recover").isEmpty, "\(recovered.stdout)")
            #expect(
                FileSystem.status(world.rootA + "/.granary/retire/" + world.id) == nil,
                "step \(step): the retire's work is left")
            if FileSystem.status(world.homeA) != nil {
                sawThere = true
                #expect(World.whole(world.homeA) == before, "step \(step): the folder is there but changed")
            } else {
                sawGone = true
                let final = world.archives().filter { $0.contains("-final.") }
                #expect(
                    final.count == 1, "step \(step): the folder is gone without its final archive: \(world.archives())")
                let verified = try world.granary(["verify", world.id + "/" + (final.first ?? "")])
                #expect(verified.status == 0, "step \(step): \(verified)")
                let check = try world.granary(["check"])
                #expect(check.status == 0 && check.stderr.isEmpty, "step \(step): \(check)")
            }
        }
        #expect(crashes >= 6, "retire should have six points or more: is GRANARY_TEST_CRASH_AT compiled in?")
        #expect(sawThere && sawGone)
    }
}
