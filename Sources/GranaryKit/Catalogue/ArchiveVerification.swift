import Foundation

/// `granary verify` over several archives: each is verified in a private folder under the
/// repository's work folder, and the result of each archive of the repository is recorded beside
/// it (`VerificationRecord`). A file outside the repository (an entry with no object) is verified
/// alike, and nothing is written beside it: granary writes only in its own folders.
public enum ArchiveVerification {
    /// One archive's result.
    public struct Outcome: Sendable {
        public let entry: RepositoryEntry
        /// What is wrong, or `nil` when the archive is good.
        public let failure: VerificationFailure?
        public let stores: Int
        public let bytes: Int64
    }

    /// The local folder where verification extracts (beside backup's).
    public static func workFolder(_ repository: any Repository) throws -> String { try repository.prepareWorkFolder() }

    /// Verifies each entry in turn. Data faults are outcomes; an interruption, a full disk, a
    /// failed download or another error of the machine (not of the archive) is thrown, and
    /// records nothing. With no repository (files outside any, named by their paths), the work
    /// is done in a private temporary folder, removed after.
    /// With `chain` (issue 35), a delta archive of the repository is also rebuilt from its chain
    /// in a scratch folder, and its stores checked against the state it records (`DeltaRestore`).
    public static func run(
        _ entries: [RepositoryEntry], repository: (any Repository)?, check: CheckMode, context: RunContext,
        chain: Bool = false
    ) throws -> [Outcome] {
        var outcomes: [Outcome] = []
        var scratch: String?
        defer { scratch.map(FileSystem.removeTree) }
        let work: String
        if let repository {
            work = try workFolder(repository)
        } else {
            scratch = try FileSystem.createTemporaryDirectory(in: NSTemporaryDirectory(), for: "granary-verify")
            work = scratch!
        }
        for entry in entries {
            try Interruption.check()
            do {
                // Work on granary's own files only: it yields the CPU to the owners (CPUYield).
                let result = try context.cpu.yielding {
                    try ArchiveVerifier.verify(
                        source: try repository?.open(entry) ?? .file(entry.localFile ?? entry.path), name: entry.path,
                        workFolder: work,
                        check: check,
                        expectedUser: entry.user.rawValue, limits: context.limits)
                }
                if chain, let repository, entry.object != nil {
                    try context.cpu.yielding {
                        try DeltaRestore.verifyChain(entry, repository: repository, work: work)
                    }
                }
                // A signal during the last checks: nothing is recorded.
                try Interruption.check()
                try record(entry, good: true, reason: nil, check: check, in: repository)
                outcomes.append(
                    Outcome(entry: entry, failure: nil, stores: result.manifest.stores.count, bytes: result.bytes))
            } catch let failure as VerificationFailure {
                let reason = failure.member.map { $0 + " " + failure.reason } ?? failure.reason
                try? record(entry, good: false, reason: reason, check: check, in: repository)
                outcomes.append(Outcome(entry: entry, failure: failure, stores: 0, bytes: 0))
            }
        }
        return outcomes
    }

    /// Writes the verification record of `entry`, an archive of `repository` (none for a file
    /// outside it).
    static func record(
        _ entry: RepositoryEntry, good: Bool, reason: String?, check: CheckMode, in repository: (any Repository)?
    ) throws {
        guard let repository, entry.object != nil else { return }
        try repository.writeRecord(
            VerificationRecord(entry: entry, good: good, reason: reason, check: check), for: entry)
    }
}
