import Foundation
import GranaryKit
import GranaryOwner
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// granary at an admin's prompt: finding one's way, what -v and -q print, locks that say who
/// holds them, archives named by USER/NAME or a prefix.
@Suite("at home in an admin's shell")
struct AdminShellTests {
    final class Fixture: SampleSite {
        init(backup: Bool = true) throws { try super.init(backup: backup ? ["--all"] : []) }
    }

    @Test(
        "granary --help lists the global options and every command; help COMMAND works; the exit codes are in every command's help"
    )
    func help() throws {
        let result = try GranaryProcess.run(["--help"])
        #expect(result.status == 0 && result.stderr.isEmpty)
        for option in [
            "--root <dir>", "--repo <location>", "--config <file>", "--json", "-q, --quiet", "-v, --verbose",
        ] {
            #expect(result.stdout.contains(option), "granary --help lacks \(option)")
        }
        for command in [
            "users", "backup", "list", "verify", "inspect", "check", "delete", "prune", "restore", "reset", "retire",
            "recover", "sync", "follow", "config",
        ] {
            #expect(result.stdout.contains("  \(command) "), "granary --help lacks \(command)")
            let help = try GranaryProcess.run(["help", command])
            #expect(help.status == 0 && help.stdout.contains("USAGE: granary \(command)"), "\(command): \(help.stderr)")
            #expect(help.stdout.contains("GLOBAL OPTIONS"), "\(command) --help lacks the global options")
            // ArgumentParser adds "(values: …)" and "(default: …)": never twice on one option.
            let text = help.stdout.replacingOccurrences(of: "\n ", with: " ")
            #expect(
                !text.contains("(default: ")
                    || text.components(separatedBy: "(default").count - 1 == text.components(separatedBy: "(default: ")
                        .count - 1,
                "\(command): a default not in ArgumentParser's own form")
            for line in help.stdout.split(separator: "\n") {
                #expect(line.components(separatedBy: "(values:").count <= 2, "\(command): \(line)")
            }
        }
        let backup = try GranaryProcess.run(["backup", "--help"]).stdout
        #expect(!backup.contains("skippable") && !backup.contains("SCHED_IDLE"), "internals belong in the man page")
        #expect(!backup.contains("zstd, gzip, xz or none"), "the values are listed once, by ArgumentParser")
        let verify = try GranaryProcess.run(["verify", "--help"]).stdout
        #expect(
            verify.contains("(values: full, quick;") && !verify.contains("none"),
            "verify refuses --check none: \(verify)")
        #expect(try GranaryProcess.run(["restore", "--help"]).stdout.contains("Exit codes:"))
    }

    @Test(
        "usage mistakes exit 64 in granary's one format: bare granary, an unknown command or help topic, -q with -v, a wrong option"
    )
    func usage() throws {
        let bare = try GranaryProcess.run([])
        #expect(
            bare.status == 64 && bare.stderr.contains("SUBCOMMANDS")
                && bare.stderr.contains("granary: no command given"), "\(bare.stderr)")
        let typo = try GranaryProcess.run(["bakup", "--all"])
        #expect(typo.status == 64)
        #expect(
            typo.stderr.hasPrefix("granary: unknown command 'bakup' (did you mean backup?)\nTry: "), "\(typo.stderr)")
        let topic = try GranaryProcess.run(["help", "nonsense"])
        #expect(topic.status == 64 && topic.stderr.contains("unknown command 'nonsense'"), "\(topic.stderr)")
        let both = try GranaryProcess.run(["users", "-q", "-v", "--root", "/tmp"])
        #expect(both.status == 64 && both.stderr.contains("pass -q or -v, not both"), "\(both.stderr)")
        let option = try GranaryProcess.run(["backup", "--al"])
        #expect(option.status == 64)
        #expect(
            option.stderr.hasPrefix("granary: unknown option '--al'")
                && option.stderr.contains("\nTry: granary backup --help\n"), "\(option.stderr)")
        #expect(!option.stderr.contains("Error:") && !option.stderr.contains("Usage:") && option.stdout.isEmpty)
        let missing = try GranaryProcess.run(["restore"])
        #expect(
            missing.status == 64 && missing.stderr.hasPrefix("granary: missing expected argument '<user>'"),
            "\(missing.stderr)")
    }

    @Test(
        "inspect takes USER/NAME and a unique prefix, as verify and delete do; a prefix of several archives is 64 naming them"
    )
    func archiveNames() throws {
        let f = try Fixture()
        let name = f.archives("dave@example.com")[0]
        let stamp = String(name.prefix(16))
        let inspected = try f.granary(["inspect", "dave@example.com/" + name])
        #expect(
            inspected.status == 0 && inspected.stdout.contains("archive ") && inspected.stdout.contains("App.sqlite"),
            "\(inspected.stderr)")
        #expect(try f.granary(["inspect", "dave@example.com/" + stamp]).status == 0)
        // All four users were backed up in the same run: the longest prefix their archives share
        // (the minute's, unless the run crossed into the next minute) matches four archives.
        let names = ["alice", "bob", "carol", "dave"].map { f.archives("\($0)@example.com")[0] }
        let shared = names.dropFirst().reduce(13) { length, other in
            min(length, zip(names[0], other).prefix { $0 == $1 }.count)
        }
        let prefix = String(names[0].prefix(shared))
        for command in [["inspect", prefix], ["verify", prefix], ["delete", "--dry-run", prefix]] {
            let result = try f.granary(command)
            let users = ["alice", "bob", "carol", "dave"].filter { result.stderr.contains("\($0)@example.com/") }
            #expect(result.status == 64, "\(command): \(result.stderr)")
            #expect(
                result.stderr.hasPrefix("granary: ambiguous: \(prefix) matches ") && users.count == 4,
                "\(command): \(result.stderr)")
        }
        let nobody = try f.granary(["list", "nobody@example.com"])
        #expect(nobody.status == 66)
        #expect(
            nobody.stderr.contains(
                "no archives of nobody@example.com in \(f.repo), and no user nobody@example.com under the root"),
            "\(nobody.stderr)")
        #expect(!nobody.stderr.contains("granary users"), "\(nobody.stderr)")
    }

    @Test(
        "prune -v and backup --prune -v list each archive removed and the rules that keep the others; restore -v says more"
    )
    func verbose() throws {
        let f = try Fixture(backup: false)
        for _ in 0..<3 { #expect(try f.granary(["backup", "dave@example.com"]).status == 0) }
        let names = f.archives("dave@example.com")
        let pruned = try f.granary(["prune", "dave@example.com", "--keep-last", "2", "-v"])
        #expect(pruned.status == 0, "\(pruned.stderr)")
        #expect(
            pruned.stdout.contains("removed \(names[0])") || pruned.stdout.contains("removed  \(names[0])"),
            "\(pruned.stdout)")
        #expect(pruned.stdout.contains("kept    \(names[2])") && pruned.stdout.contains("last"), "\(pruned.stdout)")
        #expect(pruned.stderr.isEmpty)
        let quiet = try f.granary(["prune", "dave@example.com", "--keep-last", "2"])
        #expect(quiet.stdout.isEmpty && quiet.stderr.isEmpty, "silent without a terminal or -v")
        let config = f.folder.child("c.toml")
        try "[retention]\nkeep_last = 1\n".write(toFile: config, atomically: true, encoding: .utf8)
        let backup = try f.granary(["backup", "dave@example.com", "--prune", "-v", "--config", config])
        #expect(backup.status == 0, "\(backup.stderr)")
        #expect(
            backup.stdout.contains("pruned: kept 1, removed 2") && backup.stdout.contains("removed ")
                && backup.stdout.contains("kept by no rule"), "\(backup.stdout)")
        let plain = try f.granary(["restore", "dave@example.com"])
        let verbose = try f.granary(["restore", "dave@example.com", "-v"])
        #expect(plain.status == 0 && verbose.status == 0, "\(verbose.stderr)")
        #expect(verbose.stdout.contains("    live   \(f.root)/dave@example.com/Data/App.sqlite"), "\(verbose.stdout)")
        #expect(
            verbose.stdout.contains("    staged ") && verbose.stdout.contains("  archive \(f.repo)/dave@example.com/"),
            "\(verbose.stdout)")
        #expect(!plain.stdout.contains("    live "), "\(plain.stdout)")
    }

    @Test("config shows durations as written and where each key came from")
    func configText() throws {
        let folder = TemporaryFolder()
        let file = folder.child("c.toml")
        try "lock_timeout = 90\n[retention]\nkeep_within = \"2d\"\n".write(
            toFile: file, atomically: true, encoding: .utf8)
        let result = try GranaryProcess.run(["config", "--config", file])
        #expect(result.status == 0)
        let lines = result.stdout.split(separator: "\n").map {
            $0.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        }
        #expect(lines.contains(["retention.keep_within", "2d", "file"]), "\(result.stdout)")
        #expect(lines.contains(["retention.keep_daily", "0", "default"]), "\(result.stdout)")
        #expect(lines.contains(["lock_timeout", "1min30s", "file"]), "\(result.stdout)")
        #expect(lines.contains(["owner_timeout", "10s", "default"]), "\(result.stdout)")
    }

    @Test(
        "a run waiting for a user's lock says at once, on a terminal, who holds it; the 75 names the holder and a flag the command takes"
    )
    func lockWait() throws {
        let f = try Fixture()
        let store = f.root + "/alice@example.com/Local.sqlite"
        // A real granary holds alice's lock: a restore waiting for an owner that never acknowledges.
        let owner = GranaryOwner()
        try owner.register(store: store, close: { sleep(6) }, reopen: {})
        defer { owner.stop() }
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: GranaryProcess.binDirectory + "/granary")
        holder.arguments = [
            "restore", "alice@example.com", "--owner-timeout", "5s", "--root", f.root, "--repo", f.repo,
        ]
        holder.standardOutput = FileHandle.nullDevice
        holder.standardError = FileHandle.nullDevice
        try holder.run()
        defer { holder.waitUntilExit() }
        let lockFile = f.root + "/.granary/locks/alice@example.com.lock"
        var record = ""
        for _ in 0..<300 where !record.contains("granary restore") {
            usleep(20_000)
            record = (try? String(contentsOfFile: lockFile, encoding: .utf8)) ?? ""
        }
        let fields = record.split(separator: "\n").map(String.init)
        #expect(
            fields.count == 3 && fields[0] == "\(holder.processIdentifier)" && fields[1] == "granary restore"
                && Int64(fields[2]) != nil,
            "the lock file records pid, command and start: \(record.debugDescription)")
        let since = LockError.clockTime(Date(timeIntervalSince1970: TimeInterval(Int64(fields.last ?? "") ?? 0)))
        let waiting = try ShellTools.runInTerminal(
            ["restore", "alice@example.com", "--dry-run", "--lock-timeout", "1s", "--root", f.root, "--repo", f.repo])
        #expect(waiting.status == 75, "\(waiting.screen)")
        let expected =
            "granary: waiting for the lock on alice@example.com held by pid \(holder.processIdentifier) (granary restore, since \(since))"
        #expect(waiting.screen.hasPrefix(expected + "\n"), "\(waiting.screen)")
        #expect(
            waiting.screen.contains(
                "another granary run holds the lock of alice@example.com (pid \(holder.processIdentifier), granary restore, since \(since))"
            ),
            "\(waiting.screen)")
        #expect(waiting.screen.contains("--lock-timeout"), "\(waiting.screen)")
        // Without a terminal: no waiting line, the same 75.
        let cron = try f.granary(["reset", "alice@example.com", "--dry-run", "--lock-timeout", "0.2"])
        #expect(cron.status == 75 && !cron.stderr.contains("waiting for"), "\(cron.stderr)")
    }

    @Test("SIGHUP while waiting for a lock ends the run cleaned up with 129")
    func hangUp() throws {
        let f = try Fixture()
        let lockFolder = f.root + "/.granary/locks"
        try FileSystem.makeDirectory(lockFolder)
        let fd = open(lockFolder + "/dave@example.com.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        try #require(fd >= 0 && flock(fd, LOCK_EX) == 0)
        defer { close(fd) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: GranaryProcess.binDirectory + "/granary")
        process.arguments = [
            "backup", "dave@example.com", "--lock-timeout", "1min", "--root", f.root, "--repo", f.repo,
        ]
        let errors = Pipe()
        process.standardError = errors
        try process.run()
        usleep(500_000)
        kill(process.processIdentifier, SIGHUP)
        process.waitUntilExit()
        #expect(process.terminationReason == .exit && process.terminationStatus == 129)
        let text = String(decoding: errors.fileHandleForReading.readAllRetryingInterrupts(), as: UTF8.self)
        #expect(text.contains("interrupted"), "\(text)")
        #expect(f.archives("dave@example.com").count == 1)
    }
}

