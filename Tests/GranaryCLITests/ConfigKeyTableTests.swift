import Foundation
import GranaryKit
import Testing

@testable import GranaryCLI

/// The configuration file's keys live in one table (`ConfigKey.all`, ConfigKeys.swift): the
/// parser reads only keys it has, `granary config` shows one line per key, and granary.toml(5)
/// is generated from it. These tests fail when the three drift apart.
@Suite("the configuration keys are one table: parser, granary config and granary.toml(5)")
struct ConfigKeyTableTests {
    /// The repository's top folder.
    static let package = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// A file setting `key` alone to `value` (TOML).
    static func file(setting key: ConfigKey, to value: String) -> String {
        guard let table = key.table else { return "\(key.key) = \(value)\n" }
        let header = ConfigTable.named(table)?.isArray == true ? "[[\(table)]]" : "[\(table)]"
        return "\(header)\n\(key.name) = \(value)\n"
    }

    /// `granary config`'s lines for `config`.
    static func shown(_ config: ConfigFile?) -> [String: ConfigResult.Entry] {
        let settings = Settings.resolve(rootFlag: nil, repoFlag: nil, config: config, environment: [:])
        return Dictionary(uniqueKeysWithValues: ConfigResult(settings).settings.map { ($0.key, $0) })
    }

    /// The key of `row`'s line in `granary config` (every `[[mirror]]`'s repo is one line, `mirror`).
    static func shownKey(_ row: ConfigKey) -> String { row.key == "mirror.repo" ? "mirror" : row.key }

