import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// An admin's week (issue 33): reset asks as retire does, check tells the truth for the
/// documented setups (green right after `backup --all`, red on a stopped restore), Nagios'
/// exit codes, a Prometheus text file read by Prometheus' own parser, and -q that hides
/// chatter but not results.
@Suite("an admin's week: confirmations, monitoring, quiet")
struct AdminWeekTests {
    let folder = TemporaryFolder("granary-admin")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }
    let alice = "alice@example.com"
    let bob = "bob@example.com"

    init() throws {
        try GranaryProcess.run([root], tool: "granary-sample")
    }

    func granary(_ arguments: [String], environment: [String: String] = [:], stdin: String? = nil) throws
        -> GranaryProcess.Result
    {
        try GranaryProcess.run(arguments + ["--root", root, "--repo", repo], environment: environment, stdin: stdin)
    }

    /// Runs granary on a pseudo-terminal (script(1)), typing `answer` and Enter.
    func onTerminal(_ arguments: [String], answer: String) throws -> GranaryProcess.Result {
        let line = ([GranaryProcess.binDirectory + "/granary"] + arguments + ["--root", root, "--repo", repo]).map(
            ShellQuoting.word
        ).joined(separator: " ")
        return try GranaryProcess.runExecutable(
            "/usr/bin/script", ["-qec", line, "/dev/null"], environment: ["TERM": "dumb"], stdin: answer + "\n")
    }

    /// The rows of every table of every store of `user`, summed (sqlite3, not granary).
    func rows(_ user: String) throws -> Int {
        var total = 0
        for store in ["Notes.sqlite", "Cloud.sqlite", "Local.sqlite", "Data.sqlite"] {
            let path = root + "/" + user + "/" + store
            guard FileSystem.isRegularFile(path) else { continue }
            let tables = try GranaryProcess.runExecutable(
                "/usr/bin/sqlite3",
                [path, "select name from sqlite_master where type='table' and name not like 'sqlite_%'"]
            ).stdout.split(separator: "\n")
            for table in tables {
                let count = try GranaryProcess.runExecutable(
                    "/usr/bin/sqlite3", [path, "select count(*) from \"\(table)\""])
                total += Int(count.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
            }
        }
        return total
    }

    @Test(
        "reset without a terminal and without --yes is refused (64, the command line with --yes as the hint), rows intact"
    )
    func resetNeedsYes() throws {
        let before = try rows(alice)
        #expect(before > 0)
        let refused = try granary(["reset", alice, "--no-safety-archive"], stdin: "yes\n")
        #expect(refused.status == 64, "\(refused.stderr)")
        #expect(refused.stderr.contains("which has no backup"), "never backed up, said: \(refused.stderr)")
        #expect(
            refused.stderr.contains(
                "Try: granary reset \(alice) --no-safety-archive --root \(root) --repo \(repo) --yes"),
            "\(refused.stderr)")
        #expect(try rows(alice) == before, "a refused reset emptied something")
        let missing = try granary(["reset", "zed@example.com"])
        #expect(missing.status == 66, "\(missing.stderr)")
    }

    @Test("reset on a terminal lists what each store empties and warns that no backup exists; 'no' keeps every row")
    func resetAsks() throws {
        let before = try rows(alice)
        let declined = try onTerminal(["reset", alice, "--no-safety-archive"], answer: "no")
        #expect(declined.status == 1, "\(declined.stdout)")
        #expect(declined.stdout.contains("reset \(alice): every store is emptied"), "\(declined.stdout)")
        #expect(declined.stdout.contains("empties"), "the question lists the tables: \(declined.stdout)")
        #expect(
            declined.stdout.contains("WARNING: \(alice) has no backup and no safety archive is kept"),
            "\(declined.stdout)")
        #expect(declined.stdout.contains("nothing was emptied"), "\(declined.stdout)")
        #expect(try rows(alice) == before)
        let accepted = try onTerminal(["reset", alice], answer: "yes")
        #expect(accepted.status == 0, "\(accepted.stdout)")
        #expect(accepted.stdout.contains("had no backup"), "loud without a backup: \(accepted.stdout)")
        #expect(try rows(alice) < before)
    }

    @Test("reset --yes of a user without a backup runs, and says so on standard error")
    func resetYesWarns() throws {
        let done = try granary(["reset", bob, "--yes"])
        #expect(done.status == 0, "\(done.stderr)")
        #expect(done.stderr.contains("warning: \(bob) had no backup"), "\(done.stderr)")
        #expect(done.stdout.hasPrefix("reset \(bob)"), "what was done, on standard output: \(done.stdout)")
        let quiet = try granary(["reset", bob, "--yes", "-q"])
        #expect(quiet.status == 0 && quiet.stdout.isEmpty && quiet.stderr.isEmpty, "-q: \(quiet.stdout)\(quiet.stderr)")
    }

    @Test("check right after backup --all is green (the backup checked its archives); check = none is not")
    func checkAfterBackup() throws {
        let backup = try granary(["backup", "--all"])
        #expect(backup.status == 0, "\(backup.stderr)")
        let check = try granary(["check", "--max-age", "26h"])
        #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
        let list = try granary(["list", alice])
        #expect(list.stdout.contains("unverified"), "list still says verify never ran: \(list.stdout)")
        let unchecked = try granary(["backup", alice, "--check", "none"])
        #expect(unchecked.status == 0, "\(unchecked.stderr)")
        let after = try granary(["check", alice])
        #expect(after.status == 0, "an older checked archive still counts: \(after.stdout)")
        // Only archives never checked: red, on standard output.
        FileSystem.removeTree(repo + "/" + bob)
        let plain = try granary(["backup", bob, "--check", "none"])
        #expect(plain.status == 0, "\(plain.stderr)")
        let red = try granary(["check", bob, "-q"])
        #expect(red.status == 1 && red.stdout.contains("FAIL  \(bob): has no checked archive"), "\(red.stdout)")
        #expect(red.stderr.isEmpty, "results go to standard output: \(red.stderr)")
    }

    @Test("an interrupted restore fails check (CRITICAL under --nagios) until recover; --nagios codes 0 and 3")
    func interruptedRestore() throws {
        #expect(try granary(["backup", "--all"]).status == 0)
        let green = try granary(["check", "--nagios"])
        #expect(green.status == 0 && green.stdout.hasPrefix("GRANARY OK - "), "\(green.stdout)")
        #expect(green.stdout.contains("OK    \(alice):"), "\(green.stdout)")
        let crashed = try granary(["restore", alice], environment: ["GRANARY_TEST_CRASH_AT": "checked"])
        #expect(crashed.status != 0)
        let red = try granary(["check"])
        #expect(
            red.status == 1 && red.stdout.contains("FAIL  \(alice): a restore, reset or retire stopped half way"),
            "\(red.stdout)")
        let nagios = try granary(["check", "--nagios"])
        #expect(nagios.status == 2 && nagios.stdout.hasPrefix("GRANARY CRITICAL - 1 of "), "\(nagios.stdout)")
        #expect(try granary(["recover"]).status == 0)
        #expect(try granary(["check"]).status == 0)
        let unknown = try GranaryProcess.run(["check", "--nagios", "--repo", folder.child("nowhere"), "--root", root])
        #expect(
            unknown.status == 3 && unknown.stdout.hasPrefix("GRANARY UNKNOWN - "), "\(unknown.stdout)\(unknown.stderr)")
    }

    @Test("check --textfile: written atomically, 0644, and read by prometheus_client's own text-format parser")
    func textfile() throws {
        #expect(try granary(["backup", "--all"]).status == 0)
        let crashed = try granary(["restore", bob], environment: ["GRANARY_TEST_CRASH_AT": "checked"])
        #expect(crashed.status != 0)
        let path = folder.child("granary.prom")
        try "old\n".write(toFile: path, atomically: false, encoding: .utf8)
        let check = try granary(["check", "--textfile", path])
        #expect(check.status == 1, "\(check.stdout)")
        #expect(FileSystem.status(path).map { $0.st_mode & 0o777 } == 0o644)
        #expect(
            FileSystem.contents(of: folder.path).filter { $0.hasPrefix(".granary.prom") }.isEmpty,
            "a temporary file stayed")
        let python = GranaryProcess.packageDirectory + "/.build-tools/prometheus/bin/python"
        guard FileManager.default.isExecutableFile(atPath: python),
            (try? GranaryProcess.runExecutable(python, ["-c", "import prometheus_client"]))?.status == 0
        else {
            print("skipped: prometheus_client is not installed (make prometheus installs it)")
            return
        }
        let script = """
            import sys
            from prometheus_client.parser import text_string_to_metric_families
            for family in text_string_to_metric_families(open(sys.argv[1]).read()):
                for sample in family.samples:
                    print(family.name, family.type, sample.labels.get("user", ""), float(sample.value))
            """
        let parsed = try GranaryProcess.runExecutable(python, ["-c", script, path])
        #expect(parsed.status == 0, "prometheus_client refused the file: \(parsed.stderr)")
        let lines = Set(parsed.stdout.split(separator: "\n").map(String.init))
        #expect(lines.contains("granary_problems gauge \(alice) 0.0"), "\(parsed.stdout)")
        #expect(lines.contains("granary_problems gauge \(bob) 1.0"), "\(parsed.stdout)")
        #expect(lines.contains("granary_interrupted gauge \(bob) 1.0"), "\(parsed.stdout)")
        #expect(lines.contains("granary_newest_archive_verified gauge \(alice) 0.0"), "\(parsed.stdout)")
        #expect(lines.contains("granary_check_ok gauge  0.0"), "\(parsed.stdout)")
        #expect(
            lines.contains { $0.hasPrefix("granary_newest_archive_age_seconds gauge \(alice) ") }, "\(parsed.stdout)")
        #expect(
            lines.contains { $0.hasPrefix("granary_newest_archive_size_bytes gauge \(alice) ") }, "\(parsed.stdout)")
        // verify sets the verified metric.
        #expect(try granary(["verify", "--user", alice, "--latest"]).status == 0)
        _ = try granary(["check", "--textfile", path])
        let again = try GranaryProcess.runExecutable(python, ["-c", script, path])
        #expect(again.stdout.contains("granary_newest_archive_verified gauge \(alice) 1.0"), "\(again.stdout)")
    }

    @Test("-q hides chatter, not results: list, users, inspect, config, check and restore --dry-run print theirs")
    func quietKeepsResults() throws {
        #expect(try granary(["backup", "--all", "-q"]).stdout.isEmpty)
        for line in [["list", "-q"], ["users", "-q"], ["config", "-q"], ["restore", alice, "--dry-run", "-q"]] {
            let result = try granary(line)
            #expect(result.status == 0 && !result.stdout.isEmpty, "\(line): \(result.stderr)")
        }
        let archive = FileSystem.contents(of: repo + "/" + alice).first { !$0.hasPrefix(".") } ?? ""
        let inspect = try granary(["inspect", "-q", alice + "/" + archive])
        #expect(inspect.status == 0 && inspect.stdout.contains("Cloud.sqlite"), "\(inspect.stdout)\(inspect.stderr)")
        let restore = try granary(["restore", alice, "-q"])
        #expect(restore.status == 0 && restore.stdout.isEmpty, "-q hides what a restore did: \(restore.stdout)")
    }

    @Test(
        "an id that never existed leaves no lock file behind (restore, reset, retire, recover, delete); a user's own lock file stays"
    )
    func noLockFilesForStrangers() throws {
        #expect(try granary(["backup", alice]).status == 0)
        for arguments in [
            ["restore", "nosuch"], ["reset", "nosuch", "--yes"], ["retire", "nosuch", "--yes"], ["recover", "nosuch"],
            ["restore", "nosuch", "--create"],
        ] {
            let result = try granary(arguments)
            #expect(result.status == 66, "\(arguments): \(result.stderr)")
        }
        let locks = (try? FileManager.default.contentsOfDirectory(atPath: root + "/.granary/locks")) ?? []
        #expect(locks == [alice + ".lock"], "\(locks)")
    }
}
