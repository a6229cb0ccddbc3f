import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Several hosts on one bucket and the disaster walk.
@Suite(
    "hosts sharing a bucket, disaster recovery", .serialized,
    .enabled(if: S3Server.available, S3Server.unavailableReason))
struct HostsTests: HostsSuite {
    let folder = TemporaryFolder("granary-hosts")
    let bucket: String
    let server: S3Server

    init() throws {
        (server, bucket) = try RemoteRepositoryTests.serverAndBucket("h")
        try FileSystem.makeDirectory(root)
    }

    // MARK: The disaster walk

    @Test(
        "the disaster walk: the host lost, its users restored with restore --create from the mirror, cron resumed: the first backup --all; sync keeps every archive of the mirror"
    )
    func disasterWalk() throws {
        let repo = initializedRepository(folder.child("repo"))
        try writeConfig(repo: repo, mirror: mirror)
        for user in Self.users { try makeUser(user, marker: "before the disaster") }
        #expect(try granary(["backup", "--all"]).status == 0)
        #expect(try granary(["backup", "--all"]).status == 0)
        #expect(try granary(["verify", "--all"]).status == 0)
        #expect(try granary(["sync"]).status == 0)
        let before = try counts("mirror")
        #expect(before == ["alice@example.com": 2, "bob@example.com": 2], "\(before)")

        // The host is lost: its repository and its users' folders.
        FileSystem.removeTree(repo)
        for user in Self.users { FileSystem.removeTree(root + "/" + user) }

        // The walk of the README: restore each user from the mirror, then the usual cron pair.
        for user in Self.users {
            let restore = try granary(["restore", user, "--create"], repo: mirror)
            #expect(restore.status == 0, "\(restore.stderr)")
            #expect(try rows(root + "/" + user + "/Local.sqlite") == ["before the disaster"])
        }
        // The new local repository, made as the README says (the mirror is one already).
        let made = try granary(["init"])
        #expect(made.status == 0 && made.stdout.contains("created the repository \(repo)"), "\(made.stdout)")
        #expect(made.stdout.contains("\(mirror) is a granary repository already"), "\(made.stdout)")
        let backup = try granary(["backup", "--all"])
        #expect(backup.status == 0, "\(backup.stderr)")
        let sync = try granary(["sync", "--json"])
        #expect(sync.status == 0, "\(sync.stderr)")
        let after = try counts("mirror")
        #expect(
            after == before.mapValues { $0 + 1 }, "every archive of the mirror is kept, the new one added: \(after)")

