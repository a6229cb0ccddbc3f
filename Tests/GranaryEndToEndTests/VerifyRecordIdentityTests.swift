import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

/// A verification record is of the file that was verified: another file put in the archive's
/// place with the same size and modification time (`cp -p`) is not vouched for, nor blamed.
@Suite("verification records and copies")
struct VerifyRecordIdentityTests {
    static let alice = "alice@example.com"

    /// Overwrites 64 bytes in the middle of `path`, keeping its size and modification time.
    static func damage(_ path: String) throws {
        let before = try #require(FileSystem.status(path))
        let handle = try #require(FileHandle(forUpdatingAtPath: path))
        let size = try handle.seekToEnd()
        try handle.seek(toOffset: size / 2)
        try handle.write(contentsOf: Data(repeating: 0xA5, count: 64))
        try handle.close()
        var times = [before.st_atim, before.st_mtim]
        #expect(utimensat(AT_FDCWD, path, &times, 0) == 0)
    }

    static func cp(_ from: String, _ to: String) throws {
        let copied = try GranaryProcess.runExecutable("/bin/cp", ["-p", from, to])
        #expect(copied.status == 0, "\(copied.stderr)")
    }

    /// `list USER --json`'s `state` of the user's only archive.
    static func state(_ site: SampleSite) throws -> String {
        let list = try site.granary(["list", alice, "--json"])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [String: Any])
        let archives = try #require(object["archives"] as? [[String: Any]])
        return try #require(archives.first?["state"] as? String, "\(list.stdout)")
    }

    @Test(
        "a bad verify record does not outlive a good copy of the same size and modification time put in place with cp -p: list and check show it unverified, and verify finds it good"
    )
    func badRecordGoodCopy() throws {
        let site = try SampleSite()
        // Uncompressed: the damage falls in a store's bytes, and `list` still reads the manifest.
        #expect(try site.granary(["backup", Self.alice, "--compression", "none"]).status == 0)
        let name = try #require(site.archives(Self.alice).first)
        let path = site.repo + "/\(Self.alice)/" + name
        let good = site.folder.child("good.tar.zst")
        try Self.cp(path, good)
        try Self.damage(path)
        let bad = try site.granary(["verify", "\(Self.alice)/\(name)"])
        #expect(bad.status == 65, "\(bad.stdout) \(bad.stderr)")
        #expect(try Self.state(site) == "bad")
        // The admin puts the good copy back with its size and modification time.
        try Self.cp(good, path)
        let after = try #require(FileSystem.status(path)), kept = try #require(FileSystem.status(good))
        #expect(after.st_size == kept.st_size && after.st_mtim.tv_sec == kept.st_mtim.tv_sec)
        #expect(try Self.state(site) == "unverified")
        let check = try site.granary(["check", Self.alice])
        let said = check.stdout + check.stderr
        #expect(said.contains("another file") && !said.contains("found bad"), "\(said)")
        let verified = try site.granary(["verify", "\(Self.alice)/\(name)"])
        #expect(verified.status == 0, "\(verified.stdout) \(verified.stderr)")
        #expect(try Self.state(site) == "restorable-verified")
    }

    @Test(
        "a good verify record does not vouch for a damaged copy of the same size and modification time put in place with cp -p"
    )
    func goodRecordDamagedCopy() throws {
        let site = try SampleSite()
        // Uncompressed: the damage falls in a store's bytes, and `list` still reads the manifest.
        #expect(try site.granary(["backup", Self.alice, "--compression", "none"]).status == 0)
        let name = try #require(site.archives(Self.alice).first)
        let path = site.repo + "/\(Self.alice)/" + name
        #expect(try site.granary(["verify", "\(Self.alice)/\(name)"]).status == 0)
        #expect(try Self.state(site) == "restorable-verified")
        let damaged = site.folder.child("damaged.tar.zst")
        try Self.cp(path, damaged)
        try Self.damage(damaged)
        try Self.cp(damaged, path)
        #expect(try Self.state(site) == "unverified")
        let again = try site.granary(["verify", "\(Self.alice)/\(name)"])
        #expect(again.status == 65, "\(again.stdout) \(again.stderr)")
    }
}
