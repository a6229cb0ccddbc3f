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
        /// For a delta: the archives of its chain rebuilt with it (its base back to its full);
        /// empty for a full.
        public var chain: [String] = []
        /// Whether the archive restores as verified (a full, or a delta with its whole chain).
        public var restorable: Bool { failure == nil }
    }

    /// The local folder where verification extracts (beside backup's).
    public static func workFolder(_ repository: any Repository) throws -> String { try repository.prepareWorkFolder() }

    /// Verifies each entry in turn. Data faults are outcomes; an interruption, a full disk, a
    /// failed download or another error of the machine (not of the archive) is thrown, and
    /// records nothing. With no repository (files outside any, named by their paths), the work
    /// is done in a private temporary folder, removed after.
    /// A delta archive of the repository is also rebuilt from its whole chain in a scratch folder,
    /// and its stores checked against the state it records (`DeltaRestore`): "verified" means the
    /// archive restores (issue 46; `chain`, `verify --chain`, is kept and now always on). A
    /// delta whose chain is not whole, or does not rebuild, is recorded bad, with the link named.
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
        // Each archive's own verification, once per run (issue 46): a user's chain shares its links.
        var done: [String: VerificationFailure?] = [:]
        func verifyOwn(_ entry: RepositoryEntry) throws -> ArchiveVerifier.Outcome {
            // Work on granary's own files only: it yields the CPU to the owners (CPUYield).
            try context.cpu.yielding {
                try ArchiveVerifier.verify(
                    source: try repository?.open(entry) ?? .file(entry.localFile ?? entry.path), name: entry.path,
                    workFolder: work,
                    check: check,
                    expectedUser: entry.user.rawValue, limits: context.limits)
            }
        }
        for entry in entries {
            try Interruption.check()
            do {
                let result = try verifyOwn(entry)
                done[entry.path] = .some(nil)
                var links: [String] = []
                if result.manifest.isDelta, let repository, entry.object != nil {
                    // The chain's heads first (cheap, and names the link at fault), then each link's
                    // own members (once per run), then the rebuild.
                    let walked: ChainLinks
                    switch ChainLinks.walk(entry, repository: repository, records: false) {
                    case .failure(let broken):
                        throw VerificationFailure(
                            archive: entry.path, reason: "does not restore: its chain \(broken.description)")
                    case .success(let value): walked = value
                    }
                    for link in walked.links.dropFirst() {
                        try Interruption.check()
                        var failure: VerificationFailure? = nil
                        if let known = done[link.entry.path] {
                            failure = known
                        } else {
                            do {
                                _ = try verifyOwn(link.entry)
                                // A full verified here restores: recorded, as verify of it would.
                                if !link.manifest.isDelta {
                                    try record(link.entry, good: true, reason: nil, check: check, in: repository)
                                }
                            } catch let linkFailure as VerificationFailure {
                                failure = linkFailure
                                let reason = linkFailure.member.map { $0 + " " + linkFailure.reason }
                                try? record(
                                    link.entry, good: false, reason: reason ?? linkFailure.reason, check: check,
                                    in: repository)
                            }
                            done[link.entry.path] = .some(failure)
                        }
                        if let failure {
                            throw VerificationFailure(
                                archive: entry.path,
                                reason:
                                    "does not restore: its chain holds \(link.entry.name.fileName), which is bad (\(DeltaRestore.reason(failure, of: link.entry)))"
                            )
                        }
                    }
                    links = walked.links.dropFirst().map(\.entry.name.fileName)
                    try context.cpu.yielding {
                        try DeltaRestore.verifyChain(entry, repository: repository, work: work)
                    }
                }
                // A signal during the last checks: nothing is recorded.
                try Interruption.check()
                try record(entry, good: true, reason: nil, check: check, in: repository)
                var outcome = Outcome(
                    entry: entry, failure: nil, stores: result.manifest.stores.count, bytes: result.bytes)
                outcome.chain = links
                outcomes.append(outcome)
            } catch let failure as VerificationFailure {
                if done[entry.path] == nil { done[entry.path] = .some(failure) }
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
        var record = VerificationRecord(entry: entry, good: good, reason: reason, check: check)
        // Verify rebuilds every delta of the repository from its chain: a pass is a restore.
        record.restorable = good
        try repository.writeRecord(record, for: entry)
    }
}
