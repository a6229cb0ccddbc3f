import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Faults from the machine, not the data: a full disk, a read-only repository, a repository on
/// another filesystem than the root, a file-size limit, a permissive umask. Real filesystems:
/// small tmpfs mounts (the tests run as root, as CI does).
@Suite("faults: full disks, read-only and foreign filesystems, umask", .serialized)
struct FaultTests {
    /// A tmpfs of `kilobytes` mounted at a new folder, unmounted when released.
    final class SmallDisk {
        let path: String
        let mounted: Bool
        init(in folder: TemporaryFolder, name: String, kilobytes: Int) throws {
            path = folder.child(name)
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            mounted =
                (try? GranaryProcess.runExecutable(
                    "/bin/mount", ["-t", "tmpfs", "-o", "size=\(kilobytes)k,mode=0700", "tmpfs", path]
                ).status) == 0
            if mounted { initializedRepository(path) }
        }
        func readOnly() throws {
            #expect(try GranaryProcess.runExecutable("/bin/mount", ["-o", "remount,ro", path]).status == 0)
        }
        deinit { _ = try? GranaryProcess.runExecutable("/bin/umount", ["-l", path]) }
    }

    final class Fixture {
        let folder = TemporaryFolder()
        var root: String { folder.child("root") }
        var repo: String { initializedRepository(folder.child("repo")) }
        init() throws { try GranaryProcess.run([root], tool: "granary-sample") }

        func granary(_ arguments: [String], root: String? = nil, repo: String? = nil) throws -> GranaryProcess.Result {
            try GranaryProcess.run(arguments + ["--root", root ?? self.root, "--repo", repo ?? self.repo])
        }

        func temporaries(_ path: String) -> [String] {
            (FileManager.default.enumerator(atPath: path)?.allObjects as? [String] ?? []).filter {
                $0.contains(".tmp-")
            }
        }
    }

    static func mode(_ path: String) -> Int { Int(FileSystem.status(path).map { $0.st_mode & 0o7777 } ?? 0) }

    @Test(
        "a repository and a mirror on a disk that is not mounted: backup, sync and list exit 66 with granary init as the hint, and nothing is written to the mount point"
    )
    func unmountedDisk() throws {
        let fixture = try Fixture()
        let disk = try SmallDisk(in: fixture.folder, name: "usb", kilobytes: 4096)
        guard disk.mounted else { Issue.record("cannot mount a tmpfs here (the fault tests need root)"); return }
        #expect(try fixture.granary(["backup", "bob@example.com"], repo: disk.path).status == 0)
        #expect(try fixture.granary(["backup", "bob@example.com"]).status == 0)
        #expect(try GranaryProcess.runExecutable("/bin/umount", [disk.path]).status == 0)
        #expect(FileSystem.contents(of: disk.path).isEmpty, "the bare mount point")
        for arguments in [
            ["backup", "bob@example.com", "--repo", disk.path], ["backup", "--all", "--repo", disk.path],
            ["list", "--repo", disk.path], ["sync", "--mirror", disk.path],
        ] {
            let result = try GranaryProcess.run(
                arguments + ["--root", fixture.root] + (arguments.contains("--repo") ? [] : ["--repo", fixture.repo]))
            #expect(result.status == 66, "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains("Try: granary init \(disk.path)"), "\(arguments): \(result.stderr)")
        }
        let mirrored = try fixture.granary(["backup", "bob@example.com", "--mirror", disk.path])
        #expect(mirrored.status == 1 && mirrored.stderr.contains("not a granary repository"), "\(mirrored.stderr)")
        #expect(FileSystem.contents(of: disk.path).isEmpty, "\(FileSystem.contents(of: disk.path))")
    }

    @Test("a backup into a full filesystem exits 74 naming it, and leaves no archive and no temporary file")
    func backupDiskFull() throws {
        let fixture = try Fixture()
        let disk = try SmallDisk(in: fixture.folder, name: "disk", kilobytes: 16)
        guard disk.mounted else { Issue.record("cannot mount a tmpfs here (the fault tests need root)"); return }
        let result = try fixture.granary(["backup", "bob@example.com", "--compression", "none"], repo: disk.path)
        #expect(result.status == 74, "\(result.stderr)")
        #expect(result.stderr.contains(disk.path) && result.stderr.contains("free space"), "\(result.stderr)")
        #expect(FileSystem.contents(of: disk.path + "/bob@example.com").isEmpty)
        #expect(fixture.temporaries(disk.path).isEmpty, "\(fixture.temporaries(disk.path))")
    }

