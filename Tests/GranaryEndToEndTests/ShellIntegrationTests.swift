import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

/// The committed completion scripts and man pages, exercised with the real shells and formatters.
@Suite("completions and man pages")
struct ShellIntegrationTests {
    static let package = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    static func which(_ tool: String) -> String? {
        for dir in ["/usr/bin", "/bin", "/usr/local/bin"]
        where FileManager.default.isExecutableFile(atPath: dir + "/" + tool) {
            return dir + "/" + tool
        }
        return nil
    }

    /// Completes `line` (ending where TAB is pressed) in a real bash with bash-completion loaded.
    func bashComplete(_ words: [String], environment: [String: String] = [:]) throws -> [String] {
        let quoted = words.map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
        let script = """
            source /usr/share/bash-completion/bash_completion
            source '\(Self.package)/completions/granary.bash'
            COMP_WORDS=(\(quoted))
            COMP_CWORD=\(words.count - 1)
            COMP_LINE="${COMP_WORDS[*]}"
            COMP_POINT=${#COMP_LINE}
            _granary granary "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
            printf '%s\\n' "${COMPREPLY[@]}"
            """
        let result = try GranaryProcess.runExecutable(
            "/bin/bash", ["--norc", "-c", script],
            environment: ["PATH": GranaryProcess.binDirectory + ":/usr/bin:/bin"].merging(environment) { $1 })
        #expect(result.stderr.isEmpty, "completion printed into the shell: \(result.stderr)")
        return result.stdout.split(separator: "\n").map(String.init)
    }

    func sampleRoot(_ folder: TemporaryFolder) throws -> String {
        let root = folder.child("root")
        try GranaryProcess.run([root], tool: "granary-sample")
        return root
    }

    @Test("bash completes granary users <TAB> with the sample users, from --root on the line")
    func bashUsers() throws {
        let folder = TemporaryFolder()
        let root = try sampleRoot(folder)
        let offered = try bashComplete(["granary", "users", "--root", root, ""])
        #expect(offered == ["alice@example.com", "bob@example.com", "carol@example.com", "dave@example.com"])
        #expect(try bashComplete(["granary", "users", "--root", root, "b"]) == ["bob@example.com"])
    }

