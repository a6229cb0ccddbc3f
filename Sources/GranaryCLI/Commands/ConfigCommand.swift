import ArgumentParser
import Foundation
import GranaryKit

struct ConfigCommand: GranaryCommand {
    static let configuration = CommandConfiguration(
        commandName: "config",
        abstract: "Print the effective settings and where each came from (flag, environment, file, default)."
    )

    @OptionGroup(title: "Global Options") var global: GlobalOptions

    func execute(_ console: Console) throws -> ConfigResult {
        ConfigResult(try global.settings())
    }
}

/// `granary config`: every setting with its value and where the value came from. The keys
/// are the configuration file's; each value is written as the file would hold it.
struct ConfigResult: CommandResult {
    /// A listing: shown with --quiet too.
    var isAnswer: Bool { true }
    /// A setting's value: a string, an integer, or `null` when unset.
    enum Value: Encodable, Sendable {
        case string(String), integer(Int), list([String]), unset

        func encode(to encoder: Encoder) throws {
            var container = encoder.singleValueContainer()
            switch self {
            case .string(let text): try container.encode(text)
            case .integer(let number): try container.encode(number)
            case .list(let items): try container.encode(items)
            case .unset: try container.encodeNil()
            }
        }

        var text: String {
            switch self {
            case .string(let text): return text
            case .integer(let number): return String(number)
            case .list(let items): return items.joined(separator: ", ")
            case .unset: return "(unset)"
            }
        }
    }

    struct Entry: Encodable {
        let key: String
        let value: Value
        /// `flag`, `environment`, `file` or `default`.
        let source: String
    }

    @Null var file: String?
    let settings: [Entry]
    /// Where a configuration file was looked for, in order (text only).
    private var looked: [String] = []

    enum CodingKeys: String, CodingKey { case file, settings }

    init(_ settings: Settings) {
        file = settings.configPath
        looked = ConfigFile.defaultPaths(environment: ProcessInfo.processInfo.environment)
        func entry<V>(_ key: String, _ setting: Setting<V>?, _ value: (V) -> Value) -> Entry {
            Entry(
                key: key, value: setting.map { value($0.value) } ?? .unset,
                source: setting?.source.rawValue ?? "default")
        }
        let policy = settings.retention.value
        func retention(_ key: String, _ value: Value) -> Entry {
            Entry(
                key: "retention." + key, value: value,
                source: settings.retentionKeysFromFile.contains(key) ? "file" : "default")
        }
        self.settings = [
            entry("root", settings.root) { .string($0) },
            entry("repo", settings.repo) { .string($0) },
            entry("host", settings.host) { .string($0) },
            entry("compression", settings.compression) { .string($0.rawValue) },
            entry("level", settings.level) { $0.map { .integer($0) } ?? .unset },
            entry("check", settings.check) { .string($0.rawValue) },
            entry("lock_timeout", settings.lockTimeout) { .string(DurationText.format($0)) },
            entry("owner_timeout", settings.ownerTimeout) { .string(DurationText.format($0)) },
            entry("jobs", settings.jobs) { .integer($0) },
            Entry(
                key: "mirror", value: settings.mirrors.value.isEmpty ? .unset : .list(settings.mirrors.value),
                source: settings.mirrors.value.isEmpty ? "default" : settings.mirrors.source.rawValue),
            retention("keep_last", .integer(policy.keepLast)),
            retention("keep_hourly", .integer(policy.keepHourly)),
            retention("keep_daily", .integer(policy.keepDaily)),
            retention("keep_weekly", .integer(policy.keepWeekly)),
            retention("keep_monthly", .integer(policy.keepMonthly)),
            retention("keep_yearly", .integer(policy.keepYearly)),
            retention("keep_within", .string(policy.keepWithin.description)),
            retention("safety_keep_within", .string(policy.safetyKeepWithin.description)),
            retention(
                "final_keep_within", policy.finalKeepWithin.map { .string($0.description) } ?? .unset),
            entry("limits.time", settings.limits) { .string(DurationText.format($0.time)) },
            entry("limits.time_per_gib", settings.limits) { .string(DurationText.format($0.timePerGiB)) },
            entry("limits.memory", settings.limits) { Self.size($0.memory) },
            entry("limits.bytes_per_user", settings.bytesPerUser) { Self.size($0) },
            entry("reset.keep_tables", settings.resetKeepTables) { $0.isEmpty ? .unset : .list($0) },
            entry("remote.connect_timeout", settings.remote) { .string(DurationText.format($0.connectTimeout)) },
            entry("remote.timeout", settings.remote) { .string(DurationText.format($0.timeout)) },
            entry("remote.retries", settings.remote) { .integer($0.retries) },
            entry("remote.low_level_retries", settings.remote) { .integer($0.lowLevelRetries) },
        ]
    }

    /// A size as the file would hold it: `"512MiB"` for a whole number of a binary unit, else bytes.
    static func size(_ bytes: Int64) -> Value {
        let text = ByteCountText.render(bytes)
        return text.hasSuffix(" bytes") ? .integer(Int(bytes)) : .string(text.replacingOccurrences(of: " ", with: ""))
    }

    func render(_ text: inout TextOutput, _ detail: TextDetail) {
        text.line("config file: \(file ?? "none (looked for \(looked.joined(separator: ", ")))")")
        if file == nil, FileSystem.isRegularFile("/etc/granary.toml") {
            text.line("  /etc/granary.toml is not read: granary reads /etc/granary/config.toml (see granary.toml(5))")
        }
        let keyWidth = max(24, (settings.map { $0.key.count }.max() ?? 0) + 1)
        let valueWidth = max(20, (settings.map { $0.value.text.count }.max() ?? 0) + 1)
        for entry in settings {
            text.line("\(entry.key, width: keyWidth) \(entry.value.text, width: valueWidth) \(entry.source)")
        }
    }
}
