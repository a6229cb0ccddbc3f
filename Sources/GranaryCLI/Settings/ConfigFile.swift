import Foundation
import GranaryKit
import TOMLKit

/// The configuration file (`granary.toml(5)`): the values it sets, each optional.
///
/// Found at `--config FILE` (or `GRANARY_CONFIG`), else `$XDG_CONFIG_HOME/granary/config.toml`
/// (XDG default `~/.config`), else `/etc/granary/config.toml`. Only an explicitly named file
/// must exist. Every key is checked: an unknown key or a wrong type is a usage error naming
/// the file, the line and the key, so a typo never silently falls back to a default.
public struct ConfigFile: Sendable {
    /// The file read.
    public let path: String
    public var root: String?
    public var repo: String?
    /// This host's name in shared repositories (`host`).
    public var host: String?
    /// `[remote]`: the defaults with the keys the file sets.
    public var remote: RemoteLimits?
    public var compression: Compression?
    public var level: Int?
    public var check: CheckMode?
    public var lockTimeout: Duration?
    public var ownerTimeout: Duration?
    public var jobs: Int?
    public var retention: RetentionPolicy?
    /// Repositories each new archive is also sent to (`[[mirror]]` tables, each with `repo`).
    public var mirrors: [String]?
    /// The `[retention]` keys the file sets (`keep_daily`, …): the others keep their default.
    public var retentionKeysSet: Set<String> = []
    /// `[limits]`: the defaults with the keys the file sets.
    public var limits: ContentLimits?
    /// `[reset] keep_tables`.
    public var resetKeepTables: [String]?
    /// `[limits] bytes_per_user`.
    public var bytesPerUser: Int64?
    /// `remote_environment`: a root-owned file of `KEY=VALUE` lines for root's rclone.
    public var remoteEnvironment: String?

    /// The top-level keys and the keys of each table the file may hold, for messages and docs.
    public static let keys = [
        "root", "repo", "host", "compression", "level", "check", "lock_timeout", "owner_timeout", "jobs", "retention",
        "mirror", "limits", "reset", "remote", "remote_environment",
    ]
    public static let remoteKeys = ["connect_timeout", "timeout", "retries", "low_level_retries"]
    public static let retentionKeys = [
        "keep_last", "keep_hourly", "keep_daily", "keep_weekly", "keep_monthly", "keep_yearly", "keep_within",
        "safety_keep_within", "final_keep_within",
    ]
    public static let limitsKeys = ["time", "time_per_gib", "memory"]
    public static let resetKeys = ["keep_tables"]

    /// The file to read: the explicit one (which must exist), else the first default path that exists.
    /// Returns `nil` when no explicit file is named and no default file exists.
    public static func locate(explicit: String?, environment: [String: String]) -> (path: String, required: Bool)? {
        if let explicit, !explicit.isEmpty { return (explicit, true) }
        if let variable = environment["GRANARY_CONFIG"], !variable.isEmpty { return (variable, true) }
        for candidate in defaultPaths(environment: environment) where FileManager.default.fileExists(atPath: candidate)
        {
            return (candidate, false)
        }
        return nil
    }

    /// The default locations, in the order they are tried. Root acting for a user through sudo
    /// (`SUDO_USER` set) reads `/etc/granary/config.toml` only: the user's `XDG_CONFIG_HOME` and
    /// `HOME` must not choose root's configuration.
    public static func defaultPaths(environment: [String: String], euid: uid_t = geteuid()) -> [String] {
        var paths: [String] = []
        if RootEnvironment.isSudo(euid: euid, environment: environment) {
            paths.append("/etc/granary/config.toml")
            return paths
        }
        if let xdg = environment["XDG_CONFIG_HOME"], xdg.hasPrefix("/") {
            paths.append(xdg + "/granary/config.toml")
        } else if let home = environment["HOME"], !home.isEmpty {
            paths.append(home + "/.config/granary/config.toml")
        }
        paths.append("/etc/granary/config.toml")
        return paths
    }

