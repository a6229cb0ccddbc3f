import Foundation
import GranaryKit

/// A user named on the command line who has no archives in the repository.
struct NoArchivesError: GranaryError, CommandLineError {
    let user: UserID
    let repository: String
    /// Whether the user exists under the root (a user never backed up).
    let existsUnderRoot: Bool

    init(user: UserID, repository: String, root: Root?) {
        self.user = user
        self.repository = repository
        existsUnderRoot = root.map { (try? $0.user(user)) != nil } ?? false
    }

    var description: String {
        existsUnderRoot
            ? "\(user) has no archives in \(repository)"
            : "no archives of \(user) in \(repository), and no user \(user) under the root"
    }

    var status: ExitStatus { .notFound }

    var hint: String? {
        existsUnderRoot
            ? Hint.command("granary", "backup", user.rawValue)
            : "granary list shows every user's archives; check the spelling of the user id"
    }
}

/// An error the executable makes itself: a message, a hint and an exit status.
struct CommandError: GranaryError, CommandLineError {
    let description: String
    let status: ExitStatus
    var hint: String?
}

/// Archive files named by their paths that are not in the repository: `delete` and `verify`
/// act on the repository's archives, and on other files only with `--force`.
struct OutsideRepository: GranaryError, CommandLineError {
    /// `delete` or `verify`.
    let command: String
    let paths: [String]
    /// The repository, when there is one.
    let repository: String?

    var description: String {
        let subject = paths.count == 1 ? paths[0] + ": it is" : paths.joined(separator: ", ") + ": they are"
        let place =
            repository.map { "the repository \($0)" }
            ?? "a repository (none is set, and the folder above the user's folder is not one)"
        return "refusing to \(command) \(subject) not in \(place)"
    }

    var status: ExitStatus { .usage }

    var hint: String? {
        let words = paths.map(ShellWord.quote).joined(separator: " ")
        switch command {
        case "delete":
            return "granary delete --force \(words) removes it anyway; granary list shows the repository's archives"
        default: return "granary verify --force \(words) verifies it without recording the result"
        }
    }
}
