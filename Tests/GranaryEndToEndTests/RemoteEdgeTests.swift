import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A download cut and resumed, remotes named wrong, a wrong crypt password, the modes of a local
/// rclone mirror, and granary killed during a multipart upload.
@Suite(
    "remotes: a cut download, wrong places, a wrong crypt password, modes, a killed upload", .serialized,
    .enabled(if: S3Server.available, S3Server.unavailableReason))
struct RemoteEdgeTests: HostsSuite {
    let folder = TemporaryFolder("granary-hosts")
    let bucket: String
    let server: S3Server

    init() throws {
        (server, bucket) = try RemoteRepositoryTests.serverAndBucket("h")
        try FileSystem.makeDirectory(root)
    }

    @Test("a download cut twice is resumed where it stopped: verify and restore --to succeed")
    func downloadsResume() throws {
        let store = try makeUser("alice@example.com", marker: "resumed")
        let db = try Database(path: store, mode: .readWrite)
        try db.execute("CREATE TABLE blobs(body BLOB)")
        try db.execute(
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 512) INSERT INTO blobs(body) SELECT randomblob(4096) FROM c"
        )
        let repo = initializedRepository("s3:\(bucket)/resume", environment: server.environment())
        try writeConfig(repo: repo, extra: "[remote]\nretries = 8\n")
        let proxy = try FaultProxy(upstream: server.port)
        #expect(
            try granary(
                ["backup", "alice@example.com", "--compression", "none"], environment: ownLimits(port: proxy.port)
            ).status == 0)
        // Every connection is cut after 768 KiB: the 2 MiB archive needs three.
        proxy.mode = .cutDownload(after: 768 * 1024)
        let verify = try granary(["verify", "--all"], environment: ownLimits(port: proxy.port))
        #expect(verify.status == 0, "\(verify.stderr)")
        let drill = folder.child("drill")
        let restore = try granary(
            ["restore", "alice@example.com", "--to", drill], environment: ownLimits(port: proxy.port))
        #expect(restore.status == 0, "\(restore.stderr)")
        #expect(try rows(drill + "/Local.sqlite") == ["resumed"])
    }

    // MARK: Wrong places

    @Test("a remote scheme in the wrong case is refused with a did-you-mean, and no local folder appears")
    func wrongCaseScheme() throws {
        try makeUser("alice@example.com", marker: "x")
        try writeConfig(repo: folder.child("unused"))
        let cwd = FileManager.default.currentDirectoryPath
        for (typed, meant) in [("S3:\(bucket)", "s3:\(bucket)"), ("Rclone:x:y", "rclone:x:y")] {
            let backup = try granary(["backup", "alice@example.com"], repo: typed)
            #expect(backup.status == 64, "\(typed): \(backup.stderr)")
            #expect(backup.stderr.contains("did you mean \(meant)"), "\(backup.stderr)")
            #expect(FileSystem.status(cwd + "/" + typed) == nil)
        }
    }

    @Test(
        "a prefix that is an object is refused: init exits 64, backup 66 (no repository), nothing is written beside the object"
    )
    func prefixIsAnObject() throws {
        try makeUser("alice@example.com", marker: "x")
        try writeConfig(repo: folder.child("unused"))
        let file = folder.child("object")
        try Data("an object".utf8).write(to: URL(fileURLWithPath: file))
        #expect(try server.rclone(["copyto", file, "moto:\(bucket)/taken"]).status == 0)
        let made = try granary(["init", "s3:\(bucket)/taken"])
        #expect(made.status == 64, "\(made.stderr)")
        #expect(made.stderr.contains("is an object"), "\(made.stderr)")
        let backup = try granary(["backup", "alice@example.com"], repo: "s3:\(bucket)/taken")
        #expect(backup.status == 66 && backup.stderr.contains("granary init"), "\(backup.stderr)")
        #expect(try server.objects(bucket).keys.sorted() == ["taken"])
    }

    /// An rclone configuration with a crypt remote `secret` over the bucket, with `password`.
    func cryptConfig(_ password: String) throws -> [String: String] {
        let obscured = try GranaryProcess.runExecutable(S3Server.rclone!, ["obscure", password])
        let path = folder.child("rclone-\(password.count).conf")
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

        """.write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o600)
        var environment = server.environment()
        environment["RCLONE_CONFIG"] = path
        environment["AWS_CA_BUNDLE"] = ""
        return environment
    }

    @Test(
        "a wrong crypt password: backup --mirror and backup to the repository stop rather than start a second repository, and list, verify, restore and check name the password"
    )
    func wrongCryptPassword() throws {
        try makeUser("alice@example.com", marker: "x")
        let repo = "rclone:secret:granary"
        try writeConfig(repo: initializedRepository(folder.child("repo")))
        let right = try cryptConfig("correct horse battery staple")
        initializedRepository(repo, environment: right)
        #expect(try granary(["backup", "alice@example.com"], repo: repo, environment: right).status == 0)
        let stored = try server.objects(bucket + "/vault")
        let wrong = try cryptConfig("wrong password")
        let backup = try granary(["backup", "alice@example.com"], repo: repo, environment: wrong)
        #expect(backup.status == 64, "\(backup.stderr)")
        #expect(backup.stderr.contains("password"), "\(backup.stderr)")
        let mirrored = try granary(["backup", "alice@example.com", "--mirror", repo, "--json"], environment: wrong)
        #expect(mirrored.status == 1, "\(mirrored.stderr)")
        #expect(mirrored.stdout.contains("password"), "\(mirrored.stdout)")
        #expect(try server.objects(bucket + "/vault") == stored, "nothing was written beside the repository")
        // Every command that reads says it is the password, not "no repository" or a missing archive.
        for command in [["list"], ["verify", "--all"], ["restore", "alice@example.com", "--dry-run"]] {
            let read = try granary(command, repo: repo, environment: wrong)
            #expect(read.status == 64 && read.stderr.contains("password"), "\(command[0]): \(read.stderr)")
        }
        #expect(try granary(["backup", "alice@example.com"], environment: right).status == 0)
        let check = try granary(["check", "alice@example.com", "--mirror", repo], environment: wrong)
        #expect(check.status == 1 && check.stdout.contains("password"), "\(check.stdout)\(check.stderr)")
    }

    // MARK: Tidy and private

    @Test(
        "an rclone local-folder mirror: archives 0600, folders 0700; a mirror folder open to everyone is refused like a local repository"
    )
    func localRemoteModes() throws {
        try makeUser("alice@example.com", marker: "x")
        let rcloneConfig = folder.child("local-rclone.conf")
        try "[usb]\ntype = local\n".write(toFile: rcloneConfig, atomically: true, encoding: .utf8)
        chmod(rcloneConfig, 0o600)
        var environment = server.environment()
        environment["RCLONE_CONFIG"] = rcloneConfig
        let target = folder.child("usb")
        let old = umask(0o022)
        defer { umask(old) }
        try writeConfig(
            repo: initializedRepository(folder.child("repo")),
            mirror: initializedRepository("rclone:usb:\(target)", environment: environment))
        let backup = try granary(["backup", "alice@example.com"], environment: environment)
        #expect(backup.status == 0, "\(backup.stderr)")
        var found = 0
        for name in FileManager.default.subpaths(atPath: target) ?? [] {
            guard let info = FileSystem.status(target + "/" + name) else { continue }
            let mode = info.st_mode & 0o777
            if (info.st_mode & S_IFMT) == S_IFDIR {
                #expect(mode == 0o700, "\(name): \(String(mode, radix: 8))")
            } else {
                #expect(mode == 0o600, "\(name): \(String(mode, radix: 8))")
                found += 1
            }
        }
        #expect(found >= 2, "the marker and the archive are there")
        chmod(target, 0o777)
        let refused = try granary(["backup", "alice@example.com", "--json"], environment: environment)
        #expect(refused.status == 1, "\(refused.stderr)")
        #expect(refused.stdout.contains("writable by everyone"), "\(refused.stdout)")
    }

    @Test(
        "granary killed with SIGKILL during a multipart upload: its rclone dies with it, and the next run removes the unfinished upload; no half archive is listed"
    )
    func killedMultipartUpload() throws {
        let store = try makeUser("alice@example.com", marker: "big")
        let db = try Database(path: store, mode: .readWrite)
        try db.execute("CREATE TABLE blobs(body BLOB)")
        try db.execute(
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3072) INSERT INTO blobs(body) SELECT randomblob(4096) FROM c"
        )
        let repo = initializedRepository("s3:\(bucket)/killed", environment: server.environment())
        try writeConfig(repo: repo)
        let proxy = try FaultProxy(upstream: server.port)
        var environment = server.environment(endpointPort: proxy.port)
        environment["RCLONE_S3_UPLOAD_CUTOFF"] = "5M"
        environment["RCLONE_S3_CHUNK_SIZE"] = "5M"
        environment["RCLONE_S3_UPLOAD_CONCURRENCY"] = "1"
        #expect(try granary(["backup", "alice@example.com"], environment: environment).status == 0)
        // The upload crawls: granary is killed once its first part went up.
        proxy.mode = .delay(milliseconds: 400)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: GranaryProcess.binDirectory + "/granary")
        process.arguments = [
            "backup", "alice@example.com", "--compression", "none", "--root", root, "--config", config,
        ]
        var env = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("GRANARY_") }
        env.merge(environment) { $1 }
        process.environment = env
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        var uploading = false
        for _ in 0..<600 {
            usleep(100_000)
            if Self.processes(mentioning: bucket).count > 0, Self.multipartUploads(server, bucket: bucket) > 0 {
                uploading = true
                break
            }
        }
        #expect(uploading, "the multipart upload started")
        // rclone, told to stop (SIGTERM, granary's death signal for it), aborts its multipart upload
        // on its way out when the server answers: a race with its exit that it sometimes wins (the
        // test then saw no unfinished upload). The server refuses it here, as a host that loses its
        // network or its power would, so that the next run's clean-up is what is tried.
        proxy.mode = .status(503)
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        var gone = false
        for _ in 0..<100 {
            if Self.processes(mentioning: bucket).isEmpty {
                gone = true
                break
            }
            usleep(100_000)
        }
        #expect(gone, "rclone died with granary: \(Self.processes(mentioning: bucket))")
        proxy.mode = .pass
        #expect(Self.multipartUploads(server, bucket: bucket) == 1)
        let next = try granary(["backup", "alice@example.com"], environment: environment)
        #expect(next.status == 0, "\(next.stderr)")
        #expect(Self.multipartUploads(server, bucket: bucket) == 0, "the next run removed the unfinished upload")
        let archives = try server.objects(bucket + "/killed").keys.filter {
            ArchiveName(fileName: String($0.split(separator: "/").last ?? "")) != nil
        }
        #expect(archives.count == 2, "two archives, nothing of the killed one: \(archives)")
        #expect(!(try server.objects(bucket + "/killed")).keys.contains { $0.contains(".host=") }, "no marker objects")
    }
}
