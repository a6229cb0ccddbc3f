import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// What root inherits: `sudo -E` passes a user's environment to a root granary. Nothing in it may
/// choose a program for root to run, nor root's configuration, repository or root folder.
@Suite(
    "what root inherits", .serialized,
    .enabled(if: geteuid() == 0, "these tests run granary as root over an unprivileged user's files"))
struct RootEnvironmentTests {
    let folder = TemporaryFolder("granary-environment")

    /// An unprivileged account for these tests (created once).
    static let account: (uid: uid_t, gid: gid_t) = {
        let name = "granary-env"
        if getpwnam(name) == nil {
            _ = try? GranaryProcess.runExecutable("/usr/sbin/useradd", ["-M", "-s", "/usr/sbin/nologin", name])
        }
        let entry = getpwnam(name)!.pointee
        return (entry.pw_uid, entry.pw_gid)
    }()

    /// A program that records that it ran, and as whom.
    func canary() throws -> (program: String, witness: String) {
        let program = folder.child("canary.sh"), witness = folder.child("witness/canary.ran")
        try FileSystem.makeDirectory(folder.child("witness"), mode: 0o1777)
        try Data("#!/bin/sh\nid > \(witness)\n".utf8).write(to: URL(fileURLWithPath: program))
        chmod(program, 0o755)
        chmod(folder.path, 0o755)
        return (program, witness)
    }

