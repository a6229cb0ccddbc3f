import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Remotes that fail: every failure ends within the bound the remote limits give.
@Suite(
    "remotes that fail fast: a server that never answers, a dead mirror", .serialized,
    .enabled(if: S3Server.available, S3Server.unavailableReason))
struct RemoteFailFastTests: HostsSuite {
    let folder = TemporaryFolder("granary-hosts")
    let bucket: String
    let server: S3Server

    init() throws {
        (server, bucket) = try RemoteRepositoryTests.serverAndBucket("h")
        try FileSystem.makeDirectory(root)
    }

    // MARK: Fail fast

    @Test(
        "a server that accepts and never answers, one that answers 503 to everything, and a refused connection: list and backup fail with 74/75 within the documented bound"
    )
    func failuresAreBounded() throws {
        try makeUser("alice@example.com", marker: "x")
        let repo = initializedRepository("s3:\(bucket)/faults", environment: server.environment())
        try writeConfig(repo: repo, extra: Self.limits)
        let proxy = try FaultProxy(upstream: server.port)
        #expect(try granary(["backup", "alice@example.com"], environment: ownLimits(port: proxy.port)).status == 0)
        let refused = try S3Server.freePort()
        for (what, mode, port) in [
            ("never answers", FaultProxy.Mode.delay(milliseconds: 3_600_000), proxy.port),
            ("503", .status(503), proxy.port), ("refused", .pass, refused),
        ] {
            proxy.mode = mode
            for command in [["list"], ["backup", "alice@example.com"]] {
                let (result, seconds) = try timed(command, repo: repo, environment: ownLimits(port: port))
                #expect(
                    [74, 75].contains(result.status), "\(what), \(command[0]): exit \(result.status): \(result.stderr)")
                // The documented bound holds (granary stops rclone there), with a few seconds for
                // granary's own start and rclone's exit: a bound on a hang, not a speed measurement.
                #expect(
                    seconds < Self.bound + 5, "\(what), \(command[0]) ran \(seconds) s; the bound is \(Self.bound) s")
            }
            proxy.mode = .pass
        }
    }

    @Test(
        "a dead mirror beside local backups of several users: every local archive is published without waiting for it, the mirror is tried once, each user's mirror error is 74/75, the run exits 1 within one bound"
    )
    func deadMirrorBesideLocalBackups() throws {
        let users = ["u1@example.com", "u2@example.com", "u3@example.com", "u4@example.com"]
        for user in users { try makeUser(user, marker: user) }
        let repo = initializedRepository(folder.child("repo"))
        let proxy = try FaultProxy(upstream: server.port)
        proxy.mode = .delay(milliseconds: 3_600_000)
        try writeConfig(repo: repo, mirror: mirror, extra: Self.limits)
        let (backup, seconds) = try timed(
            ["backup", "--all", "--json"], repo: repo, environment: ownLimits(port: proxy.port))
        #expect(backup.status == 1, "\(backup.stderr)")
        struct Document: Decodable {
            struct User: Decodable {
                struct Mirror: Decodable {
                    struct Failure: Decodable { let code: Int; let message: String }
                    let ok: Bool
                    let error: Failure?
                    let seconds: Double
                }
                let id: String
                let ok: Bool
                let archive: String?
                let mirrors: [Mirror]?
            }
            let users: [User]
        }
        let document = try JSONDecoder().decode(Document.self, from: Data(backup.stdout.utf8))
        // The mirror is sent beside the local work, not between two users' backups: every local
        // archive was published in less time than the one try of the dead mirror took.
        let published = document.users.compactMap { $0.archive.flatMap(FileSystem.status) }.map {
            Double($0.st_mtim.tv_sec) + Double($0.st_mtim.tv_nsec) / 1e9
        }
        let tried = try #require(document.users.first?.mirrors?.first?.seconds)
        #expect(published.count == users.count)
        #expect(
            (published.max() ?? 0) - (published.min() ?? 0) < tried,
            "the local archives were published over \((published.max() ?? 0) - (published.min() ?? 0)) s; the mirror's try took \(tried) s"
        )
        #expect(document.users.map(\.id) == users)
        for user in document.users {
            #expect(user.ok, "\(user.id)'s local backup")
            #expect(user.archive.map(FileSystem.isRegularFile) == true, "\(user.id)'s archive is in the repository")
            let error = try #require(user.mirrors?.first?.error, "\(user.id) has a mirror error")
            #expect([74, 75].contains(error.code), "\(user.id): \(error.code) \(error.message)")
        }
        let skipped = document.users.filter { $0.mirrors?.first?.error?.message.contains("failed earlier") == true }
        // Each user is backed up in a worker process of its own (crash isolation) and hands its
        // archive to the parent, which sends it to the mirror once the worker has ended: after the
        // first failure, the mirror is not tried again in the run.
        #expect(skipped.count == users.count - 1, "the dead mirror was tried once: \(backup.stdout)")
        #expect(
            seconds < Self.bound * 3, "the run took \(seconds) s; one mirror failure is bounded by \(Self.bound) s")
    }

    @Test(
        "a dead mirror and several users: sync and check fail within one bound, not one per user"
    )
    func deadMirrorSyncAndCheck() throws {
        let users = ["u1@example.com", "u2@example.com", "u3@example.com", "u4@example.com"]
        for user in users { try makeUser(user, marker: user) }
        let repo = initializedRepository(folder.child("repo"))
        try writeConfig(repo: repo, mirror: mirror, extra: Self.limits)
        #expect(try granary(["backup", "--all"]).status == 0)
        #expect(try granary(["verify", "--all"]).status == 0)
        let proxy = try FaultProxy(upstream: server.port)
        proxy.mode = .delay(milliseconds: 3_600_000)
        let (sync, syncSeconds) = try timed(["sync", "--json"], repo: repo, environment: ownLimits(port: proxy.port))
        #expect(sync.status == 1, "\(sync.stderr)")
        #expect(syncSeconds < Self.bound * 3, "sync took \(syncSeconds) s; the bound is \(Self.bound) s")
        let (check, checkSeconds) = try timed(["check"], repo: repo, environment: ownLimits(port: proxy.port))
        #expect(check.status == 1, "\(check.stderr)")
        #expect(checkSeconds < Self.bound * 3, "check took \(checkSeconds) s; the bound is \(Self.bound) s")
        for user in users { #expect((check.stdout + check.stderr).contains(user), "\(check.stdout)\(check.stderr)") }
    }
}
