import Foundation

/// Running granary the ways an admin's shell does: on a terminal, with a closed standard
/// output or a closed pipe, and checking its JSON against the committed schemas.
enum ShellTools {
    static let package = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    /// Debian's Python, which `make deps` gives python3-jsonschema.
    static let python = "/usr/bin/python3"

    struct TerminalResult {
        let status: Int32
        /// What the terminal showed (standard output and error together), with `\r\n` as `\n`.
        let screen: String
    }

    /// Runs `granary ARGUMENTS` with standard input, output and error on a pseudo-terminal
    /// (Python's `pty`), as at an admin's prompt.
    static func runInTerminal(_ arguments: [String], environment: [String: String] = [:]) throws -> TerminalResult {
        let script = """
            import os, pty, sys
            pid, fd = pty.fork()
            if pid == 0:
                os.execv(sys.argv[1], sys.argv[1:])
            out = b""
            while True:
                try:
                    data = os.read(fd, 65536)
                except OSError:
                    break
                if not data:
                    break
                out += data
            _, status = os.waitpid(pid, 0)
            sys.stdout.buffer.write(out)
            sys.stderr.write(str(os.waitstatus_to_exitcode(status)))
            """
        // NO_COLOR empty counts as unset (the test runner may set it).
        var env = ["TERM": "xterm-256color", "NO_COLOR": ""]
        env.merge(environment) { $1 }
        let result = try GranaryProcess.runExecutable(
            python, ["-c", script, GranaryProcess.binDirectory + "/granary"] + arguments, environment: env)
        return TerminalResult(
            status: Int32(result.stderr.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1000,
            screen: result.stdout.replacingOccurrences(of: "\r\n", with: "\n"))
    }

    /// How a run ended when its standard output could not be written.
    struct Ended {
        /// The exit status, or `nil` when a signal ended it.
        let status: Int32?
        let signal: Int32?
        let stderr: String
    }

    /// Runs `granary ARGUMENTS` with standard output closed (`>&-`) or, with `pipe`, a pipe
    /// whose reading end is already closed.
    static func runWithBrokenOutput(_ arguments: [String], pipe: Bool) throws -> Ended {
        let script = """
            import os, subprocess, sys
            if sys.argv[1] == "pipe":
                r, w = os.pipe()
                os.close(r)
                p = subprocess.run(sys.argv[2:], stdout=w, stderr=subprocess.PIPE)
            else:
                os.close(1)
                p = subprocess.run(sys.argv[2:], stderr=subprocess.PIPE)
            sys.stderr.write(p.stderr.decode("utf-8", "replace"))
            os.write(2, ("\\nRETURNCODE %d" % p.returncode).encode())
            """
        let result = try GranaryProcess.runExecutable(
            python, ["-c", script, pipe ? "pipe" : "closed", GranaryProcess.binDirectory + "/granary"] + arguments)
        let parts = result.stderr.components(separatedBy: "\nRETURNCODE ")
        let code = Int32(parts.last?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "") ?? -1000
        return Ended(status: code >= 0 ? code : nil, signal: code < 0 ? -code : nil, stderr: parts.dropLast().joined())
    }

    /// The problems the JSON schema `docs/json/NAME.schema.json` finds in `document` (none: valid).
    static func schemaProblems(_ document: String, schema name: String) throws -> [String] {
        let script = """
            import json, sys, jsonschema
            schema = json.load(open(sys.argv[1]))
            jsonschema.Draft202012Validator.check_schema(schema)
            try:
                document = json.loads(sys.stdin.read())
            except ValueError as error:
                print("not one JSON document: %s" % error)
                sys.exit(1)
            for error in jsonschema.Draft202012Validator(schema).iter_errors(document):
                print("/".join(str(p) for p in error.absolute_path) + ": " + error.message)
            """
        let result = try GranaryProcess.runExecutable(
            python, ["-c", script, package + "/docs/json/\(name).schema.json"], stdin: document)
        if result.status != 0 && result.stdout.isEmpty { return ["the validator failed: \(result.stderr)"] }
        return result.stdout.split(separator: "\n").map(String.init)
    }

    /// Types `setup` and then `line` followed by TAB and Enter into an interactive `shell`
    /// (bash, zsh or fish) on a pseudo-terminal, where `granary` is a function that prints
    /// each argument as `<ARG>` (and hands `---completion` requests to the real binary), and
    /// returns the arguments the shell passed: what completion put on the line, as the shell
    /// itself reads it back.
    static func completeInShell(_ shell: String, setup: String, line: String, folder: String) throws -> [String] {
        let driver = """
            import os, pty, select, sys, time
            pid, fd = pty.fork()
            if pid == 0:
                os.chdir(sys.argv[1])
                os.execvp(sys.argv[2], sys.argv[2:])
            out = b""
            def pump(until=None, quiet=0.6, limit=20):
                global out
                start, last = time.time(), time.time()
                while time.time() - start < limit:
                    if until is not None and until in out:
                        return
                    if until is None and time.time() - last > quiet:
                        return
                    r, _, _ = select.select([fd], [], [], 0.05)
                    if r:
                        try:
                            data = os.read(fd, 65536)
                        except OSError:
                            return
                        if not data:
                            return
                        out += data
                        last = time.time()
            pump(quiet=1.0)
            os.write(fd, os.environ["SETUP"].encode() + b"; echo SETUP''DONE\\r")
            pump(until=b"SETUPDONE")
            pump(quiet=0.5)
            os.write(fd, os.environ["LINE"].encode() + b"\\t")
            pump(quiet=1.5)
            os.write(fd, b"\\r")
            pump(until=b"END-OF-ARGS\\r\\n")
            os.write(fd, b"exit\\r")
            pump(quiet=0.5, limit=3)
            sys.stdout.write(out.decode("utf-8", "replace"))
            """
        let arguments: [String]
        let function: String
        switch shell {
        case "bash":
            arguments = ["bash", "--norc", "-i"]
            function =
                #"granary() { if [[ $1 == ---completion ]]; then command granary "$@"; else printf "<%s>\n" "$@"; echo END-OF-ARGS; fi; }"#
        case "zsh":
            arguments = ["zsh", "-f", "-i"]
            function =
                #"granary() { if [[ $1 == ---completion ]]; then command granary "$@"; else printf "<%s>\n" "$@"; echo END-OF-ARGS; fi; }"#
        default:
            arguments = ["fish", "--no-config", "-i"]
            function =
                #"function granary; if test "$argv[1]" = ---completion; command granary $argv; else; printf "<%s>\n" $argv; echo END-OF-ARGS; end; end"#
        }
        let result = try GranaryProcess.runExecutable(
            python, ["-c", driver, folder] + arguments,
            environment: [
                "PATH": GranaryProcess.binDirectory + ":/usr/bin:/bin", "TERM": "dumb",
                "SETUP": setup + "; " + function, "LINE": line,
            ])
        let lines = result.stdout.replacingOccurrences(of: "\r", with: "").split(separator: "\n").map(String.init)
        guard let end = lines.lastIndex(of: "END-OF-ARGS") else {
            return ["(no END-OF-ARGS)", result.stdout, result.stderr]
        }
        var args: [String] = []
        for line in lines[..<end].reversed() {
            guard line.hasPrefix("<") && line.hasSuffix(">") else { break }
            args.insert(String(line.dropFirst().dropLast()), at: 0)
        }
        return args
    }
}
