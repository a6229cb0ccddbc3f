import ArgumentParser
import Foundation
import GranaryKit

struct ConfigCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "config",
        abstract: "Print the effective settings and where each came from (flag, environment, file, default)."
    )

    @OptionGroup var global: GlobalOptions

    func run() throws {
        let console = global.console()
        let document = ConfigDocument(try global.settings())
        if global.json {
            console.json(document)
            return
        }
        console.out("config file: \(document.file ?? "none")")
        for entry in document.settings {
            console.out(Format.pad(entry.key, 24) + " " + Format.pad(entry.value ?? "(unset)", 20) + " " + entry.source)
        }
    }
}

/// `granary config --json`: format version 1. Keys are the configuration file's keys.
struct ConfigDocument: Encodable {
    struct Entry: Encodable {
        let key: String
        let value: String?
        let source: String
    }
    let version = 1
    let file: String?
    let settings: [Entry]

    init(_ settings: Settings) {
        file = settings.configPath
        func entry<V>(_ key: String, _ setting: Setting<V>?, _ render: (V) -> String?) -> Entry {
            Entry(key: key, value: setting.flatMap { render($0.value) }, source: setting?.source.rawValue ?? "unset")
        }
        func seconds(_ duration: Duration) -> String { "\(duration.components.seconds)s" }
        let retention = settings.retention.value
        let source = settings.retention.source.rawValue
        self.settings = [
            entry("root", settings.root) { $0 },
            entry("repo", settings.repo) { $0 },
            entry("compression", settings.compression) { $0.rawValue },
            entry("level", settings.level) { $0.map(String.init) },
            entry("check", settings.check) { $0.rawValue },
            entry("lock_timeout", settings.lockTimeout, seconds),
            entry("owner_timeout", settings.ownerTimeout, seconds),
            entry("jobs", settings.jobs) { String($0) },
            Entry(
                key: "mirror", value: settings.mirrors.value.isEmpty ? nil : settings.mirrors.value.joined(separator: ", "),
                source: settings.mirrors.value.isEmpty ? "unset" : settings.mirrors.source.rawValue),
            Entry(key: "retention.keep_last", value: String(retention.keepLast), source: source),
            Entry(key: "retention.keep_hourly", value: String(retention.keepHourly), source: source),
            Entry(key: "retention.keep_daily", value: String(retention.keepDaily), source: source),
            Entry(key: "retention.keep_weekly", value: String(retention.keepWeekly), source: source),
            Entry(key: "retention.keep_monthly", value: String(retention.keepMonthly), source: source),
            Entry(key: "retention.keep_yearly", value: String(retention.keepYearly), source: source),
            Entry(key: "retention.keep_within", value: "\(retention.keepWithin)s", source: source),
            Entry(key: "retention.safety_keep_within", value: "\(retention.safetyKeepWithin)s", source: source),
        ]
    }
}
