import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension AttackTests {
    /// A final archive is the user's last copy: every regular file of the folder is in it (the
    /// other files under `files/`, with owner and mode), `restore --create` brings them back, and
    /// links and special files make retire refuse unless `--discard-others`.
    @Suite("a final archive holds every regular file of the folder")
    struct FinalArchiveFiles {
        /// The attacker's folder with a preferences file in a folder of its own beside `notes.txt`.
        static func addPreferences(_ lab: Lab) throws {
            try Lab.makeFolder(lab.attackerHome + "/Preferences", mode: 0o750)
            try Lab.write(lab.attackerHome + "/Preferences/app.plist", "\(lab.attackerMarker) prefs\n", mode: 0o640)
            Lab.chownTree(lab.attackerHome + "/Preferences", to: lab.attacker)
        }

        /// Bytes, type, owner, group and mode of the non-store files (and their folder).
        static func others(_ home: String) -> [String] {
            ["notes.txt", "Preferences", "Preferences/app.plist"].map { name in
                guard let info = FileSystem.status(home + "/" + name) else { return "\(name) missing" }
                let bytes = (try? String(contentsOfFile: home + "/" + name, encoding: .utf8)) ?? "-"
                return
                    "\(name) \(info.st_mode & S_IFMT) \(info.st_uid):\(info.st_gid) \(String(info.st_mode & 0o7777, radix: 8)) \(bytes)"
            }
        }

        static func document(_ outcome: Outcome) throws -> [String: Any] {
            try JSONSerialization.jsonObject(with: Data(outcome.stdout.utf8)) as? [String: Any] ?? [:]
        }

        func finalArchive(_ lab: Lab) throws -> String {
            try #require(lab.attackerArchives().first { $0.contains("-final.") })
        }

        @Test(
            "restore --create refused while placing the other files (an entry in the way of a folder) leaves the folder as it was: no file or folder of the archive stays"
        )
        func refusedPlacementLeavesNothing() throws {
            let lab = try Lab()
            try Self.addPreferences(lab)
            try Lab.makeFolder(lab.attackerHome + "/zz", mode: 0o750)
            try Lab.write(lab.attackerHome + "/zz/last.txt", "\(lab.attackerMarker) last\n", mode: 0o640)
            Lab.chownTree(lab.attackerHome + "/zz", to: lab.attacker)
            let retired = try lab.granary(["retire", "attacker", "--yes"], timeout: 120)
            try #require(retired.status == 0, "\(retired)")
            // The user's folder again, empty but for a plain file where the archive has a folder:
            // the files before it are placed, then zz/last.txt cannot be.
            try Lab.makeFolder(lab.attackerHome, mode: 0o700)
            try Lab.write(lab.attackerHome + "/zz", "mine\n", mode: 0o600)
            Lab.chownTree(lab.attackerHome, to: lab.attacker)
            let before = try FileManager.default.contentsOfDirectory(atPath: lab.attackerHome).sorted()
            let final = PathText.lastComponent(try finalArchive(lab))
            let created = try lab.granary(["restore", "attacker", final, "--create"], timeout: 120)
            #expect(created.status == 65 && created.stderr.contains("zz"), "\(created)")
            let after = try FileManager.default.contentsOfDirectory(atPath: lab.attackerHome).sorted()
            #expect(after == before, "the refused restore left \(after) (before: \(before))")
            #expect((try? String(contentsOfFile: lab.attackerHome + "/zz", encoding: .utf8)) == "mine\n")
        }

        @Test(
            "retire archives the notes and preferences files under files/ (tar lists them, inspect shows them, the result counts them); restore --create brings back their bytes, owners and modes"
        )
        func roundTrip() throws {
            let lab = try Lab()
            try Self.addPreferences(lab)
            let before = Self.others(lab.attackerHome)
            let retired = try lab.granary(["retire", "attacker", "--yes", "--json"], timeout: 120)
            try #require(retired.status == 0, "\(retired)")
            #expect(try ShellTools.schemaProblems(retired.stdout, schema: "retire").isEmpty, "\(retired.stdout)")
            let document = try Self.document(retired)
            #expect(document["plainFiles"] as? Int == 2, "\(retired.stdout)")
            #expect(document["discarded"] as? [String] == [], "\(retired.stdout)")
            #expect(FileSystem.status(lab.attackerHome) == nil)

            let archive = try finalArchive(lab)
            let listing = try Spawned("/usr/bin/tar", ["--zstd", "-tf", archive]).wait(timeout: 30)
            #expect(listing.status == 0, "\(listing)")
            let members = listing.stdout.split(separator: "\n").map(String.init)
            #expect(
                members.contains("files/notes.txt") && members.contains("files/Preferences/app.plist")
                    && members.contains("stores/Local.sqlite"), "\(members)")
            let inspected = try lab.granary(["inspect", archive, "--json"], timeout: 60)
            #expect(inspected.status == 0, "\(inspected)")
            #expect(try ShellTools.schemaProblems(inspected.stdout, schema: "inspect").isEmpty, "\(inspected.stdout)")
            let files = (try Self.document(inspected))["files"] as? [[String: Any]] ?? []
            #expect(files.compactMap { $0["name"] as? String }.sorted() == ["Preferences/app.plist", "notes.txt"])
            #expect(
                files.first { $0["name"] as? String == "notes.txt" }?["uid"] as? Int == Int(lab.attacker.uid),
                "\(inspected.stdout)")
            let text = try lab.granary(["inspect", archive], timeout: 60)
            #expect(text.stdout.contains("other files (files/)") && text.stdout.contains("notes.txt"), "\(text)")

            let created = try lab.granary(["restore", "attacker", "--create", "--json"], timeout: 120)
            try #require(created.status == 0, "\(created)")
            #expect(try ShellTools.schemaProblems(created.stdout, schema: "restore").isEmpty, "\(created.stdout)")
            #expect(
                ((try Self.document(created))["createdFolder"] as? [String: Any])?["files"] as? Int == 2,
                "\(created.stdout)")
            #expect(Self.others(lab.attackerHome) == before, "the other files came back different")
        }

        @Test(
            "retire refuses (65) while the folder holds a FIFO and a link, naming them, and removes nothing; --discard-others retires without them and says so"
        )
        func refusesSpecials() throws {
            let lab = try Lab()
            try lab.makeSpecial(.fifo, at: lab.attackerHome + "/pipe")
            try lab.makeSpecial(.zeroLink, at: lab.attackerHome + "/zero")
            let refused = try lab.granary(["retire", "attacker", "--yes"], timeout: 60)
            #expect(refused.status == 65, "\(refused)")
            #expect(
                refused.stderr.contains("pipe") && refused.stderr.contains("zero")
                    && refused.stderr.contains("--discard-others") && refused.stderr.contains("nothing was removed"),
                "\(refused)")
            #expect(FileSystem.isRegularFile(lab.attackerHome + "/notes.txt"))
            #expect(lab.attackerArchives().isEmpty, "\(lab.attackerArchives())")

            let retired = try lab.granary(["retire", "attacker", "--yes", "--discard-others", "--json"], timeout: 120)
            try #require(retired.status == 0, "\(retired)")
            let document = try Self.document(retired)
            #expect((document["discarded"] as? [String])?.sorted() == ["pipe", "zero"], "\(retired.stdout)")
            #expect(document["plainFiles"] as? Int == 1, "\(retired.stdout)")
            #expect(FileSystem.status(lab.attackerHome) == nil)
        }

        @Test(
            "a non-store file swapped for a link to another user's file after it was listed for the final archive is not followed: retire fails, the folder stays, no archive holds the other's bytes"
        )
        func swapWhileArchiving() throws {
            let lab = try Lab()
            let before = lab.watch()
            let run = try lab.start(
                ["retire", "attacker", "--yes"], environment: ["GRANARY_TEST_PAUSE_AT": "retireFilesListed"])
            let deadline = Date().addingTimeInterval(60)
            while !run.isStopped && run.process.isRunning && Date() < deadline { usleep(1_000) }
            try #require(run.isStopped, "retire did not pause: is GRANARY_TEST_PAUSE_AT compiled in?")
            lab.symlink(lab.attackerHome + "/.evil", to: lab.victimHome + "/notes.txt")
            try Lab.exchange(lab.attackerHome + "/notes.txt", lab.attackerHome + "/.evil")
            kill(run.pid, SIGCONT)
            let outcome = run.wait(timeout: 60)
            Lab.expectDocumented(outcome, "notes.txt swapped for a link")
            #expect(outcome.status != 0, "\(outcome)")
            #expect(outcome.stderr.contains("notes.txt"), "\(outcome)")
            #expect(FileSystem.isDirectory(lab.attackerHome), "the folder was removed")
            #expect(!lab.attackerArchives().contains { $0.contains("-final.") }, "\(lab.attackerArchives())")
            try lab.expectContained(since: before, "notes.txt swapped for a link", folderToo: false)
        }

        @Test(
            "restore --create into the user's empty folder, with its other files' names swapped for links to another user's file and folder after staging: nothing is followed, the other's files are untouched"
        )
        func createNeverFollows() throws {
            let lab = try Lab()
            try Self.addPreferences(lab)
            let retired = try lab.granary(["retire", "attacker", "--yes"], timeout: 120)
            try #require(retired.status == 0, "\(retired)")
            let archive = try finalArchive(lab)
            // The empty folder an interrupted --create would leave, the attacker's.
            try Lab.makeFolder(lab.attackerHome, mode: 0o755)
            chown(lab.attackerHome, lab.attacker.uid, lab.attacker.gid)
            let before = lab.watch()
            let run = try lab.start(
                ["restore", "attacker", PathText.lastComponent(archive), "--create"],
                environment: ["GRANARY_TEST_PAUSE_AT": "staged"])
            let deadline = Date().addingTimeInterval(60)
            while !run.isStopped && run.process.isRunning && Date() < deadline { usleep(1_000) }
            try #require(run.isStopped, "restore did not pause: \(run.wait(timeout: 5))")
            lab.symlink(lab.attackerHome + "/notes.txt", to: lab.victimHome + "/notes.txt")
            lab.symlink(lab.attackerHome + "/Preferences", to: lab.victimHome + "/Data")
            kill(run.pid, SIGCONT)
            let outcome = run.wait(timeout: 120)
            Lab.expectDocumented(outcome, "links planted after staging")
            // The files are put in place before the stores: the link where a folder must be stops it.
            #expect(outcome.status != 0 && outcome.stderr.contains("Preferences"), "\(outcome)")
            try lab.expectContained(since: before, "links planted after staging", folderToo: false)
            #expect(FileSystem.status(lab.victimHome + "/Data/app.plist") == nil, "written through the link")
            let planted = FileSystem.status(lab.attackerHome + "/notes.txt")
            #expect(planted.map { $0.st_mode & S_IFMT == S_IFLNK } ?? false, "the planted link was replaced")
        }

        @Test("verify finds a files/ member of a final archive whose bytes were changed (65, naming it)")
        func verifyFindsDamage() throws {
            let lab = try Lab()
            let retired = try lab.granary(["retire", "attacker", "--yes"], timeout: 120)
            try #require(retired.status == 0, "\(retired)")
            let archive = try finalArchive(lab)
            #expect((try lab.granary(["verify", archive], timeout: 60)).status == 0)
            // The tar inside, with one byte of notes.txt changed, compressed again in its place.
            let damaged = lab.base + "/damaged"
            try Lab.makeFolder(damaged, mode: 0o700)
            let copy = damaged + "/" + PathText.lastComponent(archive)
            let tar = damaged + "/archive.tar"
            #expect(try Spawned("/usr/bin/zstd", ["-q", "-d", archive, "-o", tar]).wait(timeout: 30).status == 0)
            var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: tar)))
            let needle = Array("\(lab.attackerMarker) notes\n".utf8)
            let at = try #require(
                (0...(bytes.count - needle.count)).first { bytes[$0..<($0 + needle.count)].elementsEqual(needle) })
            bytes[at] ^= 0x01
            try Data(bytes).write(to: URL(fileURLWithPath: tar))
            #expect(try Spawned("/usr/bin/zstd", ["-q", tar, "-o", copy]).wait(timeout: 30).status == 0)
            try FileSystem.rename(copy, to: archive)
            let verified = try lab.granary(["verify", archive], timeout: 60)
            #expect(verified.status == 65, "\(verified)")
            #expect((verified.stdout + verified.stderr).contains("files/notes.txt"), "\(verified)")
        }
    }
}
