import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

/// Where granary writes and what it writes there: closed and broken standard outputs, names
/// that try to take over the terminal, and what a terminal gets (colour, TERM=dumb).
@Suite("output streams and terminals")
struct OutputStreamTests {
    /// A sample root with every user backed up once.
    final class Fixture: SampleSite {
        init() throws { try super.init(backup: ["--all"]) }
    }

    /// One command line per command, each of which writes to standard output, and its exit
    /// status when its output cannot be written: 74, or the command's own failure (check).
    static let writers: [([String], Int32)] = [
        (["users"], 74), (["users", "--json"], 74), (["config"], 74), (["list"], 74), (["list", "--json"], 74),
        (["backup", "dave@example.com", "-v"], 74), (["backup", "dave@example.com", "--json"], 74),
        (["verify", "--all", "-v"], 74),
        (["verify", "--all", "--json"], 74), (["inspect", "ROOT/bob@example.com/Notes.sqlite"], 74),
        (["check", "--json"], 74), (["delete", "--dry-run", "dave@example.com/LATEST", "--force"], 74),
        (["prune", "--all", "--keep-last", "5", "--dry-run"], 74), (["restore", "alice@example.com"], 74),
        (["reset", "carol@example.com", "--yes"], 74), (["recover", "-v"], 74), (["--help"], 74), (["--version"], 74),
        (["help", "backup"], 74),
        (["sync", "--mirror", "MIRROR", "--dry-run", "--json"], 74), (["init", "MIRROR"], 74),
    ]

    static let cases: [(command: [String], status: Int32, pipe: Bool)] = writers.flatMap {
        [($0.0, $0.1, false), ($0.0, $0.1, true)]
    }

