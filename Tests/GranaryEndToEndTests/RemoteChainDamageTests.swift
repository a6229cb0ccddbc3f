import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

/// A damaged delta chain on a remote primary, and on two hosts with a mirror: the
/// damage cases of `DeltaChainDamageTests` that a remote repository can suffer (a link removed,
/// another archive put under its name), on a real S3 server through rclone, with and without the
/// page-hash cache. The next `backup --delta` writes a full and says why; `check` and `verify
/// --latest` are red until then, then green; no delta on a broken chain reaches the mirror.
@Suite(
    "delta chains on a remote primary and a mirror: damage is never built on, and never green", .serialized,
    .enabled(if: S3Server.available, S3Server.unavailableReason))
struct RemoteChainDamageTests {
    static let alice = DeltaOperatorTests.alice
    let folder = TemporaryFolder("granary-remote-chain")
    var root: String { folder.child("root") }
    var config: String { folder.child("config.toml") }
    let bucket: String
    let server: S3Server
    var primary: String { "s3:\(bucket)/primary" }
    var mirror: String { "s3:\(bucket)/mirror" }
    /// Every archive of a test in one second, in the order taken, without waiting for the clock.
    static let clock = ["GRANARY_TEST_NOW": testSecond]

    init() throws {
        (server, bucket) = try RemoteRepositoryTests.serverAndBucket("c")
        try FileSystem.makeDirectory(root + "/" + Self.alice)
        try SampleData.makeItemsStore(root + "/" + Self.alice + "/Local.sqlite", rows: 60, walOnlyTail: 0)
    }

    func writeConfig(repo: String, mirror: String? = nil) throws {
        for location in [repo] + (mirror.map { [$0] } ?? []) {
            initializedRepository(location, environment: server.environment())
        }
        var text = "repo = \"\(repo)\"\ndelta = true\n"
        if let mirror { text += "\n[[mirror]]\nrepo = \"\(mirror)\"\n" }
        try text.write(toFile: config, atomically: true, encoding: .utf8)
    }

    func granary(_ arguments: [String], host: String? = nil, repo: String? = nil) throws -> GranaryProcess.Result {
        var arguments = arguments + ["--root", root, "--config", config]
        if let host { arguments += ["--host", host] }
        if let repo { arguments += ["--repo", repo] }
        return try GranaryProcess.run(arguments, environment: server.environment().merging(Self.clock) { $1 })
    }

    func change(_ step: Int) throws {
        try Database(path: root + "/\(Self.alice)/Local.sqlite", mode: .readWrite).execute(
            "UPDATE items SET body = 'step \(step)' WHERE id = 3")
    }

    /// The archive names of alice under `prefix` of the bucket, straight from the server, oldest first.
    func archives(_ prefix: String) throws -> [String] {
        try server.objects(bucket + "/" + prefix).keys.filter {
            $0.hasPrefix(Self.alice + "/2") && !$0.contains("/.")
        }.map { String($0.dropFirst(Self.alice.count + 1)) }.sorted()
    }

