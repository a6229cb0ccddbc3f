import Foundation
import GranaryKit
import Testing

extension AttackTests {
    /// Class 8: the reopen socket of a store is an abstract Unix socket whose name anyone can
    /// compute from the store's path ("granary-reopen/v1/" + hex SHA-256 of its canonical path)
    /// and anyone can bind first. Another user squatting the victim's socket must not be able to
    /// block, stall or mislead a restore of the victim, nor learn anything from it.
    @Suite("8. another user squatting the victim's reopen socket")
    struct ReopenSquat {
        /// The victim's store with a row the archive does not have, so that a restore shows; the
        /// canonical paths of the victim's two stores (what their socket names are made from).
        static func prepare(_ lab: Lab) throws -> (canonical: [String], archivedRows: Int) {
            let backup = try lab.granary(["backup", "victim"])
            try #require(backup.status == 0, "\(backup)")
            try addRow(lab)
            let canonical = try ["Data/App.sqlite", "Local.sqlite"].map { name in
                try #require(
                    realpath(lab.victimHome + "/" + name, nil).map { pointer in
                        defer { free(pointer) }
                        return String(cString: pointer)
                    })
            }
            return (canonical, 40)
        }

        /// The squatter's log: a file the attacker can write.
        static func log(_ lab: Lab) throws -> String {
            let log = lab.base + "/squatter.log"
            try Lab.write(log, "", mode: 0o644)
            Lab.chownTree(log, to: lab.attacker)
            return log
        }

        /// Adds a row to the victim's store, as the victim.
        static func addRow(_ lab: Lab) throws {
            let script =
                "import sqlite3,sys; db=sqlite3.connect(sys.argv[1]); db.execute(\"INSERT INTO notes(body) VALUES ('later')\"); db.commit()"
            let added = try lab.run(as: lab.victim, [AttackLab.python, "-c", script, lab.victimHome + "/Local.sqlite"])
            try #require(added.status == 0, "\(added)")
        }

        static func rows(_ lab: Lab) throws -> Int {
            let db = try Database(path: lab.victimHome + "/Local.sqlite", mode: .readOnly)
            return Int(try db.scalar("SELECT count(*) FROM notes")?.integer ?? -1)
        }

        @Test(
            "with a squatter on the victim's reopen socket, restore --method auto restores online with a warning and sends the squatter nothing"
        )
        func autoRestores() throws {
            let lab = try Lab()
            let (canonical, archived) = try Self.prepare(lab)
            let log = try Self.log(lab)
            let squatter = try lab.helper("squat.py", ["accept", log] + canonical)
            defer { squatter.stop() }
            let watched = lab.watch()
            let outcome = try lab.granary(["restore", "victim"], timeout: 30)
            #expect(outcome.status == 0, "\(outcome)")
            #expect((outcome.stdout + outcome.stderr).contains("ignored the reopen socket"), "\(outcome)")
            #expect(outcome.stdout.contains("online"), "\(outcome)")
            #expect(try Self.rows(lab) == archived, "the victim's store was not restored")
            let heard = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            #expect(
                heard.split(separator: "\n").allSatisfy { $0 == "CONNECTED" },
                "granary talked to the squatter: \(heard)")
            #expect(lab.watch().etc == watched.etc && lab.watch().secret == watched.secret)

            // A reset of the victim goes on the same way.
            let reset = try lab.granary(["reset", "victim", "--yes"], timeout: 30)
            #expect(reset.status == 0, "\(reset)")
            #expect((reset.stdout + reset.stderr).contains("ignored the reopen socket"), "\(reset)")
            #expect(try Self.rows(lab) == 0)
        }

        @Test(
            "with a squatter on the victim's reopen socket, restore --method swap refuses (65, naming the store) and changes nothing"
        )
        func swapRefuses() throws {
            let lab = try Lab()
            let (canonical, _) = try Self.prepare(lab)
            let squatter = try lab.helper("squat.py", ["accept", try Self.log(lab)] + canonical)
            defer { squatter.stop() }
            let before = lab.watch()
            let outcome = try lab.granary(["restore", "victim", "--method", "swap"], timeout: 30)
            Lab.expectRefused(outcome, "restore --method swap with a squatter", naming: lab.victimHome + "/")
            #expect(
                outcome.stderr.contains("uid \(lab.attacker.uid)"),
                "the message does not say whose socket it is: \(outcome)")
            try lab.expectContained(since: before, "restore --method swap with a squatter")
        }

        @Test("a squatter that never accepts (its backlog full) cannot hang or block a restore of the victim")
        func fullBacklog() throws {
            let lab = try Lab()
            let (canonical, archived) = try Self.prepare(lab)
            let squatter = try lab.helper("squat.py", ["full", try Self.log(lab)] + canonical)
            defer { squatter.stop() }
            let outcome = try lab.granary(["restore", "victim", "--owner-timeout", "2"], timeout: 20)
            Lab.expectDocumented(outcome, "restore with a squatter whose backlog is full")
            #expect(outcome.status == 0, "\(outcome)")
            #expect(try Self.rows(lab) == archived, "the victim's store was not restored")
        }
    }
}