    @Test(
        "a closed standard output or a closed pipe ends every command with 'write error' and exit 74, never a signal; a restore or reset stays done",
        arguments: 0..<cases.count)
    func brokenOutput(index: Int) throws {
        let (command, status, pipe) = Self.cases[index]
        let fixture = try Fixture()
        let latest = fixture.archives("dave@example.com").last!
        let arguments =
            command.map {
                $0.replacingOccurrences(of: "ROOT", with: fixture.root).replacingOccurrences(of: "LATEST", with: latest)
                    .replacingOccurrences(of: "MIRROR", with: initializedRepository(fixture.folder.child("mirror")))
            }
            + ["--root", fixture.root, "--repo", fixture.repo]
        let ended = try ShellTools.runWithBrokenOutput(arguments, pipe: pipe)
        let label = "\(command) \(pipe ? "into a closed pipe" : "with stdout closed")"
        #expect(ended.signal == nil, "\(label): killed by signal \(ended.signal ?? 0): \(ended.stderr)")
        #expect(ended.status == status, "\(label): \(ended.stderr)")
        #expect(
            ended.stderr.contains("granary: write error: " + (pipe ? "Broken pipe" : "Bad file descriptor")),
            "\(label): \(ended.stderr)")
        #expect(
            !ended.stderr.contains("Fatal error") && !ended.stderr.contains("Backtrac"), "\(label): \(ended.stderr)")
        if command.first == "restore" || command.first == "reset" {
            // The work was done before the output failed, and is kept whole: a safety archive, no journal left.
            let user = command[1]
            let label = command.first == "restore" ? "pre-restore" : "pre-reset"
            #expect(fixture.archives(user).contains { $0.contains(label) }, "\(fixture.archives(user))")
            let recover = try fixture.granary(["recover", user, "-v"])
            #expect(recover.stdout.contains("nothing to recover"), "\(recover.stdout)")
        }
    }

    @Test(
        "with standard output closed, nothing granary opens takes its place: a result line never lands in a store or a lock file"
    )
    func closedOutputIsNotReused() throws {
        let fixture = try Fixture()
        let ended = try ShellTools.runWithBrokenOutput(
            ["restore", "alice@example.com", "--root", fixture.root, "--repo", fixture.repo], pipe: false)
        #expect(ended.status == 74, "\(ended.stderr)")
        for path in [
            fixture.root + "/alice@example.com/Local.sqlite", fixture.root + "/.granary/locks/alice@example.com.lock",
        ] {
            let bytes = FileManager.default.contents(atPath: path) ?? Data()
            #expect(
                !String(decoding: bytes, as: UTF8.self).contains("restored alice"), "\(path) holds granary's output")
        }
        #expect(try fixture.granary(["inspect", fixture.root + "/alice@example.com/Local.sqlite"]).status == 0)
    }

    @Test("every name is printed escaped, the same way in every command; --json carries the exact string")
    func terminalInjection() throws {
        let folder = TemporaryFolder()
        let root = folder.child("root"), repo = initializedRepository(folder.child("repo"))
        let user = "rtl\u{202E}gpj.exe@example.com"
        let table = "evil\u{1B}[2J\u{1B}]0;owned\u{07}x\u{202E}\u{85}\u{2028}y"
        try FileSystem.makeDirectory(root + "/" + user)
        let store = root + "/" + user + "/Notes\u{1B}[31m\rA.sqlite"
        let db = try Database(path: store, mode: .create)
        let quoted = "\"" + table + "\""
        try db.execute("CREATE TABLE \(quoted)(x); INSERT INTO \(quoted) VALUES (1);")
        let shownUser = "rtl\\u{202e}gpj.exe@example.com"
        let shownStore = "Notes\\e[31m\\rA.sqlite"
        let shownTable = "evil\\e[2J\\e]0;owned\\x07x\\u{202e}\\u{0085}\\u{2028}y"
        func granary(_ arguments: [String]) throws -> GranaryProcess.Result {
            let result = try GranaryProcess.run(arguments + ["--root", root, "--repo", repo])
            #expect(result.status == 0, "\(arguments): \(result.stderr)")
            for raw in ["\u{1B}", "\r", "\u{07}", "\u{202E}", "\u{85}", "\u{2028}"] {
                #expect(
                    !(result.stdout + result.stderr).contains(raw),
                    "\(arguments) printed \(raw.unicodeScalars.first!.value) raw")
            }
            return result
        }
        let users = try granary(["users"])
        #expect(users.stdout.contains(shownUser) && users.stdout.contains(shownStore), "\(users.stdout)")
        let backup = try granary(["backup", "--all", "-v"])
        #expect(backup.stdout.contains(shownUser + ": "), "\(backup.stdout)")
        let list = try granary(["list"])
        #expect(list.stdout.contains(shownUser) && list.stdout.contains(shownStore), "\(list.stdout)")
        let inspect = try granary(["inspect", store])
        #expect(inspect.stdout.contains(shownTable) && inspect.stdout.contains(shownStore), "\(inspect.stdout)")
        let missing = try GranaryProcess.run(["list", "--root", root, "--repo", repo, "zoe\u{202E}@example.com"])
        #expect(
            missing.status == 66 && missing.stderr.contains("zoe\\u{202e}@example.com")
                && !missing.stderr.contains("\u{202E}"))
        // JSON: the exact strings.
        let json = try GranaryProcess.run(["inspect", store, "--json"])
        let stores =
            (try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])?["stores"]
            as? [[String: Any]]
        #expect((stores?.first?["tables"] as? [[String: Any]])?.first?["name"] as? String == table)
        #expect(stores?.first?["name"] as? String == (store as NSString).lastPathComponent)
        let usersJSON = try GranaryProcess.run(["users", "--root", root, "--json"])
        #expect(usersJSON.stdout.contains("\"id\" : \"\(user)\""), "\(usersJSON.stdout)")
    }

    @Test("on a terminal: bold names, unless NO_COLOR or TERM=dumb, which get no escape sequence at all")
    func terminal() throws {
        let fixture = try Fixture()
        let arguments = ["list", "--root", fixture.root, "--repo", fixture.repo]
        let colour = try ShellTools.runInTerminal(arguments)
        #expect(colour.status == 0, "\(colour.screen)")
        #expect(colour.screen.contains("\u{1B}[1malice@example.com\u{1B}[0m"), "\(colour.screen.debugDescription)")
        for environment in [["TERM": "dumb"], ["NO_COLOR": "1"]] {
            let plain = try ShellTools.runInTerminal(arguments, environment: environment)
            #expect(plain.status == 0)
            #expect(
                plain.screen.contains("alice@example.com") && !plain.screen.contains("\u{1B}"),
                "\(environment): \(plain.screen.debugDescription)")
        }
        let backup = try ShellTools.runInTerminal(
            ["backup", "--all", "--root", fixture.root, "--repo", fixture.repo], environment: ["TERM": "dumb"])
        #expect(
            backup.status == 0 && !backup.screen.contains("\u{1B}"),
            "no progress bar escapes on a dumb terminal: \(backup.screen.debugDescription)")
        #expect(backup.screen.contains("dave@example.com: "), "on a terminal backup says what it did: \(backup.screen)")
    }

    @Test("on a terminal the bar follows the snapshot phase too (a WAL copy is one SQLite step): it ends full")
    func snapshotProgress() throws {
        let fixture = try Fixture()
        let backup = try ShellTools.runInTerminal(
            ["backup", "alice@example.com", "--root", fixture.root, "--repo", fixture.repo],
            environment: ["TERM": "xterm", "COLUMNS": "200"])
        #expect(backup.status == 0, "\(backup.screen)")
        #expect(
            backup.screen.contains("alice@example.com snapshot [####################]"),
            "the snapshot line ends full, not at 0 B: \(backup.screen.debugDescription)")
    }
}
