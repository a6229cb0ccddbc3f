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
        subcommands: [UsersCommand.self, BackupCommand.self, ListCommand.self, VerifyCommand.self, InspectCommand.self, CheckCommand.self, DeleteCommand.self, PruneCommand.self, RestoreCommand.self, ResetCommand.self, RecoverCommand.self, ConfigCommand.self]
    )

    static func main() {
        Interruption.unblockSignals()
        do {
            var command = try parseAsRoot()
            try command.run()
        } catch let error as GranaryError {
            Console.standard.fail(error)
        } catch {
            exit(withError: error)
        }
    }
}
