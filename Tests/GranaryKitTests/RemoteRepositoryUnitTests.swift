import Foundation
import Testing

@testable import GranaryCLI
@testable import GranaryKit

/// The pieces of the rclone repository that need no server: what is secret, what a failure
/// means, how records come back from one download, how rclone's times read.
@Suite("remote repository: credentials, failures, records")
struct RemoteRepositoryUnitTests {
    @Test(
        "the secrets of an environment are the AWS keys, rclone's config password and RCLONE_*_KEY/SECRET/PASS/TOKEN values; scrubbing replaces them and URL passwords"
    )
    func scrubbing() {
        let environment = [
            "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE123", "AWS_SECRET_ACCESS_KEY": "s3cr3t/with+chars",
            "AWS_REGION": "eu-west-1",
            "RCLONE_CONFIG_PASS": "hunter22", "RCLONE_CONFIG_VAULT_PASSWORD": "obscured-pass",
            "RCLONE_S3_SECRET_ACCESS_KEY": "other-secret",
            "RCLONE_CONFIG_B2_KEY": "b2-application-key", "PATH": "/usr/bin:/bin", "RCLONE_RETRIES": "1",
        ]
        let secrets = Rclone.secrets(in: environment)
        #expect(
            Set(secrets) == [
                "AKIAEXAMPLE123", "s3cr3t/with+chars", "hunter22", "obscured-pass", "other-secret",
                "b2-application-key",
            ])
        let text =
            "InvalidAccessKeyId: AKIAEXAMPLE123 signed with s3cr3t/with+chars via https://user:pw@minio.local:9000/bucket"
        let scrubbed = Rclone.scrub(text, secrets: secrets)
        #expect(scrubbed == "InvalidAccessKeyId: *** signed with *** via https://***@minio.local:9000/bucket")
    }

    @Test(
        "one remote repository spelled several ways is one place: one follow lock (s3:B/R, s3://B/R/, s3:B/R//), and the same identity for mirrors; another prefix, bucket or rclone remote is another",
        .enabled(if: (try? Rclone.locate()) != nil, "rclone is not installed"))
    func oneRemoteOneLock() throws {
        let root = Root(path: "/srv/granary-root")
        func open(_ location: String) throws -> any Repository {
            try Repositories.open(location, context: RunContext(), environment: ["AWS_REGION": "us-east-1"])
        }
        func lock(_ location: String) throws -> String { FollowLock.path(root: root, repository: try open(location)) }
        let same = ["s3:bucket/repo", "s3://bucket/repo/", "s3:bucket/repo//", "s3://bucket/repo"]
        for location in same {
            #expect(try lock(location) == lock("s3:bucket/repo"), "\(location)")
            #expect(try LocationIdentity(open(location)) == LocationIdentity(open("s3:bucket/repo")), "\(location)")
        }
        for other in ["s3:bucket/other", "s3:bucket2/repo", "s3:bucket/repo/deeper"] {
            #expect(try lock(other) != lock("s3:bucket/repo"), "\(other)")
        }
        #expect(try lock("rclone:a:x") == lock("rclone:a:x/"))
        #expect(try lock("rclone:a:x") != lock("rclone:b:x"))
        #expect(try lock("rclone:a:x") != lock("rclone:a:/x"), "absolute on sftp is not under home")
    }

    @Test(
        "rclone's failures: not found is 66, denied 73, 503 and cut connections 75, anything else 74, always with rclone's last error without its timestamp"
    )
    func failures() {
        func status(_ code: Int32, _ text: String) -> GranaryCLI.ExitStatus {
            RcloneRepository.failure(status: code, diagnostics: text, location: "s3:b/p").status
        }
        #expect(status(3, "2026/11/23 20:21:12 ERROR : : error listing: directory not found") == .notFound)
        #expect(
            status(1, "2026/11/23 20:21:12 Failed to copyto: NoSuchBucket: The specified bucket does not exist")
                == .notFound)
        #expect(
            status(1, "ERROR : x: Failed to copy: AccessDenied: Access Denied\n\tstatus code: 403") == .cannotCreate)
        #expect(
            status(1, "ERROR : x: Failed to copy: SlowDown: Please reduce your request rate.\n\tstatus code: 503")
                == .temporaryFailure)
        #expect(
            status(1, "Failed to copy: read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer")
                == .temporaryFailure)
        #expect(status(7, "Fatal error: something odd") == .ioError)
        let error = RcloneRepository.failure(
            status: 1,
            diagnostics:
                "2026/11/23 20:24:29 ERROR : big: Failed to copy: BadRequest: Bad Request\n2026/11/23 20:24:29 ERROR : Attempt 1/1 failed with 1 errors and: BadRequest: Bad Request\n",
            location: "s3:b/p/alice/x.tar.zst")
        #expect(error.description == "s3:b/p/alice/x.tar.zst: big: Failed to copy: BadRequest: Bad Request")
    }

    @Test(
        "the verification records of a folder come back from one download, each by its archive's name, braces and quotes in reasons included"
    )
    func recordsInOneDownload() throws {
        let archive = try #require(ArchiveName(fileName: "20261123T101500Z.tar.zst"))
        let entry = RepositoryEntry(
            user: try UserID("alice"), name: archive, path: "s3:b/alice/" + archive.fileName, size: 1234,
            modified: 5_000_000_000, object: "alice/" + archive.fileName)
        var bad = VerificationRecord(
            entry: entry, good: false, reason: "stores/x {odd} \"quoted\" \\ name", check: .full)
        bad.archive = "20261123T101400Z.tar.zst"
        let good = VerificationRecord(entry: entry, good: true, reason: nil, check: .full)
        let objects = RcloneRepository.jsonObjects(bad.encoded() + good.encoded())
        #expect(objects.count == 2)
        #expect(VerificationRecord.decode(objects[1], matching: entry)?.isGood == true)
        #expect(
            VerificationRecord.decode(objects[0], matching: entry) == nil,
            "another archive's record does not vouch for this one")
        let moved = RepositoryEntry(
            user: entry.user, name: archive, path: entry.path, size: 1234, modified: 6_000_000_000, object: entry.object
        )
        #expect(
            VerificationRecord.decode(objects[1], matching: moved) == nil,
            "a record of an object since replaced does not apply")
    }

    @Test("rclone's listing times read to the nanosecond")
    func times() {
        #expect(RcloneRepository.nanoseconds("2026-11-23T20:10:31.000000000Z") == 1_795_464_631_000_000_000)
        #expect(RcloneRepository.nanoseconds("2026-11-23T20:10:22.652234024Z") == 1_795_464_622_652_234_024)
        #expect(RcloneRepository.nanoseconds("") == 0)
    }
}
