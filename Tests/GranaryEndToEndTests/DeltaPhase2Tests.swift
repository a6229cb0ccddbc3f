import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Phase 2 of deltas (issue 51, invariant D13): while `granary follow` runs, `backup --delta`
/// hashes only the pages follow saw change; the archive is the one hashing every page gives; and
/// every record that is incomplete or unproven makes the delta hash every page again, saying why.
/// (Debug builds also hash every page phase 2 skips and fail the backup if one changed: every
/// backup here is cross-checked.)
@Suite("delta phase 2: only the pages follow saw change", .serialized)
struct DeltaPhase2Tests {
    let folder = TemporaryFolder("granary-phase2")
    var root: String { folder.child("root") }
    var store: String { root + "/alice/Local.sqlite" }
    let repo: String
    let config: String

    init() throws {
        repo = initializedRepository(folder.child("repo"))
        config = folder.child("config.toml")
        try "delta = true\ncompression = \"none\"\n".write(toFile: config, atomically: true, encoding: .utf8)
        try FileSystem.makeDirectory(root + "/alice")
        // About 1,200 pages: a few rows changed touch a small share of them.
        let db = try Database(path: store, mode: .create)
        try db.execute("PRAGMA journal_mode=WAL")
        try db.execute("CREATE TABLE items(id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
        try db.execute("BEGIN")
        for _ in 0..<4000 { try db.run("INSERT INTO items(body) VALUES (hex(randomblob(500)))") }
        try db.execute("COMMIT")
        try db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        try db.keepWALOnClose()
    }

    /// The owner: a connection kept open, as an app keeps one, its checkpoints left to us.
    func owner() throws -> Database {
        let db = try Database(path: store, mode: .readWrite)
        try db.execute("PRAGMA wal_autocheckpoint=0")
        try db.keepWALOnClose()
        return db
    }

    func change(_ db: Database, rows: ClosedRange<Int>) throws {
        for id in rows { try db.run("UPDATE items SET body = hex(randomblob(500)) WHERE id = \(id * 37 % 4000 + 1)") }
    }

    func granary(_ arguments: [String], repository: String? = nil) throws -> GranaryProcess.Result {
        try GranaryProcess.run(
            arguments + ["--root", root, "--repo", repository ?? repo, "--config", config])
    }

    /// `backup alice --delta --json`: its `delta` object and the archive it wrote.
    func backup(repository: String? = nil) throws -> (delta: [String: Any], archive: String) {
        let run = try granary(["backup", "alice", "--delta", "--json"], repository: repository)
        #expect(run.status == 0, "\(run.stderr)")
        let document = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
        let user = try #require((document["users"] as? [[String: Any]])?.first)
        let delta = try #require(user["delta"] as? [String: Any], "\(run.stdout)")
        return (delta, try #require(user["archive"] as? String))
    }

    func commits() throws -> Int {
        var total = 0
        for generation in FollowCatalogue.generations(in: repo, user: try UserID("alice"), host: nil) {
            for segment in generation.segments { total += try SegmentReader.check(segment.path).1.commits }
        }
        return total
    }

    typealias Follow = FollowProcess

    /// The bytes of `member` in the uncompressed archive at `archive`.
    func member(_ member: String, of archive: String) throws -> Data {
        let out = folder.child("extract-\(UUID().uuidString)")
        try FileSystem.makeDirectory(out)
        let run = try GranaryProcess.runExecutable("/usr/bin/tar", ["-xf", archive, "-C", out, member])
        #expect(run.status == 0, "\(run.stderr)")
        return try Data(contentsOf: URL(fileURLWithPath: out + "/" + member))
    }

    @Test("with follow running, a delta hashes only the pages follow saw change and is the delta every page gives")
    func phase2Taken() throws {
        let follow = try Follow(["--root", root, "--repo", repo, "--config", config], log: folder.child("follow.log"))
        try waitFor("the first generation", follow) {
            !FollowCatalogue.generations(in: repo, user: try UserID("alice"), host: nil).isEmpty
        }
        let db = try owner()
        // Commits follow ships, then a checkpoint and a restart of the -wal, then commits it may
        // not have shipped yet when the backup reads the -wal's tail.
        try change(db, rows: 1...20)
        try waitFor("20 commits shipped", follow) { try commits() >= 20 }
        try db.execute("PRAGMA wal_checkpoint(RESTART)")
        try change(db, rows: 21...30)
        try waitFor("30 commits shipped", follow) { try commits() >= 30 }
        // Stopped, it has shipped all it read; commits after it are only in the -wal (the tail).
        follow.stop()
        try change(db, rows: 31...35)
        // The same state backed up twice on the same base: with follow's segments out of sight
        // (every page hashed; the archive kept aside, then deleted), then with them (phase 2).
        let segments = repo + "/alice/follow"
        #expect(rename(segments, segments + ".off") == 0)
        let everyPage = try backup()
        let kept = folder.child("every-page.tar")
        try FileManager.default.copyItem(atPath: everyPage.archive, toPath: kept)
        #expect(rename(segments + ".off", segments) == 0)
        let removed = try granary([
            "delete", "alice/" + URL(fileURLWithPath: everyPage.archive).lastPathComponent, "--force",
        ])
        #expect(removed.status == 0, "\(removed.stderr)")
        let followed = try backup()
        #expect(followed.delta["kind"] as? String == "delta", "\(followed.delta)")
        #expect(followed.delta["followedStores"] as? Int == 1, "\(followed.delta)\n\(follow.journal)")
        let candidates = try #require(followed.delta["candidatePages"] as? Int)
        let pages = try #require(followed.delta["pages"] as? Int)
        #expect(candidates > 0 && candidates < pages / 4, "\(candidates) of \(pages)")
        #expect(followed.delta["followedFallback"] == nil, "\(followed.delta)")
        // Phase 2's copy: the candidates read alone, not the store copied through SQLite's backup API.
        #expect(followed.delta["pagesReadStores"] as? Int == 1, "\(followed.delta)")
        #expect(followed.delta["backupAPIReason"] == nil, "\(followed.delta)")
        #expect(everyPage.delta["pagesReadStores"] as? Int == 0)
        #expect(everyPage.delta["kind"] as? String == "delta", "\(everyPage.delta)")
        #expect(everyPage.delta["base"] as? String == followed.delta["base"] as? String)
        #expect(everyPage.delta["followedStores"] as? Int == 0)
        #expect((everyPage.delta["followedFallback"] as? String)?.contains("no follow generation") == true)
        // The same archive content: changed pages, the state, the page list of the delta.
        #expect(followed.delta["changedPages"] as? Int == everyPage.delta["changedPages"] as? Int)
        #expect(
            try member("stores/Local.sqlite.delta", of: followed.archive)
                == member("stores/Local.sqlite.delta", of: kept))
        let a = try ArchiveHead(file: followed.archive).manifest
        let b = try ArchiveHead(file: kept).manifest
        #expect(a.delta?.stores.map(\.stateDigest) == b.delta?.stores.map(\.stateDigest))
        #expect(a.delta?.stores.map(\.pageCount) == b.delta?.stores.map(\.pageCount))
        #expect(a.delta?.stores.map(\.changedPages) == b.delta?.stores.map(\.changedPages))
        // Phase 2's own check ran (the pages read, each parsed), and says so: `pages`, not `quick`;
        // every page copied, the configured one ran.
        #expect(a.stores.map(\.check) == ["pages"])
        #expect(a.stores.map(\.integrity) == ["ok"])
        #expect(a.delta?.stores.first?.pagesChecks == 1)
        #expect(followed.delta["pagesCheckedStores"] as? Int == 1, "\(followed.delta)")
        #expect(followed.delta["fullCheckReason"] == nil, "\(followed.delta)")
        #expect(b.stores.map(\.check) == ["quick"])
        #expect(b.delta?.stores.first?.pagesChecks == nil)
        let listed = try granary(["list", "alice", "--json"])
        #expect(listed.stdout.contains("\"check\" : \"pages\""), "\(listed.stdout)")
        // Restored, it is the live store.
        let out = folder.child("restored")
        try FileSystem.makeDirectory(out)
        let restored = try granary([
            "restore", "alice", URL(fileURLWithPath: followed.archive).lastPathComponent, "--to", out,
        ])
        #expect(restored.status == 0, "\(restored.stderr)")
        let live = try Database(path: store, mode: .readOnly)
        let back = try Database(path: out + "/Local.sqlite", mode: .readOnly)
        let query = "SELECT group_concat(body, ',') FROM (SELECT body FROM items ORDER BY id)"
        #expect(try live.scalar(query)?.text == back.scalar(query)?.text)
        // With follow running again (it resumes its generation): commits shipped while the
        // backup runs, and -v says which way the delta went.
        let again = try Follow(["--root", root, "--repo", repo, "--config", config], log: folder.child("follow2.log"))
        try change(db, rows: 36...40)
        try waitFor("40 commits shipped", again) { try commits() >= 40 }
        let verbose = try granary(["backup", "alice", "--delta", "-v"])
        try change(db, rows: 41...42)
        let running = try backup()
        again.stop()
        #expect(verbose.status == 0, "\(verbose.stderr)")
        #expect(verbose.stdout.contains("pages hashed: "), "\(verbose.stdout)\n\(again.journal)")
        #expect(running.delta["followedStores"] as? Int == 1, "\(running.delta)\n\(again.journal)")
    }

    @Test("without follow, a gap, a damaged segment or a truncated -wal: every page is hashed, and the reason said")
    func fallbacks() throws {
        // No follow: today's path.
        _ = try backup()
        var db: Database? = try owner()
        try change(db!, rows: 1...3)
        let none = try backup()
        #expect(none.delta["followedStores"] as? Int == 0)
        #expect((none.delta["followedFallback"] as? String)?.contains("no follow generation") == true, "\(none.delta)")
        // A generation (follow --once twice: two segments), then phase 2 taken.
        let once = try granary(["follow", "--once"])
        #expect(once.status == 0, "\(once.stderr)")
        try change(db!, rows: 4...6)
        #expect(try granary(["follow", "--once"]).status == 0)
        try change(db!, rows: 7...8)
        let taken = try backup()
        #expect(taken.delta["followedStores"] as? Int == 1, "\(taken.delta)")
        // A segment damaged: its SHA-256 fails.
        let generation = try #require(
            FollowCatalogue.generations(in: repo, user: try UserID("alice"), host: nil).last)
        #expect(generation.segments.count >= 2)
        let second = try #require(generation.segments.last).path
        let saved = try Data(contentsOf: URL(fileURLWithPath: second))
        var damaged = saved
        damaged[damaged.count - 5] ^= 0xFF
        try damaged.write(to: URL(fileURLWithPath: second))
        try change(db!, rows: 9...10)
        let bad = try backup()
        #expect(bad.delta["followedStores"] as? Int == 0)
        #expect((bad.delta["followedFallback"] as? String)?.contains("cannot be read") == true, "\(bad.delta)")
        // A gap: the first segment gone.
        try saved.write(to: URL(fileURLWithPath: second))
        try FileManager.default.removeItem(atPath: try #require(generation.segments.first).path)
        try change(db!, rows: 11...12)
        let gap = try backup()
        #expect((gap.delta["followedFallback"] as? String)?.contains("misses a segment") == true, "\(gap.delta)")
        // A new generation, then the -wal truncated behind follow's back: its tail is unproven.
        db = nil
        let restart = try granary(["follow", "--once"])
        #expect(restart.status == 0, "\(restart.stderr)")
        db = try owner()
        try change(db!, rows: 13...14)
        #expect(try granary(["follow", "--once"]).status == 0)
        _ = try backup()
        try change(db!, rows: 15...16)
        try db!.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        try change(db!, rows: 17...17)
        let truncated = try backup()
        #expect(truncated.delta["kind"] as? String == "delta")
        #expect(truncated.delta["followedStores"] as? Int == 0, "\(truncated.delta)")
        #expect(truncated.delta["followedFallback"] != nil, "\(truncated.delta)")
    }

    /// SQLite's WAL checksum over `bytes[range]` (8-byte words), continuing `sums`.
    static func walChecksum(
        _ bytes: [UInt8], _ range: Range<Int>, bigEndian: Bool, _ sums: inout (UInt32, UInt32)
    ) {
        func word(_ at: Int) -> UInt32 {
            let b = (0..<4).map { UInt32(bytes[at + $0]) }
            return bigEndian ? b[0] << 24 | b[1] << 16 | b[2] << 8 | b[3] : b[3] << 24 | b[2] << 16 | b[1] << 8 | b[0]
        }
        for at in stride(from: range.lowerBound, to: range.upperBound, by: 8) {
            sums.0 = sums.0 &+ word(at) &+ sums.1
            sums.1 = sums.1 &+ word(at + 4) &+ sums.0
        }
    }

    /// The live `-wal`'s frame holding `marker` given a damaged cell pointer (its first one past
    /// the page), and every frame's checksum from it on made again: a frame SQLite would take, as
    /// a page an owner's SQLite wrote damaged would be. The owner is closed first; SQLite's next
    /// connection rebuilds the wal-index from the frames. Returns the damaged page's number.
    func damageFrame(holding marker: String) throws -> Int {
        let path = store + "-wal"
        var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
        let pageSize = Int(bytes[8]) << 24 | Int(bytes[9]) << 16 | Int(bytes[10]) << 8 | Int(bytes[11])
        let bigEndian = bytes[3] == 0x83
        let frameSize = 24 + pageSize
        let frames = (bytes.count - 32) / frameSize
        let needle = Array(marker.utf8)
        let found = try #require(
            (0..<frames).last { frame in
                let data = 32 + frame * frameSize + 24
                return bytes[data] == 13
                    && bytes[data..<data + pageSize].firstRange(of: needle) != nil
            }, "a frame with the marker")
        let data = 32 + found * frameSize + 24
        // The first cell pointer past the page's end.
        bytes[data + 8] = UInt8((pageSize + 16) >> 8)
        bytes[data + 9] = UInt8((pageSize + 16) & 0xFF)
        var sums: (UInt32, UInt32)
        func big(_ at: Int) -> UInt32 { (0..<4).reduce(0) { $0 << 8 | UInt32(bytes[at + $1]) } }
        if found == 0 {
            sums = (big(24), big(28))
        } else {
            let previous = 32 + (found - 1) * frameSize
            sums = (big(previous + 16), big(previous + 20))
        }
        for frame in found..<frames {
            let at = 32 + frame * frameSize
            Self.walChecksum(bytes, at..<at + 8, bigEndian: bigEndian, &sums)
            Self.walChecksum(bytes, at + 24..<at + frameSize, bigEndian: bigEndian, &sums)
            for (i, value) in [sums.0, sums.1].enumerated() {
                for k in 0..<4 { bytes[at + 16 + i * 4 + k] = UInt8(truncatingIfNeeded: value >> UInt32(24 - 8 * k)) }
            }
        }
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return Int(big(32 + found * frameSize))
    }

