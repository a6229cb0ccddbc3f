import Foundation
import GranaryKit

/// A user named on the command line who has no archives in the repository.
struct NoArchivesError: GranaryError {
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
        existsUnderRoot ? "granary backup \(ShellWord.quote(user.rawValue))" : "granary list shows every user's archives; check the spelling of the user id"
    }
}

/// An error the executable makes itself: a message, a hint and an exit status.
struct CommandError: GranaryError {
    let description: String
    let status: ExitStatus
    var hint: String?
}
