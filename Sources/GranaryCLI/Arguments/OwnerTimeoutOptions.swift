import ArgumentParser
import GranaryKit

/// `--owner-timeout`, taken by every command that pauses a store's owner (restore, reset).
struct OwnerTimeoutOptions: ParsableArguments {
    @Option(
        name: .customLong("owner-timeout"), parsing: .unconditional,
        help: ArgumentHelp(
            "How long an owner has to acknowledge the pause: 10s, 0.5 (default: 10s).", valueName: "duration"),
        transform: ArgumentValues.timeout(within: SettingLimits.ownerTimeout))
    var ownerTimeout: Duration?

    /// The flag's value, else the configured one.
    func timeout(_ settings: Settings) -> Duration { ownerTimeout ?? settings.ownerTimeout.value }
}
