import Foundation

/// `granary verify` over several archives: each is verified in a private folder under the
/// repository's work folder, and the result is recorded beside it (`VerificationRecord`).
public enum ArchiveVerification {
    /// One archive's result.
    public struct Outcome: Sendable {
        public let entry: Repository.Entry
        /// What is wrong, or `nil` when the archive is good.
        public let failure: VerificationFailure?
        public let stores: Int
        public let bytes: Int64
    }

    /// The folder under the repository where verification extracts (beside backup's).
    public static func workFolder(_ repository: Repository) -> String { repository.workFolder }

    /// Verifies each entry in turn. Data faults are outcomes; an interruption, a full disk or
    /// another error of the machine (not of the archive) is thrown.
    public static func run(_ entries: [Repository.Entry], repository: Repository, check: CheckMode) throws -> [Outcome] {
        var outcomes: [Outcome] = []
        for entry in entries {
            try Interruption.check()
            do {
                // Work on granary's own files only: it yields the CPU to the owners (CPUYield).
                let result = try CPUYield.shared.yielding {
                    try ArchiveVerifier.verify(
                        archive: entry.path, workFolder: workFolder(repository), check: check, expectedUser: entry.user.rawValue)
                }
                try VerificationRecord(archive: entry.path, good: true, reason: nil, check: check)?.write(for: entry.path)
                outcomes.append(Outcome(entry: entry, failure: nil, stores: result.manifest.stores.count, bytes: result.bytes))
            } catch let failure as VerificationFailure {
                let reason = failure.member.map { $0 + " " + failure.reason } ?? failure.reason
                try? VerificationRecord(archive: entry.path, good: false, reason: reason, check: check)?.write(for: entry.path)
                outcomes.append(Outcome(entry: entry, failure: failure, stores: 0, bytes: 0))
            }
        }
        return outcomes
    }
}
