import Foundation
import GranaryTestSupport
import Testing

@testable import GranaryKit

#if canImport(Glibc)
    import Glibc
#endif

/// Copies of a user's bytes are charged to the user's time (`ContentAccount`, `[limits] time`
/// and `time_per_gib`) as SQLite's checks are, and stop once it is spent (`CopyTimeError`).
@Suite("copies charged to the user's time budget")
struct CopyBudgetTests {
    /// A file of `length` bytes, all a hole but its first bytes: reading it costs time, not disk.
    static func hole(_ path: String, length: Int64) throws -> Descriptor {
        let fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        try #require(fd >= 0)
        _ = Array("the owner's bytes".utf8).withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        try #require(ftruncate(fd, off_t(length)) == 0)
        return Descriptor(fd, display: path)
    }

    static let tiny = ContentLimits(time: .milliseconds(200), timePerGiB: .zero, memory: 0)

    @Test("a copy of a 1 TiB hole stops once the user's time is spent: the error names the file and the budget")
    func copyStops() throws {
        let folder = TemporaryFolder()
        let source = try Self.hole(folder.child("photo-9"), length: 1 << 40)
        let account = ContentAccount(limits: Self.tiny, storesOfSize: 0)
        do {
            _ = try FileDigest.copy(from: source, to: folder.child("copy"), limit: 1 << 40, account: account)
            Issue.record("a 1 TiB copy finished within 200 ms")
        } catch let error as CopyTimeError {
            #expect(error.path == folder.child("photo-9"))
            #expect(error.budget == .milliseconds(200))
            #expect(
                error.description.contains("photo-9") && error.description.contains("time budget of 200ms"), "\(error)")
        }
        #expect(account.isSpent)
        // What was copied before the budget ran out is far from the file's length.
        let copied = try #require(FileSystem.status(folder.child("copy")))
        #expect(Int64(copied.st_size) < 1 << 40)
    }

    @Test("a read (a hash of a user's file) stops the same way")
    func readStops() throws {
        let folder = TemporaryFolder()
        let source = try Self.hole(folder.child("photo-9"), length: 1 << 40)
        let account = ContentAccount(limits: Self.tiny, storesOfSize: 0)
        #expect(throws: CopyTimeError.self) { try FileDigest.of(source, limit: 1 << 40, account: account) }
    }

    @Test("time spent before the copy counts: an account already spent stops the copy at its first piece")
    func spentBefore() throws {
        let folder = TemporaryFolder()
        let source = try Self.hole(folder.child("photo-9"), length: 4 << 20)
        let account = ContentAccount(limits: Self.tiny, storesOfSize: 0)
        account.charge(.milliseconds(250))
        #expect(throws: CopyTimeError.self) {
            try FileDigest.copy(from: source, to: folder.child("copy"), limit: 4 << 20, account: account)
        }
    }

    @Test("each copy adds time_per_gib for each GiB of the file's blocks; an account without a budget keeps none")
    func allowance() throws {
        let account = ContentAccount(
            limits: ContentLimits(time: .seconds(1), timePerGiB: .seconds(120), memory: 0), storesOfSize: 0)
        #expect(account.limit == .seconds(1))
        account.allow(copyOf: 1 << 29)
        #expect(account.limit == .seconds(61))
        account.charge(.seconds(60))
        #expect(!account.isSpent)
        account.charge(.seconds(2))
        #expect(account.isSpent)
        let none = ContentAccount(limits: .unlimited, storesOfSize: 1 << 30)
        none.allow(copyOf: 1 << 30)
        none.charge(.seconds(3600))
        #expect(none.limit == .zero)
        #expect(!none.isSpent)
    }

    @Test("with a budget that is not spent, the copy is whole and its hash the file's")
    func wholeWithinBudget() throws {
        let folder = TemporaryFolder()
        let source = try Self.hole(folder.child("photo-1"), length: 3 << 20)
        let account = ContentAccount(limits: .defaults, storesOfSize: 0)
        let (size, sha256) = try FileDigest.copy(
            from: source, to: folder.child("copy"), limit: 3 << 20, account: account)
        #expect(size == 3 << 20)
        #expect(sha256 == (try FileDigest.of(folder.child("photo-1"))).sha256)
        #expect(account.spent > .zero)
    }
}
