import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

/// Every numeric option at its bounds (accepted) and past them (64, before any work), on the
/// command line and in the configuration file.
@Suite("numbers at and past their bounds")
struct BoundsTests {
    struct Case: Sendable, CustomTestStringConvertible {
        let arguments: [String]
        /// Whether the value is within bounds (the command runs) or not (64, nothing done).
        let accepted: Bool
        init(_ arguments: [String], _ accepted: Bool) {
            self.arguments = arguments
            self.accepted = accepted
        }
        var testDescription: String { arguments.joined(separator: " ") + (accepted ? " (accepted)" : " (refused)") }
    }

    static func backup(_ options: [String], _ accepted: Bool) -> Case {
        Case(["backup", "dave@example.com"] + options, accepted)
    }

    static let backups: [Case] = [
        backup(["--level", "1"], true), backup(["--level", "19"], true), backup(["--level", "0"], false),
        backup(["--level", "20"], false), backup(["--level", "22"], false), backup(["--level", "99"], false),
        backup(["--level", "-5"], false), backup(["--level", "nan"], false),
        backup(["--compression", "gzip", "--level", "0"], true),
        backup(["--compression", "gzip", "--level", "9"], true),
        backup(["--compression", "gzip", "--level", "10"], false),
        backup(["--compression", "xz", "--level", "9"], true),
        backup(["--compression", "xz", "--level", "-1"], false),
        backup(["--compression", "none", "--level", "1"], false),
        backup(["--jobs", "1"], true), backup(["--jobs", "64"], true), backup(["--jobs", "0"], false),
        backup(["--jobs", "65"], false), backup(["--jobs", "-1"], false), backup(["--jobs", "100000000"], false),
        backup(["--jobs", "99999999999999999999"], false),
        backup(["--lock-timeout", "0"], true), backup(["--lock-timeout", "0.5"], true),
        backup(["--lock-timeout", "2min"], true),
        backup(["--lock-timeout", "7d"], true), backup(["--lock-timeout", "7d1s"], false),
        backup(["--lock-timeout", "nan"], false),
        backup(["--lock-timeout", "inf"], false), backup(["--lock-timeout", "-inf"], false),
        backup(["--lock-timeout", "1e300"], false),
        backup(["--lock-timeout", "-1"], false), backup(["--lock-timeout", "soon"], false),
    ]

