import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `granary follow` over many users, driven by the kernel's events: a store that was not written
/// is not opened; users and stores that appear are followed without a restart; a folder moved out
/// of the root and swapped for a link is never read through; SIGTERM ships what is held.
@Suite("follow: many users, event-driven", .serialized)
struct FollowManyTests {
    let folder = TemporaryFolder("granary-follow-many")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }

    func makeStore(_ path: String, keepWAL: Bool = true) throws {
        let db = try Database(path: path, mode: .create)
        try db.execute("PRAGMA journal_mode=WAL")
        try db.execute("PRAGMA synchronous=OFF")  // hundreds of stores to make: no fsync for each
        try db.execute("PRAGMA wal_autocheckpoint=0")
        try db.execute("CREATE TABLE items(id INTEGER PRIMARY KEY, body TEXT)")
        try db.run("INSERT INTO items(body) VALUES ('one')")
        if keepWAL { try db.keepWALOnClose() }
    }

    func commit(_ path: String, rows: Int = 1) throws {
        let db = try Database(path: path, mode: .readWrite)
        try db.execute("PRAGMA wal_autocheckpoint=0")
        for _ in 0..<rows { try db.run("INSERT INTO items(body) VALUES (hex(randomblob(200)))") }
        try db.keepWALOnClose()
    }

    typealias Follow = FollowProcess

    func generations(_ user: String) -> [FollowCatalogue.Generation] {
        FollowCatalogue.generations(in: repo, user: try! UserID(user), host: nil)
    }

    func segments(_ user: String) -> Int { generations(user).reduce(0) { $0 + $1.segments.count } }

    func commits(_ user: String) throws -> Int {
        var total = 0
        for generation in generations(user) {
            for segment in generation.segments { total += try SegmentReader.check(segment.path).1.commits }
        }
        return total
    }

    @Test("300 stores: a commit opens its store alone; a new user and a new store are followed without a restart")
    func idleStoresCostNothing() throws {
        let users = (0..<3).map { "u\($0)" }
        for user in users {
            try FileSystem.makeDirectory(root + "/" + user)
            for index in 0..<100 { try makeStore(root + "/\(user)/s\(index).sqlite") }
            // Closed as an app closes them: no -wal left (opening one would make it, and the
            // close remove it again: events that must not read the store again and again).
            for index in 0..<5 { try makeStore(root + "/\(user)/closed\(index).sqlite", keepWAL: false) }
        }
        let trace = folder.child("trace")
        let follow = try Follow(
            root: root, repo: repo, log: folder.child("follow.log"), environment: ["GRANARY_TEST_READ_TRACE": trace])
        try waitFor("a generation of every user", follow) { users.allSatisfy { segments($0) >= 1 } }
        // Every user read whole once, then nothing more while nothing changes.
        let traced = { ((try? String(contentsOfFile: trace, encoding: .utf8)) ?? "").split(separator: "\n") }
        #expect(Set(traced().filter { $0.hasPrefix("scan ") }) == Set(users.map { "scan \($0)" }))
        // One store written: that store is read, no other is opened, and its commit is shipped.
        #expect(truncate(trace, 0) == 0)
        try commit(root + "/u2/s17.sqlite", rows: 3)
        try waitFor("the commits of u2/s17 shipped", follow) { (try? commits("u2")) == 3 }
        #expect(generations("u2").count == 1, "\(follow.journal)")
        // (Its segment's group: `publish ...`, not a read.)
        let lines = traced().filter { !$0.hasPrefix("publish ") }
        #expect(!lines.isEmpty)
        #expect(lines.allSatisfy { $0 == "read u2/s17.sqlite" }, "\(lines)")

        // A user who appears while follow runs, with a store in a folder of its own.
        try FileSystem.makeDirectory(root + "/newcomer/Data")
        try makeStore(root + "/newcomer/Data/app.sqlite")
        try waitFor("the newcomer followed", follow) { segments("newcomer") >= 1 }
        try commit(root + "/newcomer/Data/app.sqlite", rows: 2)
        try waitFor("the newcomer's commits shipped", follow) { (try? commits("newcomer")) ?? 0 >= 2 }
        // A store that appears in a new folder of a followed user: a new generation that holds it.
        try FileSystem.makeDirectory(root + "/u1/Later/Deeper")
        try makeStore(root + "/u1/Later/Deeper/late.sqlite")
        try waitFor("u1's new generation, with the new store", follow) {
            follow.journal.contains("new store Later/Deeper/late.sqlite")
        }
        try commit(root + "/u1/Later/Deeper/late.sqlite")
        try waitFor("the late store's commit shipped", follow) { (try? commits("u1")) ?? 0 >= 1 }
        follow.stop(SIGTERM)
        #expect(follow.process.terminationStatus == 0, "\(follow.journal)")
    }

    @Test("a followed folder moved out of the root and swapped for a link is never read through")
    func folderSwappedForLink() throws {
        try FileSystem.makeDirectory(root + "/carol/Data")
        try makeStore(root + "/carol/Data/x.sqlite")
        try makeStore(root + "/carol/top.sqlite")
        let follow = try Follow(root: root, repo: repo, log: folder.child("follow.log"))
        try waitFor("carol followed", follow) { segments("carol") >= 1 }
        // The watched folder leaves the root (its watch goes with it) and a link takes its place.
        let outside = folder.child("outside")
        try FileSystem.makeDirectory(outside)
        #expect(rename(root + "/carol/Data", outside + "/Data") == 0)
        #expect(symlink(outside + "/Data", root + "/carol/Data") == 0)
        try waitFor("carol's new generation, without Data/x.sqlite", follow) { generations("carol").count >= 2 }
        // Commits in the moved folder: its watch reports them, as carol's.
        try commit(outside + "/Data/x.sqlite", rows: 20)
        // And one in carol's folder proper, which must be shipped.
        try commit(root + "/carol/top.sqlite")
        try waitFor("carol's own commit shipped", follow) { (try? commits("carol")) ?? 0 >= 1 }
        try commit(outside + "/Data/x.sqlite", rows: 20)
        try commit(root + "/carol/top.sqlite")
        try waitFor("carol's second commit shipped", follow) { (try? commits("carol")) ?? 0 >= 2 }
        follow.stop(SIGTERM)
        // No segment holds a commit of the store outside, nor follows it after the swap.
        #expect(try commits("carol") == 2, "\(follow.journal)")
        for generation in generations("carol").dropFirst() {
            for segment in generation.segments {
                let (_, trailer) = try SegmentReader.check(segment.path)
                #expect(Set(trailer.cursors.keys) == ["top.sqlite"], "\(segment.name)")
            }
        }
    }

    @Test("SIGTERM ships what follow holds, then it exits 0")
    func sigtermShips() throws {
        try FileSystem.makeDirectory(root + "/dana")
        let store = root + "/dana/Local.sqlite"
        let db = try Database(path: store, mode: .create)
        try db.execute("PRAGMA journal_mode=WAL")
        try db.execute("CREATE TABLE ledger_writes(seq INTEGER PRIMARY KEY, writer TEXT NOT NULL, at REAL NOT NULL)")
        // A long interval: what is committed after the first segment waits in follow when the
        // signal comes.
        let follow = try Follow(root: root, repo: repo, log: folder.child("follow.log"), interval: "1h")
        try waitFor("dana followed", follow) { segments("dana") >= 1 }
        let ledgerFile = folder.child("ledger")
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: GranaryProcess.binDirectory + "/granary-ledger-writer")
        writer.arguments = ["--ledger", ledgerFile, "--times", "--interval-ms", "2", "--count", "100", store]
        writer.standardError = FileHandle.nullDevice
        try writer.run()
        let acknowledged = {
            ((try? String(contentsOfFile: ledgerFile, encoding: .utf8)) ?? "").split(separator: "\n").compactMap {
                Int64($0.split(separator: " ").first ?? "")
            }
        }
        writer.waitUntilExit()
        #expect(writer.terminationStatus == 0)
        let rows = acknowledged()
        #expect(rows.count == 100)
        #expect(segments("dana") == 1)
        follow.stop(SIGTERM)
        #expect(follow.process.terminationReason == .exit)
        #expect(follow.process.terminationStatus == 0, "\(follow.journal)")
        // Every acknowledged row is in the generation's segments, shipped at the stop.
        let generation = try #require(generations("dana").last)
        #expect(generation.segments.count == 2, "\(follow.journal)")
        let to = try #require(generation.window).to
        let target = folder.child("at")
        #expect(mkdir(target, 0o700) == 0)
        let restored = try GranaryProcess.run([
            "restore", "dana", "--at", ArchiveName.stamp(micros: to, precise: true), "--to", target, "--root", root,
            "--repo", repo,
        ])
        #expect(restored.status == 0, "\(restored.stderr)")
        let copy = try Database(path: target + "/Local.sqlite", mode: .readOnly)
        let seqs = Set(
            try copy.rows("SELECT seq FROM ledger_writes").compactMap { row -> Int64? in
                if case .integer(let n) = row[0] { return n }
                return nil
            })
        #expect(rows.allSatisfy(seqs.contains), "\(rows.count) acknowledged, \(seqs.count) restored")
    }
}
