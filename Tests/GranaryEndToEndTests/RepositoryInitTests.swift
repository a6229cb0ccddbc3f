import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `granary init`: the one command that makes a repository or a mirror; every other command
/// refuses a location that is not one, so that an unmounted disk or a typo never fills `/`.
@Suite("granary init, and commands refusing a location that is not a repository")
struct RepositoryInitTests {
    let folder = TemporaryFolder("granary-init")
    var root: String { folder.child("root") }

    init() throws {
        try GranaryProcess.run([root], tool: "granary-sample")
    }

    func granary(_ arguments: [String], environment: [String: String] = [:]) throws -> GranaryProcess.Result {
        try GranaryProcess.run(arguments + ["--root", root], environment: environment)
    }

    static func mode(_ path: String) -> mode_t { (FileSystem.status(path)?.st_mode ?? 0) & 0o7777 }

    @Test("init makes a private folder with its marker; run again it says so and exits 0, changing nothing")
    func initLocal() throws {
        let repo = folder.child("backups")
        let made = try granary(["init", repo])
        #expect(made.status == 0, "\(made.stderr)")
        #expect(made.stdout == "created the repository \(repo)\n", "\(made.stdout)")
        #expect(Self.mode(repo) == 0o700)
        let marker = repo + "/" + LocalRepository.markerName
        #expect(FileSystem.isRegularFile(marker))
        #expect(FileSystem.contents(of: repo) == [LocalRepository.markerName])
        let stamp = try #require(FileSystem.status(marker)).st_mtim
        let again = try granary(["init", repo, "--json"])
        #expect(again.status == 0, "\(again.stderr)")
        let document = try #require(try JSONSerialization.jsonObject(with: Data(again.stdout.utf8)) as? [String: Any])
        let items = try #require(document["repositories"] as? [[String: Any]])
        #expect(items.count == 1 && items[0]["created"] as? Bool == false && items[0]["location"] as? String == repo)
        #expect(items[0].keys.contains("error"))
        let text = try granary(["init", repo])
        #expect(text.stdout.contains("is a granary repository already"), "\(text.stdout)")
        #expect(try #require(FileSystem.status(marker)).st_mtim.tv_nsec == stamp.tv_nsec)
        // The repository works: a backup goes in.
        #expect(try granary(["backup", "alice@example.com", "--repo", repo]).status == 0)
        #expect(FileSystem.contents(of: repo + "/alice@example.com").contains { $0.hasSuffix(".tar.zst") })
    }

