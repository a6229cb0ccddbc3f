import Foundation
import GranaryKit

/// Where a setting's value came from, for `granary config` and error messages.
public enum SettingSource: String, Sendable, Codable {
    case flag, environment, file, defaultValue = "default"
}

/// A resolved setting: its value and where it came from.
public struct Setting<Value: Sendable>: Sendable {
    public let value: Value
    public let source: SettingSource

    public init(_ value: Value, from source: SettingSource) {
        self.value = value
        self.source = source
    }
}

/// The settings every command shares, resolved with the precedence granary.toml(5) documents:
/// a flag beats the environment, which beats the configuration file, which beats the default.
public struct Settings: Sendable {
    public var root: Setting<String>?
    public var repo: Setting<String>?
    /// This host's name (`--host`, `GRANARY_HOST`, `host =`, else the machine's host name).
    public var host = Setting(Hosts.machine, from: .defaultValue)
    /// Timeouts and retries of remote operations (`[remote]`).
    public var remote = Setting(RemoteLimits.defaults, from: .defaultValue)
    /// Archive compression (`compression`).
    public var compression = Setting(Compression.zstd, from: .defaultValue)
    /// Compression level (`level`); `nil` is the filter's own default.
    public var level = Setting<Int?>(nil, from: .defaultValue)
    /// The check `backup` runs on each snapshot (`check`).
    public var check = Setting(CheckMode.quick, from: .defaultValue)
    /// How long to wait for a user's lock (`lock_timeout`).
    public var lockTimeout = Setting(Duration.seconds(60), from: .defaultValue)
    /// How long an owner has to acknowledge a pause (`owner_timeout`).
    public var ownerTimeout = Setting(Duration.seconds(10), from: .defaultValue)
    /// How often `follow` ships each user's commits (`follow_interval`).
    public var followInterval = Setting(Duration.seconds(1), from: .defaultValue)
    /// The rclone runs uploading `follow`'s segments at once to a remote repository (`follow_uploads`).
    public var followUploads = Setting(4, from: .defaultValue)
    /// The most folders of one user `follow` watches (`follow_watches`).
    public var followWatches = Setting(FollowWatcher.defaultPerUser, from: .defaultValue)
    /// Users backed up at once by `backup --all` (`jobs`).
    public var jobs = Setting(1, from: .defaultValue)
    /// The retention policy `prune` and `backup --prune` apply (`[retention]`).
    public var retention = Setting(RetentionPolicy(), from: .defaultValue)
    /// Where each new archive is also sent (`[[mirror]]`, or `--mirror`, which replaces them).
    public var mirrors = Setting([String](), from: .defaultValue)
    /// The `[retention]` keys the configuration file sets; the others are defaults.
    public var retentionKeysFromFile: Set<String> = []
    /// The time budget and memory ceiling of SQLite's work on each store (`[limits]`).
    public var limits = Setting(ContentLimits.defaults, from: .defaultValue)
    /// The most bytes one user's backup copies (`[limits] bytes_per_user`; 0: no cap).
    public var bytesPerUser = Setting(SettingLimits.defaultBytesPerUser, from: .defaultValue)
    /// Tables a reset keeps with their rows, besides the built-in ones (`[reset] keep_tables`).
    public var resetKeepTables = Setting([String](), from: .defaultValue)
    /// Users `backup --all` and `check` leave out (`exclude`; `--exclude` adds to them).
    public var exclude = Setting([String](), from: .defaultValue)
    /// The file of `KEY=VALUE` lines root's rclone gets (`remote_environment`), when one is set.
    public var remoteEnvironment: Setting<String>?
    /// Whether `backup` writes delta archives when a base fits (`delta`, issue 35).
    public var delta = Setting(false, from: .defaultValue)
    /// The delta policy's knobs (`delta_max_chain`, `delta_max_age`, `delta_max_changed_percent`),
    /// with ``DeltaPolicy``'s defaults.
    public var deltaMaxChain = Setting(DeltaPolicy().maxChain, from: .defaultValue)
    public var deltaMaxAge = Setting(Duration.seconds(Int64(DeltaPolicy().maxAge)), from: .defaultValue)
    public var deltaMaxChangedPercent = Setting(Int(DeltaPolicy().maxChangedShare * 100), from: .defaultValue)
    /// Phase 2's run of deltas checked by their pages alone (`delta_pages_checks`).
    public var deltaPagesChecks = Setting(DeltaPolicy().maxPagesChecks, from: .defaultValue)

