import Foundation
import Testing

@testable import GranaryKit

/// The members of delta archives (issue 35) on real SQLite files: `.pages`, `.delta`, the state
/// digest, and what a damaged member is told apart by.
@Suite("page hashes and page deltas")
struct PageFilesTests {
    /// A WAL-free database of `rows` rows of 600 bytes at `path`, checkpointed into its file.
    static func store(_ path: String, rows: Int, vacuum: Bool = false) throws {
        let db = try Database(path: path, mode: .create)
        try db.execute("CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, body BLOB)")
        try db.execute(
            "INSERT INTO t(body) SELECT randomblob(600) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < \(rows)) SELECT x FROM c)"
        )
        if vacuum {
            try db.execute("DELETE FROM t WHERE id % 3 <> 0")
            try db.execute("VACUUM")
        }
    }

    static func bytes(_ path: String) -> Data { FileManager.default.contents(atPath: path) ?? Data() }

    @Test(
        "a delta between two states of a store, applied to the first, gives the second byte for byte (growth and shrink)"
    )
    func roundTrip() throws {
        let folder = TemporaryFolder()
        for (rows, vacuum) in [(300, false), (0, true)] {
            let base = folder.child("base-\(rows).db")
            let now = folder.child("now-\(rows).db")
            try Self.store(base, rows: 500)
            try FileManager.default.copyItem(atPath: base, toPath: now)
            try Self.store(now, rows: rows, vacuum: vacuum)
            let basePages = folder.child("base-\(rows).pages")
            let nowPages = folder.child("now-\(rows).pages")
            let before = try PageFiles.hash(file: base, pageSize: 4096, writingTo: basePages)
            let after = try PageFiles.hash(file: now, pageSize: 4096, writingTo: nowPages)
            #expect(before.stateDigest != after.stateDigest)
            #expect(try PageFiles.summary(ofPages: nowPages) == after)
            let delta = folder.child("now-\(rows).delta")
            let changed = try PageChanges.write(snapshot: now, current: nowPages, base: basePages, to: delta)
            #expect(changed > 0 && changed <= after.pageCount)
            #expect(try PageChanges.check(delta, against: nowPages).changed == changed)
            let target = folder.child("target-\(rows).db")
            try FileManager.default.copyItem(atPath: base, toPath: target)
            let header = try PageChanges.apply(delta, to: target, pageSize: 4096)
            #expect(header.pageCount == after.pageCount)
            #expect(Self.bytes(target) == Self.bytes(now), vacuum ? "shrink" : "growth")
            #expect(try PageFiles.hash(file: target, pageSize: 4096).stateDigest == after.stateDigest)
        }
    }

    @Test("a delta of a store against itself carries no page")
    func unchanged() throws {
        let folder = TemporaryFolder()
        let store = folder.child("s.db")
        try Self.store(store, rows: 50)
        let pages = folder.child("s.pages")
        try PageFiles.hash(file: store, pageSize: 4096, writingTo: pages)
        let delta = folder.child("s.delta")
        #expect(try PageChanges.write(snapshot: store, current: pages, base: pages, to: delta) == 0)
        #expect(Self.bytes(delta).count == PageFiles.deltaHeader)
    }

    @Test(
        "damaged members are refused: a page that is not the one hashed, pages out of order, a cut file, a wrong magic")
    func damage() throws {
        let folder = TemporaryFolder()
        let base = folder.child("base.db")
        let now = folder.child("now.db")
        try Self.store(base, rows: 100)
        try FileManager.default.copyItem(atPath: base, toPath: now)
        try Self.store(now, rows: 100)
        let basePages = folder.child("base.pages")
        let nowPages = folder.child("now.pages")
        try PageFiles.hash(file: base, pageSize: 4096, writingTo: basePages)
        try PageFiles.hash(file: now, pageSize: 4096, writingTo: nowPages)
        let delta = folder.child("now.delta")
        let changed = try PageChanges.write(snapshot: now, current: nowPages, base: basePages, to: delta)
        try #require(changed >= 2)
        let good = [UInt8](Self.bytes(delta))
        func refused(_ bytes: [UInt8], _ words: String) throws {
            let path = folder.child("bad.delta")
            try? FileSystem.removeFile(path)
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            do {
                _ = try PageChanges.check(path, against: nowPages)
                Issue.record("accepted: \(words)")
            } catch let error as DeltaError {
                #expect(error.description.contains(words), "\(error)")
            }
        }
        var flipped = good
        flipped[PageFiles.deltaHeader + 8 + 100] ^= 0x01
        try refused(flipped, "with another hash than its .pages lists")
        // The first two records swapped: page numbers no longer increase.
        let record = 8 + 4096
        var swapped = good
        let first = Array(good[PageFiles.deltaHeader..<PageFiles.deltaHeader + record])
        let second = Array(good[PageFiles.deltaHeader + record..<PageFiles.deltaHeader + 2 * record])
        swapped.replaceSubrange(PageFiles.deltaHeader..<PageFiles.deltaHeader + 2 * record, with: second + first)
        try refused(swapped, "after page")
        try refused(Array(good.dropLast(10)), "bytes for \(changed) pages")
        var magic = good
        magic[0] = 0x58
        try refused(magic, "is not a page-delta file")
        // A .pages file of the wrong length.
        let pages = [UInt8](Self.bytes(nowPages))
        try Data(pages.dropLast(1)).write(to: URL(fileURLWithPath: folder.child("cut.pages")))
        #expect(throws: DeltaError.self) { try PageFiles.summary(ofPages: folder.child("cut.pages")) }
    }

    @Test("a file that is not whole pages has no page hashes")
    func notPages() throws {
        let folder = TemporaryFolder()
        let path = folder.child("odd")
        try Data(repeating: 1, count: 5000).write(to: URL(fileURLWithPath: path))
        #expect(throws: DeltaError.notPages(path: path, size: 5000, pageSize: 4096)) {
            try PageFiles.hash(file: path, pageSize: 4096)
        }
    }
}