    @Test("without a location, init makes the configured repository and every configured mirror")
    func initConfigured() throws {
        let repo = folder.child("repo"), mirror = folder.child("mirror")
        let config = folder.child("granary.toml")
        try "repo = \"\(repo)\"\n\n[[mirror]]\nrepo = \"\(mirror)\"\n".write(
            toFile: config, atomically: true, encoding: .utf8)
        let made = try granary(["init", "--config", config])
        #expect(made.status == 0, "\(made.stderr)")
        #expect(made.stdout == "created the repository \(repo)\ncreated the repository \(mirror)\n", "\(made.stdout)")
        for location in [repo, mirror] { #expect(FileSystem.isRegularFile(location + "/.granary-repository")) }
        #expect(try granary(["backup", "alice@example.com", "--config", config]).status == 0)
        #expect(FileSystem.contents(of: mirror + "/alice@example.com").contains { $0.hasSuffix(".tar.zst") })
        // No repository set anywhere: a usage error naming how to set one.
        let none = try GranaryProcess.run(["init"])
        #expect(none.status == 64 && none.stderr.contains("--repo"), "\(none.stderr)")
    }

    @Test(
        "init refuses a folder holding other things (73), a missing parent (73), a folder others can write (73), and makes nothing"
    )
    func initRefusals() throws {
        let busy = folder.child("home")
        try FileSystem.makeDirectory(busy)
        try Data("notes".utf8).write(to: URL(fileURLWithPath: busy + "/notes.txt"))
        let refused = try granary(["init", busy])
        #expect(refused.status == 73, "\(refused.stderr)")
        #expect(refused.stderr.contains(busy) && refused.stderr.contains("notes.txt"), "\(refused.stderr)")
        #expect(FileSystem.contents(of: busy) == ["notes.txt"])
        let orphan = folder.child("no/such/repo")
        let missing = try granary(["init", orphan])
        #expect(missing.status == 73 && missing.stderr.contains("parent folder"), "\(missing.stderr)")
        #expect(FileSystem.status(folder.child("no")) == nil)
        let open = folder.child("open")
        try FileSystem.makeDirectory(open)
        chmod(open, 0o777)
        let unsafe = try granary(["init", open])
        #expect(unsafe.status == 73 && unsafe.stderr.contains("writable by everyone"), "\(unsafe.stderr)")
        #expect(FileSystem.contents(of: open).isEmpty)
        // A new file system's lost+found is no obstacle.
        let disk = folder.child("disk")
        try FileSystem.makeDirectory(disk + "/lost+found")
        let fresh = try granary(["init", disk])
        #expect(fresh.status == 0, "\(fresh.stderr)")
        // Several locations: each is tried, the run exits 1 naming the one that failed.
        let several = try granary(["init", folder.child("fine"), busy])
        #expect(several.status == 1, "\(several.stderr)")
        #expect(several.stdout.contains("created the repository \(folder.child("fine"))"), "\(several.stdout)")
        #expect(several.stderr.contains("notes.txt"), "\(several.stderr)")
    }

    /// Every command that uses a repository, run against `repo`.
    static func commands(repo: String) -> [(String, [String])] {
        [
            ("backup", ["backup", "alice@example.com", "--repo", repo]),
            ("backup --all", ["backup", "--all", "--repo", repo]),
            ("list", ["list", "--repo", repo]),
            ("verify", ["verify", "--all", "--repo", repo]),
            ("check", ["check", "--repo", repo]),
            ("prune", ["prune", "--all", "--keep-last", "1", "--repo", repo]),
            ("delete", ["delete", "alice@example.com/2026", "--repo", repo]),
            ("restore", ["restore", "alice@example.com", "--repo", repo]),
            ("reset", ["reset", "alice@example.com", "--yes", "--repo", repo]),
            ("retire", ["retire", "dave@example.com", "--yes", "--repo", repo]),
            ("adopt", ["adopt", "--repo", repo]),
            ("users", ["users", "--repo", repo]),
        ]
    }

    @Test(
        "every command refuses a folder that exists and holds no marker (an unmounted mount point) or no folder at all: 66, a hint to run granary init, nothing written"
    )
    func commandsRefuseUninitialized() throws {
        let mountPoint = folder.child("mnt-usb")
        try FileSystem.makeDirectory(mountPoint)
        let typo = folder.child("bakcups")
        let stores = try FileManager.default.subpathsOfDirectory(atPath: root).sorted()
        for repo in [mountPoint, typo] {
            for (name, arguments) in Self.commands(repo: repo) {
                let result = try granary(arguments)
                #expect(result.status == 66, "\(name) on \(repo): exit \(result.status) \(result.stderr)")
                #expect(
                    result.stderr.contains("not a granary repository: \(repo)")
                        && result.stderr.contains("Try: granary init \(repo)"),
                    "\(name): \(result.stderr)")
                #expect(result.stderr.split(separator: "\n").count == 2, "one line and its hint: \(result.stderr)")
            }
        }
        #expect(FileSystem.contents(of: mountPoint).isEmpty, "\(FileSystem.contents(of: mountPoint))")
        #expect(FileSystem.status(typo) == nil)
        #expect(try FileManager.default.subpathsOfDirectory(atPath: root).sorted() == stores, "the root is unchanged")
    }

    @Test(
        "a mirror that is not a repository: sync refuses it (66, nothing written); backup keeps its archive in the repository and fails that mirror alone (1)"
    )
    func mirrorsRefuseUninitialized() throws {
        let repo = initializedRepository(folder.child("repo"))
        let mirror = folder.child("mnt-usb")
        try FileSystem.makeDirectory(mirror)
        #expect(try granary(["backup", "alice@example.com", "--repo", repo]).status == 0)
        for extra in [[], ["--dry-run"]] {
            let sync = try granary(["sync", "--repo", repo, "--mirror", mirror] + extra)
            #expect(sync.status == 66, "\(extra): \(sync.stderr)")
            #expect(sync.stderr.contains("Try: granary init \(mirror)"), "\(sync.stderr)")
        }
        let backup = try granary(["backup", "alice@example.com", "--repo", repo, "--mirror", mirror])
        #expect(backup.status == 1, "\(backup.stderr)")
        #expect(backup.stderr.contains("not a granary repository: \(mirror)"), "\(backup.stderr)")
        #expect(FileSystem.contents(of: mirror).isEmpty, "\(FileSystem.contents(of: mirror))")
        #expect(FileSystem.contents(of: repo + "/alice@example.com").filter { $0.hasSuffix(".tar.zst") }.count == 2)
        // Once made, the mirror takes what sync sends.
        #expect(try granary(["init", mirror]).status == 0)
        let synced = try granary(["sync", "--repo", repo, "--mirror", mirror])
        #expect(synced.status == 0, "\(synced.stderr)")
        #expect(FileSystem.contents(of: mirror + "/alice@example.com").filter { $0.hasSuffix(".tar.zst") }.count == 2)
    }

