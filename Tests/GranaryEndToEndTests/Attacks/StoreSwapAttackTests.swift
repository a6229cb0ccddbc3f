import Foundation
import GranaryKit
import Testing

extension AttackTests {
    /// Class 2: the attacker's store is swapped for a symbolic link to another user's store (or a
    /// root-only SQLite file) the moment granary's scan has looked at it: inotify tells the
    /// attacker when granary opens or closes it, and the swap is one atomic rename.
    @Suite("2. a store swapped for a symlink after the scan")
    struct StoreSwap {
        static let runs = 20

        @Test("a backup never snapshots the store a swapped-in symlink points to (inotify-timed, 20 runs)")
        func backupRace() throws {
            let lab = try Lab()
            let home = lab.attackerHome
            var refused = 0
            for run in 0..<Self.runs {
                // Half aim at the victim's store, half at root's canary; the swap fires when the scan
                // opens the store (granary then reads the header through its own descriptor and opens
                // the name again for SQLite) or when the scan closes it.
                let target = run % 2 == 0 ? lab.victimHome + "/Local.sqlite" : lab.canaryStore
                let event = run % 4 < 2 ? "OPEN" : "CLOSE_NOWRITE"
                lab.symlink(home + "/.stash", to: target)
                let before = lab.watch()
                let racer = try lab.helper(
                    "race.py",
                    [
                        "--watch", home, "--event", event, "--name", "Local.sqlite", "--exchange",
                        home + "/Local.sqlite", home + "/.stash",
                    ])
                let outcome = try lab.granary(["backup", "attacker"])
                let swapped = racer.stop().stdout.contains("swapped")
                let context = "run \(run) (\(event), → \(target), swapped: \(swapped))"
                Lab.expectDocumented(outcome, context)
                if outcome.status != 0 {
                    refused += 1
                    Lab.expectRefused(outcome, context, naming: "Local.sqlite")
                }
                try lab.expectContained(since: before, context)
                if swapped { try Lab.exchange(home + "/Local.sqlite", home + "/.stash") }
            }
            print("class 2, backup: the swap beat granary's open in \(refused) of \(Self.runs) runs (each refused)")
        }

        @Test(
            "a restore never opens, moves or replaces the store a swapped-in symlink points to (inotify-timed, 20 runs)"
        )
        func restoreRace() throws {
            let lab = try Lab()
            let home = lab.attackerHome
            let backup = try lab.granary(["backup", "attacker"])
            try #require(backup.status == 0, "\(backup)")
            var refused = 0
            for run in 0..<Self.runs {
                let target = run % 2 == 0 ? lab.victimHome + "/Local.sqlite" : lab.canaryStore
                let (event, count) = [("OPEN", 1), ("CLOSE_NOWRITE", 1), ("OPEN", 2), ("OPEN", 3)][run % 4]
                lab.symlink(home + "/.stash", to: target)
                let before = lab.watch()
                let racer = try lab.helper(
                    "race.py",
                    [
                        "--watch", home, "--event", event, "--count", String(count), "--name", "Local.sqlite",
                        "--exchange", home + "/Local.sqlite", home + "/.stash",
                    ])
                let outcome = try lab.granary(["restore", "attacker"])
                let swapped = racer.stop().stdout.contains("swapped")
                let context = "run \(run) (\(event) #\(count), → \(target), swapped: \(swapped))"
                Lab.expectDocumented(outcome, context)
                if outcome.status != 0 {
                    refused += 1
                    Lab.expectRefused(outcome, context, codes: [65, 74, 75], naming: "Local.sqlite")
                }
                try lab.expectContained(since: before, context)
                if swapped, FileSystem.status(home + "/.stash").map({ $0.st_mode & S_IFMT == S_IFREG }) == true,
                    FileSystem.status(home + "/Local.sqlite").map({ $0.st_mode & S_IFMT == S_IFLNK }) == true
                {
                    try Lab.exchange(home + "/Local.sqlite", home + "/.stash")
                }
                let recover = try lab.granary(["recover", "attacker"])
                #expect(recover.status == 0, "\(context): recover: \(recover)")
            }
            print("class 2, restore: refused in \(refused) of \(Self.runs) runs")
        }
    }
}
