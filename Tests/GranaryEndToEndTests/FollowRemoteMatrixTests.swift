import Foundation
import GranaryKit
import Testing

/// The ledger matrix (``FollowMatrixTests``) against an S3 repository on loopback (moto, 127.0.0.1
/// only): `follow --repo s3:…` through kill -9 of follow, the store replaced, VACUUM and a
/// `granary restore` of the user, then `restore USER --at T --repo s3:…` at random moments and one
/// in each event, each checked with the ledger rule (nothing acknowledged by T − 1 s missing when
/// T is claimed, nothing acknowledged after T + 1 s, whole transactions, a prefix of the ledger).
/// Slow (a minute or two: every base is a backup uploaded through rclone): run with
/// GRANARY_SLOW_TESTS=1 (`make test-slow`), as the local matrix's whole run is.
@Suite(
    "follow: the ledger matrix on S3", .serialized,
    .enabled(if: S3Server.available, S3Server.unavailableReason),
    .enabled(if: FollowMatrixTests.full, "slow: set GRANARY_SLOW_TESTS=1")
)
struct FollowRemoteMatrixTests {
    @Test("restore --at T from S3 at random moments across kill -9, replacement, VACUUM and a restore: no false claim")
    func matrixOnS3() throws {
        guard let server = RemoteRepositoryTests.shared else { throw S3ServerError.didNotStart("moto did not start") }
        let bucket = "m" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
        try server.makeBucket(bucket)
        var matrix = FollowMatrixTests()
        let location = initializedRepository("s3:\(bucket)/matrix", environment: server.environment())
        matrix.remote = (location, server.environment())
        // Two users, with rarer checkpoints than the local matrix's: a user is read again only
        // once its last upload completed (a few seconds on moto here), and a -wal restarted twice
        // in between costs a generation each time (with RESTART every 120 rows at 10 ms, bob's
        // generations stormed and stayed paused: no window ever held two segments). alice
        // PASSIVE, bob RESTART; kill -9 twice, each event twice, users in turn.
        try matrix.runMatrix(
            specs: [("alice", 20, 1500, "PASSIVE"), ("bob", 20, 1000, "RESTART")],
            events: [.killFollow, .replaced, .vacuum, .restored, .killFollow, .replaced, .restored, .vacuum],
            count: 12, least: 1)
    }
}
