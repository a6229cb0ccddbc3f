import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A busy store's descriptors are kept between rounds (`kept` in the read trace) and used again
/// only while every name on the way is the inode kept. With the cache warm, the `-wal`, the store
/// or its folder is swapped while `follow` runs for a link to the very inode kept (the file moved
/// out of the root under another name), and the owner writes through the link: a follower that
/// read its kept descriptors without looking again would ship those commits. It must refuse the
/// link as a fresh open beneath the root does, and ship none of them.
@Suite("follow: kept descriptors against swaps while it runs", .serialized)
struct FollowKeptDescriptorsTests {
    let folder = TemporaryFolder("granary-follow-kept-run")
    let repo: String
    var root: String { folder.child("root") }
    var store: String { root + "/erin/Data/Busy.sqlite" }
    var trace: String { folder.child("trace") }

    init() throws {
        repo = initializedRepository(folder.child("repo"))
        try FileSystem.makeDirectory(folder.child("root") + "/erin/Data")
        try FollowFixtures.makeWALStore(folder.child("root") + "/erin/Data/Busy.sqlite", rows: ["one"])
    }

    func write(_ body: String) throws {
        let db = try Database(path: store, mode: .readWrite)
        try db.execute("PRAGMA wal_autocheckpoint=0")
        try db.run("INSERT INTO items(body) VALUES (?)", [.text(body)])
        try db.keepWALOnClose()
    }

    func traced() -> [Substring] {
        ((try? String(contentsOfFile: trace, encoding: .utf8)) ?? "").split(separator: "\n")
    }

    /// Every segment's bytes, decompressed.
    func segmentsText() throws -> String {
        var text = ""
        for generation in FollowCatalogue.generations(in: repo, user: try UserID("erin"), host: nil) {
            for segment in generation.segments {
                text += try GranaryProcess.runExecutable("/usr/bin/zstd", ["-dc", segment.path]).stdout
            }
        }
        return text
    }

    /// Moves `path` out of the root (a hard link keeps the very inode under another name for a
    /// file) and puts a link to it in its place.
    func swapForLink(_ path: String, folder isFolder: Bool) throws {
        let outside = folder.child("outside-" + PathText.lastComponent(path))
        if isFolder {
            #expect(rename(path, outside) == 0)
        } else {
            #expect(Glibc.link(path, outside) == 0)
            #expect(unlink(path) == 0)
        }
        #expect(symlink(outside, path) == 0)
    }

    @Test(
        "with the cache warm, the -wal, the store or its folder swapped for a link to the inode kept: refused, nothing written through the link shipped",
        arguments: ["-wal", "store", "folder"])
    func swappedWhileKept(_ what: String) throws {
        let follow = try FollowProcess(
            root: root, repo: repo, log: folder.child("follow.log"), environment: ["GRANARY_TEST_READ_TRACE": trace])
        defer { follow.stop(SIGKILL) }
        let deadline = ContinuousClock.now + .seconds(120)
        var row = 0
        // Commits until a round reads the store through its kept descriptors.
        while !traced().contains("kept erin/Data/Busy.sqlite") {
            #expect(ContinuousClock.now < deadline, "never kept: \(follow.journal)\n\(traced())")
            if ContinuousClock.now >= deadline { return }
            row += 1
            try write("before swap \(row)")
            usleep(100_000)
        }
        let journalBefore = follow.journal.count
        switch what {
        case "-wal": try swapForLink(store + "-wal", folder: false)
        case "store": try swapForLink(store, folder: false)
        default: try swapForLink(root + "/erin/Data", folder: true)
        }
        let marker = "written through the link"
        // SQLite itself may refuse the link (a -wal that is one; a store whose -wal stayed
        // behind): what it does write must not be shipped.
        try? write(marker)
        // Refused as a fresh open refuses it: the -wal a link (paused), the store or its folder
        // gone (a new generation without it, or paused when none can start).
        let refused = { (text: String) in
            ["following paused", "store gone", "gone or no longer a WAL store"].contains { text.contains($0) }
        }
        while !refused(String(follow.journal.dropFirst(journalBefore))) {
            #expect(ContinuousClock.now < deadline, "\(what): not refused: \(follow.journal)\n\(traced())")
            if ContinuousClock.now >= deadline { return }
            try? write(marker)
            usleep(100_000)
        }
        // Rounds go on (the link is looked at again each time); the owner keeps writing through it.
        for _ in 0..<5 {
            try? write(marker)
            usleep(100_000)
        }
        follow.stop(SIGTERM)
        let text = try segmentsText()
        #expect(text.contains("before swap 1"), "\(what): the commits before the swap were not shipped")
        #expect(!text.contains(marker), "\(what): a commit written through the link was shipped: \(follow.journal)")
    }
}
