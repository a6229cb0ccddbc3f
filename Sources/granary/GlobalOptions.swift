import Foundation
import ArgumentParser
import GranaryKit

/// The options every command takes (PRODUCT.md's global options).
struct GlobalOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("Folder holding one sub-folder per user (env GRANARY_ROOT).", valueName: "dir"),
        completion: .directory)
    var root: String?

    @Option(name: .long, help: ArgumentHelp("Where archives go: a folder, s3:BUCKET/PREFIX or rclone:REMOTE:PATH (env GRANARY_REPO).", valueName: "location"),
        completion: .directory)
    var repo: String?

    @Option(name: .long, help: ArgumentHelp("Configuration file (env GRANARY_CONFIG; see granary.toml(5)).", valueName: "file"), completion: .file())
    var config: String?

    @Flag(name: .long, help: "Print a JSON document instead of text.")
    var json = false

    @Flag(name: [.short, .long], help: "Print errors only.")
    var quiet = false

    @Flag(name: [.short, .long], help: "Print more detail.")
    var verbose = false

    /// Every setting with flag > environment > configuration file > default precedence.
    /// Throws a `ConfigError` (exit 64) when the configuration file is unreadable or wrong.
    func settings() throws -> Settings {
        let settings = try Settings.load(rootFlag: root, repoFlag: repo, configFlag: config)
        if !quiet { for note in settings.notes { FileHandle.standardError.write(Data(("granary: " + note + "\n").utf8)) } }
        return settings
    }

    /// The console for this run.
    func console() -> Console {
        Console(quiet: quiet, verbose: verbose)
    }
}
