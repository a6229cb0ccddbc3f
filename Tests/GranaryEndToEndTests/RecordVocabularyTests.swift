import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// What `list` and `check` say of an archive's record: one vocabulary, and the right blame.
@Suite("records: list's times say which check, check's blame for a record that no longer applies")
struct RecordVocabularyTests {
    static func archives(_ site: SampleSite, _ user: String) throws -> [[String: Any]] {
        let list = try site.granary(["list", user, "--json"])
        #expect(list.status == 0, "\(list.stderr)")
        let document = try #require(try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [String: Any])
        return try #require(document["archives"] as? [[String: Any]])
    }

    @Test(
        "list --json: checked by its backup is checkedAt with verifiedAt null (never beside unverified); verified is verifiedAt with checkedAt null"
    )
    func listTimesSayWhich() throws {
        let site = try SampleSite(backup: ["bob@example.com"])
        var archive = try #require(try Self.archives(site, "bob@example.com").first)
        #expect(archive["verified"] as? String == "unverified" && archive["state"] as? String == "checked-by-backup")
        #expect(archive["verifiedAt"] is NSNull, "\(archive)")
        #expect(archive["checkedAt"] is String, "\(archive)")
        #expect(try site.granary(["verify", "--user", "bob@example.com", "--latest"]).status == 0)
        archive = try #require(try Self.archives(site, "bob@example.com").first)
        #expect(archive["verified"] as? String == "verified" && archive["state"] as? String == "restorable-verified")
        #expect(archive["verifiedAt"] is String, "\(archive)")
        #expect(archive["checkedAt"] is NSNull, "\(archive)")
        // An archive no check vouches for: both null.
        #expect(try site.granary(["backup", "bob@example.com", "--check", "none"]).status == 0)
        archive = try #require(try Self.archives(site, "bob@example.com").first)
        #expect(archive["state"] as? String == "unverified")
        #expect(archive["verifiedAt"] is NSNull && archive["checkedAt"] is NSNull, "\(archive)")
    }

    @Test(
        "a repository copied without modification times: check says the record no longer applies and how to check again, not that the backup ran with check = none"
    )
    func copiedWithoutMtimes() throws {
        let site = try SampleSite(backup: ["bob@example.com"])
        let folder = site.repo + "/bob@example.com"
        let name = try #require(site.archives("bob@example.com").last)
        // What `cp -r` without -p does to an archive: same bytes, a new modification time.
        var times = [timespec(tv_sec: 1_000_000_000, tv_nsec: 0), timespec(tv_sec: 1_000_000_000, tv_nsec: 0)]
        #expect(utimensat(AT_FDCWD, folder + "/" + name, &times, 0) == 0)
        let check = try site.granary(["check", "bob@example.com"])
        #expect(check.status == 1, "\(check.stdout)\(check.stderr)")
        #expect(check.stdout.contains("another modification time, same size"), "\(check.stdout)")
        #expect(!check.stdout.contains("check = none"), "\(check.stdout)")
        #expect(check.stdout.contains("granary verify"), "\(check.stdout)")
        #expect(try site.granary(["verify", "--user", "bob@example.com", "--latest"]).status == 0)
        #expect(try site.granary(["check", "bob@example.com"]).status == 0)
    }
}
