import Foundation
import GranaryTestSupport
import Testing

@testable import GranaryKit

/// Phase 2's own check (`check: pages`, ``PageCheck``): every page of real SQLite stores (tables,
/// indexes, overflow chains, freeblocks, a freelist; several page sizes) passes, and a page damaged
/// the ways SQLite's quick_check reports fails with the page and what is wrong.
@Suite("delta phase 2: the changed pages checked alone")
struct PageCheckTests {
    let folder = TemporaryFolder("granary-pagecheck")

    /// A store of `pageSize`-byte pages with every kind of page, in rollback mode (its file holds
    /// every page): its bytes.
    func store(pageSize: Int) throws -> [UInt8] {
        let path = folder.child("store-\(pageSize).sqlite")
        let db = try Database(path: path, mode: .create)
        try db.execute("PRAGMA page_size=\(pageSize)")
        try db.execute("CREATE TABLE items(id INTEGER PRIMARY KEY, body TEXT NOT NULL, tag TEXT)")
        try db.execute("CREATE INDEX items_tag ON items(tag)")
        try db.execute("CREATE TABLE words(word TEXT PRIMARY KEY, n INTEGER) WITHOUT ROWID")
        try db.execute("BEGIN")
        for id in 0..<3000 {
            // Small rows, and every 50th with a body larger than a page (an overflow chain).
            let size = id % 50 == 0 ? pageSize * 3 : 40 + id % 200
            try db.run(
                "INSERT INTO items(body, tag) VALUES (hex(randomblob(\(size / 2))), 'tag-' || \(id % 97) || hex(randomblob(\(id % 30))))"
            )
            try db.run("INSERT INTO words(word, n) VALUES (hex(randomblob(\(4 + id % 40))), \(id))")
        }
        try db.execute("COMMIT")
        // Freeblocks and fragments inside pages, and freelist pages.
        try db.execute("DELETE FROM items WHERE id % 7 = 0 OR (id > 2000 AND id < 2400)")
        try db.execute("UPDATE items SET body = hex(randomblob(30)) WHERE id % 11 = 0")
        try db.execute("DELETE FROM words WHERE n % 5 = 0")
        let freelist = try db.scalar("PRAGMA freelist_count")?.integer ?? 0
        #expect(freelist > 0, "a freelist to check")
        let problems = db.integrityCheck(full: true)
        #expect(problems == [Database.sound])
        return Array(try Data(contentsOf: URL(fileURLWithPath: path)))
    }

    func problems(_ bytes: [UInt8], pageSize: Int) -> [String] {
        let count = bytes.count / pageSize
        var found: [String] = []
        bytes.withUnsafeBytes { all in
            for page in 0..<count {
                let slice = UnsafeRawBufferPointer(rebasing: all[page * pageSize..<(page + 1) * pageSize])
                if let why = PageCheck.problem(page: page, slice, usable: pageSize, pageCount: count) {
                    found.append("page \(page + 1): \(why)")
                }
            }
        }
        return found
    }

    /// The first page (index from 0) of `kind` with at least `cells` cells.
    func first(_ kind: UInt8, cells: Int, in bytes: [UInt8], pageSize: Int) throws -> Int {
        try #require(
            (1..<bytes.count / pageSize).first {
                bytes[$0 * pageSize] == kind
                    && Int(bytes[$0 * pageSize + 3]) << 8 | Int(bytes[$0 * pageSize + 4]) >= cells
            })
    }

    func problem(_ bytes: [UInt8], page: Int, pageSize: Int) -> String? {
        bytes.withUnsafeBytes {
            PageCheck.problem(
                page: page, UnsafeRawBufferPointer(rebasing: $0[page * pageSize..<(page + 1) * pageSize]),
                usable: pageSize, pageCount: bytes.count / pageSize)
        }
    }

    @Test("every page of sound stores passes", arguments: [512, 1024, 4096, 65536])
    func soundStores(pageSize: Int) throws {
        let bytes = try store(pageSize: pageSize)
        #expect(problems(bytes, pageSize: pageSize) == [])
    }

    @Test(
        "a cell pointer outside the page, two cells on one byte, a child or overflow page past the end, fragments miscounted: each found"
    )
    func damagedPages() throws {
        let pageSize = 4096
        let bytes = try store(pageSize: pageSize)
        let count = bytes.count / pageSize
        let leaf = try first(13, cells: 2, in: bytes, pageSize: pageSize)
        let base = leaf * pageSize
        #expect(problem(bytes, page: leaf, pageSize: pageSize) == nil)
        // A cell pointer past the usable size.
        var damaged = bytes
        damaged[base + 8] = 0x1F
        damaged[base + 9] = 0xF0
        #expect(problem(damaged, page: leaf, pageSize: pageSize)?.contains("cell 0") == true)
        // The second cell pointer made the first's: two cells share bytes.
        damaged = bytes
        damaged[base + 10] = bytes[base + 8]
        damaged[base + 11] = bytes[base + 9]
        #expect(problem(damaged, page: leaf, pageSize: pageSize) != nil)
        // More cells than the pointer array has room for before the content area.
        damaged = bytes
        damaged[base + 3] = 0x7F
        #expect(problem(damaged, page: leaf, pageSize: pageSize) != nil)
        // The fragmented-bytes count off by one.
        damaged = bytes
        damaged[base + 7] = bytes[base + 7] &+ 1
        #expect(problem(damaged, page: leaf, pageSize: pageSize)?.contains("fragmented") == true)
        // An interior page's right child and a cell's child past the database's end.
        let interior = try first(5, cells: 1, in: bytes, pageSize: pageSize)
        let top = interior * pageSize
        damaged = bytes
        let past = UInt32(count + 3)
        for (i, shift) in [24, 16, 8, 0].enumerated() {
            damaged[top + 8 + i] = UInt8(truncatingIfNeeded: past >> UInt32(shift))
        }
        #expect(problem(damaged, page: interior, pageSize: pageSize)?.contains("right child") == true)
        damaged = bytes
        let cell = Int(bytes[top + 12]) << 8 | Int(bytes[top + 13])
        for (i, shift) in [24, 16, 8, 0].enumerated() {
            damaged[top + cell + i] = UInt8(truncatingIfNeeded: past >> UInt32(shift))
        }
        #expect(problem(damaged, page: interior, pageSize: pageSize)?.contains("child") == true)
        // Page 1 too (its header at 100): a cell pointer into its file header.
        damaged = bytes
        damaged[108] = 0
        damaged[109] = 10
        #expect(problem(damaged, page: 0, pageSize: pageSize) != nil)
        // A page that is no b-tree page and names a page past the end.
        damaged = bytes
        for i in 0..<4 { damaged[base + i] = 0x7F }
        #expect(problem(damaged, page: leaf, pageSize: pageSize)?.contains("next page") == true)
    }

    @Test("a store with auto_vacuum is checked the configured way")
    func autoVacuum() throws {
        let path = folder.child("auto.sqlite")
        let db = try Database(path: path, mode: .create)
        try db.execute("PRAGMA auto_vacuum=FULL")
        try db.execute("CREATE TABLE t(x)")
        let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
        let plain = try store(pageSize: 4096)
        bytes.withUnsafeBytes { #expect(PageCheck.applies(pageOne: $0, pageCount: 2)?.contains("auto_vacuum") == true) }
        plain.withUnsafeBytes { #expect(PageCheck.applies(pageOne: $0, pageCount: 2) == nil) }
    }
}
