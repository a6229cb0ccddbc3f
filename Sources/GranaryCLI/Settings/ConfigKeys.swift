import Foundation
import GranaryKit
import TOMLKit

/// One key of the configuration file (granary.toml(5)), declared once.
///
/// ``ConfigKey/all`` is the one list of keys: ``ConfigFile/parse(_:path:)`` reads a key only
/// through its row (a key without a row is an unknown key), `granary config` shows one line per
/// row in this order, the hints of an unknown key list the rows, and `make generate` writes the
/// keys of granary.toml(5) from them (`granary-config-keys` prints the rows for
/// `scripts/generate-config-man.py`). A new key is one new row, its setting in ``ConfigFile`` and
/// ``Settings``, and its paragraph in `man/src/granary.toml.5`.
public struct ConfigKey: Sendable {
    /// How a value is written, as granary.toml(5) names it.
    public enum Grammar: String, Sendable, Codable {
        case string, integer, duration, size, boolean
        case strings = "array of strings"
    }

    /// `name` at the top level, `table.name` inside a table (a `[[mirror]]` table's: `mirror.repo`).
    public let key: String
    public let grammar: Grammar
    /// The default, as `granary config` shows it when nothing sets the key.
    public let defaultValue: String
    /// What the key does, in one line.
    public let summary: String
    /// A value the file may hold for it, as TOML (the tests set every key with it).
    public let example: String
    /// Reads the key's value into the file's settings.
    let read: Read
    /// The key's line in `granary config`: its value and where it came from.
    let show: @Sendable (Settings) -> ConfigResult.Entry

    typealias Read =
        @Sendable (_ value: TOMLValueConvertible, _ key: String, _ reader: ConfigReader, _ config: inout ConfigFile)
        throws(ConfigError) -> Void

    /// The table the key is in (nil at the top level).
    public var table: String? { key.firstIndex(of: ".").map { String(key[..<$0]) } }
    /// The key's name in its table.
    public var name: String { key.firstIndex(of: ".").map { String(key[key.index(after: $0)...]) } ?? key }

    /// The row of `key` (`name` or `table.name`), if the file may hold it.
    public static func named(_ key: String) -> ConfigKey? { all.first { $0.key == key } }

    /// The names of the keys in `table` (nil: the top level's keys and tables).
    public static func names(in table: String?) -> [String] {
        guard let table else {
            var names: [String] = []
            for key in all where !names.contains(key.table ?? key.key) { names.append(key.table ?? key.key) }
            return names
        }
        return all.filter { $0.table == table }.map(\.name)
    }
}

/// A table of the configuration file: what its presence sets before any of its keys is read.
struct ConfigTable: Sendable {
    let name: String
    /// `[[name]]`: an array of tables, each read on its own.
    let isArray: Bool
    /// Run once when the file has the table: the table's settings start from their defaults.
    let begin: @Sendable (inout ConfigFile) -> Void

    static let all: [ConfigTable] = [
        ConfigTable(name: "mirror", isArray: true) { $0.mirrors = [] },
        ConfigTable(name: "retention", isArray: false) { $0.retention = RetentionPolicy() },
        ConfigTable(name: "limits", isArray: false) { $0.limits = ContentLimits.defaults },
        ConfigTable(name: "reset", isArray: false) { _ in },
        ConfigTable(name: "remote", isArray: false) { $0.remote = RemoteLimits.defaults },
    ]

    static func named(_ name: String) -> ConfigTable? { all.first { $0.name == name } }
}