    @Test(
        "bash completes granary restore <TAB> with the users and restore USER <TAB> with that user's archives, newest first"
    )
    func bashRestore() throws {
        let folder = TemporaryFolder()
        let root = try sampleRoot(folder)
        let repo = initializedRepository(folder.child("repo"))
        for label in ["first", "second"] {
            let made = try GranaryProcess.run([
                "backup", "--root", root, "--repo", repo, "--label", label, "alice@example.com",
            ])
            #expect(made.status == 0, "\(made.stderr)")
        }
        let archives = try FileManager.default.contentsOfDirectory(atPath: repo + "/alice@example.com")
            .filter { !$0.hasPrefix(".") }.sorted(by: >)
        #expect(archives.count == 2)
        let users = try bashComplete(["granary", "restore", "--root", root, "--repo", repo, ""])
        #expect(users == ["alice@example.com", "bob@example.com", "carol@example.com", "dave@example.com"])
        let offered = try bashComplete(["granary", "restore", "--root", root, "--repo", repo, "alice@example.com", ""])
        #expect(offered == archives)
        #expect(
            try bashComplete(["granary", "restore", "--root", root, "--repo", repo, "bob@example.com", ""]).isEmpty)
        #expect(try bashComplete(["granary", "restore", "--method", ""]) == ["auto", "swap", "online", "offline"])
        #expect(try bashComplete(["granary", "backup", "--root", root, "c"]) == ["carol@example.com"])
    }

    @Test("bash completion finds the root through GRANARY_ROOT and through the config file")
    func bashUsersFromEnvironmentAndConfig() throws {
        let folder = TemporaryFolder()
        let root = try sampleRoot(folder)
        let config = folder.child("c.toml")
        try "root = \"\(root)\"\n".write(toFile: config, atomically: true, encoding: .utf8)
        #expect(try bashComplete(["granary", "users", "--config", config, "c"]) == ["carol@example.com"])
        let offered = try bashComplete(["granary", "users", "d"], environment: ["GRANARY_ROOT": root])
        #expect(offered == ["dave@example.com"])
        // A --root on the line beats GRANARY_ROOT, as it does when the command runs.
        try FileManager.default.createDirectory(
            atPath: folder.child("other/frank@example.com"), withIntermediateDirectories: true)
        #expect(
            try bashComplete(
                ["granary", "users", "--root", folder.child("other"), ""], environment: ["GRANARY_ROOT": root])
                == ["frank@example.com"])
    }

    @Test("completion with a missing root or a broken config file offers nothing and prints nothing")
    func bashQuietOnErrors() throws {
        let folder = TemporaryFolder()
        #expect(try bashComplete(["granary", "users", "--root", folder.child("nope"), ""]).isEmpty)
        let config = folder.child("bad.toml")
        try "root = \n".write(toFile: config, atomically: true, encoding: .utf8)
        #expect(try bashComplete(["granary", "users", "--config", config, ""]).isEmpty)
    }

    @Test("a root with 1,000 users completes them all, skipping hidden folders and files")
    func thousandUsers() throws {
        let folder = TemporaryFolder()
        let root = folder.child("root")
        for index in 0..<1000 {
            try FileManager.default.createDirectory(
                atPath: root + "/user\(index)@example.com", withIntermediateDirectories: true)
        }
        try FileManager.default.createDirectory(atPath: root + "/.granary", withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: root + "/notes.txt", contents: Data())
        let offered = try bashComplete(["granary", "users", "--root", root, "user"])
        #expect(offered.count == 1000)
        #expect(!offered.contains(".granary") && !offered.contains("notes.txt"))
    }

    @Test("fish completes granary users <TAB> with the sample users, and the subcommands")
    func fishUsers() throws {
        guard let fish = Self.which("fish") else {
            Issue.record("fish is not installed (make deps installs it)")
            return
        }
        let folder = TemporaryFolder()
        let root = try sampleRoot(folder)
        func complete(_ line: String) throws -> [String] {
            let result = try GranaryProcess.runExecutable(
                fish,
                [
                    "--no-config", "-c", "source '\(Self.package)/completions/granary.fish'; complete -C '\(line)'",
                ], environment: ["PATH": GranaryProcess.binDirectory + ":/usr/bin:/bin"])
            #expect(result.stderr.isEmpty, "\(result.stderr)")
            return result.stdout.split(separator: "\n").map { String($0.split(separator: "\t")[0]) }
        }
        #expect(
            try complete("granary users --root \(root) ") == [
                "alice@example.com", "bob@example.com", "carol@example.com", "dave@example.com",
            ])
        #expect(try complete("granary users --root \(root) b") == ["bob@example.com"])
        #expect(try complete("granary us") == ["users"])
        let repo = initializedRepository(folder.child("repo"))
        #expect(try GranaryProcess.run(["backup", "--root", root, "--repo", repo, "dave@example.com"]).status == 0)
        let archives = try FileManager.default.contentsOfDirectory(atPath: repo + "/dave@example.com").filter {
            !$0.hasPrefix(".")
        }
        #expect(try complete("granary restore --root \(root) --repo \(repo) d") == ["dave@example.com"])
        #expect(try complete("granary restore --root \(root) --repo \(repo) dave@example.com ") == archives)
    }

    /// Types `line` and TAB twice into an interactive zsh (through zsh/zpty) with the committed
    /// `_granary` on its fpath, and returns the screen text with escape sequences removed.
    /// Reads until `expect` shows up (or 20 s pass), so a slow machine only makes it slower.
    func zshComplete(_ zsh: String, _ line: String, expect: String) throws -> String {
        let script = """
            zmodload zsh/zpty
            zpty z zsh -f -i
            zpty -w z "PROMPT='> '; fpath=('\(Self.package)/completions' \\$fpath); autoload -Uz compinit; compinit -u -D; zstyle ':completion:*' list-prompt ''; zstyle ':completion:*' menu no; unsetopt beep"
            zpty -w -n z $'\(line)\\t\\t'
            out=""
            for i in {1..100}; do
              while zpty -r -t z chunk 2>/dev/null; do out+=$chunk; done
              [[ $out == *$EXPECT* ]] && break
              sleep 0.2
            done
            print -r -- "$out"
            zpty -d z
            """
        let result = try GranaryProcess.runExecutable(
            zsh, ["-f", "-c", script],
            environment: ["PATH": GranaryProcess.binDirectory + ":/usr/bin:/bin", "EXPECT": expect])
        return result.stdout.replacingOccurrences(
            of: "\u{1B}\\[[0-9;?]*[a-zA-Z]", with: "", options: .regularExpression)
    }

    @Test("zsh completes granary restore <TAB> with the users and restore USER <TAB> with the user's archives")
    func zshRestore() throws {
        guard let zsh = Self.which("zsh") else {
            Issue.record("zsh is not installed (make deps installs it)")
            return
        }
        let folder = TemporaryFolder()
        let root = try sampleRoot(folder)
        let repo = initializedRepository(folder.child("repo"))
        #expect(
            try GranaryProcess.run(["backup", "--root", root, "--repo", repo, "--label", "zsh", "carol@example.com"])
                .status == 0)
        let archive = FileSystem.contents(of: repo + "/carol@example.com").first { !$0.hasPrefix(".") }!
        let users = try zshComplete(zsh, "granary restore --root \(root) --repo \(repo) ", expect: "dave@example.com")
        for user in ["alice@example.com", "bob@example.com", "carol@example.com", "dave@example.com"] {
            #expect(users.contains(user), "\(users)")
        }
        let archives = try zshComplete(
            zsh, "granary restore --root \(root) --repo \(repo) carol@example.com ", expect: archive)
        #expect(archives.contains(archive), "\(archives)")
    }

    @Test("zsh loads the committed _granary without errors")
    func zshLoads() throws {
        guard let zsh = Self.which("zsh") else {
            Issue.record("zsh is not installed (make deps installs it)")
            return
        }
        let result = try GranaryProcess.runExecutable(
            zsh,
            [
                "-f", "-c",
                "autoload -Uz compinit && compinit -u -D && source '\(Self.package)/completions/_granary' && whence -w _granary",
            ])
        #expect(result.status == 0 && result.stdout.contains("_granary: function"), "\(result.stdout)\(result.stderr)")
    }

    /// User ids an app could make from the e-mail addresses its users registered: RFC 5322
    /// quoted local parts with spaces, `$`, parentheses, backquotes, quotes, colons and globs.
    static let hostileUsers = [
        "\"$(touch pwned)\"@example.com", "\"`touch pwned2`\"@example.com", "\"it's me\"@example.com",
        "\"a:b\"@example.com", "\"x*y\"@example.com", "\"$HOME\"@example.com", "(comment)x@example.com",
    ]

    struct Typed: Sendable, CustomTestStringConvertible {
        let shell: String
        /// What is typed before TAB, after `granary users --root ROOT `.
        let prefix: String
        let expected: String
        var testDescription: String { "\(shell): \(prefix)<TAB>" }
    }

    static let typed: [Typed] = ["bash", "zsh", "fish"].flatMap { shell in
        [
            Typed(shell: shell, prefix: "'\"$(to", expected: hostileUsers[0]),
            Typed(shell: shell, prefix: "'\"`to", expected: hostileUsers[1]),
            Typed(shell: shell, prefix: "'\"it", expected: hostileUsers[2]),
            Typed(shell: shell, prefix: "'\"a:", expected: hostileUsers[3]),
            Typed(shell: shell, prefix: "'\"$H", expected: hostileUsers[5]),
            Typed(shell: shell, prefix: "'(c", expected: hostileUsers[6]),
        ]
    }

    @Test(
        "user ids with $, (, ), backquotes, quotes, colons and spaces complete as data in real bash, zsh and fish: inserted quoted, never run",
        arguments: typed)
    func hostileNames(_ typed: Typed) throws {
        guard Self.which(typed.shell) != nil else {
            Issue.record("\(typed.shell) is not installed (make deps installs it)")
            return
        }
        let folder = TemporaryFolder()
        let root = folder.child("root")
        for user in Self.hostileUsers { try FileSystem.makeDirectory(root + "/" + user) }
        try FileSystem.makeDirectory(folder.child("cwd"))
        let setup: String
        switch typed.shell {
        case "bash":
            setup =
                "PS1='$ '; source /usr/share/bash-completion/bash_completion; source '\(Self.package)/completions/granary.bash'"
        case "zsh":
            setup =
                "PROMPT='> '; fpath=('\(Self.package)/completions' $fpath); autoload -Uz compinit; compinit -u -D; unsetopt beep"
        default: setup = "function fish_prompt; echo '> '; end; source '\(Self.package)/completions/granary.fish'"
        }
        let arguments = try ShellTools.completeInShell(
            typed.shell, setup: setup, line: "granary users --root \(root) " + typed.prefix, folder: folder.child("cwd")
        )
        #expect(arguments == ["users", "--root", root, typed.expected], "\(typed.shell) passed \(arguments)")
        #expect(
            FileSystem.contents(of: folder.child("cwd")).isEmpty,
            "completion ran a command: \(FileSystem.contents(of: folder.child("cwd")))")
        #expect(FileSystem.contents(of: root).count == Self.hostileUsers.count)
    }

    @Test("the candidates themselves: every hostile id offered exactly, in bash's COMPREPLY, and nothing run")
    func hostileCandidates() throws {
        let folder = TemporaryFolder()
        let root = folder.child("root")
        for user in Self.hostileUsers { try FileSystem.makeDirectory(root + "/" + user) }
        let offered = try bashComplete(["granary", "users", "--root", root, ""])
        #expect(offered == Self.hostileUsers.sorted(), "\(offered)")
        #expect(!FileManager.default.fileExists(atPath: FileManager.default.currentDirectoryPath + "/pwned"))
    }

    @Test(
        "verify and delete offer USER/ and then USER/ARCHIVE without --user; --root X users <TAB> offers users; help <TAB> offers the commands"
    )
    func completionPlaces() throws {
        let folder = TemporaryFolder()
        let root = try sampleRoot(folder)
        let repo = initializedRepository(folder.child("repo"))
        #expect(try GranaryProcess.run(["backup", "--root", root, "--repo", repo, "--all"]).status == 0)
        let archive = FileSystem.contents(of: repo + "/dave@example.com").first { !$0.hasPrefix(".") }!
        for command in ["verify", "delete"] {
            #expect(try bashComplete(["granary", command, "--repo", repo, "da"]) == ["dave@example.com/"])
            #expect(
                try bashComplete(["granary", command, "--repo", repo, "dave@example.com/"]) == [
                    "dave@example.com/" + archive
                ])
            #expect(
                try bashComplete(["granary", command, "--repo", repo, "--user", "dave@example.com", ""]) == [archive])
        }
        #expect(
            try bashComplete(["granary", "--root", root, "users", ""])
                == ["alice@example.com", "bob@example.com", "carol@example.com", "dave@example.com"])
        #expect(Set(try bashComplete(["granary", "help", "re"])) == ["restore", "reset", "retire", "recover"])
        #expect(
            try bashComplete(["granary", "inspect", "--repo", repo, "dave@example.com/"]) == [
                "dave@example.com/" + archive
            ])
    }

    static let manPages: [String] = ((try? FileManager.default.contentsOfDirectory(atPath: package + "/man")) ?? [])
        .filter { $0.hasSuffix(".1") || $0.hasSuffix(".5") || $0.hasSuffix(".7") }.sorted()

    static let commands = [
        "users", "backup", "list", "verify", "inspect", "check", "delete", "prune", "restore", "reset", "retire",
        "recover", "sync", "follow", "config",
    ]

    @Test("there is a man page per command, named granary-COMMAND.1, plus granary.toml(5) and granary-reopen(7)")
    func manPagesPresent() throws {
        for page in ["granary.1", "granary.toml.5", "granary-reopen.7"] + Self.commands.map({ "granary-\($0).1" }) {
            #expect(Self.manPages.contains(page), "man/\(page) is missing: run make generate")
        }
        #expect(
            !Self.manPages.contains { $0.hasPrefix("granary.") && $0.hasSuffix(".1") && $0 != "granary.1" },
            "\(Self.manPages)")
    }

    @Test(
        "granary(1) lists every command, the global options and SEE ALSO; no page is headed 'BSD General Commands Manual'"
    )
    func manIndex() throws {
        let result = try GranaryProcess.runExecutable(
            "/usr/bin/man", ["-l", Self.package + "/man/granary.1"],
            environment: ["MANPAGER": "cat", "MANWIDTH": "100"])
        for command in Self.commands {
            #expect(result.stdout.contains("granary-\(command)(1)"), "granary(1) does not list \(command)")
        }
        for option in ["--root dir", "--repo location", "--config file", "--json", "-q, --quiet", "-v, --verbose"] {
            #expect(result.stdout.contains(option), "granary(1) lacks \(option)")
        }
        #expect(result.stdout.contains("granary-reopen(7)") && result.stdout.contains("granary.toml(5)"))
        for page in Self.manPages {
            let rendered = try GranaryProcess.runExecutable(
                "/usr/bin/man", ["-l", Self.package + "/man/" + page],
                environment: ["MANPAGER": "cat", "MANWIDTH": "100"])
            #expect(!rendered.stdout.contains("BSD"), "\(page): \(rendered.stdout.prefix(200))")
        }
        let backup = try GranaryProcess.runExecutable(
            "/usr/bin/man", ["-l", Self.package + "/man/granary-backup.1"],
            environment: ["MANPAGER": "cat", "MANWIDTH": "100"])
        #expect(
            backup.stdout.contains("NOTES") && backup.stdout.contains("skippable")
                && backup.stdout.contains("With --json"))
        let prune = try GranaryProcess.runExecutable(
            "/usr/bin/man", ["-l", Self.package + "/man/granary-prune.1"],
            environment: ["MANPAGER": "cat", "MANWIDTH": "100"])
        #expect(
            prune.stdout.contains("of the user's newest archive"), "keep-within is measured from the newest archive")
        let toml = try GranaryProcess.runExecutable(
            "/usr/bin/man", ["-l", Self.package + "/man/granary.toml.5"],
            environment: ["MANPAGER": "cat", "MANWIDTH": "100"])
        #expect(
            toml.stdout.contains("the user's newest archive") && !toml.stdout.contains("younger than"), "\(toml.stdout)"
        )
    }

    @Test("every man page lints clean with mandoc and groff -ww", arguments: manPages)
    func manLint(page: String) throws {
        let path = Self.package + "/man/" + page
        let mandoc = try GranaryProcess.runExecutable("/usr/bin/mandoc", ["-T", "lint", "-W", "warning", path])
        #expect(
            mandoc.status == 0 && mandoc.stdout.isEmpty && mandoc.stderr.isEmpty, "\(mandoc.stdout)\(mandoc.stderr)")
        let groff = try GranaryProcess.runExecutable("/usr/bin/groff", ["-ww", "-man", "-z", path])
        #expect(groff.status == 0 && groff.stderr.isEmpty, "\(groff.stderr)")
    }

    @Test("man -l renders granary.1 with the exit codes, environment, files and examples")
    func manRenders() throws {
        let result = try GranaryProcess.runExecutable(
            "/usr/bin/man", ["-l", Self.package + "/man/granary.1"],
            environment: ["MANPAGER": "cat", "MANWIDTH": "100"])
        #expect(result.status == 0, "\(result.stderr)")
        for heading in [
            "EXIT STATUS", "ENVIRONMENT", "FILES", "EXAMPLES", "GRANARY_ROOT", "75", "crontab", "granary restore",
        ] {
            #expect(result.stdout.contains(heading), "missing \(heading)")
        }
    }
}

