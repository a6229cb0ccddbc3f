import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension AttackTests.Resources {
    /// Makes `path` a file of `length` bytes, a hole but for `marker` at its start and middle, as
    /// the attacker (`truncate -s` is all it takes).
    static func sparse(_ path: String, length: Int64, marker: String, lab: Lab) throws {
        FileSystem.removeTree(path)
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        defer { close(fd) }
        for offset in [0, length / 2] {
            _ = Array(marker.utf8).withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(offset)) }
        }
        #expect(ftruncate(fd, off_t(length)) == 0)
        lchown(path, lab.attacker.uid, lab.attacker.gid)
        #expect(Int64(FileSystem.status(path)!.st_blocks) * 512 < 1 << 20, "the file is not sparse here")
    }

    /// A store of the attacker's whose header claims `pages` pages of 4 KiB over a hole.
    static func sparseStore(_ path: String, pages: UInt32, lab: Lab) throws {
        try Lab.makeStore(path, wal: false, marker: lab.attackerMarker, rows: 1)
        let file = try #require(FileHandle(forUpdatingAtPath: path))
        try file.seek(toOffset: 28)
        try file.write(contentsOf: Data(withUnsafeBytes(of: pages.bigEndian) { Array($0) }))
        try file.truncate(atOffset: 4096 * UInt64(pages))
        try file.close()
        Lab.chownTree(path, to: lab.attacker)
    }

    static func document(_ outcome: Outcome) throws -> [String: [String: Any]] {
        let json = try JSONSerialization.jsonObject(with: Data(outcome.stdout.utf8)) as? [String: Any]
        let users = json?["users"] as? [[String: Any]] ?? []
        return Dictionary(uniqueKeysWithValues: users.map { ($0["id"] as? String ?? "?", $0) })
    }

    @Test(
        "a sparse store or attachment past [limits] bytes_per_user fails its user's backup (65, naming it and saying it is sparse) before it is copied; the other user's backup succeeds",
        arguments: ["store", "attachment"])
    func pastTheCap(kind: String) throws {
        let lab = try Lab()
        let config = lab.base + "/granary.toml"
        try Lab.write(config, "[limits]\nbytes_per_user = \"1GiB\"\n", mode: 0o644)
        let file: String
        if kind == "store" {
            // 1 Mi pages of 4 KiB: a 4 GiB store in 8 KiB (a header can claim 256 TiB).
            file = "Sparse.sqlite"
            try Self.sparseStore(lab.attackerHome + "/" + file, pages: 1 << 20, lab: lab)
        } else {
            // An 8 GiB attachment in 8 KiB: Core Data copies whatever file the store references.
            file = ".Local_SUPPORT/_EXTERNAL_DATA/photo-3"
            try Self.sparse(lab.attackerHome + "/" + file, length: 8 << 30, marker: lab.attackerMarker, lab: lab)
        }
        let outcome = try lab.granary(["backup", "--all", "--json", "--config", config], timeout: 120)
        Lab.expectDocumented(outcome, "backup --all with a sparse \(kind)")
        #expect(outcome.status == 1, "\(outcome)")
        let users = try Self.document(outcome)
        let attacker = try #require(users["attacker"], "\(outcome)")
        let error = attacker["error"] as? [String: Any]
        #expect(attacker["ok"] as? Bool == false)
        #expect(error?["code"] as? Int == 65, "\(outcome)")
        let message = error?["message"] as? String ?? ""
        #expect(
            message.contains(file) && message.contains("bytes_per_user") && message.contains("is sparse"), "\(message)")
        #expect(outcome.stderr.contains("granary: attacker: with \(file)"), "\(outcome)")
        // The victim's backup is whole and verifies; nothing of the attacker's was left behind.
        let victim = try #require(users["victim"], "\(outcome)")
        #expect(victim["ok"] as? Bool == true, "\(outcome)")
        let archive = try #require(victim["archive"] as? String)
        #expect(try lab.granary(["verify", archive]).status == 0)
        #expect(lab.attackerArchives().isEmpty)
        #expect(
            FileSystem.contents(of: lab.repo + "/.granary-tmp").isEmpty,
            "\(FileSystem.contents(of: lab.repo + "/.granary-tmp"))")
    }

    @Test(
        "a sparse attachment under the cap is backed up with a warning, and costs its blocks, not its length, in the archive's checks and a restore's staging"
    )
    func underTheCap() throws {
        let lab = try Lab()
        let file = lab.attackerHome + "/.Local_SUPPORT/_EXTERNAL_DATA/photo-3"
        try Self.sparse(file, length: 64 << 20, marker: lab.attackerMarker, lab: lab)
        let outcome = try lab.granary(["backup", "--all", "--json"])
        #expect(outcome.status == 0, "\(outcome)")
        let users = try Self.document(outcome)
        let warnings = users["attacker"]?["warnings"] as? [String] ?? []
        #expect(
            warnings.count == 1
                && warnings[0].hasPrefix(".Local_SUPPORT/_EXTERNAL_DATA/photo-3 is sparse: 64 MiB long"), "\(warnings)")
        #expect(
            outcome.stderr.contains("warning: attacker: .Local_SUPPORT/_EXTERNAL_DATA/photo-3 is sparse"), "\(outcome)")
        #expect(users["victim"]?["warnings"] as? [String] == [], "\(outcome)")
        // Restored into a new folder through staging on the root's filesystem: the same bytes,
        // still a hole.
        let target = lab.base + "/restored"
        let restored = try lab.granary(["restore", "attacker", "--to", target])
        #expect(restored.status == 0, "\(restored)")
        let copy = target + "/.Local_SUPPORT/_EXTERNAL_DATA/photo-3"
        #expect(FileSystem.status(copy)?.st_size == 64 << 20)
        #expect(
            Int64(FileSystem.status(copy)?.st_blocks ?? .max) * 512 < 1 << 20,
            "the restored attachment takes its length on disk")
        #expect(try FileDigest.of(copy).sha256 == (try FileDigest.of(file).sha256))
    }
}
