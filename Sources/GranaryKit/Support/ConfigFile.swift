import Foundation
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
    public var compression: Compression?
    public var level: Int?
    public var check: CheckMode?
    public var lockTimeout: Duration?
    public var ownerTimeout: Duration?
    public var jobs: Int?
    public var retention: RetentionPolicy?
    /// Repositories each new archive is also sent to (`[[mirror]]` tables, each with `repo`).
    public var mirrors: [String]?

    /// The top-level keys and the `[retention]` keys the file may hold, for messages and docs.
    public static let keys = ["root", "repo", "compression", "level", "check", "lock_timeout", "owner_timeout", "jobs", "retention", "mirror"]
    public static let retentionKeys = [
        "keep_last", "keep_hourly", "keep_daily", "keep_weekly", "keep_monthly", "keep_yearly", "keep_within",
        "safety_keep_within", "final_keep_within",
    ]

    /// The file to read: the explicit one (which must exist), else the first default path that exists.
    /// Returns `nil` when no explicit file is named and no default file exists.
    public static func locate(explicit: String?, environment: [String: String]) -> (path: String, required: Bool)? {
        if let explicit, !explicit.isEmpty { return (explicit, true) }
        if let variable = environment["GRANARY_CONFIG"], !variable.isEmpty { return (variable, true) }
        for candidate in defaultPaths(environment: environment) where FileManager.default.fileExists(atPath: candidate) {
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
    /// configuration another user can write would let them choose root's repository.
    public static func load(path: String, euid: uid_t = geteuid()) throws(ConfigError) -> ConfigFile {
        if euid == 0, let problem = ownershipProblem(path) { throw .untrusted(path: path, reason: problem) }
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            let reason = FileManager.default.fileExists(atPath: path) ? "cannot be read" : "does not exist"
            throw .unreadable(path: path, reason: reason)
        }
        return try parse(text, path: path)
    }

    /// Parses configuration text; `path` names the file in messages.
    public static func parse(_ text: String, path: String) throws(ConfigError) -> ConfigFile {
        let locator = KeyLocator(text: text)
        /// `[[mirror]]` tables: each has `repo`, a location, and nothing else.
        func mirrors(_ value: TOMLValueConvertible) throws(ConfigError) -> [String] {
            guard let array = value.array else {
                throw .wrongType(path: path, line: locator.line(of: "mirror"), key: "mirror", expected: "an array of tables ([[mirror]])", found: value.type.description)
            }
            var locations: [String] = []
            for item in array {
                guard let table = item.table else {
                    throw .wrongType(path: path, line: locator.line(of: "mirror"), key: "mirror", expected: "an array of tables ([[mirror]])", found: item.type.description)
                }
                for key in table.keys.sorted() where key != "repo" {
                    throw .unknownKey(path: path, line: locator.line(of: "mirror." + key), key: "mirror." + key)
                }
                guard let repo = table["repo"]?.string, !repo.isEmpty else {
                    throw .invalidValue(path: path, line: locator.line(of: "mirror"), key: "mirror.repo", message: "each [[mirror]] needs repo = \"LOCATION\"")
                }
                locations.append(repo)
            }
            return locations
        }
        let table: TOMLTable
        do {
            table = try TOMLTable(string: text)
        } catch let error as TOMLParseError {
            throw .unparseable(path: path, line: error.source.begin.line, column: error.source.begin.column,
                message: error.description)
        } catch {
            throw .unparseable(path: path, line: 1, column: 1, message: "\(error)")
        }
        var config = ConfigFile(path: path)

        func fail(_ key: String, expected: String, found: TOMLValueConvertible) -> ConfigError {
            .wrongType(path: path, line: locator.line(of: key), key: key, expected: expected, found: found.type.description)
        }
        func integer(_ value: TOMLValueConvertible, _ key: String, minimum: Int = 0) throws(ConfigError) -> Int {
            guard let int = value.int else { throw fail(key, expected: "an integer", found: value) }
            guard int >= minimum else {
                throw .invalidValue(path: path, line: locator.line(of: key), key: key, message: "must be at least \(minimum)")
            }
            return int
        }
        func string(_ value: TOMLValueConvertible, _ key: String) throws(ConfigError) -> String {
            guard let string = value.string else { throw fail(key, expected: "a string", found: value) }
            return string
        }
        func duration(_ value: TOMLValueConvertible, _ key: String) throws(ConfigError) -> Int64 {
            if let seconds = value.int, seconds >= 0 { return Int64(seconds) }
            guard let text = value.string else { throw fail(key, expected: "a duration such as \"30s\" or \"7d\"", found: value) }
            guard let seconds = DurationText.seconds(text) else {
                throw .invalidValue(path: path, line: locator.line(of: key), key: key,
                    message: "\"\(text)\" is not a duration (use a number with s, m, h, d or w, e.g. \"30d\")")
            }
            return seconds
        }

        for key in table.keys.sorted() {
            guard let value = table[key] else { continue }
            switch key {
            case "root": config.root = try string(value, key)
            case "repo": config.repo = try string(value, key)
            case "compression":
                let name = try string(value, key)
                guard let compression = Compression(rawValue: name) else {
                    throw .invalidValue(path: path, line: locator.line(of: key), key: key,
                        message: "\"\(name)\" is not one of \(Compression.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                config.compression = compression
            case "level": config.level = try integer(value, key, minimum: 0)
            case "check":
                let name = try string(value, key)
                guard let mode = CheckMode(rawValue: name) else {
                    throw .invalidValue(path: path, line: locator.line(of: key), key: key,
                        message: "\"\(name)\" is not one of \(CheckMode.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                config.check = mode
            case "lock_timeout": config.lockTimeout = .seconds(try duration(value, key))
            case "owner_timeout": config.ownerTimeout = .seconds(try duration(value, key))
            case "jobs": config.jobs = try integer(value, key, minimum: 1)
            case "retention":
                guard let retention = value.table else { throw fail(key, expected: "a table", found: value) }
                var policy = RetentionPolicy()
                for inner in retention.keys.sorted() {
                    guard let item = retention[inner] else { continue }
                    let full = "retention." + inner
                    switch inner {
                    case "keep_last": policy.keepLast = try integer(item, full)
                    case "keep_hourly": policy.keepHourly = try integer(item, full)
                    case "keep_daily": policy.keepDaily = try integer(item, full)
                    case "keep_weekly": policy.keepWeekly = try integer(item, full)
                    case "keep_monthly": policy.keepMonthly = try integer(item, full)
                    case "keep_yearly": policy.keepYearly = try integer(item, full)
                    case "keep_within": policy.keepWithin = try duration(item, full)
                    case "safety_keep_within": policy.safetyKeepWithin = try duration(item, full)
                    case "final_keep_within": policy.finalKeepWithin = try duration(item, full)
                    default: throw .unknownKey(path: path, line: locator.line(of: full), key: full)
                    }
                }
                config.retention = policy
            case "mirror": config.mirrors = try mirrors(value)
            default:
                throw .unknownKey(path: path, line: locator.line(of: key), key: key)
            }
        }
        return config
    }
}

extension ConfigFile {
    /// Why root must not read the configuration file at `path` (nil when it may): not root's, or
    /// writable by its group or others, or in a folder that is.
    static func ownershipProblem(_ path: String) -> String? {
        guard FileSystem.status(path) != nil else { return nil }
        // A link (the administrator's own, /etc/granary/config.toml -> …) is followed: what it
        // points to is judged, and the folder holding the name.
        let parent = (path as NSString).deletingLastPathComponent
        for (what, checked) in [("it", path), ("its folder \(parent)", parent.isEmpty ? "." : parent)] {
            var resolved = stat()
            guard stat(checked, &resolved) == 0 else { continue }
            if resolved.st_uid != 0 { return "\(what) belongs to uid \(resolved.st_uid), not root" }
            if resolved.st_mode & 0o022 != 0 && !(what != "it" && resolved.st_mode & UInt32(S_ISVTX) != 0) {
                return "\(what) is writable by \(resolved.st_mode & 0o002 != 0 ? "everyone" : "its group")"
            }
        }
        return nil
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

/// Durations written as text: `30s`, `15m`, `12h`, `30d`, `2w`, or sums such as `1d12h`.
public enum DurationText {
    /// The number of seconds `text` stands for, or `nil` when it is not a duration.
    public static func seconds(_ text: String) -> Int64? {
        var total: Int64 = 0
        var digits = ""
        var sawUnit = false
        for character in text {
            if character.isASCII, character.isNumber {
                digits.append(character)
                continue
            }
            let unit: Int64
            switch character {
            case "s": unit = 1
            case "m": unit = 60
            case "h": unit = 3600
            case "d": unit = 86_400
            case "w": unit = 604_800
            default: return nil
            }
            guard let number = Int64(digits) else { return nil }
            let (product, overflow) = number.multipliedReportingOverflow(by: unit)
            guard !overflow else { return nil }
            total += product
            digits = ""
            sawUnit = true
        }
        guard digits.isEmpty, sawUnit else { return nil }
        return total
    }
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

    public var status: ExitStatus { .usage }

    public var hint: String? {
        switch self {
        case .unreadable: return "check the path given to --config or GRANARY_CONFIG"
        case .untrusted(let path, _): return "chown root \(path) && chmod go-w \(path), or use /etc/granary/config.toml"
        case .unknownKey(_, _, let key) where key.hasPrefix("retention."):
            return "the [retention] keys are \(ConfigFile.retentionKeys.joined(separator: ", ")); see granary.toml(5)"
        case .unknownKey: return "the keys are \(ConfigFile.keys.joined(separator: ", ")); see granary.toml(5)"
        default: return "see granary.toml(5)"
        }
    }
}
