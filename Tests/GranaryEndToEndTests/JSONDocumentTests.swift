import Foundation
import GranaryKit
import Testing

/// `--json` from every command: one document with `"format": 1` on standard output, checked
/// against its schema in docs/json/, and the same for a run that fails.
@Suite("JSON documents")
struct JSONDocumentTests {
    final class Fixture: SampleSite {
        /// Runs `arguments --json`, checks the exit status, that standard output is one document
        /// valid against `schema`, and returns it.
        @discardableResult
        func document(_ arguments: [String], schema: String, status: Int32? = 0) throws -> [String: Any] {
            let result = try granary(arguments + ["--json"])
            if let status { #expect(result.status == status, "\(arguments): \(result.stderr)") }
            let problems = try ShellTools.schemaProblems(result.stdout, schema: schema)
            #expect(problems.isEmpty, "\(arguments) against \(schema).schema.json: \(problems)\n\(result.stdout)")
            let object = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any] ?? [:]
            #expect(object["format"] as? Int == 1)
            return object
        }
    }

    @Test("every command prints one document its schema in docs/json/ accepts, dry runs included")
    func everyCommand() throws {
        let f = try Fixture()
        try f.document(["config"], schema: "config")
        try f.document(["users"], schema: "users")
        let backup = try f.document(["backup", "--all"], schema: "backup")
        #expect((backup["users"] as? [[String: Any]])?.count == 4)
        try f.document(["users"], schema: "users")
        try f.document(["list"], schema: "list")
        try f.document(["verify", "--all"], schema: "verify")
        try f.document(["check"], schema: "check")
        try f.document(["inspect", f.root + "/bob@example.com/Notes.sqlite"], schema: "inspect")
        let dave = "dave@example.com/" + f.archives("dave@example.com")[0]
        let inspected = try f.document(["inspect", dave], schema: "inspect")
        #expect(inspected["kind"] as? String == "archive" && inspected["user"] as? String == "dave@example.com")
        let dryRestore = try f.document(["restore", "alice@example.com", "--dry-run"], schema: "restore")
        #expect(dryRestore["dryRun"] as? Bool == true && (dryRestore["stores"] as? [Any])?.count == 2)
        let restored = try f.document(["restore", "alice@example.com"], schema: "restore")
        #expect(restored["safetyArchive"] is String, "\(restored)")
        try f.document(["reset", "carol@example.com", "--dry-run"], schema: "reset")
        try f.document(["reset", "carol@example.com", "--yes"], schema: "reset")
        try f.document(["recover"], schema: "recover")
        // A user's end and a new start: retire, then restore --create (a dry run first).
        let retired = try f.document(["retire", "carol@example.com", "--yes"], schema: "retire")
        #expect((retired["archive"] as? String)?.contains("-final.") == true, "\(retired)")
        let users = try f.document(["users"], schema: "users")
        #expect(
            (users["users"] as? [[String: Any]])?.contains {
                $0["id"] as? String == "carol@example.com" && $0["retired"] as? Bool == true
            } == true)
        let listed = try f.document(["list"], schema: "list")
        #expect(listed["retiredUsers"] as? [String] == ["carol@example.com"], "\(listed)")
        let created = try f.document(["restore", "carol@example.com", "--create", "--dry-run"], schema: "restore")
        #expect((created["createdFolder"] as? [String: Any])?["mode"] as? String == "0700", "\(created)")
        try f.document(["restore", "carol@example.com", "--create"], schema: "restore")
        let mirror = f.folder.child("mirror")
        let made = try f.document(["init", mirror], schema: "init")
        #expect((made["repositories"] as? [[String: Any]])?.first?["created"] as? Bool == true, "\(made)")
        try f.document(["init", mirror], schema: "init")
        let synced = try f.document(["sync", "--mirror", mirror, "--dry-run"], schema: "sync")
        #expect((synced["mirrors"] as? [[String: Any]])?.count == 1, "\(synced)")
        try f.document(["sync", "--mirror", mirror], schema: "sync")
        let watched = try f.document(["check", "--mirror", mirror], schema: "check", status: nil)
        #expect(((watched["users"] as? [[String: Any]])?.first?["mirrors"] as? [Any])?.count == 1, "\(watched)")
        try f.document(["prune", "--all", "--keep-last", "1", "--dry-run"], schema: "prune")
        try f.document(["prune", "--all", "--keep-last", "1"], schema: "prune")
        #expect(try f.granary(["backup", "dave@example.com"]).status == 0)
        let older = "dave@example.com/" + f.archives("dave@example.com")[0]
        // The older archive is dave's newest verified one: --force.
        let dryDelete = try f.document(["delete", older, "--force", "--dry-run"], schema: "delete")
        #expect(dryDelete["dryRun"] as? Bool == true)
        try f.document(["delete", older, "--force"], schema: "delete")
        #expect(f.archives("dave@example.com").count == 1)
        // backup --prune carries each user's plan.
        let config = f.folder.child("c.toml")
        try "[retention]\nkeep_last = 1\n".write(toFile: config, atomically: true, encoding: .utf8)
        let pruned = try f.document(["backup", "dave@example.com", "--prune", "--config", config], schema: "backup")
        let plan =
            ((pruned["users"] as? [[String: Any]])?.first?["prune"] as? [String: Any])?["archives"] as? [[String: Any]]
        #expect(plan?.count == 2 && plan?.filter { $0["keep"] as? Bool == false }.count == 1, "\(pruned)")
    }

    /// Command lines that fail as a whole, and the exit code each must give.
    static let failing: [FailingRun] = [
        FailingRun(["users", "zoe@example.com"], 66),
        FailingRun(["list", "zoe@example.com"], 66),
        FailingRun(["verify", "dave@example.com/20990101T000000Z.tar.zst"], 66),
        FailingRun(["inspect", "/nonexistent/store.sqlite"], 66),
        FailingRun(["restore", "zoe@example.com"], 66),
        FailingRun(["retire", "dave@example.com"], 64),
        FailingRun(["retire", "zoe@example.com", "--yes"], 66),
        FailingRun(["restore", "dave@example.com", "--owner", "root"], 64),
        FailingRun(["restore", "dave@example.com", "--dry-run", "--method", "swap"], 75),
        FailingRun(["reset", "zoe@example.com", "--dry-run"], 66),
        FailingRun(["delete", "dave@example.com/20990101T000000Z.tar.zst"], 66),
        FailingRun(["prune", "zoe@example.com", "--keep-last", "1"], 66),
        FailingRun(["backup", "zoe@example.com"], 66),
        FailingRun(["recover", "../x"], 64),
        FailingRun(["config", "--config", "/nonexistent.toml"], 64),
        FailingRun(["backup", "--level", "99", "dave@example.com"], 64),
        FailingRun(["bakup", "--all"], 64),
        FailingRun(["check", "--max-age", "soon"], 64),
    ]

    struct FailingRun: Sendable, CustomTestStringConvertible {
        let arguments: [String]
        let status: Int32
        init(_ arguments: [String], _ status: Int32) {
            self.arguments = arguments
            self.status = status
        }
        var testDescription: String { arguments.joined(separator: " ") }
    }

    @Test(
        "a failing run prints {format, error: {code, message, hint}} on stdout with the exit code it names, and granary: on stderr",
        arguments: failing)
    func failures(run: FailingRun) throws {
        let (arguments, status) = (run.arguments, run.status)
        let f = try Fixture()
        #expect(try f.granary(["backup", "dave@example.com"]).status == 0)
        let result = try f.granary(arguments + ["--json"])
        #expect(result.status == status, "\(arguments): \(result.stderr)")
        let problems = try ShellTools.schemaProblems(result.stdout, schema: "error")
        #expect(problems.isEmpty, "\(problems)\n\(result.stdout)")
        let error =
            (try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])?["error"]
            as? [String: Any]
        #expect(error?["code"] as? Int == Int(status))
        #expect(result.stderr.hasPrefix("granary: "), "\(result.stderr)")
        #expect(
            !result.stderr.contains("Error:") && !result.stderr.contains("Usage:"), "one error format: \(result.stderr)"
        )
    }

    @Test("a run that fails for some items only keeps its document and names each error in it")
    func partial() throws {
        let f = try Fixture()
        // dave's store is unreadable: his backup fails, the others succeed (exit 1).
        let store = f.root + "/dave@example.com/Data/App.sqlite"
        try Data("SQLite format 3\0 but not a database".utf8).write(to: URL(fileURLWithPath: store))
        let document = try f.document(["backup", "--all"], schema: "backup", status: 1)
        let users = document["users"] as? [[String: Any]] ?? []
        let dave = users.first { $0["id"] as? String == "dave@example.com" }
        let code = (dave?["error"] as? [String: Any])?["code"] as? Int
        #expect(dave?["ok"] as? Bool == false && [65, 74].contains(code ?? 0), "\(dave ?? [:])")
        #expect(users.filter { $0["ok"] as? Bool == true }.count == 3)
    }
}
