import ArgumentParser
import GranaryKit

/// The options every command takes (PRODUCT.md's global options).
struct GlobalOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("Folder holding one sub-folder per user (env GRANARY_ROOT).", valueName: "dir"),
        completion: .directory)
    var root: String?

    @Option(name: .long, help: ArgumentHelp("Folder where archives go (env GRANARY_REPO).", valueName: "dir"),
        completion: .directory)
    var repo: String?

    @Option(name: .long, help: ArgumentHelp("Configuration file.", valueName: "file"), completion: .file())
    var config: String?

    @Flag(name: .long, help: "Print a JSON document instead of text.")
    var json = false

    @Flag(name: [.short, .long], help: "Print errors only.")
    var quiet = false

    @Flag(name: [.short, .long], help: "Print more detail.")
    var verbose = false

    /// Root and repository with flag > environment precedence.
    func settings() -> Settings {
        Settings.resolve(rootFlag: root, repoFlag: repo)
    }

    /// The console for this run.
    func console() -> Console {
        Console(quiet: quiet, verbose: verbose)
    }
}
