import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension AttackTests {
    /// Issue 31, item 4: a crash-class fault while working on one user (SIGBUS on a file the user
    /// truncates under a mapping, a trap) fails that user only. Before, an owner truncating their
    /// own -shm in a loop during `backup --all` killed the whole run (exit 135) and the users after
    /// them were never archived.
    @Suite("12. one user's content fails that user only")
    struct CrashIsolation {
        /// Users after the attacker (in the order of a scan), each with a store of its own.
        static let others = ["victim", "willow", "yarrow"]

        /// A lab with two more users beside the victim, owned by the victim's account.
        func lab() throws -> Lab {
            let lab = try Lab()
            for name in Self.others where name != "victim" {
                try lab.makeHome(
                    lab.root + "/" + name, owner: lab.victim, marker: lab.victimMarker,
                    attachment: lab.attachmentMarker, mode: 0o700)
            }
            return lab
        }

        /// `backup --all --json` (two at a time) ended with 1, by no signal, with the attacker
        /// failed and every other user's archive published and verified.
        func expectOthersBackedUp(_ outcome: Outcome, lab: Lab, _ context: String) throws {
            Lab.expectDocumented(outcome, context)
            #expect(outcome.signal == nil && outcome.status == 1, "\(context): \(outcome)")
            let document = try #require(
                try JSONSerialization.jsonObject(with: Data(outcome.stdout.utf8)) as? [String: Any],
                "\(context): \(outcome)")
            let users = try #require(document["users"] as? [[String: Any]])
            #expect(users.map { $0["id"] as? String } == ["attacker"] + Self.others, "\(context): \(outcome)")
            for user in users {
                let id = user["id"] as? String ?? "?"
                #expect((user["ok"] as? Bool) == (id != "attacker"), "\(context): \(id): \(user)")
            }
            #expect(outcome.stderr.contains("granary: attacker: "), "\(context): the failure names no user: \(outcome)")
            let leftovers =
                FileSystem.contents(of: lab.repo + "/.granary-tmp")
                + FileSystem.contents(of: lab.repo + "/attacker").filter { $0.hasPrefix(".") }
            #expect(leftovers.isEmpty, "\(context): temporaries left: \(leftovers)")
            for name in Self.others {
                let archives = FileSystem.contents(of: lab.repo + "/" + name).filter { $0.hasSuffix(".tar.zst") }
                #expect(archives.count == 1, "\(context): \(name) has \(archives) in the repository")
                let verified = try lab.granary(["verify", "--user", name])
                #expect(verified.status == 0, "\(context): verify \(name): \(verified)")
            }
        }

        @Test("an owner truncating its -shm in a loop during backup --all fails that user only")
        func truncatedShm() throws {
            let lab = try lab()
            let attacker = try lab.helper("truncate.py", ["shm", lab.attackerHome + "/Local.sqlite"])
            defer { attacker.stop() }
            let outcome = try lab.granary(["backup", "--all", "--jobs", "2", "--json"], timeout: 120)
            try expectOthersBackedUp(outcome, lab: lab, "-shm truncated")
            #expect(outcome.stderr.contains("SIGBUS"), "the attacker's failure is not the SIGBUS: \(outcome)")
        }

        @Test("an owner truncating its store in a loop during backup --all fails that user only, if anyone")
        func truncatedStore() throws {
            let lab = try lab()
            let attacker = try lab.helper("truncate.py", ["store", lab.attackerHome + "/Data/App.sqlite"])
            defer { attacker.stop() }
            let outcome = try lab.granary(["backup", "--all", "--jobs", "2", "--json"], timeout: 120)
            Lab.expectDocumented(outcome, "store truncated")
            // A snapshot taken between two truncations is a sound store: the attacker may succeed.
            if outcome.status == 1 {
                try expectOthersBackedUp(outcome, lab: lab, "store truncated")
            } else {
                #expect(outcome.status == 0, "store truncated: \(outcome)")
                for name in ["attacker"] + Self.others {
                    #expect(FileSystem.contents(of: lab.repo + "/" + name).contains { $0.hasSuffix(".tar.zst") })
                }
            }
        }

        @Test("SIGTERM to backup --all reaches the workers: a worker waiting on a lock its user holds ends, 130")
        func sigterm() throws {
            let lab = try lab()
            let holder = try lab.helper("hold.py", ["sqlite", lab.attackerHome + "/Data/App.sqlite"])
            defer { holder.stop() }
            let run = try lab.start(["backup", "--all", "--jobs", "4"])
            // Once the attacker's worker runs, the parent has its handlers (it installs them
            // before it starts a worker), and the worker waits on the lock its user holds.
            let worker = ["-f", "--", "--worker-user=attacker .*" + lab.root]
            let deadline = ContinuousClock.now + .seconds(60)
            while try GranaryProcess.runExecutable("/usr/bin/pgrep", worker).stdout.isEmpty
                && ContinuousClock.now < deadline
            {
                usleep(50_000)
            }
            usleep(300_000)
            kill(run.pid, SIGTERM)
            let outcome = run.wait(timeout: 60)
            #expect(!outcome.timedOut && outcome.signal == nil && outcome.status == 130, "\(outcome)")
            // The parent waits for its workers: none is left, and none left a temporary behind.
            let left = try GranaryProcess.runExecutable("/usr/bin/pgrep", ["-f", "--", "--worker-user=.*" + lab.root])
            #expect(left.stdout.isEmpty, "workers still running: \(left.stdout)")
            #expect(lab.attackerArchives().isEmpty)
            #expect(FileSystem.contents(of: lab.repo + "/.granary-tmp").isEmpty)
        }

        @Test("a worker that traps (a Swift runtime check) fails its user; the run goes on")
        func trap() throws {
            let lab = try lab()
            let outcome = try lab.granary(
                ["backup", "--all", "--json"], environment: ["GRANARY_TEST_WORKER_TRAP": "attacker"], timeout: 120)
            try expectOthersBackedUp(outcome, lab: lab, "trap")
            #expect(outcome.stderr.contains("was killed by"), "\(outcome)")
        }
    }
}
