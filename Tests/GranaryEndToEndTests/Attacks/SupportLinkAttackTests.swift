import Foundation
import GranaryKit
import Testing

extension AttackTests {
    /// Class 1: the attacker replaces their Core Data support folder (or the `_EXTERNAL_DATA` in
    /// it) with a symbolic link to another user's attachments or to a folder standing in for /etc.
    @Suite("1. a symlinked .X_SUPPORT or _EXTERNAL_DATA")
    struct SupportLinks {
        /// Where the attacker's link is, and where it points.
        struct Plant: CustomStringConvertible {
            var name: String
            var target: String
            var description: String { "\(name) → \(target)" }
        }

        static func plants(_ lab: Lab) -> [Plant] {
            [
                Plant(name: ".Local_SUPPORT", target: lab.victimHome + "/.Local_SUPPORT"),
                Plant(name: ".Local_SUPPORT", target: lab.etc),
                Plant(name: ".Local_SUPPORT/_EXTERNAL_DATA", target: lab.victimHome + "/.Local_SUPPORT/_EXTERNAL_DATA"),
                Plant(name: ".Local_SUPPORT/_EXTERNAL_DATA", target: lab.etc),
            ]
        }

        @Test("a backup never reads another user's attachments through a symlinked support or _EXTERNAL_DATA folder")
        func backup() throws {
            let lab = try Lab()
            for plant in Self.plants(lab) {
                lab.symlink(lab.attackerHome + "/" + plant.name, to: plant.target)
                let before = lab.watch()
                let outcome = try lab.granary(["backup", "attacker"])
                Lab.expectDocumented(outcome, "backup with \(plant)")
                if outcome.status != 0 {
                    Lab.expectRefused(outcome, "backup with \(plant)", naming: plant.name)
                }
                try lab.expectContained(since: before, "backup with \(plant)")
                FileSystem.removeTree(lab.attackerHome + "/.Local_SUPPORT")
                try Lab.makeFolder(lab.attackerHome + "/.Local_SUPPORT/_EXTERNAL_DATA", mode: 0o755)
                Lab.chownTree(lab.attackerHome, to: lab.attacker)
            }
        }

        @Test(
            "a restore refuses a symlinked support or _EXTERNAL_DATA folder (65, naming it) and creates, chowns or moves nothing through it"
        )
        func restore() throws {
            let lab = try Lab()
            let backup = try lab.granary(["backup", "attacker"])
            try #require(backup.status == 0, "\(backup)")
            for plant in Self.plants(lab) {
                let saved = lab.base + "/saved-support"
                try FileSystem.rename(lab.attackerHome + "/.Local_SUPPORT", to: saved)
                if plant.name.hasSuffix("_EXTERNAL_DATA") {
                    try Lab.makeFolder(lab.attackerHome + "/.Local_SUPPORT", mode: 0o755)
                }
                Lab.chownTree(lab.attackerHome, to: lab.attacker)
                lab.symlink(lab.attackerHome + "/" + plant.name, to: plant.target)
                let before = lab.watch()
                let outcome = try lab.granary(["restore", "attacker"])
                Lab.expectRefused(outcome, "restore with \(plant)", naming: plant.name)
                try lab.expectContained(since: before, "restore with \(plant)")
                // The attacker's folder back as it was; nothing is left to recover.
                FileSystem.removeTree(lab.attackerHome + "/.Local_SUPPORT")
                try FileSystem.rename(saved, to: lab.attackerHome + "/.Local_SUPPORT")
                let recover = try lab.granary(["recover", "attacker"])
                #expect(recover.status == 0, "recover after \(plant): \(recover)")
            }
            // With the real folder back, the same restore works.
            let restored = try lab.granary(["restore", "attacker"])
            #expect(restored.status == 0, "\(restored)")
        }

        @Test("a reset never moves another user's attachments through a symlinked support or _EXTERNAL_DATA folder")
        func reset() throws {
            let lab = try Lab()
            for plant in Self.plants(lab) {
                FileSystem.removeTree(lab.attackerHome + "/.Local_SUPPORT")
                if plant.name.hasSuffix("_EXTERNAL_DATA") {
                    try Lab.makeFolder(lab.attackerHome + "/.Local_SUPPORT", mode: 0o755)
                }
                Lab.chownTree(lab.attackerHome, to: lab.attacker)
                lab.symlink(lab.attackerHome + "/" + plant.name, to: plant.target)
                let before = lab.watch()
                let outcome = try lab.granary(["reset", "attacker", "--yes"])
                Lab.expectDocumented(outcome, "reset with \(plant)")
                if outcome.status != 0 {
                    Lab.expectRefused(outcome, "reset with \(plant)", naming: plant.name)
                }
                try lab.expectContained(since: before, "reset with \(plant)")
                #expect(try lab.granary(["recover", "attacker"]).status == 0)
            }
        }
    }
}
