// Prints the keys of the configuration file (`ConfigKey.all`) as JSON, for
// scripts/generate-config-man.py: `make generate` writes granary.toml(5)'s keys from them.
import ArgumentParser
import Foundation
import GranaryCLI

struct ConfigKeys: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "granary-config-keys",
        abstract: "Print the keys of granary.toml(5) as JSON (make generate writes the manual from them).")

    struct Row: Encodable {
        let key: String
        let table: String?
        let name: String
        let grammar: String
        let defaultValue: String
        let summary: String
    }

    func run() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let rows = ConfigKey.all.map {
            Row(
                key: $0.key, table: $0.table, name: $0.name, grammar: $0.grammar.rawValue,
                defaultValue: $0.defaultValue, summary: $0.summary)
        }
        FileHandle.standardOutput.write(try encoder.encode(rows))
        FileHandle.standardOutput.write(Data("\n".utf8))
    }
}

ConfigKeys.main()