    /// Reads and checks the file at `path`. As root, the file (and the folder holding it) must
    /// belong to root and be writable by nobody else, as sudo and ssh demand of theirs: a
    /// configuration another user can write would let them choose root's repository. Only a
    /// regular file is read (opened without blocking, so a FIFO named by mistake is refused
    /// instead of hanging), and at most `maximumSize` bytes of it.
    public static func load(path: String, euid: uid_t = geteuid()) throws(ConfigError) -> ConfigFile {
        // As root: every folder on the way checked, then the file opened through the descriptor
        // that was checked (never by its name again).
        var fd: Int32 = -1
        if euid == 0 {
            switch RootEnvironment.openTrusted(path) {
            case .opened(let opened): fd = opened
            case .absent: errno = ENOENT
            case .untrusted(let problem): throw .untrusted(path: path, reason: problem)
            }
        } else {
            fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        }
        guard fd >= 0 else {
            throw .unreadable(
                path: path,
                reason: errno == ENOENT ? "does not exist" : "cannot be read (\(String(cString: strerror(errno))))")
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
            throw .unreadable(path: path, reason: "is not a regular file")
        }
        guard info.st_size <= maximumSize else {
            throw .unreadable(path: path, reason: "is larger than \(maximumSize) bytes")
        }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size) + 1)
        var count = 0
        while count < bytes.count {
            let n = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress! + count, $0.count - count) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else {
                throw .unreadable(path: path, reason: "cannot be read (\(String(cString: strerror(errno))))")
            }
            if n == 0 { break }
            count += n
        }
        guard count <= maximumSize, let text = String(validating: bytes[0..<count], as: UTF8.self) else {
            throw .unreadable(path: path, reason: "is not UTF-8 text")
        }
        return try parse(text, path: path)
    }

    /// The largest configuration file read (a configuration is a few hundred bytes).
    public static let maximumSize = 1 << 20

    /// Parses configuration text; `path` names the file in messages.
    public static func parse(_ text: String, path: String) throws(ConfigError) -> ConfigFile {
        let locator = KeyLocator(text: text)
        /// A folder or repository location: absolute (cron, systemd and a shell run granary in
        /// different folders, so a relative path would name a different place in each), never
        /// starting with `~` (not expanded), or a remote location.
        func place(_ text: String, _ key: String) throws(ConfigError) -> String {
            if text.hasPrefix("s3:") || text.hasPrefix("rclone:") || text.isEmpty { return text }
            if let found = PathText.tildeProblem(text) {
                throw .invalidValue(
                    path: path, line: locator.line(of: key), key: key,
                    message: "\"\(text)\" \(found.problem): \(found.hint)")
            }
            guard text.hasPrefix("/") else {
                throw .invalidValue(
                    path: path, line: locator.line(of: key), key: key,
                    message:
                        "\"\(text)\" is a relative path: write it from / (cron, systemd and a shell start granary in different folders)"
                )
            }
            return text
        }
        /// `[[mirror]]` tables: each has `repo`, a location, and nothing else.
        func mirrors(_ value: TOMLValueConvertible) throws(ConfigError) -> [String] {
            guard let array = value.array else {
                throw .wrongType(
                    path: path, line: locator.line(of: "mirror"), key: "mirror",
                    expected: "an array of tables ([[mirror]])", found: value.type.description)
            }
            var locations: [String] = []
            for item in array {
                guard let table = item.table else {
                    throw .wrongType(
                        path: path, line: locator.line(of: "mirror"), key: "mirror",
                        expected: "an array of tables ([[mirror]])", found: item.type.description)
                }
                for key in table.keys.sorted() where key != "repo" {
                    throw .unknownKey(path: path, line: locator.line(of: "mirror." + key), key: "mirror." + key)
                }
                guard let repo = table["repo"]?.string, !repo.isEmpty else {
                    throw .invalidValue(
                        path: path, line: locator.line(of: "mirror"), key: "mirror.repo",
                        message: "each [[mirror]] needs repo = \"LOCATION\"")
                }
                locations.append(try place(repo, "mirror.repo"))
            }
            return locations
        }
        let table: TOMLTable
        do {
            table = try TOMLTable(string: text)
        } catch let error as TOMLParseError {
            throw .unparseable(
                path: path, line: error.source.begin.line, column: error.source.begin.column,
                message: error.description)
        } catch {
            throw .unparseable(path: path, line: 1, column: 1, message: "\(error)")
        }
        var config = ConfigFile(path: path)

        func fail(_ key: String, expected: String, found: TOMLValueConvertible) -> ConfigError {
            .wrongType(
                path: path, line: locator.line(of: key), key: key, expected: expected, found: found.type.description)
        }
        func integer(_ value: TOMLValueConvertible, _ key: String, _ range: ClosedRange<Int>) throws(ConfigError) -> Int
        {
            guard let int = value.int else { throw fail(key, expected: "an integer", found: value) }
            guard range.contains(int) else {
                throw .invalidValue(
                    path: path, line: locator.line(of: key), key: key,
                    message: "\(int) is out of range: it must be \(range.lowerBound) to \(range.upperBound)")
            }
            return int
        }
        func string(_ value: TOMLValueConvertible, _ key: String) throws(ConfigError) -> String {
            guard let string = value.string else { throw fail(key, expected: "a string", found: value) }
            return string
        }
        /// A retention span: the grammar of every duration (`DurationText`), a bare number of
        /// seconds alike as text or as a TOML number.
        func duration(_ value: TOMLValueConvertible, _ key: String) throws(ConfigError) -> TimeSpan {
            let text: String
            if let seconds = value.int {
                text = String(seconds)
            } else if let seconds = value.double {
                text = String(seconds)
            } else if let string = value.string {
                text = string
            } else {
                throw fail(key, expected: "a duration such as \"7d\" or \"6mo\"", found: value)
            }
            guard let span = DurationText.span(text), span.seconds() <= Double(SettingLimits.longestDuration) else {
                throw .invalidValue(
                    path: path, line: locator.line(of: key), key: key,
                    message: "\"\(text)\": " + (DurationText.problem(text) ?? "more than 100 years"))
            }
            return span
        }
        /// A timeout: whole or fractional seconds, or a duration text, within `range`.
        func timeout(_ value: TOMLValueConvertible, _ key: String, _ range: ClosedRange<Duration>) throws(ConfigError)
            -> Duration
        {
            let text: String
            if let seconds = value.int {
                text = String(seconds)
            } else if let seconds = value.double {
                text = String(seconds)
            } else if let string = value.string {
                text = string
            } else {
                throw fail(key, expected: "a duration such as \"30s\" or \"2min\"", found: value)
            }
            guard let parsed = DurationText.duration(text) else {
                throw .invalidValue(
                    path: path, line: locator.line(of: key), key: key,
                    message: "\"\(text)\": " + (DurationText.problem(text) ?? "more than 100 years"))
            }
            guard range.contains(parsed) else {
                throw .invalidValue(
                    path: path, line: locator.line(of: key), key: key,
                    message:
                        "must be a duration from \(DurationText.format(range.lowerBound)) to \(DurationText.format(range.upperBound)), such as \"30s\" or \"2min\""
                )
            }
            return parsed
        }
        /// A size: a number of bytes or a size text (`512MiB`), within `range`.
        func bytes(_ value: TOMLValueConvertible, _ key: String, _ range: ClosedRange<Int64>) throws(ConfigError)
            -> Int64
        {
            let count: Int64
            if let number = value.int {
                count = Int64(number)
            } else {
                guard let text = value.string else {
                    throw fail(key, expected: "a size such as \"512MiB\" or \"2GiB\"", found: value)
                }
                guard let parsed = ByteCountText.bytes(text) else {
                    throw .invalidValue(
                        path: path, line: locator.line(of: key), key: key,
                        message: "\"\(text)\" is not a size (use a number with KiB, MiB, GiB or TiB, e.g. \"512MiB\")")
                }
                count = parsed
            }
            guard range.contains(count) else {
                throw .invalidValue(
                    path: path, line: locator.line(of: key), key: key,
                    message:
                        "\(count) is out of range: it must be \(ByteCountText.render(range.lowerBound)) to \(ByteCountText.render(range.upperBound)) (0: none)"
                )
            }
            return count
        }
        func subtable(_ value: TOMLValueConvertible, _ key: String) throws(ConfigError) -> TOMLTable {
            guard let table = value.table else { throw fail(key, expected: "a table", found: value) }
            return table
        }

        for key in table.keys.sorted() {
            guard let value = table[key] else { continue }
            switch key {
            case "root": config.root = try place(try string(value, key), key)
            case "repo": config.repo = try place(try string(value, key), key)
            case "host":
                let name = try string(value, key)
                guard Hosts.isValid(name) else {
                    throw .invalidValue(
                        path: path, line: locator.line(of: key), key: key, message: InvalidHost(name: name).description)
                }
                config.host = name
            case "remote":
                let remote = try subtable(value, key)
                var result = RemoteLimits.defaults
                for inner in remote.keys.sorted() {
                    guard let item = remote[inner] else { continue }
                    let full = "remote." + inner
                    switch inner {
                    case "connect_timeout": result.connectTimeout = try timeout(item, full, SettingLimits.remoteTimeout)
                    case "timeout": result.timeout = try timeout(item, full, SettingLimits.remoteTimeout)
                    case "retries": result.retries = try integer(item, full, SettingLimits.remoteRetries)
                    case "low_level_retries":
                        result.lowLevelRetries = try integer(item, full, SettingLimits.remoteRetries)
                    default: throw .unknownKey(path: path, line: locator.line(of: full), key: full)
                    }
                }
                config.remote = result
            case "compression":
                let name = try string(value, key)
                guard let compression = Compression(rawValue: name) else {
                    throw .invalidValue(
                        path: path, line: locator.line(of: key), key: key,
                        message:
                            "\"\(name)\" is not one of \(Compression.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                config.compression = compression
            case "level": config.level = try integer(value, key, SettingLimits.levels)
            case "check":
                let name = try string(value, key)
                guard let mode = CheckMode(rawValue: name) else {
                    throw .invalidValue(
                        path: path, line: locator.line(of: key), key: key,
                        message:
                            "\"\(name)\" is not one of \(CheckMode.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                config.check = mode
            case "lock_timeout": config.lockTimeout = try timeout(value, key, SettingLimits.lockTimeout)
            case "owner_timeout": config.ownerTimeout = try timeout(value, key, SettingLimits.ownerTimeout)
            case "jobs": config.jobs = try integer(value, key, SettingLimits.jobs)
            case "retention":
                guard let retention = value.table else { throw fail(key, expected: "a table", found: value) }
                var policy = RetentionPolicy()
                for inner in retention.keys.sorted() {
                    guard let item = retention[inner] else { continue }
                    let full = "retention." + inner
                    let count = SettingLimits.retentionCount
                    switch inner {
                    case "keep_last": policy.keepLast = try integer(item, full, count)
                    case "keep_hourly": policy.keepHourly = try integer(item, full, count)
                    case "keep_daily": policy.keepDaily = try integer(item, full, count)
                    case "keep_weekly": policy.keepWeekly = try integer(item, full, count)
                    case "keep_monthly": policy.keepMonthly = try integer(item, full, count)
                    case "keep_yearly": policy.keepYearly = try integer(item, full, count)
                    case "keep_within": policy.keepWithin = try duration(item, full)
                    case "safety_keep_within": policy.safetyKeepWithin = try duration(item, full)
                    case "final_keep_within": policy.finalKeepWithin = try duration(item, full)
                    default: throw .unknownKey(path: path, line: locator.line(of: full), key: full)
                    }
                    config.retentionKeysSet.insert(inner)
                }
                config.retention = policy
            case "mirror": config.mirrors = try mirrors(value)
            case "remote_environment":
                let file = try string(value, key)
                guard file.hasPrefix("/") else {
                    throw .invalidValue(
                        path: path, line: locator.line(of: key), key: key,
                        message: "\"\(file)\" is not an absolute path")
                }
                config.remoteEnvironment = file
            case "limits":
                let limits = try subtable(value, key)
                var result = ContentLimits.defaults
                for inner in limits.keys.sorted() {
                    guard let item = limits[inner] else { continue }
                    let full = "limits." + inner
                    switch inner {
                    case "time": result.time = try timeout(item, full, SettingLimits.contentTime)
                    case "time_per_gib": result.timePerGiB = try timeout(item, full, SettingLimits.contentTime)
                    case "memory": result.memory = try bytes(item, full, SettingLimits.contentMemory)
                    case "bytes_per_user": config.bytesPerUser = try bytes(item, full, SettingLimits.bytesPerUser)
                    default: throw .unknownKey(path: path, line: locator.line(of: full), key: full)
                    }
                }
                config.limits = result
            case "reset":
                let reset = try subtable(value, key)
                for inner in reset.keys.sorted() {
                    guard let item = reset[inner] else { continue }
                    let full = "reset." + inner
                    switch inner {
                    case "keep_tables":
                        guard let array = item.array else {
                            throw fail(full, expected: "an array of table names", found: item)
                        }
                        var names: [String] = []
                        for element in array {
                            guard let name = element.string, !name.isEmpty else {
                                throw .invalidValue(
                                    path: path, line: locator.line(of: full), key: full,
                                    message: "every entry must be a table name in quotes")
                            }
                            names.append(name)
                        }
                        config.resetKeepTables = names
                    default: throw .unknownKey(path: path, line: locator.line(of: full), key: full)
                    }
                }
            default:
                throw .unknownKey(path: path, line: locator.line(of: key), key: key)
            }
        }
        if let level = config.level, let problem = (config.compression ?? .zstd).problem(withLevel: level) {
            throw .invalidValue(path: path, line: locator.line(of: "level"), key: "level", message: problem)
        }
        return config
    }
}

/// Finds the line a key is set on, by scanning the text: TOMLKit reports positions for
/// parse errors only, not for the keys of a parsed table.
struct KeyLocator {
    let lines: [Substring]

    init(text: String) {
        lines = text.split(separator: "\n", omittingEmptySubsequences: false)
    }

    /// The 1-based line of `key` (`table.key` for a key inside a table), or 1 when not found.
    func line(of key: String) -> Int {
        let parts = key.split(separator: ".", maxSplits: 1).map(String.init)
        let (table, name) = parts.count == 2 ? (parts[0], parts[1]) : ("", parts[0])
        var current = ""
        for (index, raw) in lines.enumerated() {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.hasPrefix("[") {
                let header = line.drop(while: { $0 == "[" }).prefix(while: { $0 != "]" })
                current = header.trimmingCharacters(in: .whitespaces).replacingOccurrences(of: "\"", with: "")
                if table.isEmpty && current == name { return index + 1 }
                continue
            }
            guard let equals = line.firstIndex(of: "=") else { continue }
            let lhs = line[..<equals].trimmingCharacters(in: .whitespaces).replacingOccurrences(of: "\"", with: "")
                .replacingOccurrences(of: " ", with: "")
            if current == table && lhs == name { return index + 1 }
            if current.isEmpty && (lhs == key || lhs.hasPrefix(name + ".") && table.isEmpty) { return index + 1 }
        }
        return 1
    }
}

/// The bounds of every numeric setting, shared by the configuration file and the command line.
public enum SettingLimits {
    /// Users backed up at once (`jobs`, `--jobs`).
    public static let jobs = 1...64
    /// Any compression level; each compression accepts part of it (`Compression.levels`).
    public static let levels = 0...19
    /// Each `keep_*` count of a retention policy.
    public static let retentionCount = 0...1_000_000
    /// How long to wait for a user's lock (`lock_timeout`, `--lock-timeout`): up to a week.
    public static let lockTimeout = Duration.zero...Duration.seconds(7 * 86_400)
    /// How long an owner has to acknowledge a pause (`owner_timeout`, `--owner-timeout`).
    public static let ownerTimeout = Duration.milliseconds(1)...Duration.seconds(3600)
    /// Remote timeouts (`[remote] connect_timeout`, `timeout`): 1 s to an hour.
    public static let remoteTimeout = Duration.seconds(1)...Duration.seconds(3600)
    /// Remote tries (`[remote] retries`, `low_level_retries`).
    public static let remoteRetries = 1...20
    /// The longest duration anywhere (`keep_within`, `--max-age`): 100 years, in seconds.
    public static let longestDuration: Int64 = DurationText.longest
    /// SQLite's time budget on a store (`[limits] time`, `time_per_gib`): up to a day each; 0: none.
    public static let contentTime = Duration.zero...Duration.seconds(86_400)
    /// SQLite's memory ceiling per connection (`[limits] memory`): up to 1 TiB; 0: none.
    public static let contentMemory: ClosedRange<Int64> = 0...(1 << 40)
    /// What one user's backup may copy (`[limits] bytes_per_user`): up to 1 PiB; 0: no cap.
    public static let bytesPerUser: ClosedRange<Int64> = 0...(1 << 50)
    /// 100 GiB: far past what an app keeps per user in SQLite, far short of the hours a sparse
    /// store claiming terabytes would take to copy.
    public static let defaultBytesPerUser: Int64 = 100 << 30
}

/// A configuration file that cannot be used. Every case names the file; most the line and key.
public enum ConfigError: GranaryError, Sendable, Equatable {
    case unreadable(path: String, reason: String)
    case unparseable(path: String, line: Int, column: Int, message: String)
    case unknownKey(path: String, line: Int, key: String)
    case wrongType(path: String, line: Int, key: String, expected: String, found: String)
    case invalidValue(path: String, line: Int, key: String, message: String)
    /// Root does not read a configuration file someone else could have written.
    case untrusted(path: String, reason: String)

    public var description: String {
        switch self {
        case .unreadable(let path, let reason): return "configuration file \(path) \(reason)"
        case .unparseable(let path, let line, let column, let message):
            return "\(path):\(line):\(column): not valid TOML: \(message)"
        case .unknownKey(let path, let line, let key): return "\(path):\(line): unknown key \"\(key)\""
        case .wrongType(let path, let line, let key, let expected, let found):
            return "\(path):\(line): \(key) must be \(expected), not a \(found)"
        case .invalidValue(let path, let line, let key, let message): return "\(path):\(line): \(key): \(message)"
        case .untrusted(let path, let reason):
            return "refusing the configuration file \(path) as root: \(reason)"
        }
    }

}
