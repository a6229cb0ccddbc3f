import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

/// A few valid frames whose last commit claims a store of gigabytes (checksums right, salts
/// right, a 4 KiB `-wal`) would have a new generation's base backup read that much of nothing in
/// the user's turn, while every other user waits. `follow` starts no generation from a `-wal`
/// claiming more pages than the store and its `-wal` hold: that user's following pauses with the
/// reason, and the others are followed as ever.
@Suite("follow: a -wal claiming more pages than exist starts no generation")
struct FollowBaseClaimTests {
    let folder = TemporaryFolder("granary-follow-claim")
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }

    @Test(
        "a commit frame claiming 250,000 pages of a one-page -wal: paused with the reason, no base taken; alice followed"
    )
    func implausibleClaim() throws {
        for user in ["alice", "mallory"] {
            try FileSystem.makeDirectory(root + "/" + user)
            try FollowFixtures.makeWALStore(root + "/\(user)/Local.sqlite")
        }
        // mallory's last commit frame now claims 250,000 pages (about 1 GB), its checksums redone.
        let wal = root + "/mallory/Local.sqlite-wal"
        var data = [UInt8](try Data(contentsOf: URL(fileURLWithPath: wal)))
        let pageSize = 4096
        let frameSize = 24 + pageSize
        let frames = (data.count - 32) / frameSize
        let last = 32 + (frames - 1) * frameSize
        let claimed: UInt32 = 250_000
        for index in 0..<4 { data[last + 4 + index] = UInt8(truncatingIfNeeded: claimed >> (24 - 8 * UInt32(index))) }
        WALChecksums.rechecksum(&data, pageSize: pageSize)
        try Data(data).write(to: URL(fileURLWithPath: wal))

        let once = try GranaryProcess.run(["follow", "--once", "--root", root, "--repo", repo])
        #expect(once.status == 0, "\(once.stderr)")
        #expect(once.stderr.contains("mallory: following paused: no generation could start"), "\(once.stderr)")
        #expect(once.stderr.contains("claims 250000 pages"), "\(once.stderr)")
        // No base backup was taken (nor tried: it would have read a gigabyte of zeros first).
        #expect(try LocalRepository(path: repo).archives(of: try UserID("mallory")).isEmpty)
        #expect(try FollowedGenerations.list(in: LocalRepository(path: repo), user: try UserID("alice")).count == 1)
    }
}
