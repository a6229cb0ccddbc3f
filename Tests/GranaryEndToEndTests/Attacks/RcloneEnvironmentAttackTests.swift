import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `sudo` for the attacker, as an administrator may grant it: granary, and nothing else, with
/// the caller's environment kept (`SETENV`, what `sudo -E` needs).
enum SudoGrant {
    static let file = "/etc/sudoers.d/granary-attack-lab"

    /// Writes the grant (checked with visudo) once per test process.
    static func ensure(_ user: LabUser) throws {
        try lock.withLock {
            if done { return }
            let rule = "\(user.name) ALL=(root) NOPASSWD:SETENV: \(GranaryProcess.binDirectory)/granary\n"
            let staged = file + ".new"
            try Data(rule.utf8).write(to: URL(fileURLWithPath: staged))
            chmod(staged, 0o440)
            let check = try GranaryProcess.runExecutable("/usr/sbin/visudo", ["-cf", staged])
            guard check.status == 0 else {
                unlink(staged)
                throw LabError.setup("visudo refused the test grant: \(check.stdout) \(check.stderr)")
            }
            rename(staged, file)
            done = true
        }
    }
    nonisolated(unsafe) private static var done = false
    private static let lock = NSLock()

    static var available: Bool { access("/usr/bin/sudo", X_OK) == 0 && access("/usr/sbin/visudo", X_OK) == 0 }
}

extension Lab {
    /// Runs `sudo -E granary ARGUMENTS` as the attacker with `environment` added to theirs.
    func sudoGranary(_ arguments: [String], environment: [String: String], timeout: Double = 120) throws -> Outcome {
        try SudoGrant.ensure(attacker)
        let variables = environment.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        return try Spawned(
            "/usr/bin/setpriv",
            attacker.setpriv + ["/usr/bin/env"] + variables + [
                "/usr/bin/sudo", "-n", "-E", GranaryProcess.binDirectory + "/granary",
            ] + arguments + ["--root", root, "--repo", repo]
        ).wait(timeout: timeout)
    }

    /// A root-owned file (and folder) the attacker cannot change: granary's configuration.
    func rootFile(_ name: String, _ text: String, mode: mode_t = 0o644) throws -> String {
        try Self.makeFolder(base + "/conf", mode: 0o755)
        try Self.write(base + "/conf/" + name, text, mode: mode)
        return base + "/conf/" + name
    }

    /// Every regular file under `path`.
    static func files(under path: String) -> [String] {
        var found: [String] = []
        func walk(_ full: String) {
            guard let info = FileSystem.status(full) else { return }
            if info.st_mode & S_IFMT == S_IFDIR {
                for name in FileSystem.contents(of: full) { walk(full + "/" + name) }
            } else {
                found.append(full)
            }
        }
        walk(path)
        return found
    }
}

extension AttackTests {
    /// Class 11: root's rclone and the environment a sudo user hands it (`sudo -E`, or sudoers'
    /// SETENV). rclone takes whole remotes, a remote-control server and, through the AWS client,
    /// commands to run from its environment; root's rclone must get only what root chose.
    @Suite(
        "11. rclone's environment under sudo -E",
        .enabled(if: SudoGrant.available, "sudo and visudo are needed (make deps installs sudo)"))
    struct RcloneEnvironment {
        @Test("RCLONE_CONFIG_<MIRROR>_TYPE=alias does not redirect the mirror's archives into the user's folder")
        func aliasRedirect() throws {
            let lab = try Lab()
            let loot = lab.attackerHome + "/loot"
            try Lab.makeFolder(loot, mode: 0o755)
            Lab.chownTree(loot, to: lab.attacker)
            let config = try lab.rootFile("alias.toml", "[[mirror]]\nrepo = \"rclone:offsite:granary\"\n")
            let outcome = try lab.sudoGranary(
                ["backup", "--all", "--config", config],
                environment: ["RCLONE_CONFIG_OFFSITE_TYPE": "alias", "RCLONE_CONFIG_OFFSITE_REMOTE": loot])
            Lab.expectDocumented(outcome, "sudo -E backup with an alias remote in the environment")
            // Before: every user's archive was copied into the attacker's folder (root's, 0644).
            let stolen = Lab.files(under: loot)
            #expect(stolen.isEmpty, "archives landed in the attacker's folder: \(stolen) \(outcome)")
            #expect(
                outcome.stderr.contains("RCLONE_CONFIG_OFFSITE_TYPE"),
                "the ignored variables are not named: \(outcome)")
            // The local repository still has the victim's archive: the mirror's failure loses nothing.
            #expect(FileSystem.contents(of: lab.repo + "/victim").contains { $0.hasSuffix(".tar.zst") }, "\(outcome)")
        }

