import ArgumentParser
import GranaryKit

/// The `granary` command: its subcommands and the options they all take.
struct Granary: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "granary",
        abstract: "Back up and restore per-user SQLite stores while their owners keep running.",
        discussion: """
            Exit codes: 0 success, 1 some items failed, 64 usage, 65 data error, 66 not found, \
            73 cannot create output, 74 I/O error, 75 temporary failure (retry), 129 hung up, 130 interrupted.
            """,
        version: GranaryVersion.current,
        subcommands: commands
    )

    /// Every command, in the order `granary --help` lists them. A new command is added here
    /// (its type conforms to `GranaryCommand`, with a result type of its own).
    static let commands: [ParsableCommand.Type] = [
        InitCommand.self, UsersCommand.self, BackupCommand.self, ListCommand.self, VerifyCommand.self,
        InspectCommand.self,
        CheckCommand.self, DeleteCommand.self, PruneCommand.self, RestoreCommand.self, ResetCommand.self,
        RetireCommand.self, RecoverCommand.self, SyncCommand.self, FollowCommand.self, AdoptCommand.self,
        ConfigCommand.self,
    ]

    /// The names a command line may start with.
    static var commandNames: [String] { commands.map { $0._commandName } }

    @OptionGroup var global: GlobalOptions
}
