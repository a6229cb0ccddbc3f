import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension AttackTests {
    /// Issue 47: files root writes by name outside the repository.
    @Suite("19. files written outside the repository")
    struct OutsideFiles {
        /// A textfile folder the attacker owns (as Debian's prometheus user owns
        /// /var/lib/prometheus), and a link of theirs to the root-only folder beside it.
        static func setUp(_ lab: Lab) throws -> (folder: String, textfile: String, link: String) {
            let prometheus = lab.base + "/prometheus"
            try Lab.makeFolder(prometheus, mode: 0o755)
            try Lab.makeFolder(prometheus + "/node-exporter", mode: 0o755)
            let link = prometheus + "/elsewhere"
            lab.symlink(link, to: lab.secret, owner: lab.attacker)
            Lab.chownTree(prometheus, to: lab.attacker)
            return (prometheus + "/node-exporter", prometheus + "/node-exporter/granary.prom", link)
        }

        @Test(
            "check --textfile in a folder another user owns, swapped for a link to a root-only folder while granary runs: the file lands in the real folder or is refused (73), never through the link"
        )
        func textfileFolderSwap() throws {
            let lab = try Lab()
            #expect(try lab.granary(["backup", "--all"], timeout: 120).status == 0)
            let (folder, textfile, link) = try Self.setUp(lab)
            let before = lab.watch()
            let flip = try lab.helper("flip.py", [folder, link])
            var written = 0
            var refused = 0
            for _ in 0..<20 {
                let outcome = try lab.granary(["check", "--textfile", textfile])
                Lab.expectDocumented(outcome, "check --textfile with its folder flipping")
                if outcome.status == 73 {
                    refused += 1
                    #expect(outcome.stderr.contains("cannot write --textfile"), "\(outcome)")
                } else {
                    #expect(outcome.status == 0, "\(outcome)")
                    written += 1
                }
            }
            _ = flip.stop()
            try lab.expectContained(since: before, "check --textfile with its folder swapped for a link")
            #expect(FileSystem.contents(of: lab.secret).allSatisfy { !$0.contains("granary.prom") })
            // Whatever was written is in the real folder, root's file among the attacker's.
            if written > 0 {
                #expect(FileSystem.status(textfile)?.st_uid == 0)
            }
            #expect(
                FileSystem.contents(of: folder).filter { $0.hasPrefix(".granary.prom") }.isEmpty, "a temporary stayed")
        }

        @Test("check --textfile through a link another user placed is refused (73) and nothing is written through it")
        func textfileThroughLink() throws {
            let lab = try Lab()
            #expect(try lab.granary(["backup", "--all"], timeout: 120).status == 0)
            let (_, _, link) = try Self.setUp(lab)
            let before = lab.watch()
            let outcome = try lab.granary(["check", "--textfile", link + "/granary.prom"])
            #expect(outcome.status == 73, "\(outcome)")
            #expect(outcome.stderr.contains("is a link in a folder another user can write"), "\(outcome)")
            try lab.expectContained(since: before, "check --textfile through a planted link")
        }
    }
}
