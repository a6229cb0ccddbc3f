import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension AttackTests {
    /// Issue 47: stores whose members would share a name in an archive.
    @Suite("18. member names unique by construction")
    struct MemberClashes {
        @Test(
            "stores whose members would share a name fail that user's backup (65, naming both and what to do); no archive verify would refuse is written, the other user's is",
            arguments: ["Local.sqlite-backup", "Local.db", "Local.sqlite.pages"])
        func clash(second: String) throws {
            let lab = try Lab()
            // What an app leaves beside its store: a copy under another name.
            try Lab.makeStore(lab.attackerHome + "/" + second, wal: false, marker: lab.attackerMarker, rows: 2)
            Lab.chownTree(lab.attackerHome + "/" + second, to: lab.attacker)
            let outcome = try lab.granary(["backup", "--all", "--json"], timeout: 120)
            Lab.expectDocumented(outcome, "backup --all with \(second) beside Local.sqlite")
            #expect(outcome.status == 1, "\(outcome)")
            let users = try AttackTests.Resources.document(outcome)
            let error = users["attacker"]?["error"] as? [String: Any]
            #expect(error?["code"] as? Int == 65, "\(outcome)")
            let message = error?["message"] as? String ?? ""
            #expect(
                message.contains("Local.sqlite") && message.contains(second)
                    && message.contains("would both be packed as"), "\(message)")
            #expect(outcome.stderr.contains("Try: ") || outcome.stderr.contains("rename or move"), "\(outcome)")
            #expect(lab.attackerArchives().isEmpty, "an archive was written: \(lab.attackerArchives())")
            // The victim's archive verifies; verify --all finds nothing it refuses.
            let victim = try #require(users["victim"]?["archive"] as? String, "\(outcome)")
            #expect(try lab.granary(["verify", victim]).status == 0)
            let all = try lab.granary(["verify", "--all"], timeout: 120)
            #expect(all.status == 0, "\(all)")
        }

        @Test(
            "an existing archive whose stores share a member is refused by verify with what happened and how to restore the stores one by one"
        )
        func existingArchive() throws {
            let lab = try Lab()
            let made = try lab.granary(["backup", "attacker", "--json"], timeout: 120)
            try #require(made.status == 0, "\(made)")
            let archive = try #require(lab.attackerArchives().first)
            // The archive an older granary wrote: a second store sharing .Local_SUPPORT, its
            // attachments packed a second time under the same names.
            let folder = lab.base + "/old"
            let extracted = try GranaryProcess.runExecutable(
                "/bin/tar", ["-xf", archive, "-C", lab.base, "--one-top-level=old"])
            try #require(extracted.status == 0, "\(extracted)")
            var manifest = try Manifest.decode(
                Array(try Data(contentsOf: URL(fileURLWithPath: folder + "/MANIFEST.json"))), source: archive)
            var second = try #require(manifest.stores.first { $0.name == "Local.sqlite" })
            second.name = "Local.sqlite-backup"
            second.path = Manifest.storesFolder + second.name
            manifest.stores.append(second)
            let database = try #require(manifest.files.first { $0.path == Manifest.storesFolder + "Local.sqlite" })
            let attachments = manifest.files.filter { $0.path.contains("_EXTERNAL_DATA/") }
            try #require(!attachments.isEmpty)
            manifest.files.append(
                Manifest.File(path: second.path, size: database.size, sha256: database.sha256, kind: .store))
            manifest.files += attachments
            // Written in the archive's place, as the older granary would have named it.
            let twice = archive + ".new"
            let fd = open(twice, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            defer { close(fd) }
            let writer = try ArchiveWriter(fileDescriptor: fd, path: twice, compression: manifest.compression)
            try writer.addManifest(manifest)
            try writer.addDirectory(member: Manifest.storesFolder)
            for file in manifest.files {
                let source =
                    folder + "/" + (file.path == second.path ? Manifest.storesFolder + "Local.sqlite" : file.path)
                try writer.addFile(member: file.path, from: source)
            }
            try writer.finish()
            try #require(rename(twice, archive) == 0)
            let verified = try lab.granary(["verify", archive])
            #expect(verified.status == 65, "\(verified)")
            #expect(
                verified.stderr.contains("stores Local.sqlite and Local.sqlite-backup would both be packed as")
                    && verified.stderr.contains("to restore the stores one by one")
                    && verified.stderr.contains("--occurrence=1"), "\(verified)")
        }
    }
}