@Suite("granary-sample")
struct SampleToolTests {
    @Test("granary-sample --help prints help and creates nothing; a usage mistake exits 64 and creates nothing")
    func help() throws {
        let folder = TemporaryFolder()
        for arguments in [["--help"], ["write", "--help"], ["big", "--help"], ["-h"]] {
            let result = try GranaryProcess.runExecutable(
                "/bin/sh",
                [
                    "-c", "cd \"$1\" && shift && exec \"$@\"", "sh", folder.path,
                    GranaryProcess.binDirectory + "/granary-sample",
                ] + arguments)
            #expect(
                result.status == 0 && result.stdout.contains("USAGE: granary-sample"), "\(arguments): \(result.stderr)")
        }
        for arguments in [["big", "x.sqlite", "lots"], ["write"], ["make", "dir", "0"]] {
            let result = try GranaryProcess.runExecutable(
                "/bin/sh",
                [
                    "-c", "cd \"$1\" && shift && exec \"$@\"", "sh", folder.path,
                    GranaryProcess.binDirectory + "/granary-sample",
                ] + arguments)
            #expect(result.status == 64, "\(arguments): \(result.stderr)")
        }
        #expect(FileSystem.contents(of: folder.path).isEmpty, "created \(FileSystem.contents(of: folder.path))")
    }
}
