import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension AttackTests {
    /// Class 7: FIFOs, devices (root makes them with mknod, standing in for a host where a user
    /// can get one into their folder) and symbolic links to /dev/zero where granary expects a
    /// store's companion or an external-data file. Opening a FIFO blocks until a writer comes;
    /// reading /dev/zero never ends. Each run is bounded (20 s) and must end, in time, with 65 and
    /// a message naming the file.
    @Suite("7. FIFOs, devices and links to /dev/zero")
    struct SpecialFiles {
        static let places = [
            "Local.sqlite-wal", "Local.sqlite-shm", "Data/App.sqlite-journal", ".Local_SUPPORT/_EXTERNAL_DATA/photo-3",
        ]

        @Test(
            "backup and restore never hang on a FIFO, a device or a link to /dev/zero as -wal, -shm, -journal or external-data file (65, naming it)",
            arguments: Lab.Special.allCases)
        func specialFiles(_ kind: Lab.Special) throws {
            let lab = try Lab()
            let backup = try lab.granary(["backup", "attacker"])
            try #require(backup.status == 0, "\(backup)")
            for place in Self.places {
                let path = lab.attackerHome + "/" + place
                try lab.makeSpecial(kind, at: path)
                let users = try lab.granary(["users"], timeout: 20)
                #expect(users.status == 0, "users with \(place) a \(kind): \(users)")
                for command in [["backup", "attacker"], ["restore", "attacker"]] {
                    let before = lab.watch()
                    let outcome = try lab.granary(command, timeout: 20)
                    let context = "\(command[0]) with \(place) a \(kind)"
                    Lab.expectRefused(outcome, context, naming: (place as NSString).lastPathComponent)
                    try lab.expectContained(since: before, context)
                    #expect(try lab.granary(["recover", "attacker"], timeout: 20).status == 0)
                }
                unlink(path)
            }
        }

        @Test(
            "backup and restore never cross a mount point in a user's folder (a FUSE mount a user made would answer as slowly as they like)"
        )
        func mountPoint() throws {
            let lab = try Lab()
            let backup = try lab.granary(["backup", "attacker"])
            try #require(backup.status == 0, "\(backup)")
            // Root mounts a tmpfs with a store in it, standing in for the user's own FUSE mount.
            let mounted = try GranaryProcess.runExecutable(
                "/bin/mount", ["-t", "tmpfs", "-o", "size=4m,mode=0755", "tmpfs", lab.attackerHome + "/Data"])
            guard mounted.status == 0 else {
                Issue.record("cannot mount a tmpfs here: \(mounted.stderr)")
                return
            }
            defer { _ = try? GranaryProcess.runExecutable("/bin/umount", ["-l", lab.attackerHome + "/Data"]) }
            try Lab.makeStore(lab.attackerHome + "/Data/App.sqlite", wal: false, marker: lab.attackerMarker)
            Lab.chownTree(lab.attackerHome + "/Data", to: lab.attacker)
            for command in [["backup", "attacker"], ["restore", "attacker"]] {
                let before = lab.watch()
                let outcome = try lab.granary(command, timeout: 20)
                Lab.expectRefused(outcome, "\(command[0]) with a mount on Data", codes: [65, 74], naming: "Data")
                try lab.expectContained(since: before, "\(command[0]) with a mount on Data")
            }
        }

        @Test("the first SIGTERM ends a backup that waits on a lock the user holds (130)")
        func sigtermBackup() throws {
            let lab = try Lab()
            let holder = try lab.helper("hold.py", ["sqlite", lab.attackerHome + "/Data/App.sqlite"])
            defer { holder.stop() }
            let run = try lab.start(["backup", "attacker"])
            usleep(700_000)
            let sent = ContinuousClock.now
            kill(run.pid, SIGTERM)
            let outcome = run.wait(timeout: 20)
            let waited = ContinuousClock.now - sent
            #expect(outcome.status == 130, "\(outcome)")
            #expect(waited < .seconds(3), "the backup ran on for \(waited) after SIGTERM: \(outcome)")
            #expect(lab.attackerArchives().isEmpty)
        }

        @Test("the first SIGTERM ends a restore that waits on a lock the user holds, and recover finishes it")
        func sigtermRestore() throws {
            let lab = try Lab()
            let backup = try lab.granary(["backup", "attacker"])
            try #require(backup.status == 0, "\(backup)")
            // The commit lock of Data/ (flock on the folder), held by the user: the restore waits
            // for it up to its owner timeout.
            let holder = try lab.helper("hold.py", ["flock", lab.attackerHome + "/Data"])
            let run = try lab.start(["restore", "attacker"])
            usleep(700_000)
            let sent = ContinuousClock.now
            kill(run.pid, SIGTERM)
            let outcome = run.wait(timeout: 20)
            let waited = ContinuousClock.now - sent
            // restore does not catch SIGTERM: it ends like a crash, and its journal lets recover finish.
            #expect(
                outcome.status == 130 || outcome.signal == SIGTERM
                    || AttackLab.documentedCodes.contains(outcome.status), "\(outcome)")
            #expect(waited < .seconds(3), "the restore ran on for \(waited) after SIGTERM: \(outcome)")
            holder.stop()
            let recover = try lab.granary(["recover", "attacker"])
            #expect(recover.status == 0, "\(recover)")
        }
    }
}
