import ArgumentParser
import GranaryKit

/// A granary command: ArgumentParser declares its arguments, `execute` does its work through
/// GranaryKit and returns one result value, and `perform` prints that result.
///
/// Adding a command: a `struct XCommand: GranaryCommand` with `@OptionGroup var global:
/// GlobalOptions`, its arguments, `checkArguments()` for what can be checked without touching
/// anything, and `execute(_:)` returning an `XResult: CommandResult` (declared beside it: the
/// JSON document's fields and `render`, the text); then list it in `Granary.commands`, run
/// `make generate`, add docs/json/x.schema.json and the README's JSON table row.
protocol GranaryCommand: ParsableCommand {
    associatedtype Result: CommandResult
    var global: GlobalOptions { get }
    /// Whether a signal only asks the work to stop (the work polls `Interruption` and cleans
    /// up), rather than ending the process at once. For commands that leave temporaries.
    static var cleansUpOnSignals: Bool { get }
    /// Checks the arguments together, touching nothing: a `ValidationError` is a usage error.
    /// (Not ArgumentParser's `validate()`, which runs before an unknown option is reported:
    /// `backup --al` would say "name users to back up" instead of "unknown option '--al'".)
    func checkArguments() throws
    /// Does the work; a thrown error is the failure of the whole run.
    func execute(_ console: Console) throws -> Result
}

extension GranaryCommand {
    static var cleansUpOnSignals: Bool { false }
    func checkArguments() throws {}

    /// Runs the command with the console its options ask for and prints the result.
    func perform(_ console: Console) throws -> ExitStatus {
        try checkArguments()
        if Self.cleansUpOnSignals { Interruption.installHandlers() }
        var onWait: (@Sendable (UserLock.Wait) -> Void)?
        if console.interactive && !console.quiet {
            onWait = { wait in
                console.note(
                    "waiting for the lock on \(wait.user.rawValue) held by \(LockHolderText.describe(wait.holder))")
            }
        }
        UserLock.configure(command: "granary " + Self._commandName, onWait: onWait)
        return console.emit(try execute(console))
    }

    mutating func run() throws {
        let status = try perform(Console(global))
        if status != .success { throw ExitCode(status.rawValue) }
    }
}

/// How a lock's holder is named: `pid 1234 (granary backup, since 10:15:02)`.
enum LockHolderText {
    static func describe(_ holder: UserLock.Holder) -> String {
        var text = holder.pid.map { "pid \($0)" } ?? "another run"
        var details: [String] = []
        if let command = holder.command { details.append(command) }
        if let since = holder.since { details.append("since " + LockError.clockTime(since)) }
        if !details.isEmpty { text += " (" + details.joined(separator: ", ") + ")" }
        return text
    }
}
