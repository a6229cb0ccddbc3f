import ArgumentParser
import Foundation
import GranaryKit

#if canImport(Glibc)
    import Glibc
#endif

/// The options every command takes, before or after the command's name.
///
/// The root command declares them, so `granary --help` lists them and they may come first
/// (`granary --root R users`); each command declares them too (ArgumentParser hands the
/// parent's parsed values down), so they may also come after the command's name.
struct GlobalOptions: ParsableArguments {
    @Option(
        name: .long, help: ArgumentHelp("Folder holding one sub-folder per user (env GRANARY_ROOT).", valueName: "dir"),
        completion: .directory)
    var root: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Where archives go: a folder, s3:BUCKET/PREFIX or rclone:REMOTE:PATH (env GRANARY_REPO).",
            valueName: "location"),
        completion: .directory)
    var repo: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "This host's name where hosts share a repository: new archives are this host's, and commands act on this host's archives (env GRANARY_HOST; default: the machine's host name).",
            valueName: "name"))
    var host: String?

    @Option(
        name: .long,
        help: ArgumentHelp("Configuration file (env GRANARY_CONFIG; see granary.toml(5)).", valueName: "file"),
        completion: .file())
    var config: String?

    @Flag(name: .long, help: "Print one JSON document on standard output, errors included.")
    var json = false

    @Flag(name: [.short, .long], help: "Print errors only.")
    var quiet = false

    @Flag(name: [.short, .long], help: "Print more detail.")
    var verbose = false

    func validate() throws {
        if quiet && verbose { throw ValidationError("pass -q or -v, not both") }
    }

    /// Every setting with flag > environment > configuration file > default precedence.
    /// Throws a `ConfigError` (exit 64) when the configuration file is unreadable or wrong.
    func settings() throws -> Settings {
        // A path with bytes that are not UTF-8 would reach the filesystem as other bytes than
        // typed (granary opens the root and its own files by UTF-8 paths): refused, with 64.
        for (flag, value) in [("--root", root), ("--config", config)] {
            if let value, !FolderName.isUTF8(value) {
                throw CommandError(
                    description: "\(flag) \(value) is not UTF-8 text", status: .usage,
                    hint: "name it by a UTF-8 path (a link with such a name works)")
            }
        }
        if let config = config ?? ProcessInfo.processInfo.environment["GRANARY_CONFIG"] {
            try Self.checkPlace(config, "--config")
        }
        var settings = try Settings.load(rootFlag: root, repoFlag: repo, configFlag: config)
        // A path starting with ~ (from any source) is refused before anything uses it.
        if let root = settings.root { try Self.checkPlace(root.value, Self.origin("--root", "GRANARY_ROOT", root)) }
        if let repo = settings.repo, !Repositories.isRemote(repo.value) {
            try Self.checkPlace(repo.value, Self.origin("--repo", "GRANARY_REPO", repo))
        }
        if geteuid() != 0 { try Self.checkAccess(settings) }
        if let host {
            guard Hosts.isValid(host) else {
                throw CommandError(
                    description: InvalidHost(name: host).description, status: .usage,
                    hint: "pass --host NAME with a host name such as web-1")
            }
            settings.host = Setting(host, from: .flag)
        } else if let variable = ProcessInfo.processInfo.environment["GRANARY_HOST"], !variable.isEmpty,
            !Hosts.isValid(variable)
        {
            throw CommandError(
                description: "GRANARY_HOST: " + InvalidHost(name: variable).description, status: .usage,
                hint: "set GRANARY_HOST to a host name such as web-1, or unset it")
        }
        // Where the settings came from, when a person should know (root's environment, an ignored file).
        if !quiet {
            for note in settings.notes {
                StandardStreams.error(TextLine(stringLiteral: "granary: " + note).rendered(color: false) + "\n")
            }
        }
        // GRANARY_PAGE_HASH asked for a way of hashing pages this CPU does not run, or for none:
        // the default way is used, and said.
        if !quiet, let note = PageHashSetting.note {
            StandardStreams.error(TextLine(stringLiteral: "granary: warning: " + note).rendered(color: false) + "\n")
        }
        // A `.granary` another user made first in the root (a sticky root lets them) is moved
        // aside before anything uses it, and named.
        if geteuid() == 0, let root = settings.root, let note = try? Root(path: root.value).reclaimStateFolder() {
            StandardStreams.error(TextLine(stringLiteral: "granary: warning: " + note).rendered(color: false) + "\n")
        }
        // The settings reach the core in the run's context (`Settings.context`), not as process state.
        return settings
    }

    /// Refuses a place that starts with `~` (granary does not expand it; see `PathText`).
    static func checkPlace(_ path: String, _ name: String) throws {
        guard let found = PathText.tildeProblem(path) else { return }
        throw CommandError(description: "\(name) \(path) \(found.problem)", status: .usage, hint: found.hint)
    }

    /// Not root: a root, a user's folder or a repository this user may not read is one answer,
    /// "granary must run as root", rather than "not a granary repository" or users shown with
    /// no stores. (granary may run unprivileged over folders that user owns.)
    static func checkAccess(_ settings: Settings) throws {
        func denied(_ path: String) -> Bool {
            access(path, R_OK | X_OK) != 0 && (errno == EACCES || errno == EPERM)
        }
        var places: [String] = []
        if let root = settings.root?.value, FileSystem.isDirectory(root) {
            places.append(root)
            if !denied(root) {
                places += FileSystem.contents(of: root).filter { !$0.hasPrefix(".") }.map { root + "/" + $0 }
                    .filter { FileSystem.isDirectory($0) }
            }
        }
        if let repo = settings.repo?.value, !Repositories.isRemote(repo), FileSystem.status(repo) != nil {
            places.insert(repo, at: 0)
        }
        guard let place = places.first(where: denied) else { return }
        let words = ["sudo", "granary"] + GranaryMain.argumentBytes().map(ShellWord.quote)
        throw CommandError(
            description: "granary must run as root: \(place) cannot be read by uid \(geteuid()) (permission denied)",
            status: .usage, hint: words.joined(separator: " "))
    }

    /// How a setting was given, for messages: the flag, the variable or the file's key.
    static func origin<Value>(_ flag: String, _ variable: String, _ setting: Setting<Value>) -> String {
        switch setting.source {
        case .flag: return flag
        case .environment: return variable
        case .file, .defaultValue: return String(flag.dropFirst(2)) + " (configuration)"
        }
    }

    /// The option names, and whether each takes a value (for scanning a command line that
    /// ArgumentParser refused).
    static let names: [String: Bool] = [
        "--root": true, "--repo": true, "--host": true, "--config": true, "--json": false, "-q": false,
        "--quiet": false,
        "-v": false, "--verbose": false,
    ]
}
