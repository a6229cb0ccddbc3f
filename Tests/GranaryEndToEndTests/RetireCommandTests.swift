import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `granary retire` at the prompt and in scripts, and what the other commands make of a retired
/// user: users, list and check say so, restore --create brings them back, prune keeps their final
/// archive until --final-keep-within says otherwise.
@Suite("retire and restore --create at the command line")
struct RetireCommandTests {
    let folder = TemporaryFolder("granary-retire")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }
    let bob = "bob@example.com"

    init() throws {
        try GranaryProcess.run([root], tool: "granary-sample")
    }

    func granary(_ arguments: [String], stdin: String? = nil, environment: [String: String] = [:]) throws
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

    func archives(_ user: String) -> [String] {
        FileSystem.contents(of: repo + "/" + user).filter { !$0.hasPrefix(".") }.sorted()
    }

    @Test(
        "off a terminal, retire without --yes refuses (64) with the exact command line as the hint, and removes nothing"
    )
    func needsYes() throws {
        let refused = try granary(["retire", bob], stdin: "yes\n")
        #expect(refused.status == 64, "\(refused.stderr)")
        #expect(
            refused.stderr.contains("Try: granary retire \(bob) --root \(root) --repo \(repo) --yes"),
            "\(refused.stderr)")
        #expect(FileSystem.isDirectory(root + "/" + bob) && archives(bob).isEmpty)
    }

    @Test("a folder with no store is not retired: 66, nothing removed, and nothing archived")
    func noStore() throws {
        try FileSystem.makeDirectory(root + "/empty@example.com")
        try "a note\n".write(toFile: root + "/empty@example.com/notes.txt", atomically: true, encoding: .utf8)
        let refused = try granary(["retire", "empty@example.com", "--yes"])
        #expect(
            refused.status == 66 && refused.stderr.contains("no store")
                && refused.stderr.contains("nothing was removed"), "\(refused.stderr)")
        #expect(
            FileSystem.isRegularFile(root + "/empty@example.com/notes.txt") && archives("empty@example.com").isEmpty)
    }

    @Test(
        "on a terminal, retire shows the stores and sizes it will remove and asks: anything but yes removes nothing (exit 1), yes retires",
        .enabled(
            if: FileManager.default.isExecutableFile(atPath: "/usr/bin/script"),
            "script(1) is needed for a pseudo-terminal"))
    func asksOnTerminal() throws {
        let declined = try onTerminal(["retire", bob], answer: "no")
        #expect(declined.status == 1, "\(declined.stdout)")
        #expect(
            declined.stdout.contains("Notes.sqlite") && declined.stdout.contains("external data 17 files"),
            "the question: \(declined.stdout)")
        #expect(
            declined.stdout.contains("Type yes to retire \(bob)") && declined.stdout.contains("nothing was removed"),
            "\(declined.stdout)")
        #expect(FileSystem.isDirectory(root + "/" + bob) && archives(bob).isEmpty)
        let accepted = try onTerminal(["retire", bob], answer: "yes")
        #expect(accepted.status == 0, "\(accepted.stdout)")
        #expect(accepted.stdout.contains("retired \(bob): final archive"), "\(accepted.stdout)")
        #expect(!FileSystem.isDirectory(root + "/" + bob) && archives(bob).count == 1)
    }

    @Test(
        "a retired user: users, list and check say so; retire again is 66; restore without --create is 66 with the --create command line; restore --create brings the user back"
    )
    func retiredUser() throws {
        let retired = try granary(["retire", bob, "--yes"])
        #expect(retired.status == 0, "\(retired.stderr)")
        #expect(retired.stdout.isEmpty == false && retired.stderr.isEmpty, "\(retired.stderr)")
        let users = try granary(["users"])
        #expect(users.stdout.contains("\(bob)  retired: final archive"), "\(users.stdout)")
        let named = try granary(["users", bob])
        #expect(named.status == 0 && named.stdout.contains("retired"), "\(named.stderr)")
        let list = try granary(["list", bob])
        #expect(
            list.status == 0 && list.stdout.contains("\(bob)  (retired)") && list.stdout.contains("(final archive)"),
            "\(list.stdout)")
        let check = try granary(["check", bob])
        #expect(check.status == 0 && check.stderr.isEmpty, "\(check.stderr)")
        let again = try granary(["retire", bob, "--yes"])
        #expect(again.status == 66 && again.stderr.contains("retired already"), "\(again.stderr)")
        #expect(again.stderr.contains("Hint: granary restore \(bob) --create"), "\(again.stderr)")
        let missing = try granary(["restore", bob])
        #expect(missing.status == 66, "\(missing.stderr)")
        #expect(
            missing.stderr.contains(
                "Try: granary restore \(bob) --root \(root) --repo \(repo) --create --owner root:root"),
            "\(missing.stderr)")
        let dry = try granary(["restore", bob, "--create", "--dry-run"])
        #expect(
            dry.status == 0 && dry.stdout.contains("would create") && !FileSystem.isDirectory(root + "/" + bob),
            "\(dry.stdout)")
        let back = try granary(["restore", bob, "--create", "--mode", "0750"])
        #expect(back.status == 0, "\(back.stderr)")
        #expect(back.stdout.contains("created \(root)/\(bob) (owner root:root, mode 0750)"), "\(back.stdout)")
        #expect(back.stderr.isEmpty, "a restore that only creates stores replaces nothing: \(back.stderr)")
        #expect((FileSystem.status(root + "/" + bob)?.st_mode ?? 0) & 0o7777 == 0o750)
        #expect(FileSystem.isRegularFile(root + "/" + bob + "/Notes.sqlite"))
        #expect(FileSystem.contents(of: root + "/" + bob + "/.Notes_SUPPORT/_EXTERNAL_DATA").count == 17)
        let live = try granary(["users", bob])
        #expect(!live.stdout.contains("retired") && live.stdout.contains("Notes.sqlite"), "\(live.stdout)")
        // Not retired any more: no longer marked so by list, and --create on a live user changes nothing of that.
        #expect(!(try granary(["list", bob])).stdout.contains("(retired)"))
    }

    @Test(
        "restore --create: --owner and --mode go with --create, not with --to or --undo; an unknown owner or a bad mode is 64"
    )
    func createArguments() throws {
        for (arguments, reason) in [
            (["restore", bob, "--owner", "root"], "--owner and --mode go with --create"),
            (["restore", bob, "--mode", "0700"], "--owner and --mode go with --create"),
            (["restore", bob, "--create", "--to", folder.child("drill")], "not with --to or --undo"),
            (["restore", bob, "--create", "--undo"], "not with --to or --undo"),
            (
                ["restore", bob, "--create", "--owner", "no-such-user-granary"],
                "no user no-such-user-granary on this host"
            ),
            (["restore", bob, "--create", "--owner", "root:no-such-group-granary"], "no group no-such-group-granary"),
            (["restore", bob, "--create", "--mode", "0999"], "not an octal mode"),
        ] {
            let result = try granary(arguments)
            #expect(result.status == 64 && result.stderr.contains(reason), "\(arguments): \(result.stderr)")
        }
    }

    @Test(
        "prune keeps final archives for ever by default; once --final-keep-within has passed, every archive of the retired user goes"
    )
    func pruneFinal() throws {
        // Both archives half a minute old (the test clock): within a day, past one second.
        let past = testClock(secondsAgo: 30)
        #expect(try granary(["backup", bob], environment: past).status == 0)
        #expect(try granary(["retire", bob, "--yes"], environment: past).status == 0)
        #expect(archives(bob).count == 2)
        let kept = try granary(["prune", "--all", "--keep-last", "1", "-v"])
        #expect(kept.status == 0 && archives(bob).count == 2, "\(kept.stdout)")
        #expect(kept.stdout.contains("final"), "the final archive is kept by its own rule: \(kept.stdout)")
        let withinDay = try granary(["prune", bob, "--keep-last", "1", "--final-keep-within", "1d"])
        #expect(withinDay.status == 0 && archives(bob).count == 2)
        let expired = try granary(["prune", bob, "--keep-last", "1", "--final-keep-within", "1s", "--json"])
        #expect(expired.status == 0, "\(expired.stderr)")
        #expect(try ShellTools.schemaProblems(expired.stdout, schema: "prune").isEmpty)
        #expect(archives(bob).isEmpty, "a retired user's archives outlived the final one: \(archives(bob))")
        let users = try granary(["users"])
        #expect(!users.stdout.contains(bob), "\(users.stdout)")
        #expect(try granary(["check"]).stderr.contains(bob) == false)
    }
}