        @Test("RCLONE_RC=true RCLONE_RC_NO_AUTH=true starts no remote-control server as root")
        func remoteControl() throws {
            let lab = try Lab()
            // A port the test holds: an rclone that tries to serve its remote control there fails
            // to start ("address already in use"), which is how an attempt is seen for certain.
            let held = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(held) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(held, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            try #require(bound == 0 && listen(held, 1) == 0)
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = getsockname(held, $0, &length) }
            }
            let port = Int(UInt16(bigEndian: address.sin_port))
            let config = try lab.rootFile("rc.toml", "[[mirror]]\nrepo = \"rclone:offsite:granary\"\n")
            let outcome = try lab.sudoGranary(
                ["backup", "--all", "--config", config],
                environment: [
                    "RCLONE_RC": "true", "RCLONE_RC_NO_AUTH": "true", "RCLONE_RC_ADDR": "127.0.0.1:\(port)",
                    "RCLONE_RC_SERVE": "true",
                ])
            Lab.expectDocumented(outcome, "sudo -E backup with RCLONE_RC")
            #expect(outcome.stderr.contains("RCLONE_RC_NO_AUTH"), "the ignored variables are not named: \(outcome)")
            #expect(
                !outcome.stderr.contains("remote control") && !outcome.stderr.contains("address already in use"),
                "root's rclone tried to start its remote-control server: \(outcome)")
        }

        @Test("AWS_CONFIG_FILE with a credential_process runs nothing as root")
        func credentialProcess() throws {
            guard let server = RemoteRepositoryTests.shared else {
                Issue.record("moto did not start (make test installs it)")
                return
            }
            let lab = try Lab()
            let bucket = "atk" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
            try server.makeBucket(bucket)
            let pwned = lab.base + "/pwned"
            let tools = lab.attackerHome + "/aws"
            try Lab.makeFolder(tools, mode: 0o755)
            try Lab.write(
                tools + "/creds.sh",
                "#!/bin/sh\nid -u > \(pwned)\necho '{\"Version\": 1, \"AccessKeyId\": \"AKIAPWNED\", \"SecretAccessKey\": \"pwned\"}'\n",
                mode: 0o755)
            try Lab.write(tools + "/config", "[default]\ncredential_process = \(tools)/creds.sh\n", mode: 0o644)
            Lab.chownTree(tools, to: lab.attacker)
            let config = try lab.rootFile("s3.toml", "[[mirror]]\nrepo = \"s3:\(bucket)/granary\"\n")
            let outcome = try lab.sudoGranary(
                ["backup", "--all", "--config", config],
                environment: [
                    "AWS_CONFIG_FILE": tools + "/config", "AWS_ENDPOINT_URL": server.endpoint,
                    "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true", "RCLONE_RETRIES": "1",
                    "RCLONE_LOW_LEVEL_RETRIES": "1", "RCLONE_CONTIMEOUT": "5s",
                ])
            Lab.expectDocumented(outcome, "sudo -E backup with AWS_CONFIG_FILE")
            #expect(outcome.stderr.contains("AWS_CONFIG_FILE"), "the ignored variables are not named: \(outcome)")
            #expect(
                access(pwned, F_OK) != 0,
                "the user's credential_process ran as uid \((try? String(contentsOfFile: pwned, encoding: .utf8)) ?? "?"): \(outcome)"
            )
        }

        @Test(
            "under sudo -E, root's rclone takes its settings from remote_environment only; the caller's endpoint, keys and RCLONE_* are ignored, and an untrusted file is refused"
        )
        func rootsOwnSettings() throws {
            guard let server = RemoteRepositoryTests.shared else {
                Issue.record("moto did not start (make test installs it)")
                return
            }
            let lab = try Lab()
            let bucket = "atk" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
            try server.makeBucket(bucket)
            initializedRepository("s3:\(bucket)/granary", environment: server.environment())
            let environmentFile = try lab.rootFile(
                "remote.env",
                [
                    "# root's settings for rclone", "export AWS_ACCESS_KEY_ID=\(S3Server.accessKey)",
                    "AWS_SECRET_ACCESS_KEY='\(S3Server.secretKey)'", "AWS_REGION=us-east-1",
                    "AWS_ENDPOINT_URL=\(server.endpoint)", "RCLONE_RETRIES=1", "RCLONE_LOW_LEVEL_RETRIES=1",
                ].joined(separator: "\n") + "\n", mode: 0o600)
            let config = try lab.rootFile(
                "own.toml", "remote_environment = \"\(environmentFile)\"\n[[mirror]]\nrepo = \"s3:\(bucket)/granary\"\n"
            )
            let outcome = try lab.sudoGranary(
                ["backup", "--all", "--config", config],
                environment: [
                    "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "AKIAATTACKER",
                    "RCLONE_CONFIG_GRANARYS3_ENDPOINT": "http://127.0.0.1:9",
                ])
            #expect(outcome.status == 0, "\(outcome)")
            let objects = try server.objects(bucket + "/granary")
            #expect(objects.keys.contains { $0.hasPrefix("victim/") }, "\(objects) \(outcome)")
            // The same file writable by the attacker's group: refused, naming it.
            chown(environmentFile, 0, lab.attacker.gid)
            chmod(environmentFile, 0o660)
            let refused = try lab.sudoGranary(["backup", "--all", "--config", config], environment: [:])
            Lab.expectRefused(refused, "a group-writable remote_environment", codes: [64, 1], naming: environmentFile)
        }
    }
}