extension ConfigKey {
    /// Every key, in `granary config`'s order.
    public static let all: [ConfigKey] = [
        setting(
            "root", .string, "(unset)", "The folder holding one sub-folder per user (--root, GRANARY_ROOT).",
            "\"/var/lib/app/users\"", \.root, { .string($0) }
        ) { value, key, reader, config throws(ConfigError) in
            config.root = try reader.place(try reader.string(value, key), key)
        },
        setting(
            "repo", .string, "(unset)",
            "Where archives go: a folder, s3:BUCKET/PREFIX or rclone:REMOTE:PATH (--repo, GRANARY_REPO).",
            "\"/srv/backup/granary\"", \.repo, { .string($0) }
        ) { value, key, reader, config throws(ConfigError) in
            config.repo = try reader.place(try reader.string(value, key), key)
        },
        setting(
            "host", .string, "the machine's host name",
            "This host's name in repositories and mirrors that several hosts share (--host, GRANARY_HOST).",
            "\"web-1\"", \.host, { .string($0) }
        ) { value, key, reader, config throws(ConfigError) in
            let name = try reader.string(value, key)
            guard Hosts.isValid(name) else { throw reader.invalid(key, InvalidHost(name: name).description) }
            config.host = name
        },
        setting(
            "compression", .string, "zstd", "How archives are compressed: zstd, gzip, xz or none.", "\"xz\"",
            \.compression, { .string($0.rawValue) }
        ) { value, key, reader, config throws(ConfigError) in
            config.compression = try reader.choice(value, key, Compression.self)
        },
        setting(
            "level", .integer, "(unset)",
            "The compression level: 1 to 19 for zstd, 0 to 9 for gzip and xz; unset: 3 for zstd, 6 for the others.",
            "5", \.level, { $0.map { .integer($0) } ?? .unset }
        ) { value, key, reader, config throws(ConfigError) in
            config.level = try reader.integer(value, key, SettingLimits.levels)
        },
        setting(
            "check", .string, "quick", "The SQLite check run on each snapshot: quick, full or none.", "\"full\"",
            \.check, { .string($0.rawValue) }
        ) { value, key, reader, config throws(ConfigError) in
            config.check = try reader.choice(value, key, CheckMode.self)
        },
        setting(
            "lock_timeout", .duration, "1min", "How long to wait for a user's lock: 0 (do not wait) to 7 days.",
            "\"2min\"", \.lockTimeout, { .string(DurationText.format($0)) }
        ) { value, key, reader, config throws(ConfigError) in
            config.lockTimeout = try reader.duration(value, key, SettingLimits.lockTimeout)
        },
        setting(
            "owner_timeout", .duration, "10s", "How long an owner has to acknowledge a pause: 1ms to 1 hour.",
            "\"20s\"", \.ownerTimeout, { .string(DurationText.format($0)) }
        ) { value, key, reader, config throws(ConfigError) in
            config.ownerTimeout = try reader.duration(value, key, SettingLimits.ownerTimeout)
        },
        setting(
            "follow_interval", .duration, "1s", "How often follow ships each user's commits: 10ms to 1 hour.",
            "\"500ms\"", \.followInterval, { .string(DurationText.format($0)) }
        ) { value, key, reader, config throws(ConfigError) in
            config.followInterval = try reader.duration(value, key, SettingLimits.followInterval)
        },
        setting(
            "follow_uploads", .integer, "4",
            "How many rclone runs follow keeps uploading segments at once to a remote repository: 1 to 64.", "8",
            \.followUploads, { .integer($0) }
        ) { value, key, reader, config throws(ConfigError) in
            config.followUploads = try reader.integer(value, key, SettingLimits.followUploads)
        },
        setting(
            "follow_watches", .integer, "1024",
            "The most folders of one user follow watches (inotify): 1 to 1000000; a user with more is read whole every 10 intervals instead.",
            "4096", \.followWatches, { .integer($0) }
        ) { value, key, reader, config throws(ConfigError) in
            config.followWatches = try reader.integer(value, key, SettingLimits.followWatches)
        },
        setting(
            "jobs", .integer, "1", "How many users backup --all works on at once: 1 to 64.", "2", \.jobs,
            { .integer($0) }
        ) { value, key, reader, config throws(ConfigError) in
            config.jobs = try reader.integer(value, key, SettingLimits.jobs)
        },
        setting(
            "exclude", .strings, "(unset)",
            "Users backup --all and check leave out, as --exclude (a name with no folder is no error).",
            "[\"test@example.com\"]", \.exclude, { $0.isEmpty ? .unset : .list($0) }
        ) { value, key, reader, config throws(ConfigError) in
            config.exclude = try reader.userIDs(value, key)
        },
        setting(
            "remote_environment", .string, "(unset)",
            "An absolute path to a root-owned file of KEY=VALUE lines that root's rclone gets.",
            "\"/etc/granary/remote.env\"", \.remoteEnvironment, { .string($0) }
        ) { value, key, reader, config throws(ConfigError) in
            let file = try reader.string(value, key)
            guard file.hasPrefix("/") else { throw reader.invalid(key, "\"\(file)\" is not an absolute path") }
            config.remoteEnvironment = file
        },
        setting(
            "delta", .boolean, "false",
            "Whether backup writes delta archives (the pages changed since the newest backup) when a base fits, as --delta.",
            "true", \.delta, { .boolean($0) }
        ) { value, key, reader, config throws(ConfigError) in
            config.delta = try reader.boolean(value, key)
        },
        setting(
            "delta_max_chain", .integer, "23",
            "With delta: a full after this many deltas on one full, 0 to 1000 (0: every backup a full).", "47",
            \.deltaMaxChain, { .integer($0) }
        ) { value, key, reader, config throws(ConfigError) in
            config.deltaMaxChain = try reader.integer(value, key, SettingLimits.deltaChain)
        },
        setting(
            "delta_max_age", .duration, "7d",
            "With delta: a full when the chain's full is older than this, 0 to 366 days.",
            "\"2d\"", \.deltaMaxAge, { .string(DurationText.format($0)) }
        ) { value, key, reader, config throws(ConfigError) in
            config.deltaMaxAge = try reader.duration(value, key, SettingLimits.deltaAge)
        },
        setting(
            "delta_max_changed_percent", .integer, "50",
            "With delta: a full when more than this percentage of the pages changed, 1 to 100.", "30",
            \.deltaMaxChangedPercent, { .integer($0) }
        ) { value, key, reader, config throws(ConfigError) in
            config.deltaMaxChangedPercent = try reader.integer(value, key, SettingLimits.deltaChangedPercent)
        },
        setting(
            "delta_pages_checks", .integer, "5",
            "With delta and follow: deltas in a row checked by their changed pages alone (check: pages) before the configured check runs again, 0 to 1000 (0: never; check = quick or full set also makes it 0).",
            "23", \.deltaPagesChecks, { .integer($0) }
        ) { value, key, reader, config throws(ConfigError) in
            config.deltaPagesChecks = try reader.integer(value, key, SettingLimits.deltaChain)
        },
        ConfigKey(
            key: "mirror.repo", grammar: .string, defaultValue: "(unset)",
            summary: "A repository every new archive is also sent to, one [[mirror]] table each.",
            example: "\"s3:acme-backups/granary\"",
            read: { value, key, reader, config throws(ConfigError) in
                guard let repo = value.string, !repo.isEmpty else { throw reader.mirrorWithoutRepo() }
                config.mirrors = (config.mirrors ?? []) + [try reader.place(repo, key)]
            },
            show: { settings in
                // Shown as `mirror`, the list of every [[mirror]]'s repo.
                ConfigResult.Entry(
                    key: "mirror", value: settings.mirrors.value.isEmpty ? .unset : .list(settings.mirrors.value),
                    source: settings.mirrors.value.isEmpty ? "default" : settings.mirrors.source.rawValue)
            }),
        retention("keep_last", "Keep the newest that many archives: 0 to 1000000, -1 for all.", \.keepLast),
        retention(
            "keep_hourly", "Keep the newest archive of each of that many most recent hours with one.", \.keepHourly),
        retention("keep_daily", "Keep the newest archive of each of that many most recent days with one.", \.keepDaily),
        retention(
            "keep_weekly", "Keep the newest archive of each of that many most recent ISO weeks with one.", \.keepWeekly),
        retention(
            "keep_monthly", "Keep the newest archive of each of that many most recent months with one.", \.keepMonthly),
        retention(
            "keep_yearly", "Keep the newest archive of each of that many most recent years with one.", \.keepYearly),
        retention(
            "keep_within", "0s", "Keep every archive taken within this long of the user's newest archive.", "\"2d\"",
            \.keepWithin),
        retention(
            "safety_keep_within", "7d", "Keep each safety archive this long, measured from now.", "\"14d\"",
            \.safetyKeepWithin),
        ConfigKey(
            key: "retention.final_keep_within", grammar: .duration, defaultValue: "(unset)",
            summary: "Keep each final archive this long, measured from now; unset: for ever.", example: "\"1y\"",
            read: { value, key, reader, config throws(ConfigError) in
                config.retention?.finalKeepWithin = try reader.span(value, key)
                config.retentionKeysSet.insert("final_keep_within")
            },
            show: { settings in
                retentionEntry(
                    "final_keep_within", settings,
                    settings.retention.value.finalKeepWithin.map { .string($0.description) } ?? .unset)
            }),
        ConfigKey(
            key: "retention.followed_keep_within", grammar: .duration, defaultValue: "(unset)",
            summary:
                "Keep follow's windows that ended within this long of now, with their base archives; unset: segments live as long as their base.",
            example: "\"7d\"",
            read: { value, key, reader, config throws(ConfigError) in
                config.retention?.followedKeepWithin = try reader.span(value, key)
                config.retentionKeysSet.insert("followed_keep_within")
            },
            show: { settings in
                retentionEntry(
                    "followed_keep_within", settings,
                    settings.retention.value.followedKeepWithin.map { .string($0.description) } ?? .unset)
            }),
        setting(
            "limits.time", .duration, "30s", "The time budget of SQLite's work on any store: 0 (none) to 1 day.",
            "\"1min\"", \.limits, { .string(DurationText.format($0.time)) }
        ) { value, key, reader, config throws(ConfigError) in
            config.limits?.time = try reader.duration(value, key, SettingLimits.contentTime)
        },
        setting(
            "limits.time_per_gib", .duration, "2min", "Added to the time budget for each GiB of the store: 0 to 1 day.",
            "\"3min\"", \.limits, { .string(DurationText.format($0.timePerGiB)) }
        ) { value, key, reader, config throws(ConfigError) in
            config.limits?.timePerGiB = try reader.duration(value, key, SettingLimits.contentTime)
        },
        setting(
            "limits.memory", .size, "512MiB", "The most SQLite heap one connection may hold: 0 (none) to 1 TiB.",
            "\"1GiB\"", \.limits, { ConfigResult.size($0.memory) }
        ) { value, key, reader, config throws(ConfigError) in
            config.limits?.memory = try reader.bytes(value, key, SettingLimits.contentMemory)
        },
        setting(
            "limits.bytes_per_user", .size, "100GiB", "The most one user's backup copies: 0 (no cap) to 1024 TiB.",
            "\"500GiB\"", \.bytesPerUser, { ConfigResult.size($0) }
        ) { value, key, reader, config throws(ConfigError) in
            config.bytesPerUser = try reader.bytes(value, key, SettingLimits.bytesPerUser)
        },
        setting(
            "reset.keep_tables", .strings, "(unset)", "Tables whose rows granary reset keeps, besides schema state.",
            "[\"app_settings\"]", \.resetKeepTables, { $0.isEmpty ? .unset : .list($0) }
        ) { value, key, reader, config throws(ConfigError) in
            config.resetKeepTables = try reader.tableNames(value, key)
        },
        setting(
            "remote.connect_timeout", .duration, "10s",
            "A connection to a remote not made within it fails: 1s to 1 hour.",
            "\"15s\"", \.remote, { .string(DurationText.format($0.connectTimeout)) }
        ) { value, key, reader, config throws(ConfigError) in
            config.remote?.connectTimeout = try reader.duration(value, key, SettingLimits.remoteTimeout)
        },
        setting(
            "remote.timeout", .duration, "30s",
            "A remote connection on which nothing moves this long fails: 1s to 1 hour.",
            "\"1min\"", \.remote, { .string(DurationText.format($0.timeout)) }
        ) { value, key, reader, config throws(ConfigError) in
            config.remote?.timeout = try reader.duration(value, key, SettingLimits.remoteTimeout)
        },
        setting(
            "remote.retries", .integer, "2", "How often a whole remote operation is tried: 1 to 20.", "3", \.remote,
            { .integer($0.retries) }
        ) { value, key, reader, config throws(ConfigError) in
            config.remote?.retries = try reader.integer(value, key, SettingLimits.remoteRetries)
        },
        setting(
            "remote.low_level_retries", .integer, "2", "How often each remote request is tried: 1 to 20.", "3",
            \.remote, { .integer($0.lowLevelRetries) }
        ) { value, key, reader, config throws(ConfigError) in
            config.remote?.lowLevelRetries = try reader.integer(value, key, SettingLimits.remoteRetries)
        },
    ]

