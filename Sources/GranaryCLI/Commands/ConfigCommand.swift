import ArgumentParser
import Foundation
import GranaryKit

struct ConfigCommand: GranaryCommand {
    static let configuration = CommandConfiguration(
        commandName: "config",
        abstract: "Print the effective settings and where each came from (flag, environment, file, default).",
        discussion: """
            --systemd prints the drop-in that lets the shipped systemd units write where these settings put \
            the root, the repository and each local mirror (their sandbox leaves the rest of the file system \
            read-only): save it as /etc/systemd/system/granary-.service.d/paths.conf, then systemctl daemon-reload. \
            A local repository or mirror that is not made yet is named, with the one command that makes them: \
            granary init.
            """
    )

    @OptionGroup(title: "Global Options") var global: GlobalOptions

    @Flag(help: "Print the systemd drop-in (ReadWritePaths=) for the shipped units from these settings.")
    var systemd = false

    func checkArguments() throws {
        if systemd && global.json { throw ValidationError("--systemd prints a systemd file, not JSON: drop --json") }
    }

    func execute(_ console: Console) throws -> ConfigResult {
        let settings = try global.settings()
        var result = ConfigResult(settings)
        // Local places only: a remote one would cost a listing, and config touches nothing.
        result.notMade = ([settings.repo?.value].compactMap { $0 } + settings.mirrors.value).filter {
            !Repositories.isRemote($0) && !LocalRepository(path: $0).exists()
        }
        if systemd { result.dropIn = try Self.dropIn(settings) }
        return result
    }

    /// The `[Service]` drop-in naming the settings' local places (remote ones need nothing).
    static func dropIn(_ settings: Settings) throws -> [String] {
        var places: [String] = []
        if let root = settings.root?.value { places.append(root) }
        for location in [settings.repo?.value].compactMap({ $0 }) + settings.mirrors.value
        where !Repositories.isRemote(location) {
            places.append(location)
        }
        guard !places.isEmpty else {
            throw ValidationError("no root, repository or local mirror is set: nothing for the units to write")
        }
        let absolute = places.map { LocalRepository.resolvedPath($0) }
        // systemd splits the list on spaces and takes a double-quoted word whole.
        let words = absolute.map { $0.contains(where: \.isWhitespace) ? "\"" + $0 + "\"" : $0 }
        return [
            "# /etc/systemd/system/granary-.service.d/paths.conf: where the granary units may write,",
            "# from \(settings.configPath ?? "the command line and environment") (granary config --systemd).",
            "[Service]",
            "ReadWritePaths=" + words.joined(separator: " "),
        ]
    }
}

/// `granary config`: every setting with its value and where the value came from. The keys
/// are the configuration file's; each value is written as the file would hold it.
struct ConfigResult: CommandResult {
    /// A listing: shown with --quiet too.
    var isAnswer: Bool { true }
    /// A setting's value: a string, an integer, or `null` when unset.
    enum Value: Encodable, Sendable {
        case string(String), integer(Int), boolean(Bool), list([String]), unset

        func encode(to encoder: Encoder) throws {
            var container = encoder.singleValueContainer()
            switch self {
            case .string(let text): try container.encode(text)
            case .integer(let number): try container.encode(number)
            case .boolean(let value): try container.encode(value)
            case .list(let items): try container.encode(items)
            case .unset: try container.encodeNil()
            }
        }

        var text: String {
            switch self {
            case .string(let text): return text
            case .integer(let number): return String(number)
            case .boolean(let value): return value ? "true" : "false"
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
    /// With `--systemd`: the drop-in's lines, printed instead of the settings.
    var dropIn: [String]?
    /// Where a configuration file was looked for, in order (text only).
    private var looked: [String] = []
    /// The configured local repository and mirrors that are not repositories yet (text only).
    var notMade: [String] = []

    var notes: [String] {
        notMade.map {
            "\($0) is not a granary repository yet: granary init makes the configured repository and mirrors"
        }
    }

    enum CodingKeys: String, CodingKey { case file, settings }

    init(_ settings: Settings) {
        file = settings.configPath
        looked = ConfigFile.defaultPaths(environment: ProcessInfo.processInfo.environment)
        // One line per key of the configuration file, in the order of the one list of keys.
        self.settings = ConfigKey.all.map { $0.show(settings) }
    }

    /// A size as the file would hold it: `"512MiB"` for a whole number of a binary unit, else bytes.
    static func size(_ bytes: Int64) -> Value {
        let text = ByteCountText.render(bytes)
        return text.hasSuffix(" bytes") ? .integer(Int(bytes)) : .string(text.replacingOccurrences(of: " ", with: ""))
    }

    func render(_ text: inout TextOutput, _ detail: TextDetail) {
        if let dropIn {
            for line in dropIn { text.line(TextLine(stringLiteral: line)) }
            return
        }
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
