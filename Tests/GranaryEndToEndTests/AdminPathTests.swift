import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// No path, name or configuration value crashes granary: every path-taking option and
/// configuration key, given hostile or odd paths (`~`, `x/~`, `~user`, `..`, empty, very long,
/// a file where a folder is expected), ends in an exit status, never in a signal.
@Suite("paths that once crashed granary")
struct AdminPathTests {
    let folder = TemporaryFolder("granary-paths")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }

    init() throws {
        try GranaryProcess.run([root], tool: "granary-sample")
        try GranaryProcess.run(["backup", "--all", "--root", root, "--repo", repo])
    }

    struct Outcome {
        let status: Int32
        let signaled: Bool
        let stderr: String
    }

    /// Runs granary in `folder` (relative paths land there) and says whether a signal ended it.
    func run(_ arguments: [String], environment: [String: String] = [:]) throws -> Outcome {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: GranaryProcess.binDirectory + "/granary")
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: folder.path)
        var env = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("GRANARY_") }
        env["HOME"] = "/root"
        env.merge(environment) { $1 }
        process.environment = env
        let err = Pipe()
        process.standardOutput = FileHandle.nullDevice
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let data = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Outcome(
            status: process.terminationStatus, signaled: process.terminationReason == .uncaughtSignal,
            stderr: String(decoding: data, as: UTF8.self))
    }

    static let odd = [
        "~", "~/gb", "x/~", "~root/gb", "~/", "x/~/y", "~~", "./~", "..", "/..", "//", "", ".", "-",
        "a//b/../c", String(repeating: "d/", count: 2100), String(repeating: "n", count: 300), "/etc/passwd",
        "/dev/null", "line\nbreak", "/proc/self/root/..",
    ]

    @Test("the issue's command lines: 64 with a message naming the path and the absolute path to write, no crash")
    func issueLines() throws {
        let lines: [[String]] = [
            ["--repo", "x/~", "list"], ["--repo", "~/gb", "check", "--root", root],
            ["--root", "~", "users", "--repo", repo],
            ["restore", "bob@example.com", "--to", "~/drill", "--root", root, "--repo", repo],
        ]
        for line in lines {
            let outcome = try run(line)
            #expect(!outcome.signaled, "\(line): \(outcome.stderr)")
            #expect(outcome.status != 0 && !outcome.stderr.contains("Fatal error"), "\(line): \(outcome.stderr)")
        }
        let tilde = try run(["--repo", "~/gb", "check", "--root", root])
        #expect(tilde.status == 64, "\(tilde.stderr)")
        #expect(
            tilde.stderr.contains("--repo ~/gb starts with ~") && tilde.stderr.contains("/root/gb"), "\(tilde.stderr)")
        // A ~ inside a path is a plain name: x/~ is an ordinary (missing) repository.
        let inner = try run(["--repo", "x/~", "list"])
        #expect(inner.status == 66 && inner.stderr.contains("x/~"), "\(inner.stderr)")
        let to = try run(["restore", "bob@example.com", "--to", "~/drill", "--root", root, "--repo", repo])
        #expect(to.status == 64 && to.stderr.contains("--to ~/drill starts with ~"), "\(to.stderr)")
        #expect(!FileSystem.isDirectory(folder.child("~")), "a folder named ~ was made")
    }

    @Test("configuration keys: ~ and relative paths are refused with the file's line; none crashes")
    func configuration() throws {
        for key in ["root", "repo"] {
            for value in Self.odd where !value.contains("\n") {
                let config = folder.child("c.toml")
                try "\(key) = \"\(value.replacingOccurrences(of: "\\", with: "\\\\"))\"\n".write(
                    toFile: config, atomically: true, encoding: .utf8)
                chmod(config, 0o600)
                let outcome = try run(["users", "--config", config])
                #expect(!outcome.signaled, "\(key) = \(value): \(outcome.stderr)")
            }
        }
        let config = folder.child("tilde.toml")
        try "root = \"\(root)\"\nrepo = \"~/granary-backups\"\n".write(
            toFile: config, atomically: true, encoding: .utf8)
        let tilde = try run(["users", "--config", config])
        #expect(tilde.status == 64, "\(tilde.stderr)")
        #expect(
            tilde.stderr.contains("tilde.toml:2: repo: \"~/granary-backups\" starts with ~")
                && tilde.stderr.contains("/root/granary-backups"), "\(tilde.stderr)")
        try "root = \"\(root)\"\n[[mirror]]\nrepo = \"backups\"\n".write(
            toFile: config, atomically: true, encoding: .utf8)
        let relative = try run(["users", "--config", config])
        #expect(relative.status == 64 && relative.stderr.contains("is a relative path"), "\(relative.stderr)")
    }

    @Test("every path-taking option and variable with odd paths ends in an exit status, never a signal")
    func everyOption() throws {
        for value in Self.odd {
            let lines: [[String]] = [
                ["list", "--repo", value], ["check", "--repo", value, "--root", root], ["users", "--root", value],
                ["users", "--root", root, "--repo", value], ["backup", "--all", "--root", root, "--repo", value],
                ["backup", "--all", "--root", value, "--repo", repo], ["config", "--config", value],
                ["restore", "bob@example.com", "--dry-run", "--to", value, "--root", root, "--repo", repo],
                ["sync", "--repo", repo, "--mirror", value, "--dry-run"], ["verify", "--repo", repo, value],
                ["inspect", "--repo", repo, value], ["delete", "--repo", repo, "--dry-run", value],
            ]
            for line in lines {
                let outcome = try run(line)
                #expect(!outcome.signaled, "\(line): \(outcome.stderr)")
            }
            for variable in ["GRANARY_ROOT", "GRANARY_REPO", "GRANARY_CONFIG"] {
                let outcome = try run(["check"], environment: [variable: value])
                #expect(!outcome.signaled, "\(variable)=\(value): \(outcome.stderr)")
            }
        }
        // (./~ names a folder called ~, as it says: backup --repo ./~ makes it.)
    }
}
