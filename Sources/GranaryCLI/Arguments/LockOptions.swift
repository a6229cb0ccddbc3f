import ArgumentParser
import GranaryKit

/// `--lock-timeout`, taken by every command that takes a user's lock.
struct LockOptions: ParsableArguments {
    @Option(
        name: .customLong("lock-timeout"), parsing: .unconditional,
        help: ArgumentHelp(
            "How long to wait for another run on the same user: 30s, 2min, 0.5 (default: 1min).", valueName: "duration"),
        transform: ArgumentValues.timeout(within: SettingLimits.lockTimeout))
    var lockTimeout: Duration?

    /// The flag's value, else the configured one.
    func timeout(_ settings: Settings) -> Duration { lockTimeout ?? settings.lockTimeout.value }
}
