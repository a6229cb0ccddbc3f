import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension AttackTests {
    /// Class 6: the repository is where every user's data goes. A world-writable one (a fresh
    /// tmpfs mount is 1777) lets any user plant links and folders in it; an existing one is trusted
    /// only when it is granary's alone.
    @Suite("6. a repository others can write")
    struct RepositoryAttacks {
        /// A tmpfs mounted at `path` (mode 1777, as a fresh tmpfs is), or a plain folder of that
        /// mode where mounting is not allowed; unmounted when released.
        final class WorldWritable {
            let path: String
            let mounted: Bool
            init(_ path: String) throws {
                self.path = path
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
                mounted =
                    (try? GranaryProcess.runExecutable("/bin/mount", ["-t", "tmpfs", "-o", "size=8m", "tmpfs", path])
                        .status) == 0
                chmod(path, 0o1777)
            }
            deinit { if mounted { _ = try? GranaryProcess.runExecutable("/bin/umount", ["-l", path]) } }
        }

        @Test(
            "a world-writable repository root is refused (73, naming it), and a .granary-tmp link planted in it receives nothing"
        )
        func worldWritable() throws {
            let lab = try Lab()
            let disk = try WorldWritable(lab.base + "/tmpfs")
            let loot = lab.base + "/loot"
            try Lab.makeFolder(loot, mode: 0o755)
            Lab.chownTree(loot, to: lab.attacker)
            let planted = try lab.run(as: lab.attacker, ["/bin/ln", "-s", loot, disk.path + "/.granary-tmp"])
            try #require(planted.status == 0, "\(planted)")
            _ = try lab.run(as: lab.attacker, ["/bin/mkdir", "-m", "0777", disk.path + "/victim"])
            // The marker too: granary then takes the folder for a repository and checks it.
            _ = try lab.run(as: lab.attacker, ["/usr/bin/touch", disk.path + "/.granary-repository"])
            let before = lab.watch()
            for command in [
                ["backup", "victim"], ["backup", "--all"], ["restore", "victim"], ["reset", "victim", "--yes"],
                ["list"],
                ["verify", "--all"],
            ] {
                let outcome = try lab.granary(command, repo: disk.path)
                Lab.expectRefused(
                    outcome, "\(command) into \(disk.path)", codes: command.contains("--all") ? [1, 73] : [73],
                    naming: disk.path)
            }
            #expect(FileSystem.contents(of: loot).isEmpty, "\(FileSystem.contents(of: loot))")
            #expect(FileSystem.contents(of: disk.path + "/victim").isEmpty)
            // The victim's own stores were opened by the reset before it checked the repository
            // (SQLite made their -wal and -shm, the victim's): only the others are compared.
            let after = lab.watch()
            #expect(after.etc == before.etc && after.secret == before.secret)
            #expect(try lab.foreignBytesInArchives(in: disk.path).isEmpty)
        }

        @Test("a repository made private after others planted folders in it refuses those folders (73, naming them)")
        func plantedBeforeChmod() throws {
            // The refusal's hint says: chown root REPO && chmod 0700 REPO. What another user planted
            // while it was open (their own .granary-tmp and user folders, which they can still reach
            // through descriptors they kept open) must not be used.
            let lab = try Lab()
            let disk = try WorldWritable(lab.base + "/tmpfs")
            // A repository (granary init made it) that was opened to everyone for a while.
            try Data("granary repository 1\n".utf8).write(
                to: URL(fileURLWithPath: disk.path + "/.granary-repository"))
            for name in [".granary-tmp", "victim"] {
                let made = try lab.run(as: lab.attacker, ["/bin/mkdir", "-m", "0777", disk.path + "/" + name])
                try #require(made.status == 0, "\(made)")
            }
            chmod(disk.path, 0o700)
            let outcome = try lab.granary(["backup", "victim"], repo: disk.path)
            Lab.expectRefused(
                outcome, "backup into a repository with planted folders", codes: [73], naming: disk.path + "/")
            for name in [".granary-tmp", "victim"] {
                #expect(FileSystem.contents(of: disk.path + "/" + name).isEmpty, "granary used the attacker's \(name)")
            }
        }

        @Test("a repository that is a symlink, belongs to another user or is group-writable is refused (73, naming it)")
        func unsafeRepositories() throws {
            let lab = try Lab()
            let owned = lab.base + "/owned"
            try Lab.makeFolder(owned, mode: 0o700)
            Lab.chownTree(owned, to: lab.attacker)
            let group = lab.base + "/group"
            try Lab.makeFolder(group, mode: 0o770)
            let link = lab.base + "/link"
            try Lab.makeFolder(lab.base + "/real", mode: 0o700)
            symlink(lab.base + "/real", link)
            for repo in [owned, group, link] {
                let made = try lab.granary(["init", repo], repo: repo)
                Lab.expectRefused(made, "init of \(repo)", codes: [73], naming: repo)
                #expect(FileSystem.contents(of: repo).isEmpty)
                // A marker there (its owner's, or from before the folder was opened up): still refused.
                try Data("granary repository 1\n".utf8).write(to: URL(fileURLWithPath: repo + "/.granary-repository"))
                let outcome = try lab.granary(["backup", "victim"], repo: repo)
                Lab.expectRefused(outcome, "backup into \(repo)", codes: [73], naming: repo)
                #expect(FileSystem.contents(of: repo) == [".granary-repository"])
            }
        }
    }
}
