import ArgumentParser
import Foundation
import GranaryKit

struct InitCommand: GranaryCommand {
    static let configuration = CommandConfiguration(
        commandName: "init",
        abstract: "Make a repository or a mirror: the one command that creates one.",
        discussion: """
            LOCATION is a local folder, s3:BUCKET/PREFIX or rclone:REMOTE:PATH. Without one, the configured \
            repository (--repo, GRANARY_REPO, repo =) and every configured mirror ([[mirror]]) are made. A local \
            repository is a new folder (mode 0700) in a folder that exists, or an empty one (a new file system's \
            lost+found aside); a folder holding anything else is refused (exit 73). Each gets its marker, \
            .granary-repository. No other command creates a repository: backup, sync, restore and the rest refuse \
            a location without the marker (exit 66), so that an unmounted disk or a typo never fills another file \
            system. A location that is a repository already is left as it is and said so (exit 0): init is safe to \
            run again, from a package's or a playbook's scripts. Repositories made by an older granary's backup \
            have their marker and need nothing. \
            Exit codes: 0 made or already one, 1 some of several locations failed, 64 no location set, 66 the \
            bucket or remote is missing, 73 cannot create (parent folder missing, folder not empty or not \
            granary's own).
            """
    )

    @OptionGroup(title: "Global Options") var global: GlobalOptions

    @Argument(
        help: ArgumentHelp(
            "Locations to make repositories (default: the configured repository and mirrors).",
            valueName: "location"),
        completion: .directory)
    var locations: [String] = []

    func execute(_ console: Console) throws -> InitResult {
        let settings = try global.settings()
        var repositories: [any Repository] = []
        if locations.isEmpty {
            guard let repository = try settings.repository() else {
                throw SettingsError.missing(
                    "repository", flag: "--repo", variable: "GRANARY_REPO", key: "repo",
                    config: settings.configFileToName)
            }
            repositories = [repository] + (try settings.mirrorRepositories())
        } else {
            for location in locations {
                let repository = try Repositories.open(location, context: settings.context)
                if let root = settings.root { try repository.checkSeparate(from: Root(path: root.value)) }
                repositories.append(repository)
            }
        }
        var items: [InitResult.Item] = []
        for repository in repositories {
            do {
                let created = try repository.initialize()
                items.append(InitResult.Item(location: repository.location, created: created, error: nil))
            } catch {
                // One location alone: its failure is the run's, with its own exit code.
                if repositories.count == 1 { throw error }
                items.append(InitResult.Item(location: repository.location, created: false, error: Failure(error)))
            }
        }
        return InitResult(repositories: items)
    }
}

/// `granary init`: each location, and whether it was made now or was a repository already.
struct InitResult: CommandResult {
    struct Item: Encodable {
        let location: String
        /// Made by this run; false for a repository that was one already (or a failure).
        let created: Bool
        @Null var error: Failure?
    }

    let repositories: [Item]

    var problems: [Failure] { repositories.compactMap(\.error) }

    func render(_ text: inout TextOutput, _ detail: TextDetail) {
        // Said even when not at a terminal (a script's log); --quiet silences it.
        for item in repositories where item.error == nil {
            text.line(
                item.created
                    ? "created the repository \(item.location)"
                    : "\(item.location) is a granary repository already; nothing changed")
        }
    }
}