    /// A key shown from one setting of ``Settings`` (its source is the setting's).
    private static func setting<V: Sendable>(
        _ key: String, _ grammar: Grammar, _ defaultValue: String, _ summary: String, _ example: String,
        _ setting: KeyPath<Settings, Setting<V>> & Sendable, _ value: @escaping @Sendable (V) -> ConfigResult.Value,
        read: @escaping Read
    ) -> ConfigKey {
        ConfigKey(
            key: key, grammar: grammar, defaultValue: defaultValue, summary: summary, example: example, read: read,
            show: { settings in
                let shown = settings[keyPath: setting]
                return ConfigResult.Entry(key: key, value: value(shown.value), source: shown.source.rawValue)
            })
    }

    /// ``setting(_:_:_:_:_:_:_:read:)`` for a setting that may be unset (root, repository…).
    private static func setting<V: Sendable>(
        _ key: String, _ grammar: Grammar, _ defaultValue: String, _ summary: String, _ example: String,
        _ setting: KeyPath<Settings, Setting<V>?> & Sendable, _ value: @escaping @Sendable (V) -> ConfigResult.Value,
        read: @escaping Read
    ) -> ConfigKey {
        ConfigKey(
            key: key, grammar: grammar, defaultValue: defaultValue, summary: summary, example: example, read: read,
            show: { settings in
                let shown = settings[keyPath: setting]
                return ConfigResult.Entry(
                    key: key, value: shown.map { value($0.value) } ?? .unset,
                    source: shown?.source.rawValue ?? "default")
            })
    }

