import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The smaller things an admin met in a second week (issue 49, item 7), each with the built
/// binary: times and durations as people write them, messages that say where to look, restic's
/// -1, tidy result lines, and the drill and recovery the manual shows.
@Suite("an admin's second week: the small things")
struct AdminSecondWeekTests {
    let folder = TemporaryFolder("granary-second-week")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }
    static let user = "alice@example.com"

    func granary(_ arguments: [String], environment: [String: String] = [:]) throws -> GranaryProcess.Result {
        try GranaryProcess.run(arguments + ["--root", root, "--repo", repo], environment: environment)
    }

    /// alice with a store, backed up once.
    func backedUp() throws {
        try FileSystem.makeDirectory(root + "/" + Self.user)
        try SampleData.makeRollbackStore(root + "/" + Self.user + "/Local.sqlite", rows: 3)
        let backup = try granary(["backup", Self.user])
        #expect(backup.status == 0, "\(backup.stderr)")
    }

    @Test("restore --at takes yesterday, a duration ago and a local date and time, and says which forms it takes")
    func atTimes() throws {
        try backedUp()
        // Every archive is newer than a day ago: nothing at or before it, which is not a usage error.
        for time in ["yesterday", "1d", "2h30min"] {
            let result = try granary(["restore", Self.user, "--at", time, "--dry-run"])
            #expect(result.status != 0 && result.status != 64, "\(time): \(result.stderr)")
            #expect(!result.stderr.contains("is not a time"), "\(time): \(result.stderr)")
        }
        // Local time: in Tokyo (UTC+9), a minute from now finds the archive and an hour ago does
        // not; read as UTC, the hour ago would be eight hours ahead and find it.
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "Asia/Tokyo")
        formatter.dateFormat = "yyyy-MM-dd HH:mm"
        let tokyo = ["TZ": "Asia/Tokyo"]
        let later = try granary(
            ["restore", Self.user, "--at", formatter.string(from: Date().addingTimeInterval(120)), "--dry-run"],
            environment: tokyo)
        #expect(later.status == 0, "\(later.stderr)")
        let earlier = try granary(
            ["restore", Self.user, "--at", formatter.string(from: Date().addingTimeInterval(-3600)), "--dry-run"],
            environment: tokyo)
        #expect(earlier.status != 0 && earlier.status != 64, "\(earlier.stderr)")
        let now = try granary(["restore", Self.user, "--at", "now", "--dry-run"])
        #expect(now.status == 0, "\(now.stderr)")
        for bad in ["90", "tomorrowish", "2026-13-45 10:00"] {
            let result = try granary(["restore", Self.user, "--at", bad, "--dry-run"])
            #expect(result.status == 64 && result.stderr.contains("yesterday"), "\(bad): \(result.stderr)")
        }
    }

    @Test("no root is set names the configuration file it would be read from, and how to set it there")
    func noRootNamesTheFile() throws {
        let config = folder.child("xdg")
        let result = try GranaryProcess.run(
            ["users"], environment: ["XDG_CONFIG_HOME": config, "HOME": folder.path, "SUDO_USER": ""])
        #expect(result.status == 64, "\(result.stderr)")
        #expect(result.stderr.contains("no root is set"), "\(result.stderr)")
        #expect(result.stderr.contains("root = \"…\" in \(config)/granary/config.toml"), "\(result.stderr)")
    }

    @Test(
        "a [retention] key uncommented without [retention] is an unknown key whose hint says to put it under [retention]"
    )
    func retentionKeyAtTheTop() throws {
        let config = folder.child("config.toml")
        try "root = \"/var/lib/app/users\"\nkeep_daily = 7\n".write(toFile: config, atomically: true, encoding: .utf8)
        let result = try GranaryProcess.run(["config", "--config", config])
        #expect(result.status == 64, "\(result.stderr)")
        #expect(result.stderr.contains(":2: unknown key \"keep_daily\""), "\(result.stderr)")
        #expect(result.stderr.contains("keep_daily is a key of [retention]: put it below a [retention] line"))
    }

    @Test("a duration past 100 years is called too large, not 'not a duration'")
    func tooLarge() throws {
        let result = try granary(["check", "--max-age", "99999y"])
        #expect(result.status == 64, "\(result.stderr)")
        #expect(result.stderr.contains("too large") && !result.stderr.contains("not a duration"), "\(result.stderr)")
        let typo = try granary(["check", "--max-age", "3 days"])
        #expect(typo.status == 64 && typo.stderr.contains("not a duration"), "\(typo.stderr)")
    }

    @Test("--keep-monthly -1 keeps every month's newest archive, as restic's unlimited; -2 is refused saying so")
    func keepMonthlyUnlimited() throws {
        // Thirty-odd months, archives a day apart in each: -1 keeps one per month, every month.
        var times: [Date] = []
        for month in 0..<30 {
            let base = Date(timeIntervalSince1970: 1_700_000_000).addingTimeInterval(Double(month) * 31 * 86_400)
            times += [base, base.addingTimeInterval(86_400)]
        }
        var calendar = Calendar(identifier: .iso8601)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let months = Set(times.map { calendar.dateComponents([.year, .month], from: $0) })
        let kept = Pruning.plan(times, policy: RetentionPolicy(keepMonthly: -1)).filter(\.keep)
        #expect(kept.count == months.count && months.count >= 30)
        #expect(Pruning.plan(times, policy: RetentionPolicy(keepMonthly: 12)).filter(\.keep).count == 12)
        try backedUp()
        let prune = try granary(["prune", Self.user, "--keep-monthly", "-1", "--dry-run"])
        #expect(prune.status == 0, "\(prune.stderr)")
        let refused = try granary(["prune", Self.user, "--keep-monthly", "-2", "--dry-run"])
        #expect(refused.status == 64 && refused.stderr.contains("-1 for no limit"), "\(refused.stderr)")
        let config = folder.child("config.toml")
        try "[retention]\nkeep_monthly = -1\n".write(toFile: config, atomically: true, encoding: .utf8)
        let configured = try granary(["prune", Self.user, "--config", config, "--dry-run"])
        #expect(configured.status == 0, "\(configured.stderr)")
    }

    @Test("no result line ends with a space: users, list, check -v, backup -v")
    func noTrailingSpaces() throws {
        try backedUp()
        for arguments in [
            ["users"], ["list"], ["check", "-v"], ["backup", "--all", "-v"], ["verify", "--all", "-v"],
        ] {
            let result = try granary(arguments)
            #expect(result.status == 0, "\(arguments): \(result.stderr)")
            #expect(!result.stdout.isEmpty, "\(arguments) printed nothing")
            for line in result.stdout.split(separator: "\n") {
                #expect(!line.hasSuffix(" "), "\(arguments): '\(line)'")
            }
        }
    }

    @Test("granary UNKNOWN --help is a usage error naming the unknown command, not granary's help")
    func unknownCommandHelp() throws {
        for words in [["bakup", "--help"], ["bakup", "-h"], ["--json", "frobnicate", "--help"]] {
            let result = try GranaryProcess.run(words)
            #expect(result.status == 64, "\(words): \(result.stdout)")
            #expect((result.stdout + result.stderr).contains("unknown command"), "\(words): \(result.stderr)")
            #expect(!result.stdout.contains("SUBCOMMANDS"), "\(words)")
        }
        #expect(try GranaryProcess.run(["backup", "--help"]).status == 0)
        #expect(try GranaryProcess.run(["help", "backup"]).status == 0)
    }

    @Test(
        "the drill restore --to /tmp/NEW works as root: granary makes the folder 0700 itself; one another user made first is refused",
        .enabled(if: geteuid() == 0, "root's restore --to checks need root"))
    func drillInTmp() throws {
        try backedUp()
        let drill = "/tmp/granary-drill-\(UUID().uuidString)"
        defer { FileSystem.removeTree(drill) }
        let dry = try granary(["restore", Self.user, "--to", drill, "--dry-run"])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(FileSystem.status(drill) == nil, "a dry run made the folder")
        let result = try granary(["restore", Self.user, "--to", drill])
        #expect(result.status == 0, "\(result.stderr)")
        let info = try #require(FileSystem.status(drill))
        #expect(info.st_uid == 0 && info.st_mode & 0o777 == 0o700, "mode \(String(info.st_mode & 0o777, radix: 8))")
        #expect(FileSystem.isRegularFile(drill + "/Local.sqlite"))
        // A drill that fails (no such archive) leaves no empty folder behind.
        let failed = "/tmp/granary-drill-\(UUID().uuidString)"
        let missing = try granary(["restore", Self.user, "20010101T000000Z", "--to", failed])
        #expect(missing.status == 66, "\(missing.stderr)")
        #expect(FileSystem.status(failed) == nil, "the failed drill left \(failed)")
        // A name another user made first stays theirs: refused.
        let squatted = "/tmp/granary-drill-\(UUID().uuidString)"
        defer { FileSystem.removeTree(squatted) }
        #expect(mkdir(squatted, 0o755) == 0 && chown(squatted, 65534, 65534) == 0)
        let refused = try granary(["restore", Self.user, "--to", squatted])
        #expect(refused.status == 73, "\(refused.stderr)")
        #expect(FileSystem.contents(of: squatted).isEmpty)
    }

    @Test("recover says what it removed when it removes the staged files of a restore that died before its plan")
    func recoverSaysWhatItRemoved() throws {
        try backedUp()
        let work = root + "/.granary/restore/" + Self.user
        try FileSystem.makeDirectory(work + "/staged")
        try Data(repeating: 7, count: 300_000).write(to: URL(fileURLWithPath: work + "/staged/Local.sqlite"))
        let result = try granary(["recover", "-v"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("removed \(work)"), "\(result.stdout)")
        #expect(result.stdout.contains("stopped before it changed anything"), "\(result.stdout)")
        #expect(!result.stdout.contains("nothing to recover"), "\(result.stdout)")
        #expect(FileSystem.status(work) == nil)
        try FileSystem.makeDirectory(work + "/staged")
        try Data(repeating: 7, count: 1000).write(to: URL(fileURLWithPath: work + "/staged/Local.sqlite"))
        let json = try granary(["recover", "--json"])
        #expect(try ShellTools.schemaProblems(json.stdout, schema: "recover") == [])
        let document = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let users = try #require(document["users"] as? [[String: Any]])
        let staging = try #require(users.first?["removedStaging"] as? [String: Any], "\(document)")
        #expect(staging["bytes"] as? Int == 1000 && staging["path"] as? String == work, "\(staging)")
    }
}