        // A prune on the new host, then sync: the mirror loses what the prune removed, and only that.
        #expect(try granary(["backup", "--all"]).status == 0)
        #expect(try granary(["verify", "--all"]).status == 0)
        #expect(try granary(["sync"]).status == 0)
        #expect(try counts("mirror") == before.mapValues { $0 + 2 })
        let prune = try granary(["prune", "--all", "--keep-last", "1"])
        #expect(prune.status == 0, "\(prune.stderr)")
        let pruneSync = try granary(["sync", "--json"])
        #expect(pruneSync.status == 0 && syncMoved(pruneSync.stdout) == 2, "\(pruneSync.stdout)")
        #expect(
            try counts("mirror") == before.mapValues { $0 + 1 },
            "the archive prune removed went from the mirror, the history before the disaster stayed")
    }

    // MARK: Two hosts

    @Test(
        "two hosts on one repository and one mirror: list, restore, prune, check and sync each keep to their own; --host OTHER restores the other's user"
    )
    func twoHosts() throws {
        try writeConfig(repo: shared, mirror: mirror)
        let store = try makeUser("alice@example.com", marker: "web-1 data")
        #expect(try granary(["backup", "alice@example.com"], host: "web-1").status == 0)
        #expect(try granary(["backup", "alice@example.com"], host: "web-1").status == 0)
        try makeUser("alice@example.com", marker: "web-2 data")
        #expect(try granary(["backup", "alice@example.com"], host: "web-2").status == 0)

        // list: each host's own; --all-hosts every one, with its host.
        #expect(try list(shared, host: "web-1").map(\.host) == ["web-1", "web-1"])
        #expect(try list(shared, host: "web-2").map(\.host) == ["web-2"])
        let every = try list(shared, host: "web-1", allHosts: true)
        #expect(every.count == 3 && every.allSatisfy(\.hostMarked), "\(every)")
        #expect(Set(every.compactMap(\.host)) == ["web-1", "web-2"])

        // restore: a plain restore takes this host's newest; --host the other's.
        let drill1 = folder.child("drill1"), drill2 = folder.child("drill2")
        #expect(try granary(["restore", "alice@example.com", "--to", drill1], host: "web-1").status == 0)
        #expect(try rows(drill1 + "/Local.sqlite") == ["web-1 data"])
        #expect(try granary(["restore", "alice@example.com", "--to", drill2], host: "web-2").status == 0)
        #expect(try rows(drill2 + "/Local.sqlite") == ["web-2 data"])
        _ = store

        // check: web-1's verified archive does not vouch for web-2.
        #expect(try granary(["verify", "--all"], host: "web-1").status == 0)
        #expect(try granary(["check", "alice@example.com"], host: "web-1").status == 0)
        // web-2's own archive counts: its backup checked it (a record beside it, `"by": "backup"`).
        let check2 = try granary(["check", "alice@example.com"], host: "web-2")
        #expect(check2.status == 0, "web-2's own checked archive: \(check2.stdout)\(check2.stderr)")
        #expect(try granary(["verify", "--latest", "--all"], host: "web-2").status == 0)
        #expect(try granary(["check", "alice@example.com"], host: "web-2").status == 0)

        // sync: each host sends its own; a second round moves nothing (no ping-pong).
        #expect(try granary(["sync"], host: "web-1").status == 0)
        #expect(try granary(["sync"], host: "web-2").status == 0)
        #expect(try counts("mirror") == ["alice@example.com": 3])
        for host in ["web-1", "web-2"] {
            let again = try granary(["sync", "--json"], host: host)
            #expect(again.status == 0, "\(again.stderr)")
            #expect(syncMoved(again.stdout) == 0, "\(host)'s second sync moves nothing: \(again.stdout)")
        }

        // prune: web-1's pruning leaves web-2's archive, in the repository and on the mirror.
        let prune = try granary(["prune", "--all", "--keep-last", "1"], host: "web-1")
        #expect(prune.status == 0, "\(prune.stderr)")
        #expect(try list(shared, host: "web-2").count == 1)
        #expect(try list(shared, host: "web-1").count == 1)
        #expect(try granary(["sync"], host: "web-1").status == 0)
        #expect(try granary(["sync"], host: "web-2").status == 0)
        #expect(try counts("mirror") == ["alice@example.com": 2])
        #expect(try list(mirror, host: "web-2").count == 1, "web-2's archive is still on the mirror")

        // The disaster case: a new machine restores web-2's user from the mirror as web-2.
        let drill3 = folder.child("drill3")
        #expect(try granary(["restore", "alice@example.com", "--to", drill3], host: "web-2", repo: mirror).status == 0)
        #expect(try rows(drill3 + "/Local.sqlite") == ["web-2 data"])
    }

    @Test(
        "an archive written before hosts were in names, with no host marker, is no host's: listed only with --all-hosts (marked *), until adopt names it by its manifest's host"
    )
    func unmarkedArchives() throws {
        try writeConfig(repo: shared)
        try makeUser("alice@example.com", marker: "old")
        #expect(try granary(["backup", "alice@example.com"], host: "web-1").status == 0)
        // What a granary before hosts wrote: the archive alone, under a whole-second name.
        let key = try #require(try server.objects(bucket + "/shared").keys.first { $0.hasSuffix(".web-1.tar.zst") })
        let name = try #require(ArchiveName(fileName: String(key.split(separator: "/").last ?? "")))
        let legacy = ArchiveName(micros: name.micros, compression: name.compression, precise: false).fileName
        let moved = try server.rclone([
            "moveto", "moto:\(bucket)/shared/\(key)", "moto:\(bucket)/shared/alice@example.com/\(legacy)",
        ])
        #expect(moved.status == 0, "\(moved.stderr)")
        for host in ["web-1", "web-2"] {
            #expect(try list(shared, host: host).isEmpty, "no host counts an archive of no host as its own")
            let restore = try granary(["restore", "alice@example.com", "--dry-run"], host: host)
            #expect(restore.status == 66 && restore.stderr.contains("adopt"), "\(restore.stderr)")
        }
        let every = try list(shared, host: "web-2", allHosts: true)
        #expect(every.count == 1 && every.first?.hostMarked == false, "\(every)")
        let text = try granary(["list", "--all-hosts"], host: "web-2", repo: shared)
        #expect(text.stdout.contains("*"), "\(text.stdout)")
        // adopt gives it the host its manifest names (web-1), whoever runs it.
        let adopt = try granary(["adopt"], host: "web-2")
        #expect(adopt.status == 0, "\(adopt.stderr)")
        #expect(
            try list(shared, host: "web-1").map(\.name) == [
                legacy.replacingOccurrences(of: ".tar.zst", with: ".web-1.tar.zst")
            ])
        #expect(try list(shared, host: "web-2").isEmpty)
        #expect(try granary(["verify", "--all"], host: "web-1").status == 0)
    }

    @Test(
        "an upload the server stores but whose answer is lost (once, then every time): one archive, published once, exit 0, never a duplicate"
    )
    func lostAnswers() throws {
        let store = try makeUser("alice@example.com", marker: "first")
        let repo = initializedRepository("s3:\(bucket)/lost", environment: server.environment())
        try writeConfig(repo: repo, extra: Self.limits)
        let proxy = try FaultProxy(upstream: server.port)
        #expect(try granary(["backup", "alice@example.com"], environment: ownLimits(port: proxy.port)).status == 0)
        for (round, count) in [(1, 1), (2, Int.max)] {
            let db = try Database(path: store, mode: .readWrite)
            try db.execute("INSERT INTO notes(text) VALUES ('round \(round)')")
            proxy.mode = .dropPutAnswers(count: count)
            let backup = try granary(["backup", "alice@example.com"], environment: ownLimits(port: proxy.port))
            proxy.mode = .pass
            #expect(proxy.droppedPutAnswers >= 1, "round \(round): an answer was dropped")
            #expect(backup.status == 0, "round \(round): \(backup.stderr)")
            #expect(
                try counts("lost") == ["alice@example.com": 1 + round], "round \(round): one archive more, no duplicate"
            )
        }
        #expect(try granary(["verify", "--all"], environment: ownLimits(port: proxy.port)).status == 0)
        let drill = folder.child("drill")
        #expect(try granary(["restore", "alice@example.com", "--to", drill]).status == 0)
        #expect(try rows(drill + "/Local.sqlite") == ["first", "round 1", "round 2"])
    }

    @Test(
        "two hosts backing up one user id in one second into one bucket: two archives, neither overwritten, each restores its own"
    )
    func twoHostsOneSecondOnABucket() throws {
        try writeConfig(repo: shared, mirror: mirror)
        let clock = server.environment().merging(["GRANARY_TEST_NOW": testSecond]) { $1 }
        for host in ["web-1", "web-2"] {
            try makeUser("alice@example.com", marker: host)
            let backup = try granary(["backup", "alice@example.com"], host: host, environment: clock)
            #expect(backup.status == 0, "\(host): \(backup.stderr)")
        }
        #expect(try counts("shared") == ["alice@example.com": 2])
        #expect(try counts("mirror") == ["alice@example.com": 2], "both reached the shared mirror")
        for host in ["web-1", "web-2"] {
            let drill = folder.child("drill-" + host)
            #expect(try granary(["restore", "alice@example.com", "--to", drill], host: host).status == 0)
            #expect(try rows(drill + "/Local.sqlite") == [host])
            let sync = try granary(["sync", "--json"], host: host)
            #expect(sync.status == 0 && syncMoved(sync.stdout) == 0, "\(host): \(sync.stdout)\(sync.stderr)")
        }
    }
}