    /// A `[retention]` count: -1 (all) to 1000000, 0 by default.
    private static func retention(
        _ name: String, _ summary: String, _ field: WritableKeyPath<RetentionPolicy, Int> & Sendable
    ) -> ConfigKey {
        ConfigKey(
            key: "retention." + name, grammar: .integer, defaultValue: "0", summary: summary, example: "7",
            read: { value, key, reader, config throws(ConfigError) in
                config.retention?[keyPath: field] = try reader.integer(value, key, SettingLimits.retentionCount)
                config.retentionKeysSet.insert(name)
            },
            show: { retentionEntry(name, $0, .integer($0.retention.value[keyPath: field])) })
    }

    /// A `[retention]` span.
    private static func retention(
        _ name: String, _ defaultValue: String, _ summary: String, _ example: String,
        _ field: WritableKeyPath<RetentionPolicy, TimeSpan> & Sendable
    ) -> ConfigKey {
        ConfigKey(
            key: "retention." + name, grammar: .duration, defaultValue: defaultValue, summary: summary,
            example: example,
            read: { value, key, reader, config throws(ConfigError) in
                config.retention?[keyPath: field] = try reader.span(value, key)
                config.retentionKeysSet.insert(name)
            },
            show: { retentionEntry(name, $0, .string($0.retention.value[keyPath: field].description)) })
    }

