import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension AttackTests {
    /// Every file operation granary makes in a user's folder, with the path it works on swapped
    /// for a symbolic link while granary runs. Races (classes 2 to 4) hit them by chance; here a
    /// debug build's test seam stops granary (SIGSTOP) at each named point of a restore
    /// (GRANARY_TEST_PAUSE_AT, the points of `CrashPoint.Name.restoreCommit`: staged, paused,
    /// checked, committed, each store's checkpoint, aside link, external-data links,
    /// stale-companion removal and switch, the resume and the final clean-up), the path is
    /// swapped, and granary goes on.
    @Suite("every file operation with its path swapped for a link mid-run")
    struct StepSwap {
        /// Paths in the attacker's folder, each swapped for a link to the same path in the
        /// victim's folder (whose layout is the same).
        static let paths = [
            "Data", "Data/App.sqlite", "Local.sqlite", "Local.sqlite-wal", ".Local_SUPPORT",
            ".Local_SUPPORT/_EXTERNAL_DATA",
            ".Local_SUPPORT/_EXTERNAL_DATA/photo-1", ".Local_SUPPORT/_EXTERNAL_DATA/photo-old",
        ]

        /// The attacker's folder so that a restore does every operation: a -wal and a -journal
        /// (checkpointed, then removed), an external-data file kept, one removed and one added.
        static func stage(_ lab: Lab) throws {
            let home = lab.attackerHome
            let backup = try lab.granary(["backup", "attacker"])
            try #require(backup.status == 0, "\(backup)")
            try Lab.write(
                home + "/.Local_SUPPORT/_EXTERNAL_DATA/photo-old", "\(lab.attackerMarker) old photo\n", mode: 0o600)
            unlink(home + "/.Local_SUPPORT/_EXTERNAL_DATA/photo-2")
            // An empty -wal and -journal are enough to make the restore open the store to checkpoint it.
            try Lab.write(home + "/Data/App.sqlite-journal", "", mode: 0o600)
            try Lab.write(home + "/Local.sqlite-wal", "", mode: 0o640)
            Lab.chownTree(home, to: lab.attacker)
        }

        @Test("a restore never follows a path swapped for a link at any of its steps (every step, every path)")
        func restoreSteps() throws {
            let lab = try Lab()
            try Self.stage(lab)
            let home = lab.attackerHome
            var stops = 0
            var outcomes: [String] = []
            for (index, step) in CrashPoints.plan(CrashPoint.Name.restoreCommit, times: 2).enumerated() {
                stepping: for path in [
                    Self.paths[(2 * index) % Self.paths.count], Self.paths[(2 * index + 1) % Self.paths.count],
                ] {
                    let before = lab.watch()
                    let run = try lab.start(
                        ["restore", "attacker"], environment: ["GRANARY_TEST_PAUSE_AT": step])
                    let deadline = Date().addingTimeInterval(20)
                    while !run.isStopped && run.process.isRunning && Date() < deadline { usleep(1_000) }
                    guard run.isStopped else {
                        // The restore never reached this point (a second store's, say).
                        let outcome = run.wait(timeout: 20)
                        #expect(outcome.status == 0, "the restore without a pause: \(outcome)")
                        try Self.restage(lab)
                        break stepping
                    }
                    stops += 1
                    lab.symlink(home + "/.evil", to: lab.victimHome + "/" + path)
                    let swapped = FileSystem.status(home + "/" + path) != nil
                    if swapped { try Lab.exchange(home + "/" + path, home + "/.evil") }
                    kill(run.pid, SIGCONT)
                    let outcome = run.wait(timeout: 20)
                    let context = "step \(step), \(path) swapped for a link: \(swapped)"
                    outcomes.append("\(step):\(path):\(outcome.status)")
                    Lab.expectDocumented(outcome, context)
                    // A run that failed after its commit point leaves its journal: the message must
                    // say that it committed and that recover finishes it.
                    if outcome.status != 0
                        && FileManager.default.fileExists(atPath: lab.root + "/.granary/restore/attacker/journal")
                    {
                        #expect(
                            outcome.stderr.contains("committed") && outcome.stderr.contains("granary recover attacker"),
                            "\(context): \(outcome)")
                    }
                    if outcome.status != 0 {
                        Lab.expectRefused(
                            outcome, context, codes: [65, 74, 75], naming: (path as NSString).lastPathComponent)
                    }
                    try lab.expectContained(since: before, context)
                    // With the link still there, recovery is refused the same way, then finishes.
                    if swapped && outcome.status != 0 {
                        let held = try lab.granary(["recover", "attacker"])
                        Lab.expectDocumented(held, context + ", recover with the link")
                        try lab.expectContained(since: before, context + ", recover with the link")
                    }
                    if swapped, FileSystem.status(home + "/.evil") != nil {
                        // The link may be gone (removed as a link after the commit): the file goes back alone.
                        if lstatExists(home + "/" + path) {
                            try Lab.exchange(home + "/" + path, home + "/.evil")
                        } else {
                            rename(home + "/.evil", home + "/" + path)
                        }
                    }
                    FileSystem.removeTree(home + "/.evil")
                    let recover = try lab.granary(["recover", "attacker"])
                    #expect(recover.status == 0, "\(context): recover: \(recover)")
                    try lab.expectContained(since: before, context + ", recover")
                    // The next run starts from the same folder: a -wal, a -journal, the same attachments.
                    try Self.restage(lab)
                }
            }
            #expect(stops > 5, "the restore had fewer points than expected: is GRANARY_TEST_PAUSE_AT compiled in?")
            print("restore steps: \(outcomes.joined(separator: " "))")
        }

        @Test(
            "a -journal listed for the commit's checks and gone before it is opened (a writer committed) is no companion: the restore goes on; one swapped for a link there is refused (65, naming it)",
            arguments: [false, true])
        func companionGone(link: Bool) throws {
            let lab = try Lab()
            try Self.stage(lab)
            let home = lab.attackerHome
            // The -journal the only companion listed: the pause is at it.
            unlink(home + "/Local.sqlite-wal")
            let before = lab.watch()
            let run = try lab.start(["restore", "attacker"], environment: ["GRANARY_TEST_PAUSE_AT": "companionListed"])
            let deadline = Date().addingTimeInterval(60)
            while !run.isStopped && run.process.isRunning && Date() < deadline { usleep(1_000) }
            try #require(run.isStopped, "restore did not pause: \(run.wait(timeout: 5))")
            let journal = home + "/Data/App.sqlite-journal"
            if link {
                lab.symlink(home + "/.evil", to: lab.victimHome + "/Data/App.sqlite")
                try Lab.exchange(journal, home + "/.evil")
            } else {
                #expect(unlink(journal) == 0)
            }
            kill(run.pid, SIGCONT)
            let outcome = run.wait(timeout: 60)
            let context = link ? "-journal swapped for a link after it was listed" : "-journal gone after it was listed"
            Lab.expectDocumented(outcome, context)
            if link {
                Lab.expectRefused(outcome, context, codes: [65], naming: "App.sqlite-journal")
                #expect(!outcome.stderr.contains("No such file"), "\(outcome)")
            } else {
                #expect(outcome.status == 0, "\(context): \(outcome)")
            }
            try lab.expectContained(since: before, context)
        }

        /// Puts back the -wal, the -journal and the external-data files a restore changed.
        static func restage(_ lab: Lab) throws {
            let home = lab.attackerHome
            let external = home + "/.Local_SUPPORT/_EXTERNAL_DATA"
            if FileSystem.status(external) == nil { try Lab.makeFolder(external, mode: 0o755) }
            if FileSystem.status(external + "/photo-old") == nil {
                try Lab.write(external + "/photo-old", "\(lab.attackerMarker) old photo\n", mode: 0o600)
            }
            unlink(external + "/photo-2")
            if FileSystem.status(home + "/Data/App.sqlite-journal") == nil {
                try Lab.write(home + "/Data/App.sqlite-journal", "", mode: 0o600)
            }
            if FileSystem.status(home + "/Local.sqlite-wal") == nil {
                try Lab.write(home + "/Local.sqlite-wal", "", mode: 0o640)
            }
            Lab.chownTree(home, to: lab.attacker)
        }

        @Test(
            "inspect refuses a store in a user's folder that is a symlink, or whose -wal is a hard link (65, naming it)"
        )
        func inspect() throws {
            let lab = try Lab()
            lab.symlink(lab.attackerHome + "/Stolen.sqlite", to: lab.canaryStore)
            guard link(lab.victimHome + "/notes.txt", lab.attackerHome + "/Local.sqlite-wal") == 0 else {
                throw LabError.setup("link")
            }
            let before = lab.watch()
            let linked = try lab.granary(["inspect", lab.attackerHome + "/Stolen.sqlite"])
            Lab.expectRefused(linked, "inspect of a symlinked store", codes: [65, 66], naming: "Stolen.sqlite")
            #expect(!linked.stdout.contains("notes"), "inspect described the linked store: \(linked)")
            let hardLinked = try lab.granary(["inspect", lab.attackerHome + "/Local.sqlite"])
            Lab.expectRefused(hardLinked, "inspect with a hard-linked -wal", naming: "Local.sqlite-wal")
            try lab.expectContained(since: before, "inspect", folderToo: false)
        }
    }
}

/// Whether anything (a link included) is at `path`.
private func lstatExists(_ path: String) -> Bool {
    var info = stat()
    return lstat(path, &info) == 0
}
