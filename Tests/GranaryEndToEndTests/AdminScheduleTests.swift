import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The policy the package schedules: every shipped service's command, in the order its timers
/// run them, with the unit's own environment, capability bounding set and `no_new_privs`
/// (`setpriv`), over users owned by another uid, a `lost+found` and a user with no store yet.
@Suite(
    "the package's schedule: the shipped units' commands run as the units run them", .serialized,
    .enabled(
        if: geteuid() == 0,
        "the schedule test needs root (CI runs make test as root): the units run as root with a bounded set of capabilities"
    ))
struct AdminScheduleTests {
    static let units = GranaryProcess.packageDirectory + "/examples/systemd"

    /// One `[Service]` of the shipped units: what it runs and the sandbox it runs in.
    struct Service {
        let name: String
        let command: [String]
        let environment: [String: String]
        let capabilities: [String]
        let noNewPrivileges: Bool
        let readWritePaths: [String]

        init(_ name: String) throws {
            self.name = name
            let text = try String(contentsOfFile: AdminScheduleTests.units + "/" + name, encoding: .utf8)
            var values: [String: [String]] = [:]
            for line in text.split(separator: "\n") where !line.hasPrefix("#") && line.contains("=") {
                let parts = line.split(separator: "=", maxSplits: 1).map(String.init)
                values[parts[0], default: []].append(parts.count > 1 ? parts[1] : "")
            }
            command = (values["ExecStart"]?.first ?? "").split(separator: " ").map(String.init)
            environment = Dictionary(
                (values["Environment"] ?? []).flatMap { $0.split(separator: " ") }.map {
                    let pair = $0.split(separator: "=", maxSplits: 1).map(String.init)
                    return (pair[0], pair.count > 1 ? pair[1] : "")
                }, uniquingKeysWith: { $1 })
            capabilities = (values["CapabilityBoundingSet"]?.last ?? "").split(separator: " ").map(String.init)
            noNewPrivileges = values["NoNewPrivileges"]?.last == "yes"
            readWritePaths = (values["ReadWritePaths"] ?? []).flatMap { $0.split(separator: " ").map(String.init) }
        }

        /// The command under `setpriv` with the unit's bounding set, the built granary for /usr/bin's.
        func invocation() -> [String] {
            let set =
                "-all,"
                + capabilities.map { "+" + $0.lowercased().replacingOccurrences(of: "cap_", with: "") }
                .joined(separator: ",")
            var words = ["--bounding-set", set, "--inh-caps", "-all"]
            if noNewPrivileges { words.append("--no-new-privs") }
            let program = command[0] == "/usr/bin/granary" ? GranaryProcess.binDirectory + "/granary" : command[0]
            return words + [program] + command.dropFirst()
        }
    }