    /// Backs up alice (`host`'s); returns the archive added to `prefix` and the run's JSON.
    func backup(_ prefix: String, host: String? = nil) throws -> (
        name: String, json: [String: Any], run: GranaryProcess.Result
    ) {
        let before = Set(try archives(prefix))
        let run = try granary(["backup", Self.alice, "--json"], host: host)
        let added = try archives(prefix).filter { !before.contains($0) }
        #expect(added.count == 1, "\(added) \(run.stderr)")
        let json = (try? JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any]) ?? [:]
        return (added.first ?? "", json, run)
    }

    static func delta(_ json: [String: Any]) -> [String: Any] {
        ((json["users"] as? [[String: Any]])?.first?["delta"] as? [String: Any]) ?? [:]
    }

    /// The page-hash cache the primary keeps for alice (in root's work folder, the primary's own).
    func dropCache() {
        let cache = PageHashCache.folder(workFolder: RcloneRepository.rootWorkFolder, location: primary)
        #expect(FileManager.default.fileExists(atPath: cache + "/" + Self.alice), "no cache at \(cache)")
        FileSystem.removeTree(cache + "/" + Self.alice)
    }

    @Test(
        "s3 primary: a middle link removed, or replaced by another archive, with and without the cache: check and verify red naming it, the next backup --delta a full that says why, then green",
        arguments: ["remove", "replace"], [true, false])
    func damagedRemoteChain(damage: String, cache: Bool) throws {
        try writeConfig(repo: primary)
        let full = try backup("primary").name
        try change(1)
        let middle = try backup("primary").name
        try change(2)
        let tip = try backup("primary").name
        #expect(middle.contains("-delta") && tip.contains("-delta"), "\(full) \(middle) \(tip)")
        let before = try granary(["check", Self.alice])
        #expect(before.status == 0, "\(before.stdout) \(before.stderr)")

        let object = "moto:\(bucket)/primary/\(Self.alice)/"
        if damage == "remove" {
            #expect(try server.rclone(["deletefile", object + middle]).status == 0)
        } else {
            #expect(try server.rclone(["copyto", object + full, object + middle]).status == 0)
        }
        if !cache { dropCache() }

        let red = try granary(["check", Self.alice])
        #expect(red.status == 1, "\(damage): \(red.stdout)")
        #expect(red.stdout.contains(middle), "\(damage): \(red.stdout)")
        let verify = try granary(["verify", "--all", "--latest"])
        #expect(verify.status == 65, "\(damage): \(verify.stdout) \(verify.stderr)")
        #expect(verify.stderr.contains(middle), "\(damage): \(verify.stderr)")

        try change(3)
        let next = try backup("primary")
        #expect(!next.name.contains("-delta"), "\(damage) (cache \(cache)): \(next.run.stdout)")
        let why = Self.delta(next.json)["reason"] as? String ?? ""
        #expect(why.contains(middle), "\(damage) (cache \(cache)): \(why)")

        #expect(try granary(["check", Self.alice]).status == 0)
        let green = try granary(["verify", "--all", "--latest"])
        #expect(green.status == 0, "\(damage): \(green.stdout) \(green.stderr)")
        try change(4)
        let after = try backup("primary")
        #expect(after.name.contains("-delta"), "\(after.run.stdout)")
        #expect(try granary(["verify", "--all", "--latest"]).status == 0)
    }

    @Test(
        "two hosts, a shared primary and a mirror: a middle link removed from both; backup --delta writes a full and says why, no delta on the broken chain reaches the mirror; sync and check red until then, then green"
    )
    func twoHostsWithAMirror() throws {
        let shared = folder.child("repo")
        try writeConfig(repo: shared, mirror: mirror)
        func local() -> [String] {
            FileSystem.contents(of: shared + "/" + Self.alice).filter { !$0.hasPrefix(".") }.sorted()
        }
        func backupLocal(host: String) throws -> (name: String, json: [String: Any], run: GranaryProcess.Result) {
            let before = Set(local())
            let run = try granary(["backup", Self.alice, "--json"], host: host)
            #expect(run.status == 0, "\(host): \(run.stderr)")
            let added = local().filter { !before.contains($0) }
            #expect(added.count == 1, "\(added)")
            let json = (try? JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any]) ?? [:]
            return (added.first ?? "", json, run)
        }
        // An archive of web-2's, then web-1's chain F ← D1 ← D2 beside it.
        _ = try backupLocal(host: "web-2")
        let full = try backupLocal(host: "web-1").name
        try change(1)
        let middle = try backupLocal(host: "web-1").name
        try change(2)
        let tip = try backupLocal(host: "web-1").name
        #expect(middle.contains("-delta") && tip.contains("-delta"), "\(full) \(middle) \(tip)")
        #expect(try archives("mirror") == local(), "the mirror has what the repository has")
        #expect(try granary(["check", Self.alice], host: "web-1").status == 0)

        // The middle link removed from the repository and the mirror.
        try FileSystem.removeFile(shared + "/" + Self.alice + "/" + middle)
        #expect(try server.rclone(["deletefile", "moto:\(bucket)/mirror/\(Self.alice)/\(middle)"]).status == 0)

        let damaged = Set(local())
        let red = try granary(["check", Self.alice], host: "web-1")
        #expect(red.status == 1, "\(red.stdout)")
        #expect(red.stdout.contains(middle), "\(red.stdout)")
        let sync = try granary(["sync"], host: "web-1")
        #expect(sync.status != 0, "\(sync.stdout) \(sync.stderr)")
        #expect((sync.stdout + sync.stderr).contains(middle), "\(sync.stdout) \(sync.stderr)")
        #expect(try granary(["verify", "--all", "--latest"], host: "web-1").status == 65)

        // Two more backups of web-1: the first a full that says why, the second a delta on it.
        try change(3)
        let next = try backupLocal(host: "web-1")
        #expect(!next.name.contains("-delta"), "\(next.run.stdout)")
        #expect((Self.delta(next.json)["reason"] as? String ?? "").contains(middle), "\(next.run.stdout)")
        try change(4)
        let after = try backupLocal(host: "web-1")
        #expect(after.name.contains("-delta"), "\(after.run.stdout)")
        // No delta on the broken chain was sent: what reached the mirror since is the full and the
        // delta on it.
        let mirrored = try archives("mirror")
        #expect(mirrored.filter { !damaged.contains($0) } == [next.name, after.name], "\(mirrored)")
        #expect(
            try ArchiveHead(file: shared + "/" + Self.alice + "/" + after.name).manifest.delta?.base?.name == next.name)

        #expect(try granary(["check", Self.alice], host: "web-1").status == 0)
        let synced = try granary(["sync"], host: "web-1")
        #expect(synced.status == 0, "\(synced.stdout) \(synced.stderr)")
        #expect(try granary(["verify", "--all", "--latest"], host: "web-1").status == 0)
    }
}