    @Test(
        "a changed page damaged: phase 2's own check finds it, the configured check confirms it, and the delta is refused as a failing quick_check refuses it"
    )
    func damagedChangedPage() throws {
        do { try owner().execute("PRAGMA wal_checkpoint(TRUNCATE)") }
        _ = try backup()
        // A -wal follow's cursor is in (one begun after it would not be proven).
        do { try change(try owner(), rows: 1...2) }
        #expect(try granary(["follow", "--once"]).status == 0)
        let marker = "MARKER-" + UUID().uuidString
        do {
            let db = try owner()
            try db.run("INSERT INTO items(body) VALUES ('\(marker)')")
        }
        let page = try damageFrame(holding: marker)
        let before = try granary(["list", "alice", "--json"]).stdout
        // What SQLite's own check says of the same state.
        let quick = try granary(["backup", "alice", "--delta", "--check", "quick", "--json"])
        #expect(quick.status != 0, "\(quick.stdout)")
        #expect(quick.stderr.contains("failed its check"), "\(quick.stderr)")
        let pages = try granary(["backup", "alice", "--delta", "--json"])
        #expect(pages.status == quick.status, "\(pages.stdout)\n\(pages.stderr)")
        // The pages' check found it; the configured check, run to confirm, refused it in its own words.
        #expect(pages.stderr.contains("failed its check"), "\(pages.stderr)")
        #expect(page > 1, "the damaged page is a changed page, not page 1")
        #expect(pages.stderr.contains("no archive was written"), "\(pages.stderr)")
        #expect(pages.stderr.split(separator: "\n").first?.contains("Local.sqlite") == true, "\(pages.stderr)")
        // Nothing was written.
        #expect(try granary(["list", "alice", "--json"]).stdout == before)
    }