@Suite("make install")
struct InstallTests {
    @Test(
        "after make install-files, man finds granary(1), granary-backup(1) also as 'man granary backup', granary-reopen(7) and granary.toml(5); uninstall removes everything"
    )
    func installThenMan() throws {
        let folder = TemporaryFolder()
        let prefix = folder.child("prefix")
        let package = ShellIntegrationTests.package
        // install-files is install without the release build: the debug binary is enough here.
        var result = try GranaryProcess.runExecutable(
            "/usr/bin/make",
            [
                "-s", "-C", package, "install-files", "PREFIX=\(prefix)",
                "BINARY=\(GranaryProcess.binDirectory)/granary",
            ])
        #expect(result.status == 0, "\(result.stderr)")
        for file in [
            "bin/granary", "bin/granary-reopen-check", "share/man/man1/granary.1", "share/man/man1/granary-backup.1",
            "share/man/man5/granary.toml.5", "share/man/man1/granary-reopen-check.1", "share/man/man7/granary-reopen.7",
            "share/bash-completion/completions/granary", "share/zsh/site-functions/_granary",
            "share/fish/vendor_completions.d/granary.fish",
        ] {
            #expect(FileManager.default.fileExists(atPath: prefix + "/" + file), "missing \(file)")
        }
        result = try GranaryProcess.runExecutable(
            "/usr/bin/man", ["granary"],
            environment: ["MANPATH": prefix + "/share/man", "MANPAGER": "cat"])
        #expect(result.status == 0 && result.stdout.contains("EXIT STATUS"), "\(result.stderr)")
        result = try GranaryProcess.runExecutable(
            "/usr/bin/man", ["5", "granary.toml"],
            environment: ["MANPATH": prefix + "/share/man", "MANPAGER": "cat"])
        #expect(result.status == 0 && result.stdout.contains("keep_within"), "\(result.stderr)")
        result = try GranaryProcess.runExecutable(
            "/usr/bin/man", ["granary-reopen-check"],
            environment: ["MANPATH": prefix + "/share/man", "MANPAGER": "cat"])
        #expect(result.status == 0 && result.stdout.contains("idle-timeout"), "\(result.stderr)")
        for words in [
            ["granary-backup"], ["granary", "backup"], ["7", "granary-reopen"], ["granary-restore"],
            ["granary", "prune"],
        ] {
            result = try GranaryProcess.runExecutable(
                "/usr/bin/man", words,
                environment: ["MANPATH": prefix + "/share/man", "MANPAGER": "cat", "MANWIDTH": "100"])
            let title = (words.count == 2 && words[0] != "7" ? words.joined(separator: "-") : words.last!).uppercased()
            #expect(
                result.status == 0 && result.stdout.hasPrefix(title + "("),
                "man \(words.joined(separator: " ")): \(result.stderr)")
        }
        result = try GranaryProcess.runExecutable(
            "/usr/bin/make", ["-s", "-C", package, "uninstall", "PREFIX=\(prefix)"])
        #expect(result.status == 0, "\(result.stderr)")
        let left =
            FileManager.default.enumerator(atPath: prefix)?.allObjects.compactMap { $0 as? String }
            .filter { !FileSystem.isDirectory(prefix + "/" + $0) } ?? []
        #expect(left.isEmpty, "left behind: \(left)")
    }
}
