import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

/// End-to-end tests of `granary backup`: the built binary against real stores, real writer
/// processes, and archives read back with stock `tar` and `sqlite3`.
@Suite("granary backup", .serialized)
struct BackupCommandTests {
    /// A sample root and an empty repository.
    struct Fixture {
        let folder = TemporaryFolder()
        var root: String { folder.child("root") }
        var repo: String { initializedRepository(folder.child("repo")) }
        init() throws { try GranaryProcess.run([folder.child("root")], tool: "granary-sample") }

        func backup(_ arguments: [String]) throws -> GranaryProcess.Result {
            try GranaryProcess.run(["backup", "--root", root, "--repo", repo] + arguments)
        }

        /// The names in a user's folder of the repository, but its host markers (`.NAME.host=HOST`).
        func archives(_ user: String) -> [String] {
            // (Not the verification records a backup writes beside its archives, nor an archive
            // still being written: temporaries start with a dot.)
            ((try? FileManager.default.contentsOfDirectory(atPath: repo + "/" + user)) ?? []).filter {
                !$0.hasPrefix(".") && !$0.hasSuffix(".verify.json") && !$0.contains(".host=")
            }.sorted()
        }

        /// Every name under the repository, hidden ones included (temporaries start with a dot).
        func allRepoEntries() -> [String] {
            (FileManager.default.enumerator(atPath: repo)?.allObjects as? [String] ?? []).sorted()
        }

        /// Extracts an archive with /usr/bin/tar into a new folder and returns it.
        func extract(_ archive: String) throws -> String {
            let out = folder.child("x-\(UUID().uuidString)")
            try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
            let result = try GranaryProcess.runExecutable("/usr/bin/tar", ["-xf", archive, "-C", out])
            #expect(result.status == 0, "\(result.stderr)")
            return out
        }
    }

    static func sqlite(_ path: String, _ sql: String) throws -> String {
        try GranaryProcess.runExecutable("/usr/bin/sqlite3", [path, sql]).stdout.trimmingCharacters(
            in: .whitespacesAndNewlines)
    }

    @Test("a snapshot taken while another process commits continuously is consistent and passes integrity_check")
    func consistentUnderWriter() throws {
        let fixture = try Fixture()
        let store = fixture.root + "/dave@example.com/Live.sqlite"
        for path in try Self.backUpUnderWriter(fixture, store: store, user: "dave@example.com", times: 3) {
            try Self.expectConsistent(try fixture.extract(path) + "/stores/Live.sqlite")
        }
    }

