import Foundation
import GranaryDigest
import GranaryKit
import GranaryTestSupport
import Testing

/// A restore's or a reset's safety archive is a delta on the user's newest backup when that backup
/// is a sound base (the test `backup --delta` makes), and a full otherwise; an undo puts the
/// replaced stores back byte for byte either way, and prune keeps a safety delta's chain. The
/// built binary over granary-sample's users (alice: a WAL store; bob: a rollback Core Data store
/// with external data).
@Suite("safety archives as deltas")
struct SafetyDeltaTests {
    static let alice = DeltaOperatorTests.alice
    static let bob = DeltaOperatorTests.bob

    /// SHA-256 of every regular file under the user's folder (stores, external data), by path
    /// relative to it; a store's `-wal`, `-shm` and `-journal` aside (each store is checkpointed
    /// first, so the database file holds its whole state).
    static func fingerprint(_ site: DeltaOperatorTests.Site, _ user: String) throws -> [String: String] {
        let folder = site.root + "/" + user
        var result: [String: String] = [:]
        let enumerator = try #require(FileManager.default.enumerator(atPath: folder))
        while let relative = enumerator.nextObject() as? String {
            let path = folder + "/" + relative
            guard FileSystem.isRegularFile(path),
                !["-wal", "-shm", "-journal"].contains(where: { relative.hasSuffix($0) })
            else { continue }
            result[relative] = try FileDigest.of(path).sha256
        }
        return result
    }

    /// Checkpoints every store of the user (TRUNCATE: the `-wal` emptied into the database).
    static func checkpoint(_ site: DeltaOperatorTests.Site, _ user: String) throws {
        for name in FileSystem.contents(of: site.root + "/" + user) where name.hasSuffix(".sqlite") {
            try Database(path: site.root + "/\(user)/\(name)", mode: .readWrite).execute(
                "PRAGMA wal_checkpoint(TRUNCATE)")
        }
    }

    /// Changes a few pages of the user's store.
    static func change(_ site: DeltaOperatorTests.Site, _ user: String, _ step: Int) throws {
        if user == alice {
            try site.change(step)
        } else {
            try Database(path: site.root + "/\(bob)/Notes.sqlite", mode: .readWrite).execute(
                "UPDATE ZNOTE SET ZTITLE = 'step \(step)' WHERE Z_PK = 1")
        }
    }

    /// `list USER --json`'s entry for `name`.
    /// (`status`: 65 when an archive of the user was found bad.)
    static func listed(_ site: DeltaOperatorTests.Site, _ user: String, _ name: String, status: Int32 = 0) throws
        -> [String: Any]
    {
        let list = try site.granary(["list", user, "--json"])
        #expect(list.status == status, "\(list.stderr)")
        let archives = try #require(try DeltaOperatorTests.json(list.stdout)["archives"] as? [[String: Any]])
        return try #require(archives.first { $0["name"] as? String == name }, "\(list.stdout)")
    }

    @Test(
        "a restore over a sound newest backup keeps a delta safety archive (list says so), and an undo puts the replaced stores back byte for byte"
    )
    func restoreKeepsADelta() throws {
        let site = try DeltaOperatorTests.Site()
        for user in [Self.alice, Self.bob] {
            let full = try site.backup(user)
            try Self.change(site, user, 1)
            let newest = try site.backup(user)
            #expect(newest.name.contains("-delta."), "\(newest.name)")
            // What the restore will replace: the newest backup's state and a change after it.
            try Self.change(site, user, 2)
            try Self.checkpoint(site, user)
            let replaced = try Self.fingerprint(site, user)
            let before = Set(site.archives(user))
            let restored = try site.granary(["restore", user])
            #expect(restored.status == 0, "\(restored.stderr)")
            let added = site.archives(user).filter { !before.contains($0) }
            let safety = try #require(added.first, "\(added)")
            #expect(added.count == 1 && safety.contains("-pre-restore-delta."), "\(added)")
            let manifest = try site.manifest(user, safety)
            #expect(manifest.kind == .safety && manifest.isDelta)
            #expect(manifest.delta?.base?.name == newest.name)
            #expect(manifest.restoredFrom == newest.name)
            // Only the changed pages: far fewer than the stores hold.
            let info = try #require(manifest.delta)
            let changed = info.stores.reduce(0) { $0 + ($1.changedPages ?? 0) }
            let pages = info.stores.reduce(0) { $0 + $1.pageCount }
            #expect(changed > 0 && changed * 4 < pages, "\(changed) of \(pages) pages")
            let members = try GranaryProcess.runExecutable(
                "/usr/bin/tar", ["--zstd", "-tf", site.repo + "/\(user)/" + safety])
            #expect(members.stdout.contains(".delta\n") && !members.stdout.contains(".sqlite\n"), "\(members.stdout)")
            let entry = try Self.listed(site, user, safety)
            #expect(entry["type"] as? String == "delta" && entry["base"] as? String == newest.name, "\(entry)")
            #expect(entry["kind"] as? String == "safety", "\(entry)")
            // The safety delta verifies with its chain.
            let verified = try site.granary(["verify", "\(user)/\(safety)"])
            #expect(verified.status == 0, "\(verified.stdout) \(verified.stderr)")
            // An undo rebuilds the safety delta on its chain and puts back exactly what was replaced.
            #expect(try Self.fingerprint(site, user) != replaced)
            let undone = try site.granary(["restore", user, "--undo"])
            #expect(undone.status == 0, "\(undone.stderr)")
            try Self.checkpoint(site, user)
            #expect(try Self.fingerprint(site, user) == replaced)
            // The next backup starts a new chain (the stores were replaced since the newest backup).
            let next = try site.backup(user)
            #expect(!next.name.contains("delta"), "\(next.name)")
            _ = full
        }
    }