    @Test("verify on a full filesystem exits 74, leaves no temporary folder, and does not mark the good archive bad")
    func verifyDiskFull() throws {
        let fixture = try Fixture()
        #expect(try fixture.granary(["backup", "bob@example.com"]).status == 0)
        let disk = try SmallDisk(in: fixture.folder, name: "disk", kilobytes: 24)
        guard disk.mounted else { Issue.record("cannot mount a tmpfs here (the fault tests need root)"); return }
        try FileSystem.makeDirectory(disk.path + "/bob@example.com")
        let name = FileSystem.contents(of: fixture.repo + "/bob@example.com").filter { !$0.hasPrefix(".") }[0]
        try FileManager.default.copyItem(
            atPath: fixture.repo + "/bob@example.com/" + name, toPath: disk.path + "/bob@example.com/" + name)
        let result = try fixture.granary(["verify", "--all"], repo: disk.path)
        #expect(result.status == 74, "\(result.stderr)")
        #expect(result.stderr.contains("free space"), "\(result.stderr)")
        #expect(fixture.temporaries(disk.path).isEmpty, "\(fixture.temporaries(disk.path))")
        #expect(VerificationRecord.read(for: disk.path + "/bob@example.com/" + name) == nil)
    }

    @Test(
        "a restore whose staging would not fit on the root's filesystem exits 74 naming the space it needs, before writing a byte, and changes nothing live"
    )
    func restoreDiskFull() throws {
        let fixture = try Fixture()
        let disk = try SmallDisk(in: fixture.folder, name: "disk", kilobytes: 512)
        guard disk.mounted else { Issue.record("cannot mount a tmpfs here (the fault tests need root)"); return }
        let root = disk.path + "/root"
        try GranaryProcess.run([root], tool: "granary-sample")
        #expect(try fixture.granary(["backup", "bob@example.com"], root: root).status == 0)
        // Fill the root's filesystem, leaving less than the staged copy needs.
        let live = root + "/bob@example.com/Notes.sqlite"
        let before = RestoreFixtures.sha256(live)
        _ = try GranaryProcess.runExecutable("/bin/dd", ["if=/dev/zero", "of=" + disk.path + "/filler", "bs=4k"])
        _ = try GranaryProcess.runExecutable("/bin/sh", ["-c", "truncate -s -20k '\(disk.path)/filler'"])
        var room = statvfs()
        statvfs(disk.path, &room)
        let result = try fixture.granary(["restore", "bob@example.com"], root: root)
        #expect(result.status == 74, "\(result.stderr)")
        // Refused before staging wrote anything: the filesystem was never filled up.
        #expect(
            result.stderr.contains("staging the archive's files needs")
                && result.stderr.contains("nothing was changed"), "\(result.stderr)")
        var after = statvfs()
        statvfs(disk.path, &after)
        #expect(
            after.f_bavail >= room.f_bavail,
            "staging wrote \((room.f_bavail - after.f_bavail) * 4) KiB before it was refused")
        #expect(RestoreFixtures.sha256(live) == before)
        #expect(FileSystem.contents(of: root + "/.granary/restore").isEmpty)
        #expect(try Database(path: live, mode: .readOnly).integrityCheck(full: true) == ["ok"])
    }

    @Test("a read-only repository: backup exits 73 naming it, list still works, verify exits 73 and changes nothing")
    func readOnlyRepository() throws {
        let fixture = try Fixture()
        let disk = try SmallDisk(in: fixture.folder, name: "disk", kilobytes: 1024)
        guard disk.mounted else { Issue.record("cannot mount a tmpfs here (the fault tests need root)"); return }
        #expect(try fixture.granary(["backup", "dave@example.com"], repo: disk.path).status == 0)
        try disk.readOnly()
        let backup = try fixture.granary(["backup", "dave@example.com"], repo: disk.path)
        #expect(backup.status == 73, "\(backup.stderr)")
        #expect(backup.stderr.contains(disk.path), "\(backup.stderr)")
        #expect(try fixture.granary(["list"], repo: disk.path).status == 0)
        let before = FileSystem.contents(of: disk.path + "/dave@example.com").sorted()
        let verify = try fixture.granary(["verify", "--all"], repo: disk.path)
        #expect(verify.status == 73, "\(verify.stderr)")
        #expect(FileSystem.contents(of: disk.path + "/dave@example.com").sorted() == before, "verify wrote beside it")
    }

    @Test(
        "a repository on another filesystem than the root: restore stages on the root's filesystem and swaps atomically"
    )
    func repositoryElsewhere() throws {
        let fixture = try Fixture()
        let disk = try SmallDisk(in: fixture.folder, name: "disk", kilobytes: 2048)
        guard disk.mounted else { Issue.record("cannot mount a tmpfs here (the fault tests need root)"); return }
        #expect(FileSystem.status(disk.path)!.st_dev != FileSystem.status(fixture.root)!.st_dev)
        #expect(try fixture.granary(["backup", "alice@example.com"], repo: disk.path).status == 0)
        let live = fixture.root + "/alice@example.com/Local.sqlite"
        let expected = try Database(path: live, mode: .readOnly).scalar("SELECT count(*) FROM items")?.integer
        try Database(path: live, mode: .readWrite).execute("DELETE FROM items")
        let result = try fixture.granary(["restore", "alice@example.com"], repo: disk.path)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(try Database(path: live, mode: .readOnly).scalar("SELECT count(*) FROM items")?.integer == expected)
        #expect(FileSystem.contents(of: fixture.root + "/.granary/restore").isEmpty)
    }

    @Test(
        "SIGTERM or SIGINT during verify exits 130, removes its temporary folder and records nothing",
        arguments: [SIGTERM, SIGINT])
    func verifyInterrupted(signal: Int32) throws {
        let fixture = try Fixture()
        let store = fixture.root + "/dave@example.com/Big.sqlite"
        try GranaryProcess.run(["big", store, "48"], tool: "granary-sample")
        #expect(try fixture.granary(["backup", "dave@example.com", "--check", "none"]).status == 0)
        let archive =
            fixture.repo + "/dave@example.com/"
            + FileSystem.contents(of: fixture.repo + "/dave@example.com").filter { !$0.hasPrefix(".") }[0]
        let process = Process()
        process.executableURL = URL(fileURLWithPath: GranaryProcess.binDirectory + "/granary")
        process.arguments = ["verify", archive, "--root", fixture.root, "--repo", fixture.repo]
        process.standardError = FileHandle.nullDevice
        try process.run()
        // Wait until it is extracting (its private folder exists), then signal it.
        for _ in 0..<2000 where FileSystem.contents(of: fixture.repo + "/.granary-tmp").isEmpty { usleep(2_000) }
        kill(process.processIdentifier, signal)
        process.waitUntilExit()
        #expect(process.terminationStatus == 130)
        #expect(FileSystem.contents(of: fixture.repo + "/.granary-tmp").isEmpty)
        #expect(VerificationRecord.read(for: archive) == nil)
    }

    @Test("a store granary cannot read fails its user's backup with exit 74 naming it, instead of being passed over")
    func unreadableStore() throws {
        let fixture = try Fixture()
        try FileSystem.makeDirectory(fixture.repo)
        // Root reads everything: run granary as nobody, over a root and repository nobody owns.
        _ = try GranaryProcess.runExecutable("/bin/chown", ["-R", "65534:65534", fixture.root, fixture.repo])
        _ = try GranaryProcess.runExecutable("/bin/chmod", ["0755", fixture.folder.path])
        let store = fixture.root + "/carol@example.com/Legacy.db"
        #expect(chmod(store, 0) == 0)
        func asNobody(_ arguments: [String]) throws -> GranaryProcess.Result {
            try GranaryProcess.runExecutable(
                "/usr/bin/setpriv",
                ["--reuid=65534", "--regid=65534", "--clear-groups", GranaryProcess.binDirectory + "/granary"]
                    + arguments
                    + ["--root", fixture.root, "--repo", fixture.repo])
        }
        let one = try asNobody(["backup", "carol@example.com"])
        #expect(one.status == 74, "\(one.stderr)")
        #expect(one.stderr.contains("cannot read " + store), "\(one.stderr)")
        #expect(FileSystem.contents(of: fixture.repo + "/carol@example.com").filter { !$0.hasPrefix(".") }.isEmpty)
        let all = try asNobody(["backup", "--all"])
        #expect(all.status == 1, "\(all.stderr)")
        #expect(FileSystem.contents(of: fixture.repo + "/dave@example.com").filter { !$0.hasPrefix(".") }.count == 1)
        #expect(try asNobody(["users"]).stderr.contains("cannot read " + "Legacy.db"))
    }

    @Test("with umask 000, archives, records and folders are still 0600 and 0700")
    func umask() throws {
        let fixture = try Fixture()
        let granary = GranaryProcess.binDirectory + "/granary"
        for command in ["backup dave@example.com", "verify --all"] {
            let result = try GranaryProcess.runExecutable(
                "/bin/sh",
                [
                    "-c", "umask 000; exec \"$0\" \(command) --root \"$1\" --repo \"$2\"", granary, fixture.root,
                    fixture.repo,
                ])
            #expect(result.status == 0, "\(result.stderr)")
        }
        let folder = fixture.repo + "/dave@example.com"
        let archive = folder + "/" + FileSystem.contents(of: folder).first { !$0.hasPrefix(".") }!
        #expect(Self.mode(fixture.repo) == 0o700)
        #expect(Self.mode(folder) == 0o700)
        #expect(Self.mode(archive) == 0o600)
        #expect(Self.mode(VerificationRecord.path(for: archive)) == 0o600)
        #expect(Self.mode(fixture.root + "/.granary") == 0o700)
    }
}
