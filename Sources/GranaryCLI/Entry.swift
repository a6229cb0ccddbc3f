import ArgumentParser
import Foundation
import GranaryKit

#if canImport(Glibc)
    import Glibc
#endif

/// The `granary` program: parse, run one command, print its result, exit with its status.
///
/// Every way a run can end goes through here: a command's result (`Console.emit`), an error
/// of the core (`GranaryError`: `granary: …` and `Try: …` with its exit code), a usage error
/// from ArgumentParser or from the command line check (the same format, exit 64), help and
/// version text (standard output, exit 0), and a failed write on standard output (exit 74).
public enum GranaryMain {
    /// Runs the command line of this process and exits.
    public static func main() -> Never {
        // As root, nothing in the environment may choose a program to run (the Swift crash
        // handler's SWIFT_BACKTRACE): re-executed without it before anything else happens.
        RootEnvironment.scrubAndReexec()
        TestHooks.apply()
        // File names are bytes; UTF-8 is how they are shown and how tar headers carry them.
        // libarchive converts names through the C library's character type: in the "C" locale
        // every non-ASCII name would be marked as raw bytes (hdrcharset=BINARY), which GNU tar
        // warns about. A name that is not UTF-8 is still stored exactly, as bytes.
        setlocale(LC_CTYPE, "C.UTF-8")
        StandardStreams.prepare()
        Interruption.unblockSignals()
        let status = run(argumentBytes())
        exit(StandardStreams.finish(status))
    }

    /// The command line's words, each made of its bytes as GranaryKit makes a file name
    /// (FolderName): a path that is not UTF-8 reaches the file it names, and a word that is not
    /// text is never taken for another (`CommandLine.arguments` turns such bytes into U+FFFD).
    static func argumentBytes() -> [String] {
        (1..<Int(CommandLine.argc)).map { index in
            guard let word = CommandLine.unsafeArgv[index] else { return "" }
            return FolderName.decode(
                Array(
                    UnsafeBufferPointer(
                        start: UnsafeRawPointer(word).assumingMemoryBound(to: UInt8.self), count: strlen(word))))
        }
    }

    /// Runs `arguments` (without the program name) and returns the exit status.
    static func run(_ arguments: [String]) -> Int32 {
        let words = CommandLineWords(arguments)
        var console = Console(
            json: words.has("--json"), quiet: words.has("-q", "--quiet"), verbose: words.has("-v", "--verbose"))
        do {
            try words.check()
            let command = try Granary.parseAsRoot(arguments)
            guard let command = command as? any GranaryCommand else {
                var other = command
                try other.run()
                return 0
            }
            console = Console(command.global)
            if let check = command as? CheckCommand, check.nagios { return check.performNagios(console, words: words) }
            return try command.perform(console).rawValue
        } catch {
            return report(error, console: console, words: words)
        }
    }

    /// Prints `error` in granary's one format and returns the exit status it stands for.
    static func report(_ error: Error, console: Console, words: CommandLineWords) -> Int32 {
        switch error {
        case let error as any GranaryError:
            console.fail(Failure(error))
            return error.exitStatus.rawValue
        case let error as CommandLineWords.Problem:
            if error.showsHelp { StandardStreams.error(Granary.helpMessage() + "\n") }
            console.fail(error.failure)
            return ExitStatus.usage.rawValue
        case let code as ExitCode:
            return code.rawValue
        default:
            // ArgumentParser's own errors, help and version requests included.
            let code = Granary.exitCode(for: error)
            if code == .success {
                StandardStreams.output(Granary.fullMessage(for: error) + "\n")
                return 0
            }
            let message = Granary.message(for: error)
            let usage = code == .validationFailure
            console.fail(
                Failure(
                    code: usage ? .usage : .partialFailure, message: CommandLineWords.sentence(message),
                    hint: usage ? Hint.commands([["granary"] + (words.command.map { [$0] } ?? []) + ["--help"]]) : nil))
            return usage ? ExitStatus.usage.rawValue : code.rawValue
        }
    }

    /// What the command line `arguments` parses to, without running anything or printing:
    /// `nil` when it parses and validates, else the exit status its error stands for. For
    /// the fuzz target, which feeds it argument vectors.
    public static func parseOnly(_ arguments: [String]) -> Int32? {
        let words = CommandLineWords(arguments)
        do {
            try words.check()
            let command = try Granary.parseAsRoot(arguments)
            try (command as? any GranaryCommand)?.checkArguments()
            return nil
        } catch let error as any GranaryError {
            return error.exitStatus.rawValue
        } catch is CommandLineWords.Problem {
            return ExitStatus.usage.rawValue
        } catch {
            return Granary.exitCode(for: error).rawValue
        }
    }
}
