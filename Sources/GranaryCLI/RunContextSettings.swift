import Foundation
import GranaryKit

extension Settings {
    /// The run's context, built from these settings (and `GRANARY_YIELD`): what every core call
    /// of the command is given, so that no default of the library wins over the configuration.
    /// Commands with `--lock-timeout` or `--owner-timeout` put the flag's value in it
    /// (``LockOptions/context(_:)``, ``OwnerTimeoutOptions/context(_:)``).
    var context: RunContext {
        var context = RunContext()
        context.ownerTimeout = ownerTimeout.value
        context.lockTimeout = lockTimeout.value
        context.limits = limits.value
        context.yieldPermitted = ProcessInfo.processInfo.environment["GRANARY_YIELD"] != "0"
        // Archives are written as this host's, and every listing shows this host's (and unmarked) ones.
        context.host = host.value
        context.hostScope = host.value
        context.remote = remote.value
        context.resetKeepTables = resetKeepTables.value
        context.remoteEnvironmentFile = remoteEnvironment?.value
        return context
    }
}

extension LockOptions {
    /// `context` with the flag's lock timeout, when one was given.
    func context(_ context: RunContext) -> RunContext {
        var context = context
        if let lockTimeout { context.lockTimeout = lockTimeout }
        return context
    }
}

extension OwnerTimeoutOptions {
    /// `context` with the flag's owner timeout, when one was given.
    func context(_ context: RunContext) -> RunContext {
        var context = context
        if let ownerTimeout { context.ownerTimeout = ownerTimeout }
        return context
    }
}
