import Foundation
import GranaryKit

extension GranaryMain {
    /// Parses `arguments` and resolves the places they name (configuration file, root,
    /// repository, mirrors, restore's `--to`) as a command would before its work, without
    /// doing the work or printing: the exit status of the first error, or `nil`. For the fuzz
    /// target `paths`, which feeds it every path-taking option with hostile paths.
    public static func resolveOnly(_ arguments: [String]) -> Int32? {
        let words = CommandLineWords(arguments)
        do {
            try words.check()
            let parsed = try Granary.parseAsRoot(arguments)
            guard let command = parsed as? any GranaryCommand else { return nil }
            try command.checkArguments()
            let settings = try command.global.settings()
            if let restore = command as? RestoreCommand, let to = restore.to {
                try GlobalOptions.checkPlace(to, "--to")
            }
            if let repository = try settings.repository() {
                _ = repository.location
                if let local = repository as? LocalRepository { _ = local.exists() }
            }
            _ = try settings.mirrorRepositories()
            if settings.root != nil { _ = try settings.requireRoot().scan() }
            return nil
        } catch let error as any GranaryError {
            return error.exitStatus.rawValue
        } catch is CommandLineWords.Problem {
            return ExitStatus.usage.rawValue
        } catch {
            return Granary.exitCode(for: error).rawValue
        }
    }
}