    /// A `[retention]` key's line: from the file when the file set it, else the default.
    private static func retentionEntry(_ name: String, _ settings: Settings, _ value: ConfigResult.Value)
        -> ConfigResult.Entry
    {
        ConfigResult.Entry(
            key: "retention." + name, value: value,
            source: settings.retentionKeysFromFile.contains(name) ? "file" : "default")
    }
}

/// Reads the values of one configuration file, naming the file, the line and the key in every
/// refusal.
struct ConfigReader {
    let path: String
    let locator: KeyLocator

    func fail(_ key: String, expected: String, found: TOMLValueConvertible) -> ConfigError {
        .wrongType(path: path, line: locator.line(of: key), key: key, expected: expected, found: found.type.description)
    }

    func invalid(_ key: String, _ message: String) -> ConfigError {
        .invalidValue(path: path, line: locator.line(of: key), key: key, message: message)
    }

    func unknown(_ key: String) -> ConfigError {
        .unknownKey(path: path, line: locator.line(of: key), key: key)
    }

    /// A `[[mirror]]` without a usable `repo`.
    func mirrorWithoutRepo() -> ConfigError {
        .invalidValue(
            path: path, line: locator.line(of: "mirror"), key: "mirror.repo",
            message: "each [[mirror]] needs repo = \"LOCATION\"")
    }

    /// A folder or repository location: absolute (cron, systemd and a shell run granary in
    /// different folders, so a relative path would name a different place in each), never
    /// starting with `~` (not expanded), or a remote location.
    func place(_ text: String, _ key: String) throws(ConfigError) -> String {
        if Repositories.isRemote(text) || text.isEmpty { return text }
        if let found = PathText.tildeProblem(text) {
            throw invalid(key, "\"\(text)\" \(found.problem): \(found.hint)")
        }
        guard text.hasPrefix("/") else {
            throw invalid(
                key,
                "\"\(text)\" is a relative path: write it from / (cron, systemd and a shell start granary in different folders)"
            )
        }
        return text
    }

