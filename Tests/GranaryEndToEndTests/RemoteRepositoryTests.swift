import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Repositories off the machine: granary against a real S3 server (moto) on loopback, through
/// rclone, with a fault proxy in between where a test needs one.
@Suite(
    "remote repositories on a real S3 server", .serialized, .enabled(if: S3Server.available, S3Server.unavailableReason)
)
struct RemoteRepositoryTests {
    let folder = TemporaryFolder("granary-remote")
    var root: String { folder.child("root") }
    let bucket: String
    let server: S3Server

    /// One server for the suite's tests (each test has its own bucket).
    static let shared: S3Server? = try? S3Server(log: NSTemporaryDirectory() + "/granary-moto-\(getpid()).log")

    /// The shared server and a new bucket in it, named `prefix` and up to 8 random hex digits.
    static func serverAndBucket(_ prefix: String) throws -> (S3Server, String) {
        guard let server = shared else { throw S3ServerError.didNotStart("moto did not start") }
        let bucket = prefix + String(UInt32.random(in: 0...UInt32.max), radix: 16)
        try server.makeBucket(bucket)
        return (server, bucket)
    }

    init() throws {
        (server, bucket) = try Self.serverAndBucket("t")
        try FileSystem.makeDirectory(root)
    }

    /// A user with one store of `megabytes` of random (incompressible) data, and a marker row.
    func makeUser(_ id: String, megabytes: Int = 1, marker: String = "granary-canary-row") throws -> String {
        let path = root + "/" + id + "/Local.sqlite"
        try FileSystem.makeDirectory(root + "/" + id)
        let db = try Database(path: path, mode: .create)
        try db.execute("PRAGMA journal_mode=WAL")
        try db.execute("CREATE TABLE blobs(id INTEGER PRIMARY KEY, body BLOB)")
        try db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, text TEXT)")
        try db.execute("INSERT INTO notes(text) VALUES ('\(marker)')")
        if megabytes > 0 {
            try db.execute(
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < \(megabytes * 256)) INSERT INTO blobs(body) SELECT randomblob(4096) FROM c"
            )
        }
        return path
    }

    func granary(_ arguments: [String], repo: String, environment: [String: String] = [:], proxy: FaultProxy? = nil)
        throws -> GranaryProcess.Result
    {
        var env = server.environment(endpointPort: proxy?.port)
        for (key, value) in environment { env[key] = value }
        return try GranaryProcess.run(arguments + ["--root", root, "--repo", repo], environment: env)
    }

    /// Object names under the bucket (the test's own listing, straight from the server).
    func objects(_ prefix: String = "") throws -> [String: Int64] {
        try server.objects(bucket + (prefix.isEmpty ? "" : "/" + prefix))
    }

    func noSecrets(_ results: [GranaryProcess.Result], sourceLocation: SourceLocation = #_sourceLocation) {
        for result in results {
            for text in [result.stdout, result.stderr] {
                #expect(
                    !text.contains(S3Server.secretKey), "the secret key was printed: \(text)",
                    sourceLocation: sourceLocation)
                #expect(
                    !text.contains(S3Server.accessKey), "the access key was printed: \(text)",
                    sourceLocation: sourceLocation)
            }
        }
    }

    @Test(
        "s3: is a repository like a folder: backup, list, verify, inspect, restore --to, delete, prune and check work on it, and no credential is ever printed"
    )
    func everyCommand() throws {
        _ = try makeUser("alice@example.com")
        let repo = initializedRepository("s3:\(bucket)/granary", environment: server.environment())
        var outputs: [GranaryProcess.Result] = []
        let backup = try granary(["backup", "alice@example.com", "-v", "--json"], repo: repo)
        outputs.append(backup)
        #expect(backup.status == 0, "\(backup.stderr)")
        let names = try objects("granary").keys.sorted()
        #expect(names.contains(".granary-repository"))
        let archives = names.filter { $0.hasPrefix("alice@example.com/") && $0.hasSuffix(".tar.zst") }
        #expect(archives.count == 1, "\(names)")
        let archive = try #require(archives.first)

        let list = try granary(["list", "--json"], repo: repo)
        outputs.append(list)
        #expect(list.status == 0)
        #expect(list.stdout.contains("\"verified\" : \"unverified\""), "\(list.stdout)")
        let verify = try granary(["verify", "--all", "-v"], repo: repo)
        outputs.append(verify)
        #expect(verify.status == 0, "\(verify.stderr)")
        // The record is a sidecar object beside the archive, and list reads it back.
        #expect(
            try objects("granary").keys.contains(
                "alice@example.com/." + (archive as NSString).lastPathComponent + ".verify.json"))
        let listed = try granary(["list"], repo: repo)
        outputs.append(listed)
        #expect(listed.stdout.contains("verified "), "\(listed.stdout)")
        let check = try granary(["check", "alice@example.com"], repo: repo)
        outputs.append(check)
        #expect(check.status == 0, "\(check.stdout)\(check.stderr)")

        let inspect = try granary(["inspect", archive], repo: repo)
        outputs.append(inspect)
        #expect(inspect.status == 0, "\(inspect.stderr)")
        #expect(inspect.stdout.contains("notes"), "\(inspect.stdout)")

        let drill = folder.child("drill")
        let restore = try granary(["restore", "alice@example.com", "--to", drill], repo: repo)
        outputs.append(restore)
        #expect(restore.status == 0, "\(restore.stderr)")
        #expect(
            try RestoreFixtures.dump(drill + "/Local.sqlite")
                == RestoreFixtures.dump(root + "/alice@example.com/Local.sqlite"))

        // A second backup, then prune keeps one and delete refuses the last verified one.
        #expect(try granary(["backup", "alice@example.com"], repo: repo).status == 0)
        let prune = try granary(["prune", "alice@example.com", "--keep-last", "1", "--dry-run"], repo: repo)
        outputs.append(prune)
        #expect(
            prune.stdout.contains("keep 2, remove 0"),
            "the newest verified archive is kept besides the newest: \(prune.stdout)")
        let delete = try granary(["delete", archive], repo: repo)
        outputs.append(delete)
        #expect(delete.status == 64, "the newest verified archive is refused: \(delete.stderr)")
        let forced = try granary(["delete", archive, "--force"], repo: repo)
        #expect(forced.status == 0, "\(forced.stderr)")
        let left = try objects("granary").keys.filter { $0.hasPrefix("alice@example.com/") && !$0.contains(".host=") }
        // Left: the other archive and the record its backup wrote; nothing of the deleted one.
        let deleted = (archive as NSString).lastPathComponent
        #expect(
            left.filter { !$0.hasSuffix(".verify.json") }.count == 1 && !left.contains { $0.contains(deleted) },
            "the archive and its record are gone: \(left)")
        let config = try granary(["config"], repo: repo)
        outputs.append(config)
        noSecrets(outputs)
    }

    @Test("a missing rclone: a remote repository exits 64 saying to install rclone; a local repository never needs it")
    func rcloneMissing() throws {
        _ = try makeUser("alice@example.com", megabytes: 0)
        let missing = ["GRANARY_TEST_RCLONE_FOLDER": folder.child("no-rclone")]
        let remote = try granary(["backup", "alice@example.com"], repo: "s3:\(bucket)/x", environment: missing)
        #expect(remote.status == 64)
        #expect(remote.stderr.contains("remote repositories need rclone"), "\(remote.stderr)")
        #expect(remote.stderr.contains("Try: apt-get install rclone"), "\(remote.stderr)")
        let local = try granary(
            ["backup", "alice@example.com"], repo: initializedRepository(folder.child("repo")), environment: missing)
        #expect(local.status == 0, "\(local.stderr)")
    }

    @Test(
        "locations granary cannot use are refused with a usage error: no bucket, a connection string with parameters, a local path through rclone"
    )
    func badLocations() throws {
        for location in [
            "s3:", "s3:/x", "rclone::s3,access_key_id=AKIA:bucket", "rclone:/var/backups", "rclone::local:/tmp/x",
        ] {
            let result = try granary(["list"], repo: location)
            #expect(result.status == 64, "\(location): \(result.status) \(result.stderr)")
            #expect(result.stderr.contains("cannot use the repository location"), "\(location): \(result.stderr)")
            #expect(!result.stderr.contains("AKIA:"), "a parameter is not echoed back whole")
        }
    }

    @Test("credentials never reach a command line: every process granary starts has neither key in its argument vector")
    func credentialsOffTheCommandLine() throws {
        _ = try makeUser("alice@example.com", megabytes: 2)
        let proxy = try FaultProxy(upstream: server.port)
        proxy.mode = .delay(milliseconds: 40)
        let repo = initializedRepository("s3:\(bucket)/argv", environment: server.environment())
        var env = server.environment(endpointPort: proxy.port)
        env["RCLONE_TIMEOUT"] = "60s"
        let process = Process()
        process.executableURL = URL(fileURLWithPath: GranaryProcess.binDirectory + "/granary")
        process.arguments = ["backup", "alice@example.com", "--root", root, "--repo", repo]
        process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("GRANARY_") }.merging(env)
        { $1 }
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        var seen = 0
        while process.isRunning {
            for pid in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] where Int32(pid) != nil {
                guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline"), !data.isEmpty else {
                    continue
                }
                let argv = String(decoding: data, as: UTF8.self).replacingOccurrences(of: "\0", with: " ")
                guard argv.contains("rclone") || argv.contains("granary") else { continue }
                if argv.contains("rclone") { seen += 1 }
                #expect(
                    !argv.contains(S3Server.secretKey) && !argv.contains(S3Server.accessKey),
                    "a key on a command line: \(argv)")
            }
            usleep(20_000)
        }
        #expect(process.terminationStatus == 0)
        #expect(seen > 0, "rclone was seen running")
    }

    @Test(
        "a crypt remote over the bucket: every command works, and no object on the server holds an archive's bytes, a store's data or a user's name in clear"
    )
    func cryptRemote() throws {
        let marker = "granary-plaintext-canary-7f3a"
        _ = try makeUser("alice@example.com", megabytes: 0, marker: marker)
        let obscured = try GranaryProcess.runExecutable(S3Server.rclone!, ["obscure", "correct horse battery staple"])
        let config = folder.child("rclone.conf")
        try """
        [moto]
        type = s3
        provider = Other
        env_auth = true
        endpoint = \(server.endpoint)
        no_check_bucket = true
        no_head = true

        [secret]
        type = crypt
        remote = moto:\(bucket)/vault
        password = \(obscured.stdout.trimmingCharacters(in: .whitespacesAndNewlines))

        """.write(toFile: config, atomically: true, encoding: .utf8)
        chmod(config, 0o600)
        let env = ["RCLONE_CONFIG": config, "AWS_CA_BUNDLE": ""]
        let repo = initializedRepository(
            "rclone:secret:granary", environment: server.environment().merging(env) { $1 })
        // Uncompressed, so that the store's bytes would be in the archive as they are.
        let backup = try granary(
            ["backup", "alice@example.com", "--compression", "none"], repo: repo, environment: env)
        #expect(backup.status == 0, "\(backup.stderr)")
        let list = try granary(["list"], repo: repo, environment: env)
        #expect(list.stdout.contains("alice@example.com") && list.stdout.contains(".tar "), "\(list.stdout)")
        #expect(try granary(["verify", "--all"], repo: repo, environment: env).status == 0)
        let drill = folder.child("drill")
        #expect(try granary(["restore", "alice@example.com", "--to", drill], repo: repo, environment: env).status == 0)
        #expect(try RestoreFixtures.dump(drill + "/Local.sqlite").contains(marker))

        let raw = try objects("vault")
        #expect(raw.count >= 3, "the marker, the archive and its record: \(raw)")
        for (name, _) in raw {
            #expect(
                !name.contains("alice") && !name.contains(".tar") && !name.contains("granary"),
                "a name in clear: \(name)")
            let bytes = try server.read(bucket + "/vault/" + name, scratch: folder.child("raw"))
            for clear in [marker, "SQLite format 3", "MANIFEST.json", "alice@example.com"] {
                #expect(bytes.range(of: Data(clear.utf8)) == nil, "\(name) holds \(clear) in clear")
            }
        }
    }

    // MARK: Faults

    /// Runs a backup through `proxy` in `mode`; it must fail with 74 or 75 and leave nothing
    /// `list` shows; then the same backup through a healthy proxy succeeds.
    func backupFailsCleanly(
        _ mode: FaultProxy.Mode, megabytes: Int = 2, environment: [String: String] = [:],
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        _ = try makeUser("alice@example.com", megabytes: megabytes)
        let proxy = try FaultProxy(upstream: server.port)
        let repo = initializedRepository("s3:\(bucket)/faults", environment: server.environment())
        // The repository exists first (its marker), so that the fault hits the archive's upload.
        #expect(
            try granary(["backup", "alice@example.com", "--compression", "none"], repo: repo, proxy: proxy).status == 0)
        let before = try objects("faults").keys.filter { $0.hasSuffix(".tar") }
        proxy.mode = mode
        let failed = try granary(
            ["backup", "alice@example.com", "--compression", "none"], repo: repo, environment: environment, proxy: proxy
        )
        #expect(
            [74, 75].contains(failed.status), "exit \(failed.status): \(failed.stderr)", sourceLocation: sourceLocation)
        #expect(failed.stderr.contains("granary:"), "\(failed.stderr)", sourceLocation: sourceLocation)
        noSecrets([failed], sourceLocation: sourceLocation)
        proxy.mode = .pass
        #expect(
            try objects("faults").keys.filter { $0.hasSuffix(".tar") } == before, "no partial archive",
            sourceLocation: sourceLocation)
        let list = try granary(["list", "--json"], repo: repo, proxy: proxy)
        #expect(listedArchives(list.stdout) == before.count, "\(list.stdout)", sourceLocation: sourceLocation)
        let again = try granary(["backup", "alice@example.com", "--compression", "none"], repo: repo, proxy: proxy)
        #expect(again.status == 0, "the next run succeeds: \(again.stderr)", sourceLocation: sourceLocation)
        #expect(
            try granary(["verify", "--user", "alice@example.com"], repo: repo, proxy: proxy).status == 0,
            sourceLocation: sourceLocation)
    }

    @Test("a connection cut in the middle of an upload: exit 74/75, no partial archive, the next run succeeds")
    func cutUpload() throws { try backupFailsCleanly(.cutUpload(after: 256 * 1024)) }

    @Test(
        "a connection cut in the middle of a multipart upload: exit 74/75, the parts never show as an archive, the next run succeeds"
    )
    func cutMultipartUpload() throws {
        try backupFailsCleanly(
            .cutUpload(after: 7 << 19), megabytes: 12,
            environment: [
                "RCLONE_S3_UPLOAD_CUTOFF": "5M", "RCLONE_S3_CHUNK_SIZE": "5M", "RCLONE_S3_UPLOAD_CONCURRENCY": "1",
            ])
    }

    @Test("a server answering 503 to everything: exit 75 (cron may retry), nothing written, the next run succeeds")
    func serviceUnavailable() throws { try backupFailsCleanly(.status(503)) }

    @Test("a server answering 500 to everything: exit 74/75, nothing written, the next run succeeds")
    func internalError() throws { try backupFailsCleanly(.status(500)) }

    @Test("a server slower than rclone's timeout: exit 74/75, nothing written, the next run succeeds")
    func slowServer() throws {
        try backupFailsCleanly(.delay(milliseconds: 2500), megabytes: 0, environment: ["RCLONE_TIMEOUT": "1s"])
    }

    @Test("a delay under the timeout only slows the backup down")
    func delayedServer() throws {
        _ = try makeUser("alice@example.com")
        let proxy = try FaultProxy(upstream: server.port)
        proxy.mode = .delay(milliseconds: 30)
        #expect(
            try granary(
                ["backup", "alice@example.com"],
                repo: initializedRepository("s3:\(bucket)/slow", environment: server.environment()), proxy: proxy
            ).status == 0)
    }

    @Test(
        "a download cut during verify and restore: exit 74/75, verify records nothing (the archive is not called bad), nothing live changes"
    )
    func cutDownload() throws {
        let store = try makeUser("alice@example.com", megabytes: 2)
        let proxy = try FaultProxy(upstream: server.port)
        let repo = initializedRepository("s3:\(bucket)/down", environment: server.environment())
        #expect(
            try granary(["backup", "alice@example.com", "--compression", "none"], repo: repo, proxy: proxy).status == 0)
        proxy.mode = .cutDownload(after: 512 * 1024)
        let verify = try granary(["verify", "--all"], repo: repo, proxy: proxy)
        #expect([74, 75].contains(verify.status), "exit \(verify.status): \(verify.stderr)")
        #expect(!verify.stderr.contains("damaged"), "a cut download is not a damaged archive: \(verify.stderr)")
        let before = try RestoreFixtures.sha256(store)
        let restore = try granary(["restore", "alice@example.com"], repo: repo, proxy: proxy)
        #expect([74, 75].contains(restore.status), "exit \(restore.status): \(restore.stderr)")
        #expect(try RestoreFixtures.sha256(store) == before)
        proxy.mode = .pass
        // The only record is the backup's own (its check), which list does not call verified.
        let list = try granary(["list"], repo: repo, proxy: proxy)
        #expect(list.status == 0 && list.stdout.contains("unverified"), "\(list.stdout)")
        #expect(!list.stdout.contains(" bad"), "verify recorded the cut download as bad: \(list.stdout)")
        #expect(try granary(["verify", "--all"], repo: repo, proxy: proxy).status == 0)
    }

    @Test(
        "the server killed during an upload: exit 74/75; after it is back, the next run succeeds and lists only whole archives"
    )
    func serverKilled() throws {
        _ = try makeUser("alice@example.com", megabytes: 3)
        let own = try S3Server(log: folder.child("moto.log"))
        try own.makeBucket(bucket)
        let proxy = try FaultProxy(upstream: own.port)
        let repo = initializedRepository("s3:\(bucket)/killed", environment: own.environment())
        var env = own.environment(endpointPort: proxy.port)
        env["RCLONE_CONTIMEOUT"] = "2s"
        #expect(
            try GranaryProcess.run(
                ["backup", "alice@example.com", "--root", root, "--repo", repo, "--compression", "none"],
                environment: env
            ).status == 0)
        proxy.mode = .callback(after: 512 * 1024) { own.kill() }
        let failed = try GranaryProcess.run(
            ["backup", "alice@example.com", "--root", root, "--repo", repo, "--compression", "none"], environment: env)
        #expect([74, 75].contains(failed.status), "exit \(failed.status): \(failed.stderr)")
        proxy.mode = .pass
        try own.start()
        try own.makeBucket(bucket)
        // The restarted server holds nothing: the repository is made again, as an admin would.
        #expect(try GranaryProcess.run(["init", repo], environment: own.environment()).status == 0)
        let again = try GranaryProcess.run(
            ["backup", "alice@example.com", "--root", root, "--repo", repo, "--compression", "none"], environment: env)
        #expect(again.status == 0, "\(again.stderr)")
        let list = try GranaryProcess.run(["list", "--json", "--root", root, "--repo", repo], environment: env)
        #expect(list.status == 0)
        #expect(listedArchives(list.stdout) == 1, "\(list.stdout)")
        #expect(
            try GranaryProcess.run(["verify", "--all", "--root", root, "--repo", repo], environment: env).status == 0)
    }
}

/// How many archives a `list --json` document lists (-1 when it is not one).
private func listedArchives(_ document: String) -> Int {
    ((try? JSONSerialization.jsonObject(with: Data(document.utf8))) as? [String: Any]).flatMap {
        $0["archives"] as? [Any]
    }?.count ?? -1
}