    @Test("backup: compression levels per compression, jobs and the lock timeout", arguments: backups)
    func backupBounds(_ run: Case) throws {
        let folder = TemporaryFolder()
        let root = folder.child("root"), repo = initializedRepository(folder.child("repo"))
        try GranaryProcess.run([root], tool: "granary-sample")
        let result = try GranaryProcess.run(run.arguments + ["--root", root, "--repo", repo])
        if run.accepted {
            #expect(result.status == 0, "\(result.stderr)")
            #expect(FileSystem.contents(of: repo + "/dave@example.com").contains { !$0.hasPrefix(".") })
        } else {
            #expect(result.status == 64, "\(result.stderr)")
            #expect(
                result.stderr.hasPrefix("granary: ")
                    && (result.stderr.contains("Try: ") || result.stderr.contains("Hint: ")), "\(result.stderr)")
            #expect(
                FileSystem.contents(of: repo) == [LocalRepository.markerName],
                "work was done before the bad value was refused")
        }
    }

    static let others: [Case] = [
        Case(["restore", "dave@example.com", "--dry-run", "--owner-timeout", "1ms"], true),
        Case(["restore", "dave@example.com", "--dry-run", "--owner-timeout", "2s"], true),
        Case(["restore", "dave@example.com", "--dry-run", "--owner-timeout", "1h"], true),
        Case(["restore", "dave@example.com", "--dry-run", "--owner-timeout", "0"], false),
        Case(["restore", "dave@example.com", "--dry-run", "--owner-timeout", "1h1s"], false),
        Case(["restore", "dave@example.com", "--dry-run", "--owner-timeout", "nan"], false),
        Case(["restore", "dave@example.com", "--dry-run", "--owner-timeout", "inf"], false),
        Case(["restore", "dave@example.com", "--dry-run", "--owner-timeout", "1e300"], false),
        Case(["restore", "dave@example.com", "--dry-run", "--owner-timeout", "-1"], false),
        Case(["restore", "dave@example.com", "--dry-run", "--lock-timeout", "2min"], true),
        Case(["restore", "dave@example.com", "--dry-run", "--lock-timeout", "nan"], false),
        Case(["reset", "dave@example.com", "--dry-run", "--owner-timeout", "inf"], false),
        Case(["reset", "dave@example.com", "--dry-run", "--lock-timeout", "30s"], true),
        Case(["recover", "--lock-timeout", "1e300"], false),
        Case(["recover", "--lock-timeout", "0"], true),
        Case(["delete", "--dry-run", "--force", "--lock-timeout", "-1", "dave@example.com/LATEST"], false),
        Case(["prune", "--all", "--dry-run", "--keep-last", "0", "--keep-daily", "1"], true),
        Case(["prune", "--all", "--dry-run", "--keep-last", "1000000"], true),
        Case(["prune", "--all", "--dry-run", "--keep-last", "1000001"], false),
        // -1 is restic's "unlimited"; below it is refused.
        Case(["prune", "--all", "--dry-run", "--keep-last", "-1"], true),
        Case(["prune", "--all", "--dry-run", "--keep-last", "-2"], false),
        Case(["prune", "--all", "--dry-run", "--keep-daily", "-3"], false),
        Case(["prune", "--all", "--dry-run", "--keep-yearly", "99999999999999999999"], false),
        Case(["prune", "--all", "--dry-run", "--keep-within", "1s"], true),
        Case(["prune", "--all", "--dry-run", "--keep-within", "36600d"], true),
        Case(["prune", "--all", "--dry-run", "--keep-within", "36601d"], false),
        Case(["prune", "--all", "--dry-run", "--keep-within", "0"], false),
        Case(["prune", "--all", "--dry-run", "--keep-within", "-1d"], false),
        Case(["prune", "--all", "--dry-run", "--keep-within", "nan"], false),
        Case(["prune", "--all", "--dry-run", "--keep-last", "1", "--lock-timeout", "1min"], true),
        Case(["check", "--max-age", "1s"], true), Case(["check", "--max-age", "36600d"], true),
        Case(["check", "--max-age", "0"], false), Case(["check", "--max-age", "nan"], false),
        Case(["check", "--max-age", "-1d"], false), Case(["check", "--max-age", "1e300"], false),
        Case(["check", "--max-age", "99999999999999999999s"], false),
    ]

    @Test("restore, reset, recover, delete, prune and check: timeouts, counts and durations", arguments: others)
    func otherBounds(_ run: Case) throws {
        let folder = TemporaryFolder()
        let root = folder.child("root"), repo = initializedRepository(folder.child("repo"))
        try GranaryProcess.run([root], tool: "granary-sample")
        #expect(try GranaryProcess.run(["backup", "dave@example.com", "--root", root, "--repo", repo]).status == 0)
        let latest = FileSystem.contents(of: repo + "/dave@example.com").filter { !$0.hasPrefix(".") }.sorted().last!
        let before = FileSystem.contents(of: repo + "/dave@example.com").sorted()
        let arguments = run.arguments.map { $0.replacingOccurrences(of: "LATEST", with: latest) }
        let result = try GranaryProcess.run(arguments + ["--root", root, "--repo", repo])
        if run.accepted {
            // check fails a user without a verified archive (1): the value itself was taken.
            #expect(result.status == 0 || (run.arguments[0] == "check" && result.status == 1), "\(result.stderr)")
        } else {
            #expect(result.status == 64, "\(result.stderr)")
            #expect(result.stderr.hasPrefix("granary: "), "\(result.stderr)")
            #expect(FileSystem.contents(of: repo + "/dave@example.com").sorted() == before)
        }
    }

    static let files: [(String, Bool)] = [
        ("jobs = 1", true), ("jobs = 64", true), ("jobs = 0", false), ("jobs = 65", false), ("jobs = 100000000", false),
        ("jobs = -1", false), ("level = 19", true), ("level = 20", false), ("level = -1", false), ("level = 0", false),
        ("compression = \"gzip\"\nlevel = 0", true), ("compression = \"gzip\"\nlevel = 10", false),
        ("compression = \"none\"\nlevel = 3", false), ("lock_timeout = \"7d\"", true), ("lock_timeout = \"8d\"", false),
        ("lock_timeout = 0", true), ("lock_timeout = -1", false), ("lock_timeout = 0.5", true),
        ("lock_timeout = \"nan\"", false),
        ("lock_timeout = nan", false), ("lock_timeout = inf", false), ("lock_timeout = 1e300", false),
        ("owner_timeout = \"1ms\"", true), ("owner_timeout = 0", false), ("owner_timeout = \"2h\"", false),
        ("[retention]\nkeep_last = 1000000", true), ("[retention]\nkeep_last = 1000001", false),
        ("[retention]\nkeep_daily = -1", true), ("[retention]\nkeep_daily = -2", false),
        ("[retention]\nkeep_within = \"36600d\"", true),
        ("[retention]\nkeep_within = \"36601d\"", false), ("[retention]\nkeep_within = -5", false),
        ("[limits]\ntime = 0", true), ("[limits]\ntime = \"1d\"", true), ("[limits]\ntime = \"1d1s\"", false),
        ("[limits]\ntime = -1", false), ("[limits]\ntime = nan", false), ("[limits]\ntime_per_gib = 0.5", true),
        ("[limits]\ntime_per_gib = 1e300", false), ("[limits]\nmemory = 0", true),
        ("[limits]\nmemory = \"1TiB\"", true),
        ("[limits]\nmemory = 1099511627777", false), ("[limits]\nmemory = -1", false),
        ("[limits]\nmemory = \"1PiB\"", false),
        ("[limits]\nbytes_per_user = 0", true), ("[limits]\nbytes_per_user = \"1024TiB\"", true),
        ("[limits]\nbytes_per_user = \"1025TiB\"", false), ("[limits]\nbytes_per_user = -1", false),
        ("[limits]\nbytes_per_user = \"lots\"", false),
    ]

    @Test(
        "the configuration file: every number within its bounds, or 64 naming the file, line and key", arguments: files)
    func fileBounds(text: String, accepted: Bool) throws {
        let folder = TemporaryFolder()
        let file = folder.child("c.toml")
        try (text + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        let result = try GranaryProcess.run(["config", "--config", file])
        if accepted {
            #expect(result.status == 0, "\(result.stderr)")
        } else {
            #expect(result.status == 64, "\(text): \(result.stderr)")
            #expect(result.stderr.contains(file + ":"), "\(result.stderr)")
        }
    }
}
