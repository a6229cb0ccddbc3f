import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A verification record in a remote repository is of the object that was verified. On S3 an
/// object's stamp is its upload time (Last-Modified, whole seconds), which any upload sets: what
/// it cannot tell apart is another object of the same size uploaded within the same second. The
/// record also holds the object's MD5 (its ETag, from the listing): such an object is neither
/// vouched for nor blamed by it. The same second is made here by writing the new object's stamp
/// into the record (granary's sidecar), which is what a record written in that second would hold.
@Suite(
    "verification records of remote objects", .serialized,
    .enabled(if: S3Server.available, S3Server.unavailableReason))
struct RemoteVerifyIdentityTests {
    static let alice = "alice@example.com"
    let folder = TemporaryFolder("granary-remote-identity")
    var root: String { folder.child("root") }
    let bucket: String
    let server: S3Server

    static let shared: S3Server? = try? S3Server(
        log: NSTemporaryDirectory() + "/granary-moto-identity-\(getpid()).log")

    init() throws {
        guard let server = Self.shared else { throw S3ServerError.didNotStart("moto did not start") }
        self.server = server
        bucket = "i" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
        try server.makeBucket(bucket)
        let path = root + "/" + Self.alice + "/Local.sqlite"
        try FileSystem.makeDirectory(root + "/" + Self.alice)
        let db = try Database(path: path, mode: .create)
        try db.execute("PRAGMA journal_mode=WAL")
        try db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, text TEXT)")
        try db.execute(
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 2000) INSERT INTO notes(text) SELECT hex(randomblob(100)) FROM c"
        )
    }

    func granary(_ arguments: [String], repo: String) throws -> GranaryProcess.Result {
        try GranaryProcess.run(arguments + ["--root", root, "--repo", repo], environment: server.environment())
    }

    /// `list alice --json`'s `state` of her only archive.
    func state(_ repo: String) throws -> String {
        let list = try granary(["list", Self.alice, "--json"], repo: repo)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [String: Any])
        let archives = try #require(object["archives"] as? [[String: Any]])
        return try #require(archives.first?["state"] as? String, "\(list.stdout)")
    }

    /// The object's size and upload time (in nanoseconds, as granary lists it) on the server.
    func listed(_ key: String) throws -> (size: Int64, uploaded: Int64) {
        let result = try server.rclone([
            "--use-server-modtime", "lsjson", "--no-mimetype", "moto:" + bucket + "/" + key,
        ])
        struct Item: Decodable {
            let Size: Int64
            let ModTime: String
        }
        let item = try #require(try JSONDecoder().decode([Item].self, from: Data(result.stdout.utf8)).first)
        let date = try #require(ISO8601DateFormatter().date(from: String(item.ModTime.prefix(19)) + "Z"))
        let fraction = item.ModTime.dropFirst(20).prefix { $0.isNumber }
        let nanos = Int64((fraction + String(repeating: "0", count: max(0, 9 - fraction.count))).prefix(9)) ?? 0
        return (item.Size, Int64(date.timeIntervalSince1970) * 1_000_000_000 + nanos)
    }

    /// Puts `file` in the object `key`'s place (whatever rclone thinks of the object there), then
    /// writes the new object's upload time into the archive's record, as if the new object had
    /// been uploaded in the same second as the one the record was written for.
    func replace(_ key: String, with file: String) throws {
        let before = try listed(key)
        let uploaded = try server.rclone(["copyto", "--ignore-times", file, "moto:" + bucket + "/" + key])
        #expect(uploaded.status == 0, "\(uploaded.stderr)")
        let after = try listed(key)
        #expect(after.size == before.size)
        let slash = try #require(key.lastIndex(of: "/"))
        let sidecar = String(key[...slash]) + "." + key[key.index(after: slash)...] + ".verify.json"
        let local = folder.child("record.json")
        let fetched = try server.rclone(["copyto", "moto:" + bucket + "/" + sidecar, local])
        #expect(fetched.status == 0, "\(fetched.stderr)")
        let text = try String(contentsOfFile: local, encoding: .utf8)
        let stamp = "\"archiveModified\" : \(before.uploaded)"
        #expect(text.contains(stamp) && text.contains("\"archiveIdentity\" : \"md5:"), "\(text) \(before)")
        try Data(text.replacingOccurrences(of: stamp, with: "\"archiveModified\" : \(after.uploaded)").utf8).write(
            to: URL(fileURLWithPath: local))
        let put = try server.rclone(["copyto", "--ignore-times", local, "moto:" + bucket + "/" + sidecar])
        #expect(put.status == 0, "\(put.stderr)")
        unlink(local)
    }

    /// Downloads `key` to `file`.
    func download(_ key: String, to file: String) throws {
        let result = try server.rclone(["copyto", "moto:" + bucket + "/" + key, file])
        #expect(result.status == 0, "\(result.stderr)")
    }

    /// The key of alice's only archive (under `prefix`).
    func archiveKey(_ prefix: String) throws -> String {
        let names = try server.objects(bucket + "/" + prefix).keys.filter {
            $0.hasPrefix(Self.alice + "/") && $0.hasSuffix(".tar")
        }
        #expect(names.count == 1, "\(names)")
        return prefix + "/" + (try #require(names.first))
    }

    @Test(
        "a good verify record of an S3 archive does not vouch for a damaged object of the same size and upload second put in its place"
    )
    func goodRecordDamagedObject() throws {
        let repo = initializedRepository("s3:\(bucket)/damaged", environment: server.environment())
        #expect(try granary(["backup", Self.alice, "--compression", "none"], repo: repo).status == 0)
        let key = try archiveKey("damaged")
        let verified = try granary(["verify", "--all"], repo: repo)
        #expect(verified.status == 0, "\(verified.stdout) \(verified.stderr)")
        #expect(try state(repo) == "restorable-verified")
        let damaged = folder.child("damaged.tar")
        try download(key, to: damaged)
        try VerifyRecordIdentityTests.damage(damaged)
        try replace(key, with: damaged)
        #expect(try state(repo) == "unverified")
        let check = try granary(["check", Self.alice], repo: repo)
        let said = check.stdout + check.stderr
        #expect(said.contains("another file"), "\(said)")
        let again = try granary(["verify", "--all"], repo: repo)
        #expect(again.status == 65, "\(again.stdout) \(again.stderr)")
        #expect(try state(repo) == "bad")
    }

    @Test(
        "a bad verify record of an S3 archive does not outlive a good copy of the same size and upload second put over the damaged object"
    )
    func badRecordGoodCopy() throws {
        let repo = initializedRepository("s3:\(bucket)/copies", environment: server.environment())
        #expect(try granary(["backup", Self.alice, "--compression", "none"], repo: repo).status == 0)
        let key = try archiveKey("copies")
        let good = folder.child("good.tar"), damaged = folder.child("damaged.tar")
        try download(key, to: good)
        try download(key, to: damaged)
        try VerifyRecordIdentityTests.damage(damaged)
        let uploaded = try server.rclone(["copyto", "--ignore-times", damaged, "moto:" + bucket + "/" + key])
        #expect(uploaded.status == 0, "\(uploaded.stderr)")
        let bad = try granary(["verify", "--all"], repo: repo)
        #expect(bad.status == 65, "\(bad.stdout) \(bad.stderr)")
        #expect(try state(repo) == "bad")
        // The good copy back, same size, in the second of the bad record.
        try replace(key, with: good)
        #expect(try state(repo) == "unverified")
        let check = try granary(["check", Self.alice], repo: repo)
        let said = check.stdout + check.stderr
        #expect(said.contains("another file") && !said.contains("found bad"), "\(said)")
        let verified = try granary(["verify", "--all"], repo: repo)
        #expect(verified.status == 0, "\(verified.stdout) \(verified.stderr)")
        #expect(try state(repo) == "restorable-verified")
    }
}