    @Test("every key of the table is parsed, reaches the settings and is shown by granary config as the file's")
    func everyKeyIsParsedAndShown() throws {
        #expect(ConfigKey.all.count == Set(ConfigKey.all.map(\.key)).count, "a key declared twice")
        for row in ConfigKey.all {
            let text = Self.file(setting: row, to: row.example)
            let config = try ConfigFile.parse(text, path: "/etc/granary/config.toml")
            let line = try #require(Self.shown(config)[Self.shownKey(row)], "granary config does not show \(row.key)")
            #expect(
                line.source == "file",
                "\(row.key) = \(row.example) was parsed but granary config shows it from \(line.source)")
        }
    }

    @Test("granary config shows exactly the table's keys, in its order, each with the table's default")
    func configShowsTheTable() {
        let settings = Settings.resolve(rootFlag: nil, repoFlag: nil, config: nil, environment: [:])
        let lines = ConfigResult(settings).settings
        #expect(lines.map(\.key) == ConfigKey.all.map(Self.shownKey))
        for (line, row) in zip(lines, ConfigKey.all) where row.key != "host" {  // host: the machine's name
            #expect(line.value.text == row.defaultValue, "\(row.key): the table says \(row.defaultValue)")
            #expect(line.source == "default")
        }
    }

    @Test("a key the table does not have is refused as unknown, in every table and at the top level, naming the keys")
    func keysNotInTheTableAreRefused() {
        let tables: [String?] = [nil] + ConfigTable.all.map(\.name)
        for table in tables {
            // Names that are keys elsewhere, and a typo, none of them a key of this table.
            for name in ["bytes_per_user", "keep_last", "timeout", "repo", "root", "jobz"]
            where !ConfigKey.names(in: table).contains(name) && ConfigTable.named(name) == nil {
                let full = table.map { $0 + "." + name } ?? name
                let text: String
                switch table.flatMap(ConfigTable.named) {
                case .some(let found) where found.isArray:
                    text = "[[\(found.name)]]\nrepo = \"/srv/m\"\n\(name) = 1\n"
                case .some(let found): text = "[\(found.name)]\n\(name) = 1\n"
                case .none: text = "\(name) = 1\n"
                }
                let error = #expect(throws: ConfigError.self) { try ConfigFile.parse(text, path: "/c.toml") }
                guard case .unknownKey(let path, _, let key) = error else {
                    Issue.record("\(full) was not refused as unknown: \(String(describing: error))")
                    continue
                }
                #expect(path == "/c.toml" && key == full)
                let hint = error?.hint ?? ""
                // A table's key at the top level (an uncommented #keep_daily without its #[retention]):
                // the hint names the table to put it under.
                if table == nil, let home = ConfigKey.all.first(where: { $0.table != nil && $0.name == name })?.table {
                    #expect(hint.contains("\(name) is a key of ") && hint.contains(home + "]"), "\(full): \(hint)")
                    continue
                }
                // The hint lists the table's keys from the table (bytes_per_user once was missing).
                for known in ConfigKey.names(in: table) { #expect(hint.contains(known), "\(full): \(hint)") }
            }
        }
    }

    /// The bounded duration keys (every duration key but the retention spans, which count months).
    static let durationKeys = ConfigKey.all.filter { $0.grammar == .duration && $0.table != "retention" }

    @Test("every duration key reads a TOML float as seconds, as lock_timeout always did (delta_max_age = 1.5)")
    func durationKeysReadFloats() throws {
        #expect(Set(Self.durationKeys.map(\.key)).isSuperset(of: ["lock_timeout", "delta_max_age"]))
        for row in Self.durationKeys {
            for (value, shown) in [("1.5", "1s500ms"), ("2", "2s"), ("\"1.5s\"", "1s500ms")] {
                let config = try ConfigFile.parse(Self.file(setting: row, to: value), path: "/c.toml")
                let line = try #require(Self.shown(config)[row.key])
                #expect(line.source == "file" && line.value.text == shown, "\(row.key) = \(value): \(line.value.text)")
            }
        }
        let config = try ConfigFile.parse("delta_max_age = 3600.5\n", path: "/c.toml")
        #expect(config.deltaMaxAge == .milliseconds(3_600_500))
    }

    @Test("every duration key refuses a value out of its bounds or of the wrong type with the same words")
    func durationKeysRefuseAlike() throws {
        let cases: [(key: String, value: String, message: String)] = [
            (
                "lock_timeout", "1e9",
                "/c.toml:1: lock_timeout: must be a duration from 0s to 7d, such as \"30s\", \"2min\" or \"7d\"; \"1000000000.0\" is not"
            ),
            (
                "delta_max_age", "31622400.5",
                "/c.toml:1: delta_max_age: must be a duration from 0s to 366d, such as \"30s\", \"2min\" or \"7d\"; \"31622400.5\" is not"
            ),
            (
                "delta_max_age", "\"2m\"",
                "/c.toml:1: delta_max_age: \"2m\": m is not a unit here: write min for minutes, or mo for months (restic's m)"
            ),
            (
                "lock_timeout", "-0.5",
                "/c.toml:1: lock_timeout: \"-0.5\": not a duration: use a number with ms, s, min, h, d, w, mo or y (e.g. 30s, 2min, 1h30min, 7d, 6mo, 1y), or plain seconds"
            ),
        ]
        for (key, value, message) in cases {
            let error = #expect(throws: ConfigError.self) {
                try ConfigFile.parse("\(key) = \(value)\n", path: "/c.toml")
            }
            #expect(error?.description == message, "\(key) = \(value)")
        }
        for row in Self.durationKeys {
            let error = #expect(throws: ConfigError.self) {
                try ConfigFile.parse(Self.file(setting: row, to: "true"), path: "/c.toml")
            }
            guard case .wrongType(_, _, let key, let expected, _) = error else {
                Issue.record("\(row.key) = true: \(String(describing: error))")
                continue
            }
            #expect(key == row.key && expected == "a duration such as \"30s\", \"2min\" or \"7d\"", "\(row.key)")
        }
    }

    @Test("every key of the table is documented in man/granary.toml.5 with its grammar")
    func everyKeyIsInTheManual() throws {
        let manual = try String(
            contentsOf: Self.package.appendingPathComponent("man/granary.toml.5"), encoding: .utf8)
        let lines = Set(manual.split(separator: "\n").map(String.init))
        for row in ConfigKey.all {
            let listed = lines.contains(".It Cm \(row.key) No = Ar \(row.grammar.rawValue)")
            #expect(listed, "man/granary.toml.5 does not list \(row.key): run make generate")
            let described = lines.contains {
                $0.hasPrefix(".It Cm ") && $0.hasSuffix(" No = Ar \(row.grammar.rawValue)")
                    && $0.dropFirst(7).components(separatedBy: " No = ")[0].components(separatedBy: " , ")
                        .contains(row.name)
            }
            #expect(described, "man/granary.toml.5 has no paragraph for \(row.key)")
        }
    }
}