    @Test("a repository an older granary's backup made (archives and its marker, or archives alone) keeps working")
    func olderRepositories() throws {
        let repo = initializedRepository(folder.child("repo"))
        #expect(try granary(["backup", "alice@example.com", "--repo", repo]).status == 0)
        // Older still: archives and no marker. It is a repository; a backup writes the marker back.
        unlink(repo + "/" + LocalRepository.markerName)
        #expect(try granary(["list", "--repo", repo]).status == 0)
        #expect(try granary(["backup", "alice@example.com", "--repo", repo]).status == 0)
        #expect(FileSystem.isRegularFile(repo + "/" + LocalRepository.markerName))
        let again = try granary(["init", repo])
        #expect(again.status == 0 && again.stdout.contains("already"), "\(again.stdout)")
    }
}

/// `granary init` of remote locations: S3 (moto) and an rclone remote.
@Suite(
    "granary init on S3 and rclone remotes", .serialized,
    .enabled(if: S3Server.available, S3Server.unavailableReason))
struct RemoteRepositoryInitTests {
    let folder = TemporaryFolder("granary-init-remote")
    var root: String { folder.child("root") }
    let bucket: String
    let server: S3Server

    init() throws {
        (server, bucket) = try RemoteRepositoryTests.serverAndBucket("i")
        try GranaryProcess.run([root], tool: "granary-sample")
    }

    func granary(_ arguments: [String], environment: [String: String]? = nil) throws -> GranaryProcess.Result {
        try GranaryProcess.run(arguments + ["--root", root], environment: environment ?? server.environment())
    }

    @Test("S3: backup refuses a prefix with no marker (66) and writes nothing; init writes the marker, once")
    func initS3() throws {
        let repo = "s3:\(bucket)/granary"
        let refused = try granary(["backup", "alice@example.com", "--repo", repo])
        #expect(refused.status == 66 && refused.stderr.contains("Try: granary init \(repo)"), "\(refused.stderr)")
        let sync = try granary(["sync", "--repo", initializedRepository(folder.child("repo")), "--mirror", repo])
        #expect(sync.status == 66, "\(sync.stderr)")
        let written = try server.objects(bucket)
        #expect(written.isEmpty, "nothing was written: \(written)")
        let made = try granary(["init", repo])
        #expect(made.status == 0 && made.stdout.contains("created"), "\(made.stderr)")
        #expect(try server.objects(bucket + "/granary").keys.sorted() == [".granary-repository"])
        let again = try granary(["init", repo])
        #expect(again.status == 0 && again.stdout.contains("already"), "\(again.stdout)")
        #expect(try granary(["backup", "alice@example.com", "--repo", repo]).status == 0)
        // A bucket that does not exist: 66, as for any missing location.
        let nobucket = try granary(["init", "s3:nobucket\(UInt32.random(in: 0...UInt32.max))/granary"])
        #expect([66, 74].contains(nobucket.status), "\(nobucket.status): \(nobucket.stderr)")
    }

    @Test("an rclone remote (a local-folder remote): init makes it, list then works; before, list refuses it")
    func initRclone() throws {
        let rcloneConfig = folder.child("rclone.conf")
        try "[usb]\ntype = local\n".write(toFile: rcloneConfig, atomically: true, encoding: .utf8)
        chmod(rcloneConfig, 0o600)
        var environment = server.environment()
        environment["RCLONE_CONFIG"] = rcloneConfig
        let target = folder.child("usb")
        try FileSystem.makeDirectory(target)
        chmod(target, 0o700)
        let repo = "rclone:usb:\(target)"
        let refused = try granary(["list", "--repo", repo], environment: environment)
        #expect(refused.status == 66 && refused.stderr.contains("granary init"), "\(refused.stderr)")
        #expect(FileSystem.contents(of: target).isEmpty)
        let made = try granary(["init", repo], environment: environment)
        #expect(made.status == 0, "\(made.stderr)")
        #expect(FileSystem.isRegularFile(target + "/.granary-repository"))
        #expect(try granary(["init", repo], environment: environment).stdout.contains("already"))
        #expect(try granary(["backup", "alice@example.com", "--repo", repo], environment: environment).status == 0)
        #expect(try granary(["list", "--repo", repo], environment: environment).status == 0)
    }
}