/// The suites of hosts sharing a bucket (`HostsTests`, `RemoteFailFastTests`,
/// `RemoteEdgeTests`): on the moto server the remote tests share, each test with a bucket of its
/// own, through rclone, as an administrator would run granary. Three suites, not one, so that
/// `make test` runs them in three test processes at once (each stays serialized).
protocol HostsSuite {
    var folder: TemporaryFolder { get }
    var bucket: String { get }
    var server: S3Server { get }
}

extension HostsSuite {
    var root: String { folder.child("root") }
    var config: String { folder.child("config.toml") }
    var shared: String { initializedRepository("s3:\(bucket)/shared", environment: server.environment()) }
    var mirror: String { initializedRepository("s3:\(bucket)/mirror", environment: server.environment()) }
    static var users: [String] { ["alice@example.com", "bob@example.com"] }

    /// A user with one store holding `marker` in its `notes` table.
    @discardableResult
    func makeUser(_ id: String, marker: String) throws -> String {
        try FileSystem.makeDirectory(root + "/" + id)
        let path = root + "/" + id + "/Local.sqlite"
        unlink(path)
        let db = try Database(path: path, mode: .create)
        try db.execute("PRAGMA journal_mode=WAL")
        try db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, text TEXT)")
        try db.execute("INSERT INTO notes(text) VALUES ('\(marker)')")
        return path
    }

    /// The configuration: `repo`, one mirror, and `extra` lines.
    func writeConfig(repo: String, mirror: String? = nil, extra: String = "") throws {
        var text = "repo = \"\(repo)\"\n" + extra + "\n"
        if let mirror { text += "\n[[mirror]]\nrepo = \"\(mirror)\"\n" }
        try text.write(toFile: config, atomically: true, encoding: .utf8)
    }

    func granary(
        _ arguments: [String], host: String? = nil, repo: String? = nil, environment: [String: String]? = nil,
        proxy: FaultProxy? = nil
    ) throws -> GranaryProcess.Result {
        var arguments = arguments + ["--root", root, "--config", config]
        if let host { arguments += ["--host", host] }
        if let repo { arguments += ["--repo", repo] }
        return try GranaryProcess.run(
            arguments, environment: environment ?? server.environment(endpointPort: proxy?.port))
    }

    /// The archives `list --json` shows (as `host`, or every host's).
    func list(_ location: String, host: String? = nil, allHosts: Bool = false) throws -> [HostsListed.Archive] {
        let result = try granary(["list", "--json"] + (allHosts ? ["--all-hosts"] : []), host: host, repo: location)
        #expect(result.status == 0, "\(result.stderr)")
        return try JSONDecoder().decode(HostsListed.self, from: Data(result.stdout.utf8)).archives
    }

    /// Archive counts per user, every host's, straight from the server (the test's own view).
    func counts(_ prefix: String) throws -> [String: Int] {
        var counts: [String: Int] = [:]
        for name in try server.objects(bucket + "/" + prefix).keys {
            let parts = name.split(separator: "/")
            guard parts.count == 2, ArchiveName(fileName: String(parts[1])) != nil else { continue }
            counts[String(parts[0]), default: 0] += 1
        }
        return counts
    }

    func rows(_ store: String) throws -> [String] {
        let db = try Database(path: store, mode: .readOnly)
        return try db.rows("SELECT text FROM notes ORDER BY id").map {
            if case .text(let text) = $0[0] { return text }
            return ""
        }
    }

    /// Archives a `sync --json` document says were uploaded or removed.
    func syncMoved(_ document: String) -> Int {
        guard let sync = try? JSONDecoder().decode(HostsSynced.self, from: Data(document.utf8)) else { return -1 }
        return sync.mirrors.flatMap(\.users).reduce(0) { $0 + $1.uploaded.count + $1.removed.count }
    }

    /// The remote limits these tests set, and the bound they give one operation.
    static var limits: String {
        """
        [remote]
        connect_timeout = "2s"
        timeout = "3s"
        retries = 2
        low_level_retries = 2
        """
    }

    /// retries × low_level_retries × (connect_timeout + timeout) + the pause between the tries.
    static var bound: Double { 2.0 * 2.0 * (2.0 + 3.0) + 1.0 }

    /// The server's environment without the suite's own rclone variables: granary's settings apply.
    func ownLimits(port: Int) -> [String: String] {
        var environment = server.environment(endpointPort: port)
        for key in ["RCLONE_RETRIES", "RCLONE_LOW_LEVEL_RETRIES", "RCLONE_CONTIMEOUT", "RCLONE_TIMEOUT"] {
            environment[key] = nil
        }
        return environment
    }

    /// Runs granary and returns its result and how long it ran.
    func timed(_ arguments: [String], repo: String, environment: [String: String]) throws -> (
        GranaryProcess.Result, Double
    ) {
        let started = Date()
        let result = try granary(arguments, repo: repo, environment: environment)
        return (result, Date().timeIntervalSince(started))
    }

    /// Processes whose command line mentions `text` (rclone children, by the bucket they name).
    static func processes(mentioning text: String) -> [Int32] {
        FileSystem.contents(of: "/proc").compactMap { Int32($0) }.filter { pid in
            guard pid != getpid(), let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else {
                return false
            }
            let line = String(decoding: data, as: UTF8.self)
            return line.contains("rclone") && line.contains(text) && !line.contains("list-multipart")
        }
    }

    /// Unfinished multipart uploads in the bucket.
    static func multipartUploads(_ server: S3Server, bucket: String) -> Int {
        guard let result = try? server.rclone(["backend", "list-multipart-uploads", "moto:\(bucket)"]),
            result.status == 0
        else { return -1 }
        return result.stdout.components(separatedBy: "\"UploadId\"").count - 1
    }
}

/// What `list --json` says of each archive, as the hosts suites read it.
struct HostsListed: Decodable {
    struct Archive: Decodable {
        let user: String
        let name: String
        let host: String?
        let hostMarked: Bool
    }
    let archives: [Archive]
}

/// What `sync --json` says it moved, as the hosts suites read it.
struct HostsSynced: Decodable {
    struct Mirror: Decodable {
        struct User: Decodable { let uploaded: [String]; let removed: [String] }
        let users: [User]
    }
    let mirrors: [Mirror]
}