    func integer(_ value: TOMLValueConvertible, _ key: String, _ range: ClosedRange<Int>) throws(ConfigError) -> Int {
        guard let int = value.int else { throw fail(key, expected: "an integer", found: value) }
        guard range.contains(int) else {
            throw invalid(key, "\(int) is out of range: it must be \(range.lowerBound) to \(range.upperBound)")
        }
        return int
    }

    func boolean(_ value: TOMLValueConvertible, _ key: String) throws(ConfigError) -> Bool {
        guard let bool = value.bool else { throw fail(key, expected: "true or false", found: value) }
        return bool
    }

    func string(_ value: TOMLValueConvertible, _ key: String) throws(ConfigError) -> String {
        guard let string = value.string else { throw fail(key, expected: "a string", found: value) }
        return string
    }

    /// One of the names of `Choice` (`zstd`, `quick`…).
    func choice<Choice: RawRepresentable & CaseIterable>(_ value: TOMLValueConvertible, _ key: String, _: Choice.Type)
        throws(ConfigError) -> Choice where Choice.RawValue == String
    {
        let name = try string(value, key)
        guard let choice = Choice(rawValue: name) else {
            throw invalid(key, "\"\(name)\" is not one of \(Choice.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return choice
    }

    /// A retention span: the grammar of every duration (`DurationText`, months included), a
    /// bare number of seconds alike as text or as a TOML integer or float.
    func span(_ value: TOMLValueConvertible, _ key: String) throws(ConfigError) -> TimeSpan {
        guard let text = DurationSetting.text(of: value) else {
            throw fail(key, expected: "a duration such as \"7d\" or \"6mo\"", found: value)
        }
        guard let span = DurationText.span(text), span.seconds() <= Double(SettingLimits.longestDuration) else {
            throw invalid(key, "\"\(text)\": " + (DurationText.problem(text) ?? "more than 100 years"))
        }
        return span
    }

    /// A duration within `range`: a duration text, or plain seconds as a TOML integer or float
    /// (``DurationSetting``, the one grammar of every duration key and option).
    func duration(_ value: TOMLValueConvertible, _ key: String, _ range: ClosedRange<Duration>) throws(ConfigError)
        -> Duration
    {
        guard let text = DurationSetting.text(of: value) else {
            throw fail(key, expected: "a duration \(DurationSetting.examples)", found: value)
        }
        switch DurationSetting.parse(text, within: range) {
        case .success(let duration): return duration
        case .failure(let problem): throw invalid(key, problem.message)
        }
    }

    /// A size: a number of bytes or a size text (`512MiB`), within `range`.
    func bytes(_ value: TOMLValueConvertible, _ key: String, _ range: ClosedRange<Int64>) throws(ConfigError) -> Int64 {
        let count: Int64
        if let number = value.int {
            count = Int64(number)
        } else {
            guard let text = value.string else {
                throw fail(key, expected: "a size such as \"512MiB\" or \"2GiB\"", found: value)
            }
            guard let parsed = ByteCountText.bytes(text) else {
                throw invalid(
                    key, "\"\(text)\" is not a size (use a number with KiB, MiB, GiB or TiB, e.g. \"512MiB\")")
            }
            count = parsed
        }
        guard range.contains(count) else {
            throw invalid(
                key,
                "\(count) is out of range: it must be \(ByteCountText.render(range.lowerBound)) to \(ByteCountText.render(range.upperBound)) (0: none)"
            )
        }
        return count
    }

    /// An array of table names, each a non-empty string.
    /// An array of user ids, each valid (``UserID``).
    func userIDs(_ value: TOMLValueConvertible, _ key: String) throws(ConfigError) -> [String] {
        guard let array = value.array else { throw fail(key, expected: "an array of user ids", found: value) }
        var names: [String] = []
        for element in array {
            guard let name = element.string else { throw invalid(key, "every entry must be a user id in quotes") }
            if let problem = UserID.problem(with: name) {
                throw invalid(key, "\"\(name)\" is not a valid user id: it \(problem)")
            }
            names.append(name)
        }
        return names
    }

    func tableNames(_ value: TOMLValueConvertible, _ key: String) throws(ConfigError) -> [String] {
        guard let array = value.array else { throw fail(key, expected: "an array of table names", found: value) }
        var names: [String] = []
        for element in array {
            guard let name = element.string, !name.isEmpty else {
                throw invalid(key, "every entry must be a table name in quotes")
            }
            names.append(name)
        }
        return names
    }
}
