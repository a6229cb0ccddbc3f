import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

/// What an admin installs and pastes works as installed: the README's cron lines under cron's
/// bare environment, fish's completion where fish 3.6 looks for a /usr/local install, and bash
/// completion that inserts nothing when there is no candidate.
@Suite("an admin's week: cron lines, completions as installed")
struct AdminInstallTests {
    static let package = GranaryProcess.packageDirectory

    @Test("the README's /etc/cron.d lines use absolute paths and run under env -i with cron's PATH")
    func cronLines() throws {
        let readme = try String(contentsOfFile: Self.package + "/README.md", encoding: .utf8)
        let block = try #require(readme.components(separatedBy: "# /etc/cron.d/granary").dropFirst().first)
        let lines = block.split(separator: "\n").prefix(4).map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { $0.first.map { $0.isNumber || $0 == "*" } ?? false }
        #expect(lines.count == 3, "\(lines)")
        let folder = TemporaryFolder("granary-cron")
        let root = folder.child("root"), repo = initializedRepository(folder.child("repo"))
        try GranaryProcess.run([root], tool: "granary-sample")
        for line in lines {
            // minute hour day month weekday user command…
            let fields = line.split(separator: " ", maxSplits: 6, omittingEmptySubsequences: true)
            #expect(fields.count == 7 && fields[5] == "root", "\(line)")
            let command = fields[6].trimmingCharacters(in: .whitespaces)
            for word in command.split(separator: " ") where word.contains("granary") || word == "logger" {
                #expect(
                    word.hasPrefix("/") || word.hasPrefix("\"") || word == "-t" || word == "granary",
                    "not absolute: \(word) in \(line)")
            }
            #expect(command.hasPrefix("/usr/bin/granary "), "the package's path: \(line)")
            // Run it as cron would: env -i, PATH=/usr/bin:/bin, the built granary in place of the installed one.
            let run = command.replacingOccurrences(
                of: "/usr/bin/granary", with: GranaryProcess.binDirectory + "/granary")
            let result = try GranaryProcess.runExecutable(
                "/usr/bin/env",
                [
                    "-i", "PATH=/usr/bin:/bin", "HOME=/root", "GRANARY_ROOT=\(root)", "GRANARY_REPO=\(repo)", "/bin/sh",
                    "-c", run,
                ])
            #expect(result.status == 0, "\(line): \(result.stderr)")
            #expect(result.stdout.isEmpty && result.stderr.isEmpty, "cron would mail: \(result.stdout)\(result.stderr)")
        }
    }

    @Test(
        "a /usr/local install puts fish's completion where fish finds it (fish_complete_path), /usr in vendor_completions.d"
    )
    func fishPath() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/fish") else {
            Issue.record("fish is not installed (make deps installs it)")
            return
        }
        let folder = TemporaryFolder("granary-fish")
        for (prefix, expected) in [
            ("/usr/local", "/etc/fish/completions"), ("/usr", "/usr/share/fish/vendor_completions.d"),
        ] {
            let result = try GranaryProcess.runExecutable(
                "/usr/bin/make",
                [
                    "-s", "-C", Self.package, "install-files", "PREFIX=\(prefix)", "DESTDIR=\(folder.child(prefix))",
                    "BINARY=\(GranaryProcess.binDirectory)/granary",
                ])
            #expect(result.status == 0, "\(result.stderr)")
            #expect(FileSystem.isRegularFile(folder.child(prefix) + expected + "/granary.fish"), "PREFIX=\(prefix)")
            // Where fish looks, with the environment of a root shell on a server (no XDG_DATA_DIRS).
            let path = try GranaryProcess.runExecutable(
                "/usr/bin/env",
                [
                    "-i", "HOME=/root", "PATH=/usr/bin:/bin", "/usr/bin/fish", "-c",
                    "string join \\n -- $fish_complete_path",
                ])
            #expect(path.stdout.split(separator: "\n").contains(Substring(expected)), "fish looks in: \(path.stdout)")
        }
    }

    @Test("bash: granary restore zz<TAB> with no candidate offers nothing (no empty candidate, so no stray /)")
    func bashNoCandidate() throws {
        let folder = TemporaryFolder("granary-bash")
        let root = folder.child("root"), repo = initializedRepository(folder.child("repo"))
        try GranaryProcess.run([root], tool: "granary-sample")
        try GranaryProcess.run(["backup", "--all", "--root", root, "--repo", repo])
        for words in [
            ["granary", "restore", "zz"], ["granary", "restore", "alice@example.com", "zz"],
            ["granary", "users", "zz"],
        ] {
            let quoted = words.map(ShellQuoting.word).joined(separator: " ")
            let script = """
                source /usr/share/bash-completion/bash_completion
                source '\(Self.package)/completions/granary.bash'
                COMP_WORDS=(\(quoted))
                COMP_CWORD=\(words.count - 1)
                COMP_LINE="${COMP_WORDS[*]}"
                COMP_POINT=${#COMP_LINE}
                _granary granary "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
                echo "count=${#COMPREPLY[@]}"
                """
            let result = try GranaryProcess.runExecutable(
                "/bin/bash", ["--norc", "-c", script],
                environment: [
                    "PATH": GranaryProcess.binDirectory + ":/usr/bin:/bin", "GRANARY_ROOT": root, "GRANARY_REPO": repo,
                ])
            #expect(result.stdout.contains("count=0"), "\(words): \(result.stdout)\(result.stderr)")
        }
    }

    @Test(
        "every path of a granary binary in the shipped pages is one the package installs, /usr/local/bin only beside make install"
    )
    func shippedPaths() throws {
        // What debian/rules installs: "$(PKG)/usr/bin/granary" and the like.
        let rules = try String(contentsOfFile: Self.package + "/debian/rules", encoding: .utf8)
        let installed = Set(Self.binaryPaths(in: rules).map { $0.path })
        #expect(installed.contains("/usr/bin/granary"), "\(installed)")
        // What the package ships to be read: README, docs/, the man pages, examples/ (units, config).
        var pages = ["README.md"]
        for folder in ["docs", "man", "examples"] {
            let found = FileManager.default.enumerator(atPath: Self.package + "/" + folder)?.allObjects as? [String]
            pages += (found ?? []).filter { !$0.hasPrefix("src/") || folder == "man" }.map { folder + "/" + $0 }
                .filter { FileSystem.isRegularFile(Self.package + "/" + $0) }
        }
        var stray: [String] = []
        for page in pages {
            guard let text = try? String(contentsOfFile: Self.package + "/" + page, encoding: .utf8) else { continue }
            let lines = text.components(separatedBy: "\n")
            for (path, index) in Self.binaryPaths(in: text) where !installed.contains(path) {
                let line = Self.lineNumber(of: index, in: text)
                let near = lines[max(0, line - 4)..<min(lines.count, line + 3)].joined(separator: " ")
                if path.hasPrefix("/usr/local/bin/") && near.contains("make install") { continue }
                stray.append("\(page):\(line): \(path)")
            }
        }
        #expect(stray.isEmpty, "paths the package does not install: \(stray)")
    }

    /// Every `/usr/bin/granary…`, `/usr/local/bin/granary…`, `/usr/sbin/granary…` in a text, with where it starts.
    static func binaryPaths(in text: String) -> [(path: String, index: String.Index)] {
        let pattern = try! NSRegularExpression(pattern: "/usr/(local/)?s?bin/granary[a-z-]*")
        let range = NSRange(text.startIndex..., in: text)
        return pattern.matches(in: text, range: range).compactMap { match in
            guard let found = Range(match.range, in: text) else { return nil }
            return (String(text[found]), found.lowerBound)
        }
    }

    static func lineNumber(of index: String.Index, in text: String) -> Int {
        text[..<index].reduce(1) { $1 == "\n" ? $0 + 1 : $0 }
    }
}