    /// Starts `granary-sample write` on `store` (committing as fast as it can), backs `user` up
    /// `times` times while it commits, stops it, and returns the archives' paths. Each backup is
    /// proven to have run under the writer: a whole commit (from the end of the one before it to
    /// its own end, by the writer's log) lies between the backup's start and its end.
    static func backUpUnderWriter(_ fixture: Fixture, store: String, user: String, times: Int) throws -> [String] {
        let log = fixture.folder.child("writer-\(UUID().uuidString).log")
        #expect(FileManager.default.createFile(atPath: log, contents: nil))
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: GranaryProcess.binDirectory + "/granary-sample")
        writer.arguments = ["write", store, "--interval-ms", "0"]
        // One line per acknowledged commit: id, latency (µs), when it ended (seconds since the epoch).
        writer.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        try writer.run()
        defer { writer.terminate(); writer.waitUntilExit() }
        // The writer has got going when its first commit is in the log.
        let deadline = ContinuousClock.now + .seconds(30)
        while Self.commitTimes(log).isEmpty && ContinuousClock.now < deadline && writer.isRunning { sched_yield() }
        #expect(!Self.commitTimes(log).isEmpty, "the writer never committed")
        var spans: [(start: Double, end: Double)] = []
        for _ in 0..<times {
            let start = Date().timeIntervalSince1970
            let result = try fixture.backup([user])
            spans.append((start, Date().timeIntervalSince1970))
            #expect(result.status == 0, "\(result.stderr)")
        }
        writer.terminate()
        writer.waitUntilExit()
        let ends = Self.commitTimes(log)
        for (index, span) in spans.enumerated() {
            // Commit k + 1 began after commit k ended (the writer commits one row at a time), so
            // ends[k] >= start and ends[k + 1] <= end put a whole commit inside the backup.
            let inside = zip(ends, ends.dropFirst()).contains { $0 >= span.start && $1 <= span.end }
            #expect(inside, "backup \(index + 1) of \(times): no commit of the writer while it ran")
        }
        let archives = fixture.archives(user)
        #expect(archives.count == times)
        return archives.map { fixture.repo + "/" + user + "/" + $0 }
    }

    /// When each commit in a `granary-sample write` log ended (seconds since the epoch), in order.
    static func commitTimes(_ log: String) -> [Double] {
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        // A line still being written has no newline yet: only whole lines count.
        return text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().compactMap {
            $0.split(separator: "\t").last.flatMap { Double($0) }
        }
    }

    /// A snapshot of a `granary-sample write` store passes integrity_check and holds ids 1..k, no gap.
    static func expectConsistent(_ snapshot: String) throws {
        #expect(try Self.sqlite(snapshot, "PRAGMA integrity_check") == "ok")
        let summary = try Self.sqlite(snapshot, "SELECT count(*), min(id), max(id) FROM seq").split(separator: "|")
        #expect(summary.count == 3)
        #expect(summary.count == 3 && summary[0] == summary[2], "ids are 1..k with no gap: \(summary)")
        #expect(summary.count == 3 && summary[1] == "1")
        #expect(Int(summary.first ?? "") ?? 0 > 0)
    }

    @Test("a commit held only in the -wal is in the archive")
    func walOnlyCommit() throws {
        let fixture = try Fixture()
        let store = fixture.root + "/alice@example.com/Local.sqlite"
        // Check the -wal before anything opens the store: sqlite3 checkpoints it away on close.
        #expect(FileSystem.size(store + "-wal") > 0)
        let result = try fixture.backup(["alice@example.com"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(FileSystem.size(store + "-wal") > 0, "the backup must not checkpoint the live store")
        let live = try Self.sqlite(store, "SELECT max(id) FROM items")
        let out = try fixture.extract(fixture.repo + "/alice@example.com/" + fixture.archives("alice@example.com")[0])
        #expect(try Self.sqlite(out + "/stores/Local.sqlite", "SELECT max(id) FROM items") == live)
        #expect(!FileManager.default.fileExists(atPath: out + "/stores/Local.sqlite-wal"))
    }

    @Test("a two-store user gets one archive with both stores, listed by stock tar")
    func twoStores() throws {
        let fixture = try Fixture()
        #expect(try fixture.backup(["alice@example.com"]).status == 0)
        let archives = fixture.archives("alice@example.com")
        #expect(archives.count == 1)
        let list = try GranaryProcess.runExecutable(
            "/usr/bin/tar", ["-tf", fixture.repo + "/alice@example.com/" + archives[0]])
        let members = list.stdout.split(separator: "\n").map(String.init)
        #expect(members.first == "MANIFEST.json")
        #expect(members.contains("stores/Local.sqlite"))
        #expect(members.contains("stores/Cloud.sqlite"))
    }

    @Test("the Core Data store keeps its external files and its model hashes are in the manifest")
    func coreData() throws {
        let fixture = try Fixture()
        #expect(try fixture.backup(["bob@example.com"]).status == 0)
        let out = try fixture.extract(fixture.repo + "/bob@example.com/" + fixture.archives("bob@example.com")[0])
        let external = fixture.root + "/bob@example.com/.Notes_SUPPORT/_EXTERNAL_DATA"
        let names = try FileManager.default.contentsOfDirectory(atPath: external).sorted()
        #expect(!names.isEmpty)
        for name in names {
            let original = try Data(contentsOf: URL(fileURLWithPath: external + "/" + name))
            let copy = try Data(contentsOf: URL(fileURLWithPath: out + "/stores/.Notes_SUPPORT/_EXTERNAL_DATA/" + name))
            #expect(original == copy)
        }
        let manifest =
            try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: out + "/MANIFEST.json")))
            as! [String: Any]
        let stores = manifest["stores"] as! [[String: Any]]
        let coreData = stores[0]["coreData"] as! [String: Any]
        #expect(!(coreData["modelVersionHashes"] as! [String: String]).isEmpty)
        #expect(!(coreData["entityRowCounts"] as! [String: Int]).isEmpty)
        let files = manifest["files"] as! [[String: Any]]
        #expect(files.count == names.count + 1)
    }

    @Test("a corrupt source store is refused with exit 65 naming the store, and earlier archives stay")
    func corruptStore() throws {
        let fixture = try Fixture()
        #expect(try fixture.backup(["carol@example.com"]).status == 0)
        let store = fixture.root + "/carol@example.com/Legacy.db"
        // Overwrite pages past the first with garbage: the header stays valid, the b-trees do not.
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: store))
        let size = try handle.seekToEnd()
        try handle.seek(toOffset: 4096)
        handle.write(Data(repeating: 0xA5, count: Int(size) - 4096))
        try handle.close()
        let result = try fixture.backup(["carol@example.com"])
        #expect(result.status == 65, "\(result.stderr)")
        #expect(result.stderr.contains("Legacy.db"))
        #expect(fixture.archives("carol@example.com").count == 1)
        #expect(fixture.allRepoEntries().filter { $0.contains(".tmp-") }.isEmpty)
    }

    @Test("--all goes on past a failing user and exits 1")
    func allGoesOn() throws {
        let fixture = try Fixture()
        let store = fixture.root + "/carol@example.com/Legacy.db"
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: store))
        let size = try handle.seekToEnd()
        try handle.seek(toOffset: 4096)
        handle.write(Data(repeating: 0xA5, count: Int(size) - 4096))
        try handle.close()
        let result = try fixture.backup(["--all"])
        #expect(result.status == 1)
        #expect(result.stderr.split(separator: "\n").filter { $0.hasPrefix("granary:") }.count == 1)
        #expect(fixture.archives("alice@example.com").count == 1)
        #expect(fixture.archives("dave@example.com").count == 1)
    }

    @Test("a full disk leaves no archive and no temporary file")
    func diskFull() throws {
        let fixture = try Fixture()
        // A big store, and a file-size limit of 64 KiB on granary: writes fail with EFBIG.
        let store = fixture.root + "/dave@example.com/Big.sqlite"
        try GranaryProcess.run(["big", store, "4"], tool: "granary-sample")
        try Self.expectDiskFull(fixture, user: "dave@example.com", limitKiB: 64, arguments: "--compression none")
    }

    /// Backs `user` up with a file-size limit of `limitKiB` on granary (writes beyond it fail with
    /// EFBIG, as on a full disk): exit 74 naming the repository, no archive, no temporary file.
    static func expectDiskFull(_ fixture: Fixture, user: String, limitKiB: Int, arguments: String = "") throws {
        let granary = GranaryProcess.binDirectory + "/granary"
        let result = try GranaryProcess.runExecutable(
            "/bin/bash",
            [
                "-c", "ulimit -f \(limitKiB); exec \"$0\" backup \"$1\" --root \"$2\" --repo \"$3\" \(arguments)",
                granary, user, fixture.root, fixture.repo,
            ])
        #expect(result.status == 74, "\(result.stderr)")
        #expect(result.stderr.contains(fixture.repo))
        #expect(fixture.archives(user).isEmpty)
        #expect(fixture.allRepoEntries().filter { $0.contains(".tmp-") }.isEmpty, "\(fixture.allRepoEntries())")
    }

    /// A user `erin@example.com` with one generated WAL store of `megabytes` MiB: from 64 MiB on,
    /// its `.tar.zst` is compressed while the store is snapshotted (OverlappedPack).
    @discardableResult
    static func bigUser(_ fixture: Fixture, megabytes: Int) throws -> String {
        let folder = fixture.root + "/erin@example.com"
        try FileManager.default.createDirectory(
            atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let store = folder + "/Big.sqlite"
        try GranaryProcess.run(["big", store, String(megabytes)], tool: "granary-sample")
        return store
    }

    /// zstd's count of skippable frames in `archive`: 1 when the first store was compressed during its snapshot.
    static func skippableFrames(_ archive: String) throws -> Int {
        let listing = try GranaryProcess.runExecutable("/usr/bin/zstd", ["-lv", archive]).stdout
        let line = listing.split(separator: "\n").first { $0.contains("Skippable Frames:") }
        return line.flatMap { Int($0.split(separator: ":").last!.trimmingCharacters(in: .whitespaces)) } ?? 0
    }

    @Test(
        "a 70 MiB store compressed while it is snapshotted, a writer committing: consistent, verified, read by stock tar and zstd"
    )
    func overlappedUnderWriter() throws {
        let fixture = try Fixture()
        let store = try Self.bigUser(fixture, megabytes: 70)
        for path in try Self.backUpUnderWriter(fixture, store: store, user: "erin@example.com", times: 2) {
            #expect(try Self.skippableFrames(path) == 1, "the overlapped path was not taken")
            #expect(try GranaryProcess.runExecutable("/usr/bin/zstd", ["-tq", path]).status == 0)
            try Self.expectConsistent(try fixture.extract(path) + "/stores/Big.sqlite")
        }
        let verified = try GranaryProcess.run(["verify", "--repo", fixture.repo, "--user", "erin@example.com"])
        #expect(verified.status == 0, "\(verified.stderr)")
    }

    @Test("a full disk while the first store is compressed during its snapshot leaves no archive and no temporary file")
    func diskFullOverlapped() throws {
        let fixture = try Fixture()
        try Self.bigUser(fixture, megabytes: 70)
        // 20 MiB per file: the 70 MiB snapshot hits the limit while the follower is compressing it.
        try Self.expectDiskFull(fixture, user: "erin@example.com", limitKiB: 20480)
    }

    @Test("SIGTERM while the first store is compressed during its snapshot exits 130 and leaves nothing behind")
    func interruptedOverlapped() throws {
        let fixture = try Fixture()
        try Self.bigUser(fixture, megabytes: 200)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: GranaryProcess.binDirectory + "/granary")
        process.arguments = ["backup", "erin@example.com", "--root", fixture.root, "--repo", fixture.repo]
        process.standardError = FileHandle.nullDevice
        try process.run()
        // The temporary archive is created as the snapshot starts.
        for _ in 0..<2000 {
            if fixture.allRepoEntries().contains(where: {
                $0.hasPrefix("erin@example.com/.") && !$0.hasSuffix(".verify.json")
            }) {
                break
            }
            usleep(2_000)
        }
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
        #expect(process.terminationStatus == 130)
        #expect(fixture.archives("erin@example.com").isEmpty)
        #expect(fixture.allRepoEntries().filter { $0.contains(".tmp-") }.isEmpty, "\(fixture.allRepoEntries())")
    }

    /// Peak RSS (KiB) of `granary ARGUMENTS`, from the kernel's accounting of a child Python waits for.
    static func peakMemory(_ arguments: [String]) throws -> (status: Int32, kib: Int) {
        let result = try GranaryProcess.runExecutable(
            "/usr/bin/env",
            [
                "python3", "-c",
                """
                import resource, subprocess, sys
                rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
                print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
                """, GranaryProcess.binDirectory + "/granary",
            ] + arguments)
        let fields = result.stdout.split(separator: " ").compactMap {
            Int($0.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        return (Int32(fields.first ?? -1), fields.count > 1 ? fields[1] : Int.max)
    }

    @Test(
        "memory stays flat: a 160 MiB store is backed up and verified in under 80 MiB, and in no more than a 40 MiB store takes"
    )
    func flatMemory() throws {
        let fixture = try Fixture()
        try GranaryProcess.run(["big", fixture.root + "/dave@example.com/Big.sqlite", "160"], tool: "granary-sample")
        // 40 MiB already fills zstd's job buffers; what a bigger store adds would be a leak. The
        // absolute bound leaves room for a debug build's own size (about 64 MiB at rest here).
        try GranaryProcess.run(["big", fixture.root + "/carol@example.com/Small.sqlite", "40"], tool: "granary-sample")
        let big = try Self.peakMemory(["backup", "dave@example.com", "--root", fixture.root, "--repo", fixture.repo])
        let small = try Self.peakMemory(["backup", "carol@example.com", "--root", fixture.root, "--repo", fixture.repo])
        #expect(big.status == 0 && small.status == 0)
        #expect(big.kib < 80 << 10, "peak RSS \(big.kib) KiB backing up 160 MiB")
        #expect(big.kib - small.kib < 4 << 10, "peak RSS grows with the store: \(small.kib) -> \(big.kib) KiB")
        // verify streams the same archives back (extraction, hashing, integrity_check) just as flat.
        let checkedBig = try Self.peakMemory([
            "verify", "--repo", fixture.repo, "--user", "dave@example.com", "--latest",
        ])
        let checkedSmall = try Self.peakMemory([
            "verify", "--repo", fixture.repo, "--user", "carol@example.com", "--latest",
        ])
        #expect(checkedBig.status == 0 && checkedSmall.status == 0)
        #expect(checkedBig.kib < 80 << 10, "verify's peak RSS \(checkedBig.kib) KiB for 160 MiB")
        #expect(
            checkedBig.kib - checkedSmall.kib < 4 << 10,
            "verify's peak RSS grows: \(checkedSmall.kib) -> \(checkedBig.kib) KiB")
    }

    /// Starts a slow backup of dave (a 64 MiB store, xz -6) and returns once it is packing
    /// (its temporary archive exists), so that a signal lands mid-run.
    static func startPacking(_ fixture: Fixture) throws -> Process {
        try GranaryProcess.run(["big", fixture.root + "/dave@example.com/Big.sqlite", "64"], tool: "granary-sample")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: GranaryProcess.binDirectory + "/granary")
        process.arguments = [
            "backup", "dave@example.com", "--root", fixture.root, "--repo", fixture.repo, "--compression", "xz",
            "--level", "6",
        ]
        process.standardError = FileHandle.nullDevice
        try process.run()
        for _ in 0..<2000 {
            if fixture.allRepoEntries().contains(where: {
                $0.hasPrefix("dave@example.com/.") && !$0.hasSuffix(".verify.json")
            }) {
                break
            }
            usleep(5_000)
        }
        return process
    }

    @Test(
        "SIGTERM, SIGINT or SIGHUP mid-run exits 130 (129 for SIGHUP) and leaves no archive and no temporary file",
        arguments: [SIGTERM, SIGINT, SIGHUP])
    func interrupted(signal: Int32) throws {
        let status: Int32 = signal == SIGHUP ? 129 : 130
        let fixture = try Fixture()
        let process = try Self.startPacking(fixture)
        kill(process.processIdentifier, signal)
        process.waitUntilExit()
        #expect(process.terminationReason == .exit && process.terminationStatus == status)
        #expect(fixture.archives("dave@example.com").isEmpty)
        #expect(fixture.allRepoEntries().filter { $0.contains(".tmp-") }.isEmpty, "\(fixture.allRepoEntries())")
    }

    @Test("after a SIGKILL, recover and the next backup remove the dead run's leftovers")
    func killed() throws {
        let fixture = try Fixture()
        let process = try Self.startPacking(fixture)
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        #expect(fixture.archives("dave@example.com").allSatisfy { $0.hasPrefix(".") }, "no published archive")
        if fixture.allRepoEntries().contains(where: { $0.contains(".tmp-") }) {
            let recovered = try GranaryProcess.run([
                "recover", "--root", fixture.root, "--repo", fixture.repo, "dave@example.com",
            ])
            #expect(recovered.status == 0, "\(recovered.stderr)")
            #expect(recovered.stdout.contains("left by a run that died"), "\(recovered.stdout)")
            #expect(fixture.allRepoEntries().filter { $0.contains(".tmp-") }.isEmpty, "\(fixture.allRepoEntries())")
        }
        try FileManager.default.removeItem(atPath: fixture.root + "/dave@example.com/Big.sqlite")
        let result = try fixture.backup(["dave@example.com"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(fixture.archives("dave@example.com").count == 1)
        #expect(fixture.allRepoEntries().filter { $0.contains(".tmp-") }.isEmpty, "\(fixture.allRepoEntries())")
    }

    @Test("two concurrent backups of one user serialize and both publish")
    func concurrent() throws {
        let fixture = try Fixture()
        let store = fixture.root + "/dave@example.com/Big.sqlite"
        try GranaryProcess.run(["big", store, "16"], tool: "granary-sample")
        let group = DispatchGroup()
        nonisolated(unsafe) var statuses: [Int32] = []
        let lock = NSLock()
        let root = fixture.root, repo = fixture.repo
        for _ in 0..<2 {
            group.enter()
            DispatchQueue.global().async {
                let status =
                    (try? GranaryProcess.run(["backup", "--root", root, "--repo", repo, "dave@example.com"]).status)
                    ?? -1
                lock.lock(); statuses.append(status); lock.unlock()
                group.leave()
            }
        }
        group.wait()
        #expect(statuses == [0, 0])
        #expect(fixture.archives("dave@example.com").count == 2)
    }

    @Test("a lock held past --lock-timeout exits 75 naming the holder's pid")
    func lockTimeout() throws {
        let fixture = try Fixture()
        let lockFolder = fixture.root + "/.granary/locks"
        try FileManager.default.createDirectory(atPath: lockFolder, withIntermediateDirectories: true)
        let lockFiles = try FileManager.default.contentsOfDirectory(atPath: lockFolder)
        #expect(lockFiles.isEmpty)
        // Take the user's lock the way granary does: run one backup's lock path via flock(1).
        let first = try fixture.backup(["dave@example.com"])
        #expect(first.status == 0)
        let lockPath = try FileManager.default.contentsOfDirectory(atPath: lockFolder).map { lockFolder + "/" + $0 }
            .first!
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/flock")
        holder.arguments = [lockPath, "sleep", "5"]
        try holder.run()
        defer { holder.terminate(); holder.waitUntilExit() }
        usleep(300_000)
        let result = try fixture.backup(["dave@example.com", "--lock-timeout", "0.5"])
        #expect(result.status == 75, "\(result.stderr)")
        #expect(result.stderr.contains("dave@example.com"))
    }

    @Test("--jobs 2 backs the other users up while the first one waits for its lock")
    func jobsRunSideBySide() throws {
        let fixture = try Fixture()
        let users = try FileManager.default.contentsOfDirectory(atPath: fixture.root).filter { !$0.hasPrefix(".") }
            .sorted()
        try #require(users.count >= 3, "\(users)")
        // The first user's lock, held by this test the way granary takes it (flock on its lock file).
        let held = users[0]
        let lockFolder = fixture.root + "/.granary/locks"
        try FileManager.default.createDirectory(atPath: lockFolder, withIntermediateDirectories: true)
        let fd = open(lockFolder + "/" + held + ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        try #require(fd >= 0 && flock(fd, LOCK_EX) == 0)
        var holding = true
        defer { if holding { close(fd) } }
        let backup = Process()
        backup.executableURL = URL(fileURLWithPath: GranaryProcess.binDirectory + "/granary")
        backup.arguments =
            ["backup", "--root", fixture.root, "--repo", fixture.repo, "--jobs", "2", "--lock-timeout", "300"] + users
        backup.standardOutput = FileHandle.nullDevice
        try backup.run()
        // Two jobs: one waits for the held lock, the other backs up everyone else meanwhile. With
        // one job they would all wait behind the first user, and this loop would give up (60 s).
        let others = users.dropFirst()
        for _ in 0..<600 where !others.allSatisfy({ !fixture.archives($0).isEmpty }) { usleep(100_000) }
        #expect(others.allSatisfy { fixture.archives($0).count == 1 }, "\(others.map { fixture.archives($0) })")
        #expect(fixture.archives(held).isEmpty)
        close(fd)
        holding = false
        backup.waitUntilExit()
        #expect(backup.terminationStatus == 0)
        #expect(fixture.archives(held).count == 1)
    }

    @Test("an unknown user exits 66")
    func unknownUser() throws {
        let fixture = try Fixture()
        let result = try fixture.backup(["nobody@example.com"])
        #expect(result.status == 66)
        #expect(result.stderr.contains("nobody@example.com"))
    }

    @Test("run as root, the -wal and -shm that opening a store creates get the store owner's uid, gid and mode")
    func ownerKept() throws {
        let fixture = try Fixture()
        let folder = fixture.root + "/bob@example.com"
        let store = folder + "/Notes.sqlite"
        for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: store + suffix) }
        #expect(chown(folder, 4321, 4322) == 0 && chown(store, 4321, 4322) == 0 && chmod(store, 0o640) == 0)
        func rootOwned() throws -> Set<String> {
            Set(
                try FileManager.default.contentsOfDirectory(atPath: folder).filter {
                    FileSystem.status(folder + "/" + $0)?.st_uid == 0
                })
        }
        let before = try rootOwned()
        #expect(try fixture.backup(["bob@example.com"]).status == 0)
        var created = 0
        for suffix in ["-wal", "-shm"] {
            guard let info = FileSystem.status(store + suffix) else { continue }
            created += 1
            #expect(info.st_uid == 4321 && info.st_gid == 4322, "\(suffix) is owned by \(info.st_uid):\(info.st_gid)")
            #expect(info.st_mode & 0o777 == 0o640, "\(suffix) has mode \(String(info.st_mode & 0o777, radix: 8))")
        }
        #expect(created > 0, "opening the WAL store created no -wal/-shm: the test would prove nothing")
        let stray = try rootOwned().subtracting(before)
        #expect(stray.isEmpty, "root-owned files left in the user's folder: \(stray)")
    }

    @Test("archives are 0600, folders 0700, quiet without a terminal")
    func modes() throws {
        let fixture = try Fixture()
        let result = try fixture.backup(["--all"])
        #expect(result.status == 0)
        #expect(result.stdout.isEmpty && result.stderr.isEmpty)
        func mode(_ path: String) -> Int {
            ((try? FileManager.default.attributesOfItem(atPath: path)[.posixPermissions]) as? Int) ?? -1
        }
        #expect(mode(fixture.repo) == 0o700)
        #expect(mode(fixture.repo + "/alice@example.com") == 0o700)
        let archive = fixture.repo + "/alice@example.com/" + fixture.archives("alice@example.com")[0]
        #expect(mode(archive) == 0o600)
    }

    @Test("--json prints one entry per user with its archive")
    func json() throws {
        let fixture = try Fixture()
        let result = try fixture.backup(["--all", "--json"])
        #expect(result.status == 0)
        let document = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as! [String: Any]
        let users = document["users"] as! [[String: Any]]
        #expect(users.count == 4)
        #expect(
            users.allSatisfy {
                $0["ok"] as? Bool == true && FileManager.default.fileExists(atPath: $0["archive"] as! String)
            })
        // Where the time went: four stages, none negative, together no more than the whole.
        for user in users {
            let stages = try #require(user["stages"] as? [String: Double], "\(user)")
            #expect(Set(stages.keys) == ["snapshot", "checkAndHash", "pack", "sync"])
            #expect(stages.values.allSatisfy { $0 >= 0 })
            #expect(stages.values.reduce(0, +) <= (user["seconds"] as! Double) + 0.001)
            #expect(stages["snapshot"]! > 0 && stages["pack"]! > 0, "\(stages)")
        }
        let verbose = try fixture.backup(["-v", "bob@example.com"])
        #expect(
            verbose.stdout.contains("  snapshot ") && verbose.stdout.contains(", pack ")
                && verbose.stdout.contains(", sync "), "\(verbose.stdout)")
        #expect(verbose.stderr.isEmpty, "results go to standard output: \(verbose.stderr)")
        // As root a backup yields the CPU ("raised" if the other tests left it none for a second).
        if getuid() == 0 {
            #expect(users.allSatisfy { ["yielded", "raised"].contains($0["priority"] as? String) }, "\(users)")
        }
        let off = try GranaryProcess.run(
            ["backup", "--root", fixture.root, "--repo", fixture.repo, "--json", "bob@example.com"],
            environment: ["GRANARY_YIELD": "0"])
        #expect(off.status == 0, "\(off.stderr)")
        let offUsers = try #require(
            (try JSONSerialization.jsonObject(with: Data(off.stdout.utf8)) as? [String: Any])?["users"]
                as? [[String: Any]])
        #expect(offUsers.first?["priority"] as? String == "normal", "\(off.stdout)")
    }

    @Test("a backup or a verify that other load leaves no CPU stops yielding and finishes at normal priority")
    func starvedBackupIsRaised() throws {
        try #require(getuid() == 0, "only root may come back from SCHED_IDLE by default")
        let fixture = try Fixture()
        // 64 MiB: a backup and a verify of it take some 0.3 CPU-s or more each, many seconds at the
        // part of the CPUs that SCHED_IDLE threads get beside the loops below. (With 24 MiB, a verify
        // that hashes each byte once could end within the monitor's first window, 1.25 s, under
        // `make test`'s parallel load, and report "yielded".)
        try Self.bigUser(fixture, megabytes: 64)
        // Eight busy loops per core at nice 19: a SCHED_IDLE thread gets about 2.5% of a CPU
        // beside them (weight 3 against 8 × 15), while the tests running beside this one
        // (weight 1024) hardly notice them.
        var hogs: [Process] = []
        // SIGKILL: Foundation starts children with SIGTERM blocked.
        defer { for hog in hogs { kill(hog.processIdentifier, SIGKILL); hog.waitUntilExit() } }
        for _ in 0..<(8 * ProcessInfo.processInfo.activeProcessorCount) {
            let hog = Process()
            hog.executableURL = URL(fileURLWithPath: "/usr/bin/nice")
            hog.arguments = ["-n", "19", "/bin/sh", "-c", "while :; do :; done"]
            try hog.run()
            hogs.append(hog)
        }
        // Bounded: a backup that stays idle beside the loops would not end (timeout exits 124).
        let result = try GranaryProcess.runExecutable(
            "/usr/bin/timeout",
            [
                "120", GranaryProcess.binDirectory + "/granary", "backup", "--root", fixture.root, "--repo",
                fixture.repo, "--json", "erin@example.com",
            ])
        try #require(result.status == 0, "\(result.status) \(result.stderr)")
        let document = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as! [String: Any]
        let user = try #require((document["users"] as? [[String: Any]])?.first)
        #expect(user["priority"] as? String == "raised", "\(user)")
        #expect(fixture.archives("erin@example.com").count == 1)
        let verify = try GranaryProcess.runExecutable(
            "/usr/bin/timeout",
            [
                "120", GranaryProcess.binDirectory + "/granary", "verify", "--repo", fixture.repo, "--json", "--user",
                "erin@example.com",
            ])
        try #require(verify.status == 0, "\(verify.status) \(verify.stderr)")
        let verified = try JSONSerialization.jsonObject(with: Data(verify.stdout.utf8)) as! [String: Any]
        #expect(verified["priority"] as? String == "raised", "\(verified)")
        #expect((verified["archives"] as? [[String: Any]])?.first?["ok"] as? Bool == true, "\(verified)")
    }
}
