import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

/// The fixture most end-to-end tests start from: granary-sample's users under a root, and a
/// repository beside it, in a private folder removed with the value.
class SampleSite {
    let folder = TemporaryFolder()
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }

    /// Makes the sample root; `backup` names what to back up first (`["--all"]` for every
    /// user), which must succeed.
    init(backup: [String] = []) throws {
        try GranaryProcess.run([root], tool: "granary-sample")
        guard !backup.isEmpty else { return }
        let made = try granary(["backup"] + backup)
        #expect(made.status == 0, "\(made.stderr)")
    }

    /// Runs granary with `arguments` on this root and repository.
    func granary(_ arguments: [String], environment: [String: String] = [:]) throws -> GranaryProcess.Result {
        try GranaryProcess.run(arguments + ["--root", root, "--repo", repo], environment: environment)
    }

    /// The names of the user's archives in the repository, oldest first (records and temporaries,
    /// whose names start with a dot, left out).
    func archives(_ user: String) -> [String] {
        FileSystem.contents(of: repo + "/" + user).filter { !$0.hasPrefix(".") }.sorted()
    }
}
