import Foundation
import GranaryKit
import Testing

extension AttackTests {
    /// Class 5: a store's `-wal`, `-shm` or `-journal` is a hard link to another user's file (or a
    /// root-only one). This host has fs.protected_hardlinks=1, so root makes the link, standing in
    /// for a host where it is 0 and the attacker can. SQLite opens companions read-write and, as
    /// root, chowns them to the database's owner: the linked file must keep its owner and bytes.
    @Suite("5. a companion hard-linked to another user's file")
    struct HardLinks {
        struct Case: CustomStringConvertible, Sendable {
            var companion: String
            var target: @Sendable (Lab) -> String
            var label: String
            var description: String { "\(companion) = \(label)" }
        }

        static let cases: [Case] = [
            Case(companion: "Local.sqlite-wal", target: { $0.victimHome + "/notes.txt" }, label: "the victim's notes"),
            Case(companion: "Local.sqlite-shm", target: { $0.victimHome + "/notes.txt" }, label: "the victim's notes"),
            Case(companion: "Local.sqlite-wal", target: { $0.canaryFile }, label: "root's canary"),
            Case(
                companion: "Data/App.sqlite-journal", target: { $0.victimHome + "/notes.txt" },
                label: "the victim's notes"),
            Case(companion: "Data/App.sqlite-journal", target: { $0.canaryFile }, label: "root's canary"),
        ]

        @Test(
            "backup, restore and reset refuse a -wal, -shm or -journal hard-linked to someone else's file (65, naming it); that file keeps its owner and bytes"
        )
        func companions() throws {
            let lab = try Lab()
            let backup = try lab.granary(["backup", "attacker"])
            try #require(backup.status == 0, "\(backup)")
            for item in Self.cases {
                let path = lab.attackerHome + "/" + item.companion
                // The backup left the store's own -wal and -shm (owned by the attacker): replaced.
                unlink(path)
                guard link(item.target(lab), path) == 0 else { throw LabError.setup("link \(path): \(errno)") }
                for command in [["backup", "attacker"], ["restore", "attacker"], ["reset", "attacker", "--yes"]] {
                    if FileSystem.status(path) == nil, link(item.target(lab), path) != 0 {
                        throw LabError.setup("link \(path): \(errno)")
                    }
                    let before = lab.watch()
                    let outcome = try lab.granary(command)
                    let context = "\(command[0]) with \(item)"
                    // Refused, or (a restore or reset that never opens the file, only removes the
                    // attacker's name for it) done without touching it.
                    Lab.expectDocumented(outcome, context)
                    if outcome.status != 0 || command[0] == "backup" {
                        Lab.expectRefused(outcome, context, naming: (item.companion as NSString).lastPathComponent)
                    }
                    // The link itself sits in the attacker's folder: only the archives are searched,
                    // and the target may lose that one link (its owner, mode and bytes stay).
                    try lab.expectContained(since: before, context, folderToo: false, linkCounts: false)
                    #expect(try lab.granary(["recover", "attacker"]).status == 0)
                }
                unlink(path)
            }
        }

        @Test(
            "a store hard-linked to another user's store is never snapshotted or emptied, and the run says so, naming it"
        )
        func store() throws {
            let lab = try Lab()
            let path = lab.attackerHome + "/Stolen.sqlite"
            // World-readable, so that the attacker's own permissions are no obstacle: only the checks are.
            chmod(lab.victimHome + "/Data/App.sqlite", 0o644)
            guard link(lab.victimHome + "/Data/App.sqlite", path) == 0 else {
                throw LabError.setup("link \(path): \(errno)")
            }
            for command in [["backup", "attacker"], ["reset", "attacker", "--yes"]] {
                let before = lab.watch()
                let outcome = try lab.granary(command)
                // Refused, or passed over with a warning: a store must not be left out in silence.
                Lab.expectRefused(
                    outcome, "\(command[0]) with a store hard-linked to the victim's", codes: [0, 1, 65, 74],
                    naming: "Stolen.sqlite")
                try lab.expectContained(
                    since: before, "\(command[0]) with a store hard-linked to the victim's", folderToo: false)
                #expect(try lab.granary(["recover", "attacker"]).status == 0)
            }
        }
    }
}
