import Foundation
import GranaryDigest
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A delta's `.delta` members are applied to the staged store as they stream out of the archive
/// (issue 35, `DeltaRestore`/`StreamedPages`): with the built binary, over real archives, a member
/// whose structure is wrong (its size and SHA-256 made to agree with the manifest, so that only
/// the structure can tell) is refused with 65 and nothing live changes; chains that grow and
/// shrink the store rebuild it exactly.
@Suite("delta restore, streamed")
struct DeltaRestoreStreamTests {
    static let alice = "alice@example.com"
    static let record = 8 + 4096

    /// The members of a small archive, in order, with their bytes (folders with none).
    struct Member {
        var name: String
        var kind: ArchiveEntry.Kind
        var bytes: [UInt8]
    }

    static func members(of path: String) throws -> [Member] {
        let reader = try ArchiveReader(path: path)
        var members: [Member] = []
        while let entry = try reader.next() {
            let bytes = entry.kind == .regular ? try reader.readAll(limit: 1 << 30) : []
            members.append(Member(name: entry.name, kind: entry.kind, bytes: bytes))
        }
        return members
    }

    /// Rewrites the archive at `path` with `change` applied to the bytes of `member`, and its
    /// manifest's size and SHA-256 of that member made to agree: only a check of the member's
    /// structure can find what changed.
    /// With `agree` false, the manifest's bytes are kept as they were (a delta built on the
    /// archive still names it by their SHA-256).
    static func rewrite(_ path: String, member: String, agree: Bool = true, _ change: (inout [UInt8]) -> Void)
        throws
    {
        var members = try members(of: path)
        let index = try #require(members.firstIndex { $0.name == member })
        change(&members[index].bytes)
        var manifest = try Manifest.decode(members[0].bytes, source: path)
        let entry = try #require(manifest.files.firstIndex { $0.path == member })
        manifest.files[entry].size = Int64(members[index].bytes.count)
        manifest.files[entry].sha256 = SHA256.hash(data: members[index].bytes).hex
        let temporary = path + ".rewritten"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        #expect(fd >= 0)
        let writer = try ArchiveWriter(fileDescriptor: fd, path: temporary, compression: .zstd)
        if agree {
            try writer.addManifest(manifest)
        } else {
            try writer.addData(member: Manifest.memberName, bytes: members[0].bytes)
        }
        for item in members.dropFirst() {
            if item.kind == .directory {
                try writer.addDirectory(member: item.name)
            } else {
                try writer.addData(member: item.name, bytes: item.bytes)
            }
        }
        try writer.finish()
        close(fd)
        #expect(rename(temporary, path) == 0)
    }

    /// What proves the live folder untouched: each file's inode and bytes.
    static func state(of folder: String) throws -> [String: String] {
        var state: [String: String] = [:]
        for name in FileSystem.contents(of: folder) {
            let path = folder + "/" + name
            guard let info = FileSystem.status(path) else { continue }
            let bytes = FileManager.default.contents(atPath: path).map { SHA256.hash(data: $0).hex } ?? "folder"
            state[name] = "\(info.st_ino) \(bytes)"
        }
        return state
    }

    /// Changes rows spread over the store, so that its delta carries several pages.
    static func spreadChange(_ store: String, _ step: Int) throws {
        try Database(path: store, mode: .readWrite).execute(
            "UPDATE items SET body = 'changed \(step) ' || id WHERE id % 7 = \(step % 7)")
    }

