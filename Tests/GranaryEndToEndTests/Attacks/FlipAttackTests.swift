import Foundation
import GranaryKit
import Testing

extension AttackTests {
    /// Class 4: during a backup, a name granary reads is flipped back and forth, as fast as the
    /// attacker can, between their own regular file and something else: a symbolic link to a
    /// root-only file or to another user's attachment, a hard link to a root-only file (made by
    /// root: this host has fs.protected_hardlinks=1, a host with 0 lets the user make it), or a
    /// FIFO. renameat2(RENAME_EXCHANGE) makes every flip atomic, so granary sees one or the other
    /// at every instant, whatever it checked a moment before. `verify` would pass a stolen file
    /// (its hash is recorded as read), so the archives are extracted and searched instead.
    @Suite("4. names flipped by a RENAME_EXCHANGE loop during backup")
    struct Flip {
        static let runs = 20

        /// The attacker's own file at `name` flips with `.stash` (in their folder's top level,
        /// where the scan passes over it) holding `intruder`.
        func flip(_ name: String, intruder: (Lab, String) throws -> Void, label: String, runs: Int = Self.runs) throws {
            let lab = try Lab()
            let home = lab.attackerHome
            try intruder(lab, home + "/.stash")
            var outcomes: [Int32: Int] = [:]
            for run in 0..<runs {
                let before = lab.watch()
                let flipper = try lab.helper("flip.py", [home + "/" + name, home + "/.stash"])
                let outcome = try lab.granary(["backup", "attacker"])
                let flips = flipper.stop().stdout
                outcomes[outcome.status, default: 0] += 1
                let context = "\(label) run \(run) (\(flips.trimmingCharacters(in: .whitespacesAndNewlines)))"
                Lab.expectDocumented(outcome, context)
                if outcome.status != 0 {
                    Lab.expectRefused(outcome, context, codes: [65], naming: (name as NSString).lastPathComponent)
                }
                // The hard link to the canary sits in the attacker's folder by construction: only
                // the archives are searched then.
                try lab.expectContained(since: before, context, folderToo: !label.contains("hard link"))
            }
            print("class 4, \(label): exit codes over \(runs) backups: \(outcomes.sorted { $0.key < $1.key })")
        }

        @Test(
            "an external-data file flipped with a symlink to a root-only file never puts its bytes in the archive (20 runs)"
        )
        func externalSymlinkToCanary() throws {
            try flip(
                ".Local_SUPPORT/_EXTERNAL_DATA/photo-1",
                intruder: { lab, stash in lab.symlink(stash, to: lab.canaryFile) },
                label: "external ↔ symlink to canary")
        }

        @Test(
            "an external-data file flipped with a symlink to another user's attachment, a hard link to a root-only file or a FIFO never puts foreign bytes in the archive nor hangs (20 runs)"
        )
        func externalOtherIntruders() throws {
            // One intruder after another, each for a third of the runs.
            let intruders: [(String, (Lab, String) throws -> Void)] = [
                (
                    "symlink to victim",
                    { lab, stash in lab.symlink(stash, to: lab.victimHome + "/.Local_SUPPORT/_EXTERNAL_DATA/photo-1") }
                ),
                (
                    "hard link to canary",
                    { lab, stash in
                        guard link(lab.canaryFile, stash) == 0 else { throw LabError.setup("link: \(errno)") }
                    }
                ),
                ("FIFO", { lab, stash in try lab.makeSpecial(.fifo, at: stash) }),
            ]
            for (index, (label, intruder)) in intruders.enumerated() {
                try flip(
                    ".Local_SUPPORT/_EXTERNAL_DATA/photo-1", intruder: intruder, label: "external ↔ \(label)",
                    runs: Self.runs / 3 + (index < Self.runs % 3 ? 1 : 0))
            }
        }

        @Test("a store flipped with a symlink to a root-only database never puts its rows in the archive (10 runs)")
        func storeSymlinkToCanary() throws {
            try flip(
                "Local.sqlite", intruder: { lab, stash in lab.symlink(stash, to: lab.canaryStore) },
                label: "store ↔ symlink to canary", runs: 10)
        }
    }
}