    @Test("as root, SWIFT_BACKTRACE from the environment cannot make a crash run a program")
    func crashHandlerScrubbed() throws {
        let (program, witness) = try canary()
        let environment = [
            "SWIFT_BACKTRACE": "enable=yes,interactive=no,swift-backtrace=" + program, "GRANARY_TEST_CRASH": "1",
        ]
        // The control: an unprivileged granary (a copy it may run) does run the canary on a crash,
        // so the witness below would appear if root's did.
        let copy = folder.child("granary")
        try FileManager.default.copyItem(atPath: GranaryProcess.binDirectory + "/granary", toPath: copy)
        let (uid, gid) = Self.account
        _ = try GranaryProcess.runExecutable(
            "/usr/bin/setpriv", ["--reuid=\(uid)", "--regid=\(gid)", "--clear-groups", copy, "users"],
            environment: environment)
        #expect(
            FileManager.default.fileExists(atPath: witness),
            "the control run did not start the canary: the test proves nothing")
        try? FileSystem.removeFile(witness)
        let result = try GranaryProcess.run(["users"], environment: environment)
        #expect(result.status != 0)
        #expect(!FileManager.default.fileExists(atPath: witness), "root ran the program SWIFT_BACKTRACE named")
    }

    @Test("as root under sudo, a configuration, root or repository the user controls is not used")
    func userConfigurationIgnored() throws {
        let (uid, gid) = Self.account
        let home = folder.child("home")
        try FileSystem.makeDirectory(home + "/.config/granary", mode: 0o755)
        let victimRoot = folder.child("root")
        try GranaryProcess.run([victimRoot], tool: "granary-sample")
        let evilRepo = home + "/repo"
        try FileSystem.makeDirectory(evilRepo + "/alice@example.com", mode: 0o755)
        try Data("granary repository 1\n".utf8).write(to: URL(fileURLWithPath: evilRepo + "/.granary-repository"))
        try Data("repo = \"\(evilRepo)\"\nroot = \"\(victimRoot)\"\n".utf8).write(
            to: URL(fileURLWithPath: home + "/.config/granary/config.toml"))
        for path in [
            home, home + "/.config", home + "/.config/granary", home + "/.config/granary/config.toml", evilRepo,
            evilRepo + "/alice@example.com", evilRepo + "/.granary-repository",
        ] {
            chown(path, uid, gid)
        }
        // What `sudo -E granary …` hands root: the user's HOME and XDG_CONFIG_HOME, and SUDO_USER.
        let sudo = ["SUDO_USER": "granary-env", "HOME": home, "XDG_CONFIG_HOME": home + "/.config"]
        // Before: root read that file, took its repository and restored from it.
        let users = try GranaryProcess.run(["users"], environment: sudo)
        #expect(users.status == 64, "\(users.stdout) \(users.stderr)")
        #expect(users.stderr.contains("no root is set"), "\(users.stderr)")
        // Named explicitly, it is refused: root reads only root's configuration files.
        let explicit = try GranaryProcess.run(
            ["users", "--config", home + "/.config/granary/config.toml"], environment: sudo)
        #expect(explicit.status == 64, "\(explicit.stderr)")
        #expect(explicit.stderr.contains("belongs to uid \(uid)"), "\(explicit.stderr)")
        // The same file as root's own (no sudo): when it is not root's, it is ignored with a message.
        let notSudo = try GranaryProcess.run(
            ["users"], environment: ["HOME": home, "XDG_CONFIG_HOME": home + "/.config"])
        #expect(notSudo.stderr.contains("ignoring the configuration file"), "\(notSudo.stderr)")
        // Variables the user set: where the repository came from is said, and a repository the user
        // owns is refused.
        let restore = try GranaryProcess.run(
            ["restore", "alice@example.com", "--root", victimRoot],
            environment: sudo.merging(["GRANARY_REPO": evilRepo]) { $1 })
        #expect(restore.stderr.contains("comes from GRANARY_REPO"), "\(restore.stderr)")
        #expect(restore.status == 73, "\(restore.stderr)")
        #expect(restore.stderr.contains("belongs to uid \(uid)"), "\(restore.stderr)")
    }

    @Test("the re-exec that drops SWIFT_BACKTRACE keeps the argument bytes that are not UTF-8")
    func reexecKeepsArgumentBytes() throws {
        // Before: the re-exec passed CommandLine.arguments, which had turned 0xFF into U+FFFD: the
        // re-executed granary looked for a root named "r\u{FFFD}" (a valid UTF-8 path: exit 66,
        // "no such folder") instead of refusing the path it was given (64, "not UTF-8").
        let odd = folder.child("odd")
        try FileSystem.makeDirectory(odd)
        // The shell makes the bytes: a Swift string cannot carry 0xFF as itself.
        let words = [
            "backup", "--root", "\"$(printf '%s/r\\377' \"$1\")\"", "--repo", "\"$1/repo\"", "alice@example.com",
        ]
        for environment in [[:], ["SWIFT_BACKTRACE": "enable=yes,interactive=no"]] {
            let result = try GranaryProcess.runExecutable(
                "/bin/sh",
                ["-c", "exec \"$0\" " + words.joined(separator: " "), GranaryProcess.binDirectory + "/granary", odd],
                environment: environment)
            #expect(result.status == 64, "\(environment): \(result.stderr)")
            #expect(
                result.stderr.contains("--root") && result.stderr.contains("not UTF-8"),
                "\(environment): \(result.stderr)")
            #expect(!result.stderr.contains("\u{FFFD}"), "\(environment): \(result.stderr)")
        }
    }

    @Test("a real sudo -E keeps the same rules")
    func realSudo() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/sudo") else {
            Issue.record("sudo is not installed (make deps installs it)")
            return
        }
        let home = folder.child("sudo-home")
        try FileSystem.makeDirectory(home + "/.config/granary", mode: 0o755)
        try Data("root = \"/nonexistent\"\n".utf8).write(
            to: URL(fileURLWithPath: home + "/.config/granary/config.toml"))
        chown(home + "/.config/granary/config.toml", Self.account.uid, Self.account.gid)
        let result = try GranaryProcess.runExecutable(
            "/usr/bin/sudo", ["-E", GranaryProcess.binDirectory + "/granary", "users"],
            environment: ["XDG_CONFIG_HOME": home + "/.config"])
        // sudo sets SUDO_USER: the user's configuration is not even looked at.
        #expect(!result.stderr.contains("/nonexistent"), "\(result.stderr)")
        #expect(result.stderr.contains("no root is set"), "\(result.stderr)")
    }
}