    /// The delta policy the settings give (``DeltaPolicy``; `forceFull` is the command's).
    public var deltaPolicy: DeltaPolicy {
        var policy = DeltaPolicy()
        policy.maxChain = deltaMaxChain.value
        policy.maxAge = deltaMaxAge.value.timeInterval
        policy.maxChangedShare = Double(deltaMaxChangedPercent.value) / 100
        // A check set in the configuration (`check = quick` or `full`) is run on every delta, as
        // before phase 2's own check; only the default lets a delta check its pages alone.
        policy.maxPagesChecks = check.source == .defaultValue ? deltaPagesChecks.value : 0
        return policy
    }

    /// The configuration file the settings were read from, when one was.
    public var configPath: String?

    /// The file a setting missing from every place should go in: the one read, else the first
    /// place granary looks (`~/.config/granary/config.toml`, root's `/etc/granary/config.toml`).
    var configFileToName: String {
        configPath ?? ConfigFile.defaultPaths(environment: ProcessInfo.processInfo.environment).first
            ?? "/etc/granary/config.toml"
    }
    /// Things a person should know about where the settings came from: a default configuration
    /// file root did not read (someone else could write it), and, for root acting through sudo,
    /// the root and repository the environment chose.
    public var notes: [String] = []

    /// Resolves root and repository from flags and the environment, then every other setting
    /// from the configuration file (no command-line flag or variable overrides those here:
    /// commands that take e.g. `--compression` apply it with `Setting(value, from: .flag)`).
    public static func resolve(
        rootFlag: String?, repoFlag: String?, config: ConfigFile? = nil,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> Settings {
        func pick(_ flag: String?, _ variable: String, _ file: String?) -> Setting<String>? {
            if let flag, !flag.isEmpty { return Setting(flag, from: .flag) }
            if let value = environment[variable], !value.isEmpty { return Setting(value, from: .environment) }
            if let file, !file.isEmpty { return Setting(file, from: .file) }
            return nil
        }
        var settings = Settings()
        settings.configPath = config?.path
        settings.root = pick(rootFlag, "GRANARY_ROOT", config?.root)
        settings.repo = pick(repoFlag, "GRANARY_REPO", config?.repo)
        if let host = pick(nil, "GRANARY_HOST", config?.host), Hosts.isValid(host.value) { settings.host = host }
        guard let config else { return settings }
        if let value = config.compression { settings.compression = Setting(value, from: .file) }
        if let value = config.level { settings.level = Setting(value, from: .file) }
        if let value = config.check { settings.check = Setting(value, from: .file) }
        if let value = config.lockTimeout { settings.lockTimeout = Setting(value, from: .file) }
        if let value = config.ownerTimeout { settings.ownerTimeout = Setting(value, from: .file) }
        if let value = config.followInterval { settings.followInterval = Setting(value, from: .file) }
        if let value = config.followUploads { settings.followUploads = Setting(value, from: .file) }
        if let value = config.followWatches { settings.followWatches = Setting(value, from: .file) }
        if let value = config.jobs { settings.jobs = Setting(value, from: .file) }
        if let value = config.retention { settings.retention = Setting(value, from: .file) }
        if let value = config.mirrors { settings.mirrors = Setting(value, from: .file) }
        settings.retentionKeysFromFile = config.retentionKeysSet
        if let value = config.limits { settings.limits = Setting(value, from: .file) }
        if let value = config.bytesPerUser { settings.bytesPerUser = Setting(value, from: .file) }
        if let value = config.resetKeepTables { settings.resetKeepTables = Setting(value, from: .file) }
        if let value = config.exclude { settings.exclude = Setting(value, from: .file) }
        if let value = config.remote { settings.remote = Setting(value, from: .file) }
        if let value = config.remoteEnvironment { settings.remoteEnvironment = Setting(value, from: .file) }
        if let value = config.delta { settings.delta = Setting(value, from: .file) }
        if let value = config.deltaMaxChain { settings.deltaMaxChain = Setting(value, from: .file) }
        if let value = config.deltaPagesChecks { settings.deltaPagesChecks = Setting(value, from: .file) }
        if let value = config.deltaMaxAge { settings.deltaMaxAge = Setting(value, from: .file) }
        if let value = config.deltaMaxChangedPercent { settings.deltaMaxChangedPercent = Setting(value, from: .file) }
        return settings
    }

    /// Finds and reads the configuration file (the search order of granary.toml(5)), then resolves.
    /// An explicit `--config` file (or `GRANARY_CONFIG`) must exist; the default paths may not.
    public static func load(
        rootFlag: String?, repoFlag: String?, configFlag: String?,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(ConfigError) -> Settings {
        var config: ConfigFile?
        var notes: [String] = []
        if let (path, required) = ConfigFile.locate(explicit: configFlag, environment: environment) {
            do {
                config = try ConfigFile.load(path: path)
            } catch .untrusted(let path, let reason) where !required {
                // A default path nobody asked for: root goes on without it, and says so.
                notes.append("ignoring the configuration file \(path): \(reason); as root granary reads only root's")
            }
        }
        var settings = resolve(rootFlag: rootFlag, repoFlag: repoFlag, config: config, environment: environment)
        if RootEnvironment.isSudo(environment: environment) {
            for (name, setting, variable) in [
                ("root", settings.root, "GRANARY_ROOT"), ("repository", settings.repo, "GRANARY_REPO"),
            ] {
                if let setting, setting.source == .environment {
                    notes.append("\(name) \(setting.value) comes from \(variable) in the environment")
                }
            }
        }
        if !RemoteEnvironment.isRootsOwn(environment: environment), geteuid() == 0,
            ([settings.repo?.value].compactMap { $0 } + settings.mirrors.value).contains(where: Repositories.isRemote)
        {
            let ignored = environment.keys.filter { RemoteEnvironment.allowed($0) || $0.hasPrefix("RCLONE_") }.sorted()
            if !ignored.isEmpty {
                notes.append(
                    "ignoring \(ignored.joined(separator: ", ")) from the environment: it is not root's own (sudo), and root's rclone takes its settings from remote_environment in the configuration (granary.toml(5))"
                )
            }
        }
        settings.notes = notes
        return settings
    }

    /// The root, or a usage error saying how to set it.
    public func requireRoot() throws(SettingsError) -> Root {
        guard let root else {
            throw .missing("root", flag: "--root", variable: "GRANARY_ROOT", key: "root", config: configFileToName)
        }
        return Root(path: root.value)
    }

    /// The repository, or a usage error saying how to set it. It must not be the root, lie in it
    /// or hold it, and it must exist already: only `granary init` makes one.
    /// `rememberListings`: a command that runs once and reads the same folders again asks a
    /// remote repository once a moment (``Repository/rememberListings()``).
    public func requireRepository(context: RunContext? = nil, rememberListings: Bool = false) throws
        -> any Repository
    {
        guard let repository = try repository(context: context) else {
            throw SettingsError.missing(
                "repository", flag: "--repo", variable: "GRANARY_REPO", key: "repo", config: configFileToName)
        }
        if rememberListings { repository.rememberListings() }
        try repository.requireExisting()
        return repository
    }

    /// The repository when one is set (checked against the root as ``requireRepository(context:)`` does).
    public func repository(context: RunContext? = nil) throws(RepositoryError) -> (any Repository)? {
        guard let repo else { return nil }
        let repository = try Repositories.open(repo.value, context: context ?? self.context)
        if let root { try repository.checkSeparate(from: Root(path: root.value)) }
        return repository
    }

    /// The mirrors (``mirrors``, or `flags` when any is given), each checked against the root as
    /// the repository is, and compared with the repository and with each other by what they are
    /// (``LocationIdentity``), not by how they are spelled. A configured mirror that is the
    /// repository given by `--repo` or `GRANARY_REPO` (working from a mirror after a disaster) is
    /// left out; any other mirror that is the repository, or another mirror, is refused (64).
    public func mirrorRepositories(
        flags: [String] = [], context: RunContext? = nil, rememberListings: Bool = false
    ) throws(RepositoryError) -> [any Repository] {
        let locations = flags.isEmpty ? mirrors.value : flags
        let primary = try repo.map { setting throws(RepositoryError) in
            LocationIdentity(try Repositories.open(setting.value, context: context ?? self.context))
        }
        var seen: [LocationIdentity: String] = [:]
        var result: [any Repository] = []
        for location in locations {
            let mirror = try Repositories.open(location, context: context ?? self.context)
            let identity = LocationIdentity(mirror)
            if let primary, identity == primary, let repo {
                // Working from the mirror (--repo naming it): it is not its own mirror.
                if flags.isEmpty && repo.source != .file { continue }
                throw .sameLocation(location, "the repository \(repo.value)")
            }
            if let other = seen[identity] { throw .sameLocation(location, "the mirror \(other)") }
            seen[identity] = location
            if let root { try mirror.checkSeparate(from: Root(path: root.value)) }
            if rememberListings { mirror.rememberListings() }
            result.append(mirror)
        }
        return result
    }
}

/// A setting that is missing or wrong.
public enum SettingsError: GranaryError, Sendable {
    case missing(String, flag: String, variable: String, key: String, config: String)
    case invalid(String)

    public var description: String {
        switch self {
        case .missing(let what, let flag, let variable, let key, let config):
            return "no \(what) is set (\(flag), \(variable), or \(key) in \(config))"
        case .invalid(let message): return message
        }
    }

}
