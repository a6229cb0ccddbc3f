import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension AttackTests {
    /// Class 10: a repository inside the root becomes a "user" (and its archives readable by
    /// whoever owns that folder); a repository equal to the root puts archives in users' folders.
    @Suite("10. a repository equal to the root or inside it")
    struct RepositoryOverlap {
        @Test(
            "--repo equal to the root, inside it (also through a link or ..) or holding it is refused (64) before anything is written"
        )
        func overlaps() throws {
            let lab = try Lab()
            let alias = lab.base + "/alias"
            symlink(lab.root, alias)
            let repos = [
                lab.root, lab.root + "/", lab.root + "/backups", lab.root + "/attacker/backups", alias + "/backups",
                lab.root + "/../root", lab.base,
            ]
            let commands = [
                ["backup", "attacker"], ["backup", "--all"], ["restore", "attacker"], ["reset", "attacker", "--yes"],
                ["list"],
                ["verify", "--all"], ["recover"],
            ]
            let rootBefore = Lab.fingerprint(lab.root)
            let before = lab.watch()
            for (index, repo) in repos.enumerated() {
                // Every command with the root itself; a few with each other spelling.
                for command in index == 0 ? commands : [commands[index % 2], commands[2 + index % 5]] {
                    let outcome = try lab.granary(command, repo: repo)
                    Lab.expectRefused(
                        outcome, "\(command) with --repo \(repo)", codes: [64], naming: LocalRepository(path: repo).path
                    )
                }
            }
            #expect(Lab.fingerprint(lab.root) == rootBefore, "something was written in the root")
            try lab.expectContained(since: before, "overlapping repositories")
        }
    }
}