    @Test("phase 2's own check at most delta_pages_checks deltas in a row; check set, or no record: the configured one")
    func pagesCheckRuns() throws {
        try "delta = true\ncompression = \"none\"\ndelta_pages_checks = 1\n".write(
            toFile: config, atomically: true, encoding: .utf8)
        _ = try backup()
        #expect(try granary(["follow", "--once"]).status == 0)
        let db = try owner()
        func checks(_ archive: String) throws -> [String] {
            try ArchiveHead(file: archive).manifest.stores.map(\.check)
        }
        try change(db, rows: 1...3)
        let first = try backup()
        #expect(first.delta["pagesReadStores"] as? Int == 1, "\(first.delta)")
        #expect(try checks(first.archive) == ["pages"])
        // A second in a row: the configured check again, and why.
        try change(db, rows: 4...6)
        let second = try backup()
        #expect(second.delta["pagesReadStores"] as? Int == 1, "\(second.delta)")
        #expect(try checks(second.archive) == ["quick"])
        #expect((second.delta["fullCheckReason"] as? String)?.contains("in a row") == true, "\(second.delta)")
        // After a delta checked whole, the pages again.
        try change(db, rows: 7...9)
        let third = try backup()
        #expect(try checks(third.archive) == ["pages"], "\(third.delta)")
        // `--check quick` asked for: quick, phase 2's copy all the same.
        try change(db, rows: 10...12)
        let asked = try granary(["backup", "alice", "--delta", "--check", "quick", "--json"])
        #expect(asked.status == 0, "\(asked.stderr)")
        let newest = try #require(
            try FileManager.default.contentsOfDirectory(atPath: repo + "/alice").filter { $0.hasSuffix(".tar") }.max())
        #expect(try checks(repo + "/alice/" + newest) == ["quick"])
        // follow's segments out of sight: every page hashed, the configured check.
        let segments = repo + "/alice/follow"
        #expect(rename(segments, segments + ".off") == 0)
        try change(db, rows: 13...15)
        let none = try backup()
        #expect(none.delta["followedStores"] as? Int == 0)
        #expect(try checks(none.archive) == ["quick"])
        #expect(none.delta["pagesCheckedStores"] as? Int == 0)
    }

    @Test("the store replaced after follow's last segment: a full, nothing taken from follow's record")
    func storeReplaced() throws {
        _ = try backup()
        #expect(try granary(["follow", "--once"]).status == 0)
        // A program writes a new file and renames it over the store (its -wal checkpointed and
        // removed first, as SQLite does when the last connection closes).
        let next = root + "/alice/.next.sqlite"
        do {
            let db = try owner()
            try change(db, rows: 1...3)
            try db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            try db.execute("VACUUM INTO '\(next)'")
        }
        unlink(store + "-wal")
        unlink(store + "-shm")
        #expect(rename(next, store) == 0)
        let replaced = try backup()
        #expect(replaced.delta["kind"] as? String == "full", "\(replaced.delta)")
        #expect((replaced.delta["followedStores"] as? Int ?? 0) == 0)
    }

    @Test("a page written to the database file outside SQLite's WAL is caught by the debug cross-check")
    func crossCheckCatchesAMiss() throws {
        // The -wal emptied first: SQLite reads every page from the database file.
        do { try owner().execute("PRAGMA wal_checkpoint(TRUNCATE)") }
        _ = try backup()
        #expect(try granary(["follow", "--once"]).status == 0)
        // Bytes of a page in the middle of the file changed behind SQLite's back (an owner that
        // writes the file itself): follow saw no frame of it, so phase 2 would take the base's hash.
        let fd = open(store, O_WRONLY)
        #expect(fd >= 0)
        let junk = [UInt8](repeating: 0x5A, count: 16)
        #expect(pwrite(fd, junk, junk.count, 4096 * 600 + 2000) == junk.count)
        close(fd)
        let run = try granary(["backup", "alice", "--delta", "--json"])
        #expect(run.status != 0, "\(run.stdout)")
        #expect(run.stderr.contains("missed a changed page"), "\(run.stderr)")
    }

    @Test("the -wal swapped for a link to another store's while backups run: never read through the link")
    func walSwappedForALink() throws {
        _ = try backup()
        #expect(try granary(["follow", "--once"]).status == 0)
        do { try change(try owner(), rows: 1...5) }
        // Another store outside alice's folder, with commits of its own in its -wal.
        let outside = folder.child("other.sqlite")
        do {
            let other = try Database(path: outside, mode: .create)
            try other.execute("PRAGMA journal_mode=WAL")
            try other.execute("PRAGMA wal_autocheckpoint=0")
            try other.execute("CREATE TABLE items(id INTEGER PRIMARY KEY, body TEXT)")
            for _ in 0..<50 { try other.run("INSERT INTO items(body) VALUES (hex(randomblob(500)))") }
            try other.keepWALOnClose()
        }
        let real = root + "/alice/.real-wal", link = root + "/alice/.link-wal"
        let swapping = Swapping()
        let swapper = Thread { [store] in
            while !swapping.done {
                _ = Glibc.link(store + "-wal", real)
                unlink(link)
                _ = symlink(outside + "-wal", link)
                _ = rename(link, store + "-wal")
                usleep(300)
                _ = rename(real, store + "-wal")
                usleep(300)
            }
        }
        swapper.start()
        var results: [GranaryProcess.Result] = []
        for _ in 0..<4 { results.append(try granary(["backup", "alice", "--delta", "--json"])) }
        swapping.done = true
        while !swapper.isFinished { usleep(1000) }
        unlink(link)
        // Each backup either refused (a documented failure, never a crash) or wrote a delta whose
        // skipped pages the debug cross-check proved unchanged; none took a -wal that is not alice's.
        for result in results {
            #expect(result.status == 0 || (result.status > 1 && result.status < 128), "\(result.stderr)")
            #expect(!result.stderr.contains("missed a changed page"), "\(result.stderr)")
        }
        // Afterwards, with the -wal alice's again, a delta takes phase 2 or says why it did not.
        let after = try backup()
        #expect(after.delta["followedStores"] as? Int == 1 || after.delta["followedFallback"] != nil, "\(after.delta)")
    }

    final class Swapping: @unchecked Sendable { var done = false }
}
