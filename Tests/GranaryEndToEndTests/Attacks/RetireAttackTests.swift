import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension AttackTests {
    /// `retire` removes a whole folder the attacker controls: every path it touches there is
    /// swapped for a symbolic link to the same path in the victim's folder while it runs, at each
    /// of its steps (GRANARY_TEST_PAUSE_AT stops it there: before the final archive, before
    /// its verification, before the journal, before the folder moves, after it moved, and before
    /// each entry is removed). After the move the folder is in granary's state folder, out of the
    /// attacker's reach by name; the swap there stands for a process of theirs that kept a
    /// descriptor of a folder inside it.
    @Suite("retire with a path of the user's folder swapped for a link mid-run")
    struct RetireSwap {
        static let paths = StepSwap.paths + ["notes.txt"]

        @Test(
            "retire never follows a path swapped for a link at any of its steps: the victim's folder is untouched and the attacker's ends fully there or fully gone"
        )
        func retireSteps() throws {
            var stops = 0
            var outcomes: [String] = []
            for (index, step) in CrashPoints.plan(CrashPoint.Name.retire, times: 2).enumerated() {
                stepping: for path in [
                    Self.paths[(2 * index) % Self.paths.count], Self.paths[(2 * index + 1) % Self.paths.count],
                ] {
                    let lab = try Lab()
                    let before = lab.watch()
                    let run = try lab.start(
                        ["retire", "attacker", "--yes"], environment: ["GRANARY_TEST_PAUSE_AT": step])
                    let deadline = Date().addingTimeInterval(30)
                    while !run.isStopped && run.process.isRunning && Date() < deadline { usleep(1_000) }
                    guard run.isStopped else {
                        let outcome = run.wait(timeout: 30)
                        #expect(outcome.status == 0, "the retire without a pause: \(outcome)")
                        break stepping
                    }
                    stops += 1
                    // Where the folder is at this step: under the root, or moved into the state folder.
                    let moved = lab.root + "/.granary/retire/attacker/folder"
                    let home = FileSystem.status(lab.attackerHome) != nil ? lab.attackerHome : moved
                    lab.symlink(home + "/.evil", to: lab.victimHome + "/" + path)
                    let swapped = FileSystem.status(home + "/" + path) != nil
                    if swapped { try Lab.exchange(home + "/" + path, home + "/.evil") }
                    kill(run.pid, SIGCONT)
                    let outcome = run.wait(timeout: 30)
                    let context =
                        "step \(step) (\(home == moved ? "moved" : "in place")), \(path) swapped for a link: \(swapped)"
                    outcomes.append("\(step):\(path):\(outcome.status)")
                    Lab.expectDocumented(outcome, context)
                    try lab.expectContained(since: before, context, folderToo: false)
                    let recover = try lab.granary(["recover", "attacker"])
                    #expect(recover.status == 0, "\(context): recover: \(recover)")
                    try lab.expectContained(since: before, context + ", recover", folderToo: false)
                    #expect(
                        FileSystem.status(lab.root + "/.granary/retire/attacker") == nil,
                        "\(context): the retire's work is left")
                    if FileSystem.status(lab.attackerHome) == nil {
                        // Gone: only after its final archive verified.
                        let finals = lab.attackerArchives().filter { $0.contains("-final.") }
                        #expect(finals.count == 1, "\(context): the folder is gone without a final archive")
                    } else {
                        #expect(outcome.status != 0, "\(context): retire said it succeeded and the folder is there")
                        // The final archive of a retire that did not happen does not stay to pass for the user's last word.
                        #expect(
                            outcome.status != 75 || !lab.attackerArchives().contains { $0.contains("-final.") },
                            "\(context): a final archive was left: \(lab.attackerArchives())")
                    }
                }
            }
            #expect(stops > 5, "retire had fewer points than expected: is GRANARY_TEST_PAUSE_AT compiled in?")
            print("retire steps: \(outcomes.joined(separator: " "))")
        }

        @Test(
            "the empty -wal SQLite's lock opens for retire's check is removed only while it is that file: swapped for a link meanwhile, the link stays and the victim's folder is untouched"
        )
        func checkedWALSwapped() throws {
            let lab = try Lab()
            let store = lab.attackerHome + "/Local.sqlite"
            // Its last connection closed cleanly: no -wal until SQLite's lock, taken to check it, opens one.
            try Database(path: store, mode: .readWrite).execute("PRAGMA wal_checkpoint(TRUNCATE)")
            #expect(FileSystem.status(store + "-wal") == nil)
            let before = lab.watch()
            // Stopped where the commit's checks passed, SQLite's locks still held (retire's first look).
            let run = try lab.start(["retire", "attacker", "--yes"], environment: ["GRANARY_TEST_PAUSE_AT": "checked"])
            let deadline = Date().addingTimeInterval(30)
            while !run.isStopped && run.process.isRunning && Date() < deadline { usleep(1_000) }
            try #require(run.isStopped, "retire did not stop after its checks")
            #expect(FileSystem.status(store + "-wal").map { Int64($0.st_size) } == 0, "the check's -wal is there")
            lab.symlink(lab.attackerHome + "/.evil", to: lab.victimHome + "/Local.sqlite-wal")
            try Lab.exchange(store + "-wal", lab.attackerHome + "/.evil")
            kill(run.pid, SIGCONT)
            let outcome = run.wait(timeout: 60)
            let context = "the check's -wal swapped for a link"
            Lab.expectDocumented(outcome, context)
            var info = stat()
            #expect(
                lstat(store + "-wal", &info) == 0 && info.st_mode & S_IFMT == S_IFLNK,
                "\(context): the attacker's link was removed (granary removes only the file it made)")
            try lab.expectContained(since: before, context, folderToo: false)
            #expect(outcome.status != 0 && FileSystem.status(lab.attackerHome) != nil, "\(context): \(outcome)")
            #expect(!lab.attackerArchives().contains { $0.contains("-final.") }, "\(context): a final archive")
        }
    }
}
