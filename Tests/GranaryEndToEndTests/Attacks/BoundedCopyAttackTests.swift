import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension AttackTests {
    /// Issue 47: what a user can make granary spend by changing a file after it was counted.
    @Suite("17. copies bounded by what was counted, and interruptible")
    struct BoundedCopies {
        static let attachments = ".Local_SUPPORT/_EXTERNAL_DATA"

        @Test(
            "an attachment the owner grows to 4 TiB once granary reads it fails that user's backup (65, naming it); the next user's archive is written"
        )
        func grownAttachment() throws {
            let lab = try Lab()
            let folder = lab.attackerHome + "/" + Self.attachments
            // 1 GiB of hole: long enough to read that the grow lands while the copy runs.
            try AttackTests.Resources.sparse(
                folder + "/photo-3", length: 1 << 30, marker: lab.attackerMarker, lab: lab)
            let grow = try lab.helper(
                "grow.py", ["--watch", folder, "--name", "photo-3", "--size", String(4 << 40)])
            let outcome = try lab.granary(["backup", "--all", "--json"], timeout: 120)
            let grown = grow.stop()
            try #require(grown.stdout.contains("grown"), "the helper never saw granary read the file: \(grown)")
            Lab.expectDocumented(outcome, "backup --all with an attachment grown while copied")
            #expect(!outcome.timedOut, "granary read the grown attachment to its end: \(outcome)")
            #expect(outcome.seconds < 60, "\(outcome)")
            #expect(outcome.status == 1, "\(outcome)")
            let users = try AttackTests.Resources.document(outcome)
            let attacker = try #require(users["attacker"], "\(outcome)")
            let error = attacker["error"] as? [String: Any]
            #expect(attacker["ok"] as? Bool == false)
            #expect(error?["code"] as? Int == 65, "\(outcome)")
            let message = error?["message"] as? String ?? ""
            #expect(message.contains("photo-3") && message.contains("grew past"), "\(message)")
            let victim = try #require(users["victim"], "\(outcome)")
            #expect(victim["ok"] as? Bool == true, "\(outcome)")
            let archive = try #require(victim["archive"] as? String)
            #expect(try lab.granary(["verify", archive]).status == 0)
            #expect(lab.attackerArchives().isEmpty)
            #expect(
                FileSystem.contents(of: lab.repo + "/.granary-tmp").isEmpty,
                "\(FileSystem.contents(of: lab.repo + "/.granary-tmp"))")
        }

        @Test("SIGTERM stops a backup within seconds while it copies a long attachment (130, nothing left behind)")
        func interruptedCopy() throws {
            let lab = try Lab()
            let config = lab.base + "/granary.toml"
            try Lab.write(config, "[limits]\nbytes_per_user = \"1TiB\"\n", mode: 0o644)
            let folder = lab.attackerHome + "/" + Self.attachments
            // 512 GiB of hole, under the cap: hours of zeros to read.
            try AttackTests.Resources.sparse(
                folder + "/photo-3", length: 512 << 30, marker: lab.attackerMarker, lab: lab)
            let watch = try lab.helper(
                "grow.py", ["--watch", folder, "--name", "photo-3", "--size", String(512 << 30)])
            let run = try lab.start(["backup", "--all", "--config", config])
            _ = watch.waitForLine("grown", timeout: 60)
            Thread.sleep(forTimeInterval: 1)
            let asked = ContinuousClock.now
            let outcome = run.stop(timeout: 20)
            let took = ContinuousClock.now - asked
            _ = watch.stop()
            #expect(!outcome.timedOut, "granary went on copying after SIGTERM: \(outcome)")
            #expect(took < .seconds(5), "SIGTERM took \(took) to end the run: \(outcome)")
            #expect(outcome.status == 130, "\(outcome)")
            #expect(lab.attackerArchives().isEmpty)
            // No worker left reading.
            let workers = try GranaryProcess.runExecutable("/usr/bin/pgrep", ["-f", "--", "--root " + lab.root])
            #expect(workers.stdout.isEmpty, "a worker still runs: \(workers.stdout)")
        }

        /// A store of the attacker's whose hand-written `-wal` has one commit frame saying the
        /// database is `pages` pages of 4 KiB long (Tests/Fixtures/attacks/wal.py): 12 KiB of files.
        static func lyingWAL(_ lab: Lab, name: String, pages: Int) throws {
            let made = try lab.helper("wal.py", [lab.attackerHome + "/" + name, String(pages)])
            #expect(made.wait(timeout: 30).stdout.contains("ready \(pages)"), "SQLite does not believe the -wal")
        }

        @Test(
            "a -wal whose commit frame claims 1 GiB is charged as 1 GiB: past bytes_per_user that user fails (65) before the copy; the other user's archive is written"
        )
        func lyingWALOverTheCap() throws {
            let lab = try Lab()
            let config = lab.base + "/granary.toml"
            try Lab.write(config, "[limits]\nbytes_per_user = \"64MiB\"\n", mode: 0o644)
            try Self.lyingWAL(lab, name: "Lying.sqlite", pages: 262_144)
            let outcome = try lab.granary(["backup", "--all", "--json", "--config", config], timeout: 120)
            Lab.expectDocumented(outcome, "backup --all with a lying -wal")
            #expect(outcome.status == 1, "\(outcome)")
            let users = try AttackTests.Resources.document(outcome)
            let error = users["attacker"]?["error"] as? [String: Any]
            #expect(error?["code"] as? Int == 65, "\(outcome)")
            let message = error?["message"] as? String ?? ""
            #expect(message.contains("Lying.sqlite") && message.contains("bytes_per_user"), "\(message)")
            #expect(users["victim"]?["ok"] as? Bool == true, "\(outcome)")
            #expect(lab.attackerArchives().isEmpty)
            #expect(FileSystem.contents(of: lab.repo + "/.granary-tmp").isEmpty)
        }

        @Test(
            "a -wal that claims more than a small repository holds is refused before the copy, with --jobs 2: the other user's backup does not fail for it"
        )
        func lyingWALSmallRepository() throws {
            let lab = try Lab()
            let repo = lab.base + "/smalldisk"
            try FileManager.default.createDirectory(atPath: repo, withIntermediateDirectories: true)
            let mounted = try GranaryProcess.runExecutable(
                "/bin/mount", ["-t", "tmpfs", "-o", "size=48m,mode=0700", "tmpfs", repo])
            guard mounted.status == 0 else {
                Issue.record("cannot mount a tmpfs here: \(mounted.stderr)")
                return
            }
            defer { _ = try? GranaryProcess.runExecutable("/bin/umount", ["-l", repo]) }
            initializedRepository(repo)
            try Self.lyingWAL(lab, name: "Lying.sqlite", pages: 262_144)
            let outcome = try lab.granary(["backup", "--all", "--json", "--jobs", "2"], repo: repo, timeout: 120)
            Lab.expectDocumented(outcome, "backup --all --jobs 2 with a lying -wal")
            #expect(!outcome.stderr.contains("victim: the repository"), "\(outcome)")
            let users = try AttackTests.Resources.document(outcome)
            #expect(users["victim"]?["ok"] as? Bool == true, "\(outcome)")
            #expect(users["attacker"]?["ok"] as? Bool == false, "\(outcome)")
            let message = (users["attacker"]?["error"] as? [String: Any])?["message"] as? String ?? ""
            #expect(message.contains("Lying.sqlite"), "\(message)")
            #expect(FileSystem.contents(of: repo + "/.granary-tmp").isEmpty)
        }
    }
}
