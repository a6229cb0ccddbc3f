import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension AttackTests.BoundedCopies {
    /// `[limits] time` of a fraction of a second, with nothing per GiB: a copy of a 64 GiB hole
    /// (hashed and checked for zeros as it goes) takes far longer than that on any machine.
    static func tinyBudget(_ lab: Lab) throws -> String {
        let config = lab.base + "/granary.toml"
        try Lab.write(config, "[limits]\ntime = \"1s\"\ntime_per_gib = \"0s\"\n", mode: 0o644)
        return config
    }

    @Test(
        "an attachment that takes longer to read than the user's time budget fails that user (65, naming it and the budget); the next user's archive is written"
    )
    func attachmentPastTheTimeBudget() throws {
        let lab = try Lab()
        let config = try Self.tinyBudget(lab)
        // A first backup of the victim (its WAL store's -wal and -shm appear), then the watch.
        try #require(try lab.granary(["backup", "victim"], timeout: 120).status == 0)
        let before = lab.watch()
        // 64 GiB of hole, under the default bytes_per_user: counted, and slow to read.
        try AttackTests.Resources.sparse(
            lab.attackerHome + "/" + Self.attachments + "/photo-3", length: 64 << 30, marker: lab.attackerMarker,
            lab: lab)
        let outcome = try lab.granary(["backup", "--all", "--json", "--config", config], timeout: 120)
        Lab.expectDocumented(outcome, "backup --all with an attachment slower to read than the budget")
        #expect(outcome.status == 1, "\(outcome)")
        let users = try AttackTests.Resources.document(outcome)
        let error = users["attacker"]?["error"] as? [String: Any]
        #expect(error?["code"] as? Int == 65, "\(outcome)")
        let message = error?["message"] as? String ?? ""
        #expect(message.contains("photo-3") && message.contains("time budget of 1s"), "\(message)")
        let victim = try #require(users["victim"], "\(outcome)")
        #expect(victim["ok"] as? Bool == true, "\(outcome)")
        let archive = try #require(victim["archive"] as? String)
        #expect(try lab.granary(["verify", archive]).status == 0)
        #expect(lab.attackerArchives().isEmpty)
        #expect(FileSystem.contents(of: lab.repo + "/.granary-tmp").isEmpty)
        try lab.expectContained(since: before, "attachment past the time budget")
    }

    @Test(
        "a plain file of retire's final archive that takes longer to read than the user's time budget: retire refuses (65, naming it), nothing is removed"
    )
    func finalArchiveFilePastTheTimeBudget() throws {
        let lab = try Lab()
        let config = try Self.tinyBudget(lab)
        try AttackTests.Resources.sparse(
            lab.attackerHome + "/big.bin", length: 64 << 30, marker: lab.attackerMarker, lab: lab)
        let outcome = try lab.granary(["retire", "attacker", "--yes", "--config", config], timeout: 120)
        Lab.expectRefused(outcome, "retire with a plain file slower to read than the budget", naming: "big.bin")
        #expect(outcome.stderr.contains("time budget"), "\(outcome)")
        #expect(FileSystem.status(lab.attackerHome + "/big.bin") != nil, "the user's file is still there")
        #expect(FileSystem.status(lab.attackerHome + "/Local.sqlite") != nil, "the user's store is still there")
        #expect(!lab.attackerArchives().contains { $0.contains("-final.") })
    }

    @Test(
        "an attachment a restore sets aside, grown to 4 TiB by its owner the moment the safety archive reads it: the read stops at the length counted; the restore stands and the replaced files are kept (nothing lost)"
    )
    func grownDuringSafetyArchive() throws {
        let lab = try Lab()
        let backup = try lab.granary(["backup", "attacker"], timeout: 120)
        try #require(backup.status == 0, "\(backup)")
        let before = lab.watch()
        // An attachment made after the backup: the restore removes it from the folder and keeps it
        // aside (its inode, linked into root's work folder) for the safety archive.
        let file = lab.attackerHome + "/" + Self.attachments + "/photo-9"
        try AttackTests.Resources.sparse(file, length: 1 << 30, marker: lab.attackerMarker, lab: lab)
        // The owner keeps the file open and watches the inode itself, wherever it is linked.
        let grow = try lab.helper("grow.py", ["--file", file, "--size", String(4 << 40)])
        let restore = try lab.granary(["restore", "attacker", "--force"], timeout: 120)
        let grown = grow.stop()
        try #require(grown.stdout.contains("grown"), "the helper never saw granary read the file: \(grown)")
        Lab.expectDocumented(restore, "restore with an attachment grown while its safety archive reads it")
        let said = restore.stdout + restore.stderr
        #expect(said.contains("photo-9") && said.contains("grew past"), "\(restore)")
        // No safety archive holds a part of the file; the file itself waits with the others replaced.
        #expect(!lab.attackerArchives().contains { $0.contains("pre-restore") }, "\(lab.attackerArchives())")
        let pending = lab.root + "/.granary/safety-pending/attacker"
        let kept = try #require(
            FileManager.default.enumerator(atPath: pending)?.compactMap { $0 as? String }.first {
                $0.hasSuffix("/photo-9")
            }, "the replaced attachment is not kept: \(FileSystem.contents(of: pending))")
        #expect(FileSystem.status(pending + "/" + kept).map { Int64($0.st_size) } == 4 << 40)
        // The restore itself stands: the store is the archive's again.
        #expect(FileSystem.status(file) == nil, "the restore removed the attachment the archive does not have")
        #expect(FileSystem.contents(of: lab.repo + "/.granary-tmp").isEmpty)
        try lab.expectContained(since: before, "grown during the safety archive")
    }

    @Test(
        "a store a restore replaces, grown to 4 TiB by its owner (who keeps it open) the moment root reads it: no read runs past the user's time budget; the restore ends with a documented status and nothing is lost"
    )
    func storeGrownDuringRestore() throws {
        let lab = try Lab()
        let config = try Self.tinyBudget(lab)
        let backup = try lab.granary(["backup", "attacker"], timeout: 120)
        try #require(backup.status == 0, "\(backup)")
        let before = lab.watch()
        let store = lab.attackerHome + "/Local.sqlite"
        let original = try #require(FileSystem.status(store).map { Int64($0.st_size) })
        // The owner holds its store open and grows the inode, wherever it is linked, at root's
        // first read of it.
        let grow = try lab.helper("grow.py", ["--file", store, "--size", String(4 << 40)])
        let restore = try lab.granary(["restore", "attacker", "--force", "--config", config], timeout: 120)
        let grown = grow.stop()
        try #require(grown.stdout.contains("grown"), "the helper never saw granary read the store: \(grown)")
        Lab.expectDocumented(restore, "restore of a store its owner grows to 4 TiB as root reads it")
        // The restore stands; the safety archive's copy of the replaced store stopped at the
        // user's time budget, naming it, and the replaced files wait, whole, for `recover`.
        #expect(restore.status == 1, "\(restore)")
        #expect(restore.stdout.contains("restored attacker"), "\(restore)")
        #expect(
            restore.stderr.contains("Local.sqlite") && restore.stderr.contains("time budget of 1s"), "\(restore)")
        #expect(!lab.attackerArchives().contains { $0.contains("pre-restore") }, "\(lab.attackerArchives())")
        #expect(FileSystem.status(store).map { Int64($0.st_size) } == original, "the store is the archive's again")
        let pending = lab.root + "/.granary/safety-pending/attacker"
        let kept = try #require(
            FileManager.default.enumerator(atPath: pending)?.compactMap { $0 as? String }.first {
                $0.hasSuffix("/Local.sqlite")
            }, "the replaced store is not kept: \(FileSystem.contents(of: pending))")
        #expect(FileSystem.status(pending + "/" + kept).map { Int64($0.st_size) } == 4 << 40)
        #expect(FileSystem.contents(of: lab.repo + "/.granary-tmp").isEmpty)
        try lab.expectContained(since: before, "store grown during a restore")
    }

    @Test(
        "backup --delta on a chain: a -wal rewritten to claim 1 GiB is charged from the page count inside the copy's read transaction (65, bytes_per_user); the other user's delta is written"
    )
    func lyingWALDelta() throws {
        let lab = try Lab()
        let config = lab.base + "/granary.toml"
        try Lab.write(config, "[limits]\nbytes_per_user = \"64MiB\"\n", mode: 0o644)
        try Self.lyingWAL(lab, name: "Lying.sqlite", pages: 2)
        let full = try lab.granary(["backup", "--all", "--delta", "--json", "--config", config], timeout: 120)
        try #require(full.status == 0, "\(full)")
        // The same database file (the delta's base knows it), a -wal that now claims 1 GiB.
        let made = try lab.helper("wal.py", [lab.attackerHome + "/Lying.sqlite", "262144", "--wal-only"])
        #expect(made.wait(timeout: 30).stdout.contains("ready 262144"), "SQLite does not believe the -wal")
        let outcome = try lab.granary(["backup", "--all", "--delta", "--json", "--config", config], timeout: 120)
        Lab.expectDocumented(outcome, "backup --all --delta with a lying -wal")
        #expect(outcome.status == 1, "\(outcome)")
        let users = try AttackTests.Resources.document(outcome)
        let error = users["attacker"]?["error"] as? [String: Any]
        #expect(error?["code"] as? Int == 65, "\(outcome)")
        let message = error?["message"] as? String ?? ""
        #expect(message.contains("Lying.sqlite") && message.contains("bytes_per_user"), "\(message)")
        #expect(users["victim"]?["ok"] as? Bool == true, "\(outcome)")
        let archive = users["victim"]?["archive"] as? String ?? ""
        #expect(archive.contains("delta"), "the victim's backup is a delta of its chain: \(archive)")
        #expect(lab.attackerArchives().count == 1, "\(lab.attackerArchives())")
        #expect(
            FileSystem.contents(of: lab.repo + "/.granary-tmp").allSatisfy { $0 == "page-hashes" },
            "\(FileSystem.contents(of: lab.repo + "/.granary-tmp"))")
    }
}
