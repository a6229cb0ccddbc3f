import Foundation
import GranaryKit
import Testing

extension AttackTests {
    /// Class 3: while granary restores or resets the attacker, the folder of one of their stores
    /// (`Data/` of `Data/App.sqlite`) is swapped for a symbolic link to the victim's `Data/` (which
    /// holds a store of the same name) or to the /etc stand-in. The swap is timed by inotify at a
    /// different point of the run each time (the scan's open, later opens, the switch's rename).
    @Suite("3. a sub-folder swapped for a symlink during restore and reset")
    struct FolderSwap {
        static let runs = 20

        /// When the swap fires: the nth event of that kind on `App.sqlite` in `Data/`.
        static let triggers: [(event: String, name: String, count: Int)] = [
            ("OPEN", "App.sqlite", 1), ("CLOSE_NOWRITE", "App.sqlite", 1), ("OPEN", "App.sqlite", 2),
            ("OPEN", "App.sqlite", 3),
            ("OPEN", "App.sqlite", 4), ("MOVED_TO", "App.sqlite", 1), ("DELETE", "App.sqlite-journal", 1),
            ("CLOSE_NOWRITE", "App.sqlite", 2),
            ("OPEN", "App.sqlite", 5), ("MOVED_FROM", "App.sqlite", 1),
        ]

        func race(_ command: [String], label: String) throws {
            let lab = try Lab()
            let home = lab.attackerHome
            let backup = try lab.granary(["backup", "attacker"])
            try #require(backup.status == 0, "\(backup)")
            var swaps = 0
            var outcomes: [Int32: Int] = [:]
            for run in 0..<Self.runs {
                let trigger = Self.triggers[run % Self.triggers.count]
                let target = run % 2 == 0 ? lab.victimHome + "/Data" : lab.etc
                lab.symlink(home + "/.evil", to: target)
                let before = lab.watch()
                let racer = try lab.helper(
                    "race.py",
                    [
                        "--watch", home + "/Data", "--event", trigger.event, "--count", String(trigger.count), "--name",
                        trigger.name, "--exchange",
                        home + "/Data", home + "/.evil",
                    ])
                let outcome = try lab.granary(command)
                let swapped = racer.stop().stdout.contains("swapped")
                if swapped { swaps += 1 }
                outcomes[outcome.status, default: 0] += 1
                let context = "\(label) run \(run) (\(trigger), → \(target), swapped: \(swapped))"
                Lab.expectDocumented(outcome, context)
                if outcome.status != 0 {
                    Lab.expectRefused(outcome, context, codes: [65, 74, 75], naming: "Data")
                }
                try lab.expectContained(since: before, context)
                // A later command with the link still there is refused the same way.
                if swapped && outcome.status != 0 {
                    let again = try lab.granary(["recover", "attacker"])
                    Lab.expectDocumented(again, context + ", recover with the link in place")
                    try lab.expectContained(since: before, context + ", recover with the link in place")
                }
                if swapped { try Lab.exchange(home + "/Data", home + "/.evil") }
                let recover = try lab.granary(["recover", "attacker"])
                #expect(recover.status == 0, "\(context): recover: \(recover)")
                try lab.expectContained(since: before, context + ", recover")
            }
            print(
                "class 3, \(label): swapped in \(swaps) of \(Self.runs) runs; exit codes \(outcomes.sorted { $0.key < $1.key })"
            )
        }

        @Test(
            "a restore never writes, moves or chowns through a sub-folder swapped for a symlink (inotify-timed, 20 runs)"
        )
        func restoreRace() throws {
            try race(["restore", "attacker"], label: "restore")
        }

        @Test(
            "a reset never writes, moves or chowns through a sub-folder swapped for a symlink (inotify-timed, 20 runs)")
        func resetRace() throws {
            try race(["reset", "attacker", "--yes"], label: "reset")
        }

        @Test(
            "a restore that must create a store's folder refuses a symlink in its place (65, naming it) and writes nothing through it"
        )
        func newStoreFolder() throws {
            let lab = try Lab()
            let backup = try lab.granary(["backup", "attacker"])
            try #require(backup.status == 0, "\(backup)")
            for target in [lab.victimHome + "/Data", lab.etc, lab.etc + "/cron.d"] {
                lab.symlink(lab.attackerHome + "/Data", to: target)
                let before = lab.watch()
                let outcome = try lab.granary(["restore", "attacker", "--force"])
                Lab.expectRefused(outcome, "Data → \(target)", naming: "Data")
                try lab.expectContained(since: before, "Data → \(target)")
                #expect(try lab.granary(["recover", "attacker"]).status == 0)
            }
        }
    }
}