    @Test(
        "a .delta member cut short, out of order, out of range, with a wrong header or bytes after its pages (its size and SHA-256 made to agree) is refused with exit 65 by restore and verify, and the live folder is untouched"
    )
    func malformedMembersRefused() throws {
        let site = try SampleSite()
        let folder = site.root + "/\(Self.alice)"
        let store = folder + "/Local.sqlite"
        #expect(try site.granary(["backup", Self.alice, "--delta"]).status == 0)
        try Self.spreadChange(store, 1)
        #expect(try site.granary(["backup", Self.alice, "--delta"]).status == 0)
        let names = site.archives(Self.alice)
        let delta = try #require(names.last { $0.contains("-delta.") })
        let path = site.repo + "/\(Self.alice)/" + delta
        let original = try #require(FileManager.default.contents(atPath: path))
        let member = "stores/Local.sqlite.delta"
        let carried = try #require(try Self.members(of: path).first { $0.name == member }).bytes
        let pages = (carried.count - 28) / Self.record
        #expect(pages >= 3, "the delta carries several pages (\(pages))")
        // The untouched delta restores (into another folder: the live one stays as it is).
        let drill = site.folder.child("drill")
        try FileSystem.makeDirectory(drill)
        #expect(try site.granary(["restore", Self.alice, delta, "--to", drill]).status == 0)
        // Changes the live store after the backup: a restore that committed would undo them.
        try Self.spreadChange(store, 2)

        let cases: [(String, (inout [UInt8]) -> Void, String)] = [
            ("cut short", { $0.removeLast(100) }, "ends after"),
            ("a record missing", { $0.removeLast(Self.record) }, "ends after"),
            (
                "out of order",
                { bytes in
                    let first = Array(bytes[28..<28 + Self.record])
                    bytes.replaceSubrange(28..<28 + Self.record, with: bytes[28 + Self.record..<28 + 2 * Self.record])
                    bytes.replaceSubrange(28 + Self.record..<28 + 2 * Self.record, with: first)
                }, "after page"
            ),
            (
                "out of range",
                { bytes in
                    let last = bytes.count - Self.record
                    for index in 0..<8 { bytes[last + index] = 0x7F }
                }, "after page"
            ),
            ("another page size", { $0[10] = 0x20 }, "states"),
            ("another page count", { $0[19] &+= 1 }, "states"),
            ("bytes after its pages", { $0 += [UInt8](repeating: 1, count: Self.record) }, "bytes after"),
            ("not a delta", { $0[0] = UInt8(ascii: "X") }, "GRDELTA1"),
        ]
        for (what, change, says) in cases {
            try Data(original).write(to: URL(fileURLWithPath: path))
            try Self.rewrite(path, member: member, change)
            let before = try Self.state(of: folder)
            let archives = site.archives(Self.alice)
            let restored = try site.granary(["restore", Self.alice, delta])
            #expect(restored.status == 65, "\(what): \(restored.stdout) \(restored.stderr)")
            #expect(
                restored.stderr.contains(member) && restored.stderr.contains(says), "\(what): \(restored.stderr)")
            #expect(try Self.state(of: folder) == before, "\(what): the live folder changed")
            #expect(site.archives(Self.alice) == archives, "\(what): no safety archive, nothing new")
            let verified = try site.granary(["verify", "\(Self.alice)/\(delta)"])
            #expect(verified.status == 65, "\(what): \(verified.stdout) \(verified.stderr)")
            #expect(verified.stderr.contains(member), "\(what): \(verified.stderr)")
        }
    }

    @Test(
        "a chain whose full has a store byte changed (its manifest kept, so the chain still links) is refused with exit 65 by restore and verify --chain: the full's pages are hashed as they stream in"
    )
    func damagedFullRefused() throws {
        let site = try SampleSite()
        let folder = site.root + "/\(Self.alice)"
        let store = folder + "/Local.sqlite"
        #expect(try site.granary(["backup", Self.alice, "--delta"]).status == 0)
        try Self.spreadChange(store, 1)
        #expect(try site.granary(["backup", Self.alice, "--delta"]).status == 0)
        let names = site.archives(Self.alice)
        #expect(names.count == 2 && names[1].contains("-delta."), "\(names)")
        // A byte of the full's store: refused as the full streams in (its own state digest),
        // whether or not a delta of the chain carries that page.
        try Self.rewrite(site.repo + "/\(Self.alice)/" + names[0], member: "stores/Local.sqlite", agree: false) {
            $0[$0.count - 100] ^= 0x55
        }
        try Self.spreadChange(store, 2)
        let before = try Self.state(of: folder)
        let restored = try site.granary(["restore", Self.alice, names[1]])
        #expect(restored.status == 65, "\(restored.stdout) \(restored.stderr)")
        #expect(
            restored.stderr.contains(names[0]) && restored.stderr.contains("stores/Local.sqlite has state digest"),
            "\(restored.stderr)")
        #expect(try Self.state(of: folder) == before, "the live folder changed")
        let chain = try site.granary(["verify", "\(Self.alice)/\(names[1])", "--chain"])
        #expect(chain.status == 65, "\(chain.stdout) \(chain.stderr)")
        // The full alone fails its own verify too (its member's SHA-256).
        #expect(try site.granary(["verify", "\(Self.alice)/\(names[0])"]).status == 65)
    }

    @Test(
        "a chain of deltas that grows and shrinks the store (auto_vacuum frees pages at the end) restores every link to the live store's .dump at its time, the newest into the live folder"
    )
    func growAndShrink() throws {
        let site = try SampleSite()
        let store = site.root + "/\(Self.alice)/Local.sqlite"
        // A connection for each change, closed at once: the restore at the end finds the store free.
        func execute(_ sql: String) throws { try Database(path: store, mode: .readWrite).execute(sql) }
        // Big enough that no step changes half of its pages (a full, by rule).
        try execute(
            "PRAGMA auto_vacuum = FULL; VACUUM; CREATE TABLE big(id INTEGER PRIMARY KEY, blob BLOB); INSERT INTO items(body, created) SELECT hex(randomblob(500)), 0 FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 6000) SELECT x FROM c)"
        )
        #expect(try site.granary(["backup", Self.alice, "--delta"]).status == 0)
        let steps = [
            "INSERT INTO big(blob) SELECT randomblob(3000) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300) SELECT x FROM c)",
            "DELETE FROM big WHERE id > 100",
            "UPDATE items SET body = body || ' more' WHERE id % 97 = 0",
            "INSERT INTO big(blob) SELECT randomblob(5000) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200) SELECT x FROM c)",
            "DELETE FROM big WHERE id > 100",
        ]
        var made: [(archive: String, dump: String, pages: Int)] = []
        for (index, step) in steps.enumerated() {
            try execute(step)
            let before = Set(site.archives(Self.alice))
            let backup = try site.granary(["backup", Self.alice, "--delta", "--json"])
            #expect(backup.status == 0, "step \(index): \(backup.stderr)")
            let archive = try #require(site.archives(Self.alice).first { !before.contains($0) })
            #expect(archive.contains("-delta."), "step \(index) is a delta: \(backup.stdout.suffix(300))")
            let document = try JSONSerialization.jsonObject(with: Data(backup.stdout.utf8)) as? [String: Any]
            let users = document?["users"] as? [[String: Any]]
            let pages = (users?.first?["delta"] as? [String: Any])?["pages"] as? Int ?? 0
            made.append((archive, try DeltaArchiveTests.dump(store), pages))
        }
        let counts = made.map(\.pages)
        #expect(counts[0] > counts[1] && counts[3] > counts[4], "the store grew and shrank: \(counts)")
        for (index, item) in made.enumerated() {
            let target = site.folder.child("restored-\(index)")
            try FileSystem.makeDirectory(target)
            let restored = try site.granary(["restore", Self.alice, item.archive, "--to", target])
            #expect(restored.status == 0, "\(item.archive): \(restored.stderr)")
            #expect(try DeltaArchiveTests.dump(target + "/Local.sqlite") == item.dump, "\(item.archive)")
        }
        // The newest, into the live folder (nobody has the store open: offline), over later changes.
        try execute("INSERT INTO big(blob) VALUES (randomblob(10000))")
        let live = try site.granary(["restore", Self.alice, "--json"])
        #expect(live.status == 0, "\(live.stderr)")
        #expect(live.stdout.contains(made.last!.archive), "\(live.stdout)")
        #expect(try DeltaArchiveTests.dump(store) == made.last!.dump)
        #expect(try site.granary(["verify", "\(Self.alice)/\(made.last!.archive)", "--chain"]).status == 0)
    }
}
