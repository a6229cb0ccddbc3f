import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension AttackTests {
    /// Class 9: what a restore puts in a user's folder must be theirs, as it was: a root-owned
    /// file there is one the user cannot replace or remove, a 0600 attachment one their app (run
    /// under another uid of the same group, say) can no longer read.
    @Suite("9. ownership after restore")
    struct Ownership {
        struct Seen: CustomStringConvertible {
            var path: String
            var uid: uid_t
            var gid: gid_t
            var mode: mode_t
            var description: String { "\(path) \(uid):\(gid) \(String(mode, radix: 8))" }
        }

        static func seen(_ home: String) -> [String: Seen] {
            var result: [String: Seen] = [:]
            for line in Lab.fingerprint(home) {
                let parts = line.split(separator: " ")
                guard parts.count >= 4, let uid = UInt32(parts[2].dropFirst(4)), let gid = UInt32(parts[3].dropFirst(4))
                else { continue }
                let mode = mode_t(parts[4].dropFirst(5), radix: 8) ?? 0
                result[String(parts[0])] = Seen(path: String(parts[0]), uid: uid, gid: gid, mode: mode)
            }
            return result
        }

        /// Expects each of `names` to be in `after` with the owner and mode it had in `before`.
        static func expectAsBefore(
            _ names: [String], before: [String: Seen], after: [String: Seen], owner: LabUser,
            sourceLocation: SourceLocation = #_sourceLocation
        ) {
            for name in names {
                guard let old = before[name], let new = after[name] else {
                    Issue.record("\(name) was not there before and after the restore", sourceLocation: sourceLocation)
                    continue
                }
                #expect(
                    new.uid == owner.uid && new.gid == old.gid, "\(name): was \(old), restored as \(new)",
                    sourceLocation: sourceLocation)
                #expect(new.mode == old.mode, "\(name): was \(old), restored as \(new)", sourceLocation: sourceLocation)
            }
        }

        @Test(
            "restored stores, their companions and external-data files belong to the folder's owner with the modes they had"
        )
        func restoredFiles() throws {
            let lab = try Lab()
            let home = lab.victimHome
            let before = Self.seen(home)
            let backup = try lab.granary(["backup", "victim"])
            try #require(backup.status == 0, "\(backup)")
            // A new store in an existing folder, and the whole support folder, come back new.
            unlink(home + "/Data/App.sqlite")
            FileSystem.removeTree(home + "/.Local_SUPPORT")
            // Every entry that appears in the folder during the restores, as it appears.
            let witness = try lab.helper("created.py", [home], as: lab.victim)
            let restored = try lab.granary(["restore", "victim", "--force"])
            #expect(restored.status == 0, "\(restored)")
            // An online restore writes through SQLite: its -wal and -shm are made in the folder.
            let online = try lab.granary(["restore", "victim", "--method", "online"])
            #expect(online.status == 0, "\(online)")
            usleep(200_000)
            let created = witness.stop().stdout.split(separator: "\n").map(String.init)
            Self.expectAsBefore(
                [
                    "Local.sqlite", "Data/App.sqlite", ".Local_SUPPORT/_EXTERNAL_DATA/photo-1",
                    ".Local_SUPPORT/_EXTERNAL_DATA/photo-2",
                ], before: before,
                after: Self.seen(home), owner: lab.victim)
            // Everything that appeared during the restores, even for a moment, was the owner's; the
            // companions SQLite made had their store's mode.
            #expect(
                created.contains { $0.hasPrefix("Local.sqlite-wal ") }, "the online restore made no -wal: \(created)")
            for line in created where !line.hasSuffix(" gone") {
                let parts = line.split(separator: " ")
                guard parts.count == 5 else { continue }
                #expect(
                    parts[1] == "\(lab.victim.uid)", "\(line): appeared in the victim's folder not owned by the victim")
                if let dash = parts[0].range(of: "-", options: .backwards),
                    ["-wal", "-shm", "-journal"].contains(String(parts[0][dash.lowerBound...]))
                {
                    let store = String(parts[0][..<dash.lowerBound])
                    #expect(
                        parts[3] == String(before[store]?.mode ?? 0, radix: 8),
                        "\(line): a companion without its store's mode")
                }
            }
        }

        @Test("a backup leaves nothing in the user's folder that is not theirs, not even for a moment")
        func backupLeavesNothingForeign() throws {
            let lab = try Lab()
            let witness = try lab.helper("created.py", [lab.victimHome], as: lab.victim)
            let backup = try lab.granary(["backup", "victim"])
            #expect(backup.status == 0, "\(backup)")
            usleep(200_000)
            let created = witness.stop().stdout.split(separator: "\n").map(String.init)
            // The read-only snapshot makes the WAL store's -wal and -shm: the owner's, with the store's mode.
            #expect(created.contains { $0.hasPrefix("Local.sqlite-shm ") }, "\(created)")
            for line in created where line != "ready" && !line.hasSuffix(" gone") {
                let parts = line.split(separator: " ")
                #expect(
                    parts.count == 5 && parts[1] == "\(lab.victim.uid)" && parts[3] == "640",
                    "\(line): not the owner's, or not the store's mode")
            }
        }

        @Test(
            "the folders a restore creates (a store's folder, the support and _EXTERNAL_DATA folders) belong to the folder's owner with the modes they had"
        )
        func restoredFolders() throws {
            let lab = try Lab()
            let home = lab.victimHome
            let before = Self.seen(home)
            let backup = try lab.granary(["backup", "victim"])
            try #require(backup.status == 0, "\(backup)")
            FileSystem.removeTree(home + "/Data")
            FileSystem.removeTree(home + "/.Local_SUPPORT")
            let restored = try lab.granary(["restore", "victim", "--force"])
            #expect(restored.status == 0, "\(restored)")
            Self.expectAsBefore(
                ["Data", "Data/App.sqlite", ".Local_SUPPORT", ".Local_SUPPORT/_EXTERNAL_DATA"], before: before,
                after: Self.seen(home), owner: lab.victim)
        }
    }
}
