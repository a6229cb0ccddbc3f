import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The settings of one run, built once by the program that embeds GranaryKit (the `granary`
/// command builds it from its flags, environment and configuration file) and handed to every
/// operation: backups, restores, recovery, retire, and the repositories opened for the run.
///
/// Nothing in GranaryKit reads a process-wide setting instead: a default set before the
/// configuration was read, or a worker process that never set it, cannot silently win over what
/// the configuration says. A worker process (`UserWorkers`) builds its own context from the same
/// command line and configuration as its parent.
public struct RunContext: Sendable, Equatable {
    /// How long an owner has to acknowledge a pause (`owner_timeout`): a restore, a reset, and the
    /// recovery any command on a user runs first (a backup that finishes an interrupted restore).
    public var ownerTimeout: Duration = .seconds(10)
    /// How long to wait for a user's lock (`lock_timeout`).
    public var lockTimeout: Duration = .seconds(60)
    /// The time budget and memory ceiling of every SQLite connection on a user's content (`[limits]`).
    public var limits: ContentLimits = .defaults
    /// Whether granary's own CPU work may run under `SCHED_IDLE` (``CPUYield``).
    public var yieldPermitted = true
    /// The host this run's archives are written as (`--host`, `host =`; else the machine's name).
    public var host: String = HostName.machine
    /// The host whose archives listings show, with the unmarked ones; nil: every host's.
    public var hostScope: String?
    /// The time bounds of every remote operation (`[remote]`).
    public var remote: RemoteLimits = .defaults
    /// Tables a reset keeps with their rows, besides the built-in ones (`[reset] keep_tables`).
    public var resetKeepTables: [String] = []
    /// The file of `KEY=VALUE` lines rclone's environment is also read from (`remote_environment`
    /// in the configuration; ``RemoteEnvironment``), nil for none.
    public var remoteEnvironmentFile: String?

    /// The library's defaults: this machine's host name, listings of every host, the default
    /// timeouts and limits.
    public init() {}

    /// The defaults (see ``init()``).
    public static let defaults = RunContext()
}

/// Host names as granary takes them (``RunContext/host``; `Hosts` in the repository layer uses the
/// same rule).
public enum HostName {
    /// The machine's host name (its first label when it is not a valid host name as a whole).
    public static var machine: String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "localhost" }
        let name = String(cString: buffer)
        if isValid(name) { return name }
        let first = String(name.prefix { $0 != "." })
        return isValid(first) ? first : "localhost"
    }

    /// Host names: 1 to 64 of `A-Z a-z 0-9 . _ -`, starting with a letter or digit.
    public static func isValid(_ name: String) -> Bool {
        guard !name.isEmpty, name.utf8.count <= 64, let first = name.unicodeScalars.first,
            ("a"..."z").contains(first) || ("A"..."Z").contains(first) || ("0"..."9").contains(first)
        else { return false }
        return name.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "."
                || $0 == "_" || $0 == "-"
        }
    }
}
