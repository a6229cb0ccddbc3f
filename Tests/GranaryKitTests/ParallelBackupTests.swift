import Foundation
import GranaryTestSupport
import Testing

@testable import GranaryKit

/// Several users backed up at once in one process (`BackupRun`, `--jobs`): what the threads share
/// (the CPU yield, the content limits, the tee VFS, the lock files) is used by all of them at the
/// same time. `make tsan` runs this suite under the thread sanitizer.
@Suite("parallel backup in one process")
struct ParallelBackupTests {
    @Test("four users, three at a time: every archive is published and verifies")
    func parallel() throws {
        let folder = TemporaryFolder()
        let root = folder.child("root")
        try SampleData.generate(in: root)
        let (users, _) = try Root(path: root).scan()
        #expect(users.count >= 3, "the sample data has \(users)")
        var options = BackupOperation.Options()
        options.overlap.minimumSize = 0
        let repository = LocalRepository(path: initializedRepository(folder.child("repo")))
        let operation = BackupOperation(root: Root(path: root), repository: repository, options: options)
        let outcomes = BackupRun.run(operation, users: users, jobs: 3)
        #expect(outcomes.map(\.user) == users)
        for outcome in outcomes {
            let result = try #require(outcome.result, "\(outcome.user): \(String(describing: outcome.error))")
            _ = try ArchiveVerifier.verify(archive: result.archive, workFolder: folder.child("work"), check: .full)
        }
    }
}
