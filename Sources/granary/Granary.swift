import ArgumentParser
import Foundation
import GranaryKit

/// The `granary` command: parses, calls GranaryKit, renders, and maps errors to exit codes.
@main
struct Granary: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "granary",
        abstract: "Back up and restore per-user SQLite stores while their owners keep running.",
        discussion: """
            Exit codes: 0 success, 1 some items failed, 64 usage, 65 data error, 66 not found, \
            73 cannot create output, 74 I/O error, 75 temporary failure (retry), 130 interrupted.
            """,
        version: GranaryVersion.current,
        subcommands: [UsersCommand.self, BackupCommand.self, ListCommand.self, VerifyCommand.self, InspectCommand.self, CheckCommand.self, DeleteCommand.self, PruneCommand.self, RestoreCommand.self, ResetCommand.self, RecoverCommand.self, SyncCommand.self, ConfigCommand.self]
    )

    static func main() {
        // As root, nothing in the environment may choose a program to run (the Swift crash
        // handler's SWIFT_BACKTRACE): re-executed without it before anything else happens.
        RootEnvironment.scrubAndReexec()
        CrashPoint.crashIfAsked()
        // File names are bytes; UTF-8 is how they are shown and how tar headers carry them.
        // libarchive converts names through the C library's character type: in the "C" locale
        // every non-ASCII name would be marked as raw bytes (hdrcharset=BINARY), which GNU tar
        // warns about. A name that is not UTF-8 is still stored exactly, as bytes.
        setlocale(LC_CTYPE, "C.UTF-8")
        Interruption.unblockSignals()
        do {
            var command = try parseAsRoot(Self.globalOptionsAfterCommand(Array(CommandLine.arguments.dropFirst())))
            try command.run()
        } catch let error as GranaryError {
            Console.standard.fail(error)
        } catch {
            exit(withError: error)
        }
    }

    /// The global options each subcommand declares (GlobalOptions), with whether they take a value.
    static let globalOptions: [String: Bool] = [
        "--root": true, "--repo": true, "--config": true, "--json": false, "-q": false, "--quiet": false,
        "-v": false, "--verbose": false,
    ]

    /// `granary --root R --repo P users` is how PRODUCT.md writes a command line; ArgumentParser
    /// only takes a subcommand's options after its name. Global options given before the
    /// subcommand are moved after it; anything else is left exactly as it was.
    static func globalOptionsAfterCommand(_ arguments: [String]) -> [String] {
        var leading: [String] = []
        var index = 0
        while index < arguments.count {
            let word = arguments[index]
            let name = word.split(separator: "=", maxSplits: 1).first.map(String.init) ?? word
            guard let takesValue = globalOptions[name] else { break }
            leading.append(word)
            if takesValue && !word.contains("=") {
                guard index + 1 < arguments.count else { return arguments }
                leading.append(arguments[index + 1])
                index += 1
            }
            index += 1
        }
        guard !leading.isEmpty, index < arguments.count, !arguments[index].hasPrefix("-") else { return arguments }
        return [arguments[index]] + leading + arguments[(index + 1)...]
    }
}