    @Test(
        "every shipped service is sandboxed: ProtectSystem=strict, PrivateTmp, NoNewPrivileges, a bounded capability set"
    )
    func sandboxed() throws {
        let services = try FileManager.default.contentsOfDirectory(atPath: Self.units).filter {
            $0.hasSuffix(".service")
        }
        #expect(
            Set(services) == [
                "granary-backup.service", "granary-prune.service", "granary-sync.service",
                "granary-verify.service", "granary-check.service", "granary-follow.service",
            ])
        for name in services {
            let text = try String(contentsOfFile: Self.units + "/" + name, encoding: .utf8)
            for setting in [
                "ProtectSystem=strict", "PrivateTmp=yes", "NoNewPrivileges=yes", "ProtectHome=read-only",
                "CacheDirectory=granary", "CacheDirectoryMode=0700",
            ] {
                #expect(text.contains("\n" + setting + "\n"), "\(name) lacks \(setting)")
            }
            let service = try Service(name)
            #expect(service.readWritePaths.contains("-/var/lib/app/users"), "\(name)")
            #expect(!service.capabilities.isEmpty && !service.capabilities.contains("CAP_SYS_ADMIN"), "\(name)")
            #expect(service.command.first == "/usr/bin/granary", "\(name): \(service.command)")
            let timer = Self.units + "/" + name.replacingOccurrences(of: ".service", with: ".timer")
            // follow runs all the time: the one service without a timer.
            #expect(FileSystem.isRegularFile(timer) == (name != "granary-follow.service"), "\(name) and its timer")
        }
        // The places the units may write are those the shipped configuration's examples name.
        let config = try String(
            contentsOfFile: GranaryProcess.packageDirectory + "/examples/config.toml", encoding: .utf8)
        #expect(config.contains("#root = \"/var/lib/app/users\"") && config.contains("#repo = \"/srv/backup/granary\""))
    }

    @Test(
        "granary config --systemd prints the units' drop-in naming the configuration's root, repository and local mirrors"
    )
    func dropIn() throws {
        let folder = TemporaryFolder("granary-drop-in")
        let config = folder.child("config.toml")
        try """
        root = "\(folder.child("users"))"
        repo = "\(folder.child("backup dir"))"

        [[mirror]]
        repo = "\(folder.child("usb"))"

        [[mirror]]
        repo = "s3:acme-backups/granary"
        """.write(toFile: config, atomically: true, encoding: .utf8)
        let result = try GranaryProcess.run(["config", "--systemd", "--config", config])
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(lines.contains("[Service]"), "\(result.stdout)")
        let place = { (name: String) in LocalRepository.resolvedPath(folder.child(name)) }
        #expect(
            lines.contains("ReadWritePaths=\(place("users")) \"\(place("backup dir"))\" \(place("usb"))"),
            "\(result.stdout)")
        #expect(!result.stdout.contains("s3:"))
        // Neither local place is a repository yet: config names each, and the one command to run.
        for name in ["backup dir", "usb"] {
            #expect(
                result.stderr.contains("\(folder.child(name)) is not a granary repository yet: granary init"),
                "\(result.stderr)")
        }
        let json = try GranaryProcess.run(["config", "--systemd", "--json", "--config", config])
        #expect(json.status == 64, "\(json.stderr)")
    }

    @Test(
        "backup, prune, sync, verify and check run as their units run them, silent, over users of another uid, lost+found and a user with no store yet"
    )
    func policy() throws {
        let folder = TemporaryFolder("granary-schedule")
        chmod(folder.path, 0o755)
        let root = folder.child("root"), repo = initializedRepository(folder.child("repo")),
            mirror = initializedRepository(folder.child("mirror"))
        try GranaryProcess.run([root], tool: "granary-sample")
        // The users are another uid's, their files 0600: root reads them through its capabilities.
        let nobody: uid_t = 65534
        for user in try FileManager.default.contentsOfDirectory(atPath: root) {
            let chown = try GranaryProcess.runExecutable(
                "/bin/chown", ["-R", "\(nobody):\(nobody)", root + "/" + user])
            #expect(chown.status == 0, "\(chown.stderr)")
        }
        mkdir(root + "/lost+found", 0o700)
        mkdir(root + "/new@example.com", 0o700)
        chown(root + "/new@example.com", nobody, nobody)
        let config = folder.child("config.toml")
        try """
        root = "\(root)"
        repo = "\(repo)"

        [retention]
        keep_last = 2

        [[mirror]]
        repo = "\(mirror)"
        """.write(toFile: config, atomically: true, encoding: .utf8)
        chmod(config, 0o644)

        let order = [
            "granary-backup.service", "granary-backup.service", "granary-backup.service", "granary-prune.service",
            "granary-sync.service", "granary-verify.service", "granary-check.service",
        ]
        for name in order {
            let service = try Service(name)
            var environment = service.environment
            #expect(environment["GRANARY_CONFIG"] == "/etc/granary/config.toml", "\(name)")
            environment["GRANARY_CONFIG"] = config
            let result = try GranaryProcess.runExecutable(
                "/usr/bin/setpriv", service.invocation(), environment: environment)
            #expect(result.status == 0, "\(name): \(service.command): \(result.stderr)")
            #expect(
                result.stdout.isEmpty && result.stderr.isEmpty,
                "\(name) is not silent: \(result.stdout)\(result.stderr)")
        }
        // Prune kept two archives per user; sync removed the others from the mirror too.
        let users = try GranaryProcess.run(["list", "--json", "--config", config])
        #expect(users.status == 0, "\(users.stderr)")
        for user in try FileManager.default.contentsOfDirectory(atPath: repo) where !user.hasPrefix(".") {
            let archives = try FileManager.default.contentsOfDirectory(atPath: repo + "/" + user)
                .filter { !$0.hasPrefix(".") }
            let mirrored = try FileManager.default.contentsOfDirectory(atPath: mirror + "/" + user)
                .filter { !$0.hasPrefix(".") }
            #expect(archives.count == 2, "\(user): \(archives)")
            #expect(Set(mirrored) == Set(archives), "\(user): the mirror holds \(mirrored), the repository \(archives)")
        }
        // Neither lost+found nor the user with no store yet has a folder in the repository.
        #expect(!FileManager.default.fileExists(atPath: repo + "/lost+found"))
        #expect(!FileManager.default.fileExists(atPath: repo + "/new@example.com"))
    }
}
