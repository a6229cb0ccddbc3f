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
    /// `follow_interval`: how often `follow` ships each user's commits.
    public var followInterval: Duration?
    /// `follow_uploads`: the rclone runs uploading segments at once (a remote repository).
    public var followUploads: Int?
    /// `follow_watches`: the most folders of one user `follow` watches.
    public var followWatches: Int?
    public var jobs: Int?
    public var retention: RetentionPolicy?
    /// Repositories each new archive is also sent to (`[[mirror]]` tables, each with `repo`).
    public var mirrors: [String]?
    /// The `[retention]` keys the file sets (`keep_daily`, …): the others keep their default.
    public var retentionKeysSet: Set<String> = []
    /// `[limits]`: the defaults with the keys the file sets.
    public var limits: ContentLimits?
    /// `exclude`: users `backup --all` and `check` leave out.
    public var exclude: [String]?
    /// `[reset] keep_tables`.
    public var resetKeepTables: [String]?
    /// `[limits] bytes_per_user`.
    public var bytesPerUser: Int64?
    /// `remote_environment`: a root-owned file of `KEY=VALUE` lines for root's rclone.
    public var remoteEnvironment: String?
    /// `delta`: backup writes delta archives when a base fits (issue 35, as `backup --delta`).
    public var delta: Bool?
    /// `delta_max_chain`, `delta_max_age`, `delta_max_changed_percent`: the delta policy's knobs.
    public var deltaMaxChain: Int?
    public var deltaPagesChecks: Int?
    public var deltaMaxAge: Duration?
    public var deltaMaxChangedPercent: Int?

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

    /// Parses configuration text; `path` names the file in messages. Each key is read through
    /// its row of ``ConfigKey/all``; a key without one is an unknown key.
    public static func parse(_ text: String, path: String) throws(ConfigError) -> ConfigFile {
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
        let reader = ConfigReader(path: path, locator: KeyLocator(text: text))
        var config = ConfigFile(path: path)
        func read(_ key: String, _ value: TOMLValueConvertible) throws(ConfigError) {
            guard let row = ConfigKey.named(key) else { throw reader.unknown(key) }
            try row.read(value, key, reader, &config)
        }
        for key in table.keys.sorted() {
            guard let value = table[key] else { continue }
            guard let section = ConfigTable.named(key) else {
                try read(key, value)
                continue
            }
            if section.isArray {
                // `[[name]]`: an array of tables, each checked for unknown keys before it is read.
                let expected = "an array of tables ([[\(key)]])"
                guard let items = value.array else { throw reader.fail(key, expected: expected, found: value) }
                section.begin(&config)
                for item in items {
                    guard let inner = item.table else { throw reader.fail(key, expected: expected, found: item) }
                    for name in inner.keys.sorted() where ConfigKey.named(key + "." + name) == nil {
                        throw reader.unknown(key + "." + name)
                    }
                    for row in ConfigKey.all where row.table == key {
                        // Every key of such a table is required (a [[mirror]] is its repo).
                        try row.read(inner[row.name] ?? "", row.key, reader, &config)
                    }
                }
                continue
            }
            guard let inner = value.table else { throw reader.fail(key, expected: "a table", found: value) }
            section.begin(&config)
            for name in inner.keys.sorted() {
                guard let item = inner[name] else { continue }
                try read(key + "." + name, item)
            }
        }
        if let level = config.level, let problem = (config.compression ?? .zstd).problem(withLevel: level) {
            throw .invalidValue(path: path, line: reader.locator.line(of: "level"), key: "level", message: problem)
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
    /// Each `keep_*` count of a retention policy; -1 keeps every one of its kind (restic's
    /// "unlimited").
    public static let retentionCount = -1...1_000_000
    /// How long to wait for a user's lock (`lock_timeout`, `--lock-timeout`): up to a week.
    public static let lockTimeout = Duration.zero...Duration.seconds(7 * 86_400)
    /// How long an owner has to acknowledge a pause (`owner_timeout`, `--owner-timeout`).
    public static let ownerTimeout = Duration.milliseconds(1)...Duration.seconds(3600)
    /// How often `follow` ships each user's commits (`follow_interval`, `--interval`).
    public static let followInterval = Duration.milliseconds(10)...Duration.seconds(3600)
    /// rclone runs uploading `follow`'s segments at once (`follow_uploads`).
    public static let followUploads = 1...64
    /// Folders of one user `follow` watches at most (`follow_watches`).
    public static let followWatches = 1...1_000_000
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
    /// The most deltas on one full (`delta_max_chain`); 0: every backup a full.
    public static let deltaChain = 0...1000
    /// The oldest a chain's full may be (`delta_max_age`): up to a year.
    public static let deltaAge = Duration.zero...Duration.seconds(366 * 86_400)
    /// The largest share of changed pages a delta may carry, in percent (`delta_max_changed_percent`).
    public static let deltaChangedPercent = 1...100
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
