import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension AttackTests {
    /// Issue 47: rclone remotes that end in this machine's filesystem.
    @Suite("21. rclone remotes on a local folder, checked before the first write")
    struct LocalRemotes {
        @Test(
            "a mirror on an rclone alias or local remote whose folder the attacker owns, with .granary-repository planted as a link to a root-only file: refused, the file unchanged",
            arguments: ["alias", "local"])
        func plantedMarker(kind: String) throws {
            let lab = try Lab()
            let loot = lab.attackerHome + "/loot"
            try Lab.makeFolder(loot, mode: 0o755)
            try Lab.makeFolder(loot + "/granary", mode: 0o755)
            lab.symlink(loot + "/granary/.granary-repository", to: lab.canaryFile, owner: lab.attacker)
            Lab.chownTree(loot, to: lab.attacker)
            let canary = try String(contentsOfFile: lab.canaryFile, encoding: .utf8)
            var environment = ["RCLONE_RETRIES=1", "RCLONE_LOW_LEVEL_RETRIES=1"]
            let repo: String
            switch kind {
            case "alias":
                environment += ["RCLONE_CONFIG_OFFSITE_TYPE=alias", "RCLONE_CONFIG_OFFSITE_REMOTE=\(loot)"]
                repo = "rclone:offsite:granary"
            default:
                environment += ["RCLONE_CONFIG_OFFSITE_TYPE=local"]
                repo = "rclone:offsite:\(loot)/granary"
            }
            let environmentFile = try lab.rootFile(
                "remote.env", environment.joined(separator: "\n") + "\n", mode: 0o600)
            let config = try lab.rootFile(
                "local.toml", "remote_environment = \"\(environmentFile)\"\n[[mirror]]\nrepo = \"\(repo)\"\n")
            let before = lab.watch()
            let outcome = try lab.granary(["backup", "--all", "--config", config], timeout: 120)
            Lab.expectDocumented(outcome, "backup --all with a mirror on the attacker's folder (\(kind))")
            #expect(outcome.status == 1, "\(outcome)")
            #expect(
                try String(contentsOfFile: lab.canaryFile, encoding: .utf8) == canary,
                "root's file was written through the planted marker")
            #expect(outcome.stderr.contains("belongs to uid") || outcome.stderr.contains("symbolic link"), "\(outcome)")
            // Root's folders untouched (the victim's is backed up: its -shm comes and goes).
            let after = lab.watch()
            #expect(after.secret == before.secret && after.etc == before.etc)
            #expect(
                Lab.files(under: loot).filter { !$0.hasSuffix(".granary-repository") }.isEmpty,
                "\(Lab.files(under: loot))")
        }
    }
}