    @Test(
        "a restore when the newest backup is not a sound base (found bad, or without page hashes) keeps a full safety archive, which undoes byte for byte"
    )
    func unsoundBaseGivesAFull() throws {
        // The newest backup is a delta whose bytes were damaged, and verify found it bad.
        let site = try DeltaOperatorTests.Site()
        let full = try site.backup(Self.alice)
        try site.change(1)
        let delta = try site.backup(Self.alice)
        let path = site.repo + "/\(Self.alice)/" + delta.name
        let handle = try #require(FileHandle(forUpdatingAtPath: path))
        let size = try handle.seekToEnd()
        try handle.seek(toOffset: size / 2)
        try handle.write(contentsOf: Data(repeating: 0x5A, count: 64))
        try handle.close()
        let bad = try site.granary(["verify", "\(Self.alice)/\(delta.name)"])
        #expect(bad.status == 65, "\(bad.stdout) \(bad.stderr)")
        try site.change(2)
        try Self.checkpoint(site, Self.alice)
        let replaced = try Self.fingerprint(site, Self.alice)
        let before = Set(site.archives(Self.alice))
        let restored = try site.granary(["restore", Self.alice, full.name])
        #expect(restored.status == 0, "\(restored.stderr)")
        let safety = try #require(site.archives(Self.alice).first { !before.contains($0) })
        #expect(safety.contains("-pre-restore.") && !safety.contains("delta"), "\(safety)")
        #expect(try !site.manifest(Self.alice, safety).isDelta)
        #expect(try Self.listed(site, Self.alice, safety, status: 65)["type"] as? String == "full")
        let undone = try site.granary(["restore", Self.alice, "--undo"])
        #expect(undone.status == 0, "\(undone.stderr)")
        try Self.checkpoint(site, Self.alice)
        #expect(try Self.fingerprint(site, Self.alice) == replaced)

        // Backups without page hashes (deltas off): a plain full, as before.
        let plain = try DeltaOperatorTests.Site(config: "")
        _ = try plain.backup(Self.bob)
        try Self.change(plain, Self.bob, 1)
        let reset = try plain.granary(["reset", Self.bob, "--yes"])
        #expect(reset.status == 0, "\(reset.stderr)")
        let names = plain.archives(Self.bob)
        #expect(names.contains { $0.contains("-pre-reset.") } && !names.contains { $0.contains("delta") }, "\(names)")
    }

    @Test(
        "prune keeps a safety delta's chain while the safety archive is kept (and delete refuses its base); once it expires, the chain goes"
    )
    func pruneKeepsTheChain() throws {
        let site = try DeltaOperatorTests.Site()
        let full = try site.backup(Self.alice)
        try site.change(1)
        let delta = try site.backup(Self.alice)
        try site.change(2)
        try Self.checkpoint(site, Self.alice)
        let replaced = try Self.fingerprint(site, Self.alice)
        #expect(try site.granary(["restore", Self.alice]).status == 0)
        let safety = try #require(site.archives(Self.alice).first { $0.contains("-pre-restore-delta.") })
        try site.change(3)
        let newest = try site.backup(Self.alice)
        #expect(!newest.name.contains("delta"))
        // keep-last 1 keeps the newest full; the safety delta keeps its base and that base's full.
        let pruned = try site.granary(["prune", Self.alice, "--keep-last", "1"])
        #expect(pruned.status == 0, "\(pruned.stderr)")
        #expect(site.archives(Self.alice) == [full.name, delta.name, safety, newest.name].sorted())
        let refused = try site.granary(["delete", "\(Self.alice)/\(delta.name)"])
        #expect(refused.status != 0 && refused.stderr.contains(safety), "\(refused.stderr)")
        let undone = try site.granary(["restore", Self.alice, "--undo"])
        #expect(undone.status == 0, "\(undone.stderr)")
        try Self.checkpoint(site, Self.alice)
        #expect(try Self.fingerprint(site, Self.alice) == replaced)
        // Safety archives kept for no time: the safety delta goes, and its chain with it.
        let config = site.site.folder.child("short.toml")
        try "delta = true\n[retention]\nsafety_keep_within = \"1s\"\n".write(
            toFile: config, atomically: true, encoding: .utf8)
        Thread.sleep(forTimeInterval: 1.1)
        let expired = try site.site.granary(["prune", Self.alice, "--keep-last", "1", "--config", config])
        #expect(expired.status == 0, "\(expired.stderr)")
        let left = site.archives(Self.alice)
        #expect(!left.contains(safety) && !left.contains(delta.name) && !left.contains(full.name), "\(left)")
    }
}
