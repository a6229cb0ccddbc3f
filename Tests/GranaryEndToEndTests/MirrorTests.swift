import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Mirrors on a real S3 server: the machine's repository lost, everything from the mirror alone.
@Suite("mirrors on a real S3 server", .serialized, .enabled(if: S3Server.available, S3Server.unavailableReason))
struct MirrorTests {
    let folder = TemporaryFolder("granary-mirror")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }
    var config: String { folder.child("config.toml") }
    let bucket: String
    let server: S3Server
    var mirror: String { initializedRepository("s3:\(bucket)/mirror", environment: server.environment()) }

    init() throws {
        (server, bucket) = try RemoteRepositoryTests.serverAndBucket("m")
        try FileSystem.makeDirectory(root + "/alice@example.com")
        try FileSystem.makeDirectory(root + "/bob@example.com")
        try SampleData.makeItemsStore(root + "/alice@example.com/Local.sqlite", rows: 60, walOnlyTail: 5)
        try SampleData.makeItemsStore(root + "/bob@example.com/Notes.sqlite", rows: 30, walOnlyTail: 0)
        try "repo = \"\(repo)\"\n\n[[mirror]]\nrepo = \"\(mirror)\"\n".write(
            toFile: config, atomically: true, encoding: .utf8)
    }

    func granary(_ arguments: [String], repo: String? = nil, proxy: FaultProxy? = nil) throws -> GranaryProcess.Result {
        var arguments = arguments + ["--root", root, "--config", config]
        if let repo { arguments += ["--repo", repo] }
        return try GranaryProcess.run(arguments, environment: server.environment(endpointPort: proxy?.port))
    }

    /// Archive names per user in a repository, as granary lists them.
    func archives(_ location: String) throws -> [String: Set<String>] {
        let list = try granary(["list", "--json"], repo: location)
        #expect(list.status == 0, "\(list.stderr)")
        struct Document: Decodable {
            struct Archive: Decodable { let user: String; let name: String }
            let archives: [Archive]
        }
        let document = try JSONDecoder().decode(Document.self, from: Data(list.stdout.utf8))
        return Dictionary(grouping: document.archives, by: \.user).mapValues { Set($0.map(\.name)) }
    }

    @Test(
        "backup --all with a mirror, the local repository lost: list, verify, restore --to and a restore in place under a running owner from the mirror alone; then prune and sync converge both repositories"
    )
    func loseTheMachine() throws {
        let backup = try granary(["backup", "--all", "--json"])
        #expect(backup.status == 0, "\(backup.stderr)")
        #expect(backup.stdout.contains("\"repository\" : \"\(mirror)\""), "\(backup.stdout)")
        let first = try archives(mirror)
        #expect(first.keys.sorted() == ["alice@example.com", "bob@example.com"])
        #expect(try archives(repo) == first, "the mirror has what the repository has")

        // The machine's repository is lost.
        FileSystem.removeTree(repo)

        #expect(try granary(["verify", "--all"], repo: mirror).status == 0)
        let drill = folder.child("drill")
        let restoreTo = try granary(["restore", "bob@example.com", "--to", drill], repo: mirror)
        #expect(restoreTo.status == 0, "\(restoreTo.stderr)")
        #expect(
            try RestoreFixtures.dump(drill + "/Notes.sqlite")
                == RestoreFixtures.dump(root + "/bob@example.com/Notes.sqlite"))

        // alice's store is in use: a running owner writes to it and is swapped under.
        let store = root + "/alice@example.com/Local.sqlite"
        let archived = try RestoreFixtures.ids(store, table: "items")
        let owner = try DemoOwner(stores: [store], log: folder.child("owner.log"), startID: 10_000)
        try owner.waitForMoreWrites(20)
        let restore = try granary(["restore", "alice@example.com"], repo: mirror)
        #expect(restore.status == 0, "\(restore.stderr)")
        #expect(
            restore.stdout.contains("swap") && restore.stdout.contains("owner pid \(owner.pid)"), "\(restore.stdout)")
        try owner.waitForMoreWrites(10)
        owner.stop()
        #expect(try RestoreFixtures.ids(store, table: "items") == archived, "the archive's rows are back")
        #expect(
            try archives(mirror)["alice@example.com"]?.contains { $0.contains("-pre-restore") } == true,
            "the safety archive went to the mirror")

        // A new repository on the machine; prune it, then sync: the mirror gets the new archives and
        // keeps every archive from before the loss (the new repository never had them).
        let history = try archives(mirror)
        initializedRepository(folder.child("repo"))
        #expect(try granary(["backup", "--all"]).status == 0)
        #expect(try granary(["verify", "--all"]).status == 0)
        #expect(try granary(["prune", "--all", "--keep-last", "1"]).status == 0)
        let sync = try granary(["sync", "--json"])
        #expect(sync.status == 0, "\(sync.stderr)")
        let primary = try archives(repo)
        #expect(primary.values.allSatisfy { $0.count == 1 })
        let mirrored = try archives(mirror)
        for (user, names) in primary {
            #expect(mirrored[user] == history[user, default: []].union(names), "\(user): the mirror keeps its history")
        }
        // The verification records came along: check passes on the mirror alone.
        let check = try granary(["check"], repo: mirror)
        #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
        let again = try granary(["sync", "--json"])
        #expect(
            again.status == 0 && !again.stdout.contains("\"uploaded\" : [\n        \""),
            "a second sync has nothing to do: \(again.stdout)")
    }

    @Test(
        "a mirror that fails: backup exits 1 naming it and keeps the archive; check fails the user until sync sends it")
    func mirrorFails() throws {
        let proxy = try FaultProxy(upstream: server.port)
        #expect(try granary(["backup", "alice@example.com"], proxy: proxy).status == 0)
        #expect(try granary(["verify", "--all"]).status == 0)
        proxy.mode = .status(503)
        let backup = try granary(["backup", "alice@example.com"], proxy: proxy)
        #expect(backup.status == 1, "\(backup.stderr)")
        #expect(backup.stderr.contains("did not reach the mirror \(mirror)"), "\(backup.stderr)")
        #expect(backup.stderr.contains("granary sync alice@example.com"), "\(backup.stderr)")
        proxy.mode = .pass
        #expect(try archives(repo)["alice@example.com"]?.count == 2, "the archive stays in the repository")
        #expect(try granary(["verify", "--all"]).status == 0)
        let check = try granary(["check", "alice@example.com"], proxy: proxy)
        #expect(check.status == 1)
        #expect(check.stdout.contains("mirror \(mirror): lacks the newest archive"), "\(check.stdout)")
        let sync = try granary(["sync", "alice@example.com"], proxy: proxy)
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(try granary(["check", "alice@example.com"], proxy: proxy).status == 0)
        #expect(try archives(mirror) == archives(repo))
    }

    @Test(
        "a mirror's copy never replaces an object: a taken name is refused with the object left as it was, and a new mirror gets its marker from init"
    )
    func mirrorCopyNeverReplaces() throws {
        let location = "s3:\(bucket)/fresh"
        let remote = try RcloneRepository(location: location, environment: server.environment())
        #expect(try remote.exists() == false)
        let first = folder.child("first"), second = folder.child("second")
        try Data("the first archive".utf8).write(to: URL(fileURLWithPath: first))
        try Data("another archive, longer".utf8).write(to: URL(fileURLWithPath: second))
        #expect(throws: RepositoryError.self) { try remote.prepare() }
        #expect(try remote.initialize())
        #expect(try remote.initialize() == false)
        #expect(try remote.write("alice@example.com/20261123T150043Z.tar.zst", from: first))
        #expect(
            try RcloneRepository(location: location, environment: server.environment()).exists(),
            "the marker came from init")
        // A second run (no cached knowledge of the marker) and the same name: refused, unchanged.
        let again = try RcloneRepository(location: location, environment: server.environment())
        try again.prepare()
        #expect(try again.write("alice@example.com/20261123T150043Z.tar.zst", from: second) == false)
        #expect(try again.write("alice@example.com/20261123T150043Z.tar.zst", from: second) == false)
        let stored = try server.read(
            "\(bucket)/fresh/alice@example.com/20261123T150043Z.tar.zst", scratch: folder.child("scratch"))
        #expect(String(decoding: stored, as: UTF8.self) == "the first archive")
        #expect(
            try server.objects("\(bucket)/fresh").keys.sorted() == [
                ".granary-repository", "alice@example.com/20261123T150043Z.tar.zst",
            ])
    }

    @Test(
        "the mirror's lookup, done while the snapshots are taken, lets no upload replace a name taken after it: that mirror fails, the archive stays in the repository"
    )
    func nameTakenAfterTheLookup() throws {
        let proxy = try FaultProxy(upstream: server.port)
        let user = try UserID("alice@example.com")
        // The mirror exists before the run, so its lookup is the one rclone run before the upload.
        try RcloneRepository(location: mirror, environment: server.environment()).prepare()
        let mirrorRepository = try RcloneRepository(
            location: mirror, environment: server.environment(endpointPort: proxy.port))
        let planted = folder.child("planted")
        try Data("not this archive".utf8).write(to: URL(fileURLWithPath: planted))
        // Once packing starts the archive's name is fixed: its temporary file in the repository
        // is named after it (`.NAME.tmp-…`). When the lookup has ended, that name is taken on the mirror.
        let hook = PackHook { [server, bucket, repo] in
            for _ in 0..<600 where proxy.finished == 0 { usleep(50_000) }
            #expect(proxy.finished >= 1, "the lookup ended before packing")
            let temporary = FileSystem.contents(of: repo + "/alice@example.com").first { $0.contains(".tmp-") }
            guard let temporary, let end = temporary.range(of: ".tmp-") else {
                Issue.record("no temporary archive while packing")
                return
            }
            let name = String(temporary[temporary.index(after: temporary.startIndex)..<end.lowerBound])
            #expect(ArchiveName(fileName: name) != nil, "\(name)")
            let put = try? server.rclone(["copyto", planted, "moto:\(bucket)/mirror/alice@example.com/\(name)"])
            #expect(put?.status == 0, "\(put?.stderr ?? "")")
        }
        let operation = BackupOperation(
            root: Root(path: root), repository: LocalRepository(path: repo), mirrors: [mirrorRepository],
            options: .init(), progress: hook)
        let result = try operation.run(user)
        #expect(hook.ran)
        #expect(result.mirrors.count == 1)
        #expect(result.mirrors.first?.archive == nil)
        guard case .nameTaken? = result.mirrors.first?.error as? MirrorError else {
            Issue.record("the mirror's failure is not a taken name: \(String(describing: result.mirrors.first?.error))")
            return
        }
        #expect(FileSystem.isRegularFile(result.entry.path), "the archive stays in the repository")
        let stored = try server.read(
            "\(bucket)/mirror/alice@example.com/\(result.entry.name.fileName)", scratch: folder.child("scratch"))
        #expect(String(decoding: stored, as: UTF8.self) == "not this archive", "the object on the mirror is as it was")
    }

    @Test(
        "a mirror whose lookup fails (no such bucket) fails alone: the other mirror takes the archive, the repository keeps it, exit 1"
    )
    func lookupFailureFailsThatMirror() throws {
        let missing = "s3:nobucket\(UInt32.random(in: 0...UInt32.max))/mirror"
        let backup = try granary(["backup", "alice@example.com", "--mirror", missing, "--mirror", mirror, "--json"])
        #expect(backup.status == 1, "\(backup.stderr)")
        struct Document: Decodable {
            struct User: Decodable {
                struct Mirror: Decodable { let repository: String; let ok: Bool; let archive: String? }
                let archive: String?
                let mirrors: [Mirror]
            }
            let users: [User]
        }
        let document = try JSONDecoder().decode(Document.self, from: Data(backup.stdout.utf8))
        let user = try #require(document.users.first)
        #expect(user.mirrors.map(\.repository) == [missing, mirror])
        #expect(user.mirrors.map(\.ok) == [false, true])
        // No bucket, so no marker: not a repository (granary init on it names the missing bucket).
        #expect(backup.stdout.contains("not a granary repository: \(missing)"), "\(backup.stdout)")
        let archive = try #require(user.archive)
        #expect(FileSystem.isRegularFile(archive), "the archive stays in the repository")
        #expect(try archives(mirror)["alice@example.com"] == [(archive as NSString).lastPathComponent])
    }

    @Test("sync never empties a mirror: a user the repository has no archive of is left alone there")
    func emptyPrimaryLeavesMirror() throws {
        #expect(try granary(["backup", "--all"]).status == 0)
        FileSystem.removeTree(repo + "/bob@example.com")
        let sync = try granary(["sync", "bob@example.com"])
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(try archives(mirror)["bob@example.com"]?.count == 1)
    }
}

/// Runs `action` once, the first time a backup reports packing.
final class PackHook: BackupProgress, @unchecked Sendable {
    private let lock = NSLock()
    private var done = false
    private let action: @Sendable () throws -> Void

    init(_ action: @escaping @Sendable () throws -> Void) { self.action = action }

    var ran: Bool { lock.withLock { done } }

    func update(user: String, phase: String, done _: Int64, total _: Int64) {
        guard phase == "pack",
            lock.withLock({ () -> Bool in
                defer { done = true }; return !done
            })
        else { return }
        try? action()
    }
}
