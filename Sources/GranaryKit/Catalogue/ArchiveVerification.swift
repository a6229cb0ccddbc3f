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
        /// For a delta verified before whose chain has not changed since: when it was verified
        /// (nothing was read again).
        public var unchangedSince: Date?
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
                if entry.name.saysDelta, let repository, entry.object != nil {
                    outcomes.append(
                        try verifyDelta(
                            entry, repository: repository, check: check, work: work, context: context, done: &done))
                    continue
                }
                let result = try verifyOwn(entry)
                done[entry.path] = .some(nil)
                // A signal during the last checks: nothing is recorded.
                try Interruption.check()
                try record(entry, good: true, reason: nil, check: check, in: repository)
                outcomes.append(
                    Outcome(entry: entry, failure: nil, stores: result.manifest.stores.count, bytes: result.bytes))
            } catch let failure as VerificationFailure {
                if done[entry.path] == nil { done[entry.path] = .some(failure) }
                let reason = failure.member.map { $0 + " " + failure.reason } ?? failure.reason
                try? record(entry, good: false, reason: reason, check: check, in: repository)
                outcomes.append(Outcome(entry: entry, failure: failure, stores: 0, bytes: 0))
            }
        }
        return outcomes
    }

    /// A delta of the repository, verified with its whole chain, each archive of it read once:
    /// the chain's heads (``ChainLinks``), then one rebuild that checks every link's
    /// members against its manifest as it reads them and the rebuilt stores against the state the
    /// delta records (``DeltaRestore``). A delta verified before, whose chain is listed as it was
    /// then (each link's name, size and modification stamp) and none of whose links verify has
    /// found bad since, is not read again. A link at fault is recorded bad and named.
    private static func verifyDelta(
        _ entry: RepositoryEntry, repository: any Repository, check: CheckMode, work: String, context: RunContext,
        done: inout [String: VerificationFailure?]
    ) throws -> Outcome {
        let archives = try repository.archives(of: entry.user)
        let sidecars = repository.readSidecars(in: entry.user.rawValue)
        if let outcome = unchanged(entry, archives: archives, sidecars: sidecars) { return outcome }
        let walked: ChainLinks
        switch ChainLinks.walk(entry, repository: repository, archives: archives, records: false) {
        case .failure(let broken):
            if broken.archive == entry.name.fileName {
                // The delta's own head cannot be read: its own fault, named as verify of any
                // archive names it (the member and what is wrong).
                _ = try context.cpu.yielding {
                    try ArchiveVerifier.verify(
                        source: try repository.open(entry), name: entry.path, workFolder: work, check: check,
                        expectedUser: entry.user.rawValue, limits: context.limits)
                }
            }
            throw VerificationFailure(archive: entry.path, reason: "does not restore: its chain \(broken.description)")
        case .success(let value): walked = value
        }
        guard walked.links.count >= 2 else {
            throw VerificationFailure(
                archive: entry.path, member: Manifest.memberName, reason: "has no base, though its name says delta")
        }
        func bad(_ link: RepositoryEntry, _ failure: VerificationFailure) -> VerificationFailure {
            VerificationFailure(
                archive: entry.path,
                reason:
                    "does not restore: its chain holds \(link.name.fileName), which is bad (\(DeltaRestore.reason(failure, of: link)))"
            )
        }
        for link in walked.links.dropFirst() {
            if let known = done[link.entry.path], let failure = known { throw bad(link.entry, failure) }
        }
        let observer = DeltaRestore.Observer()
        let manifest: Manifest?
        do {
            manifest = try context.cpu.yielding {
                try DeltaRestore.verifyChain(
                    entry, repository: repository, work: work, links: walked.links.map { ($0.entry, $0.manifest) },
                    observer: observer, limits: context.limits)
            }
        } catch let failure as VerificationFailure {
            guard let (link, own) = observer.fault else { throw failure }
            // The tip's own member: reported as its own, as verify of a full reports one.
            if link.path == entry.path { throw own }
            done[link.path] = .some(own)
            try? record(
                link, good: false, reason: own.member.map { $0 + " " + own.reason } ?? own.reason, check: check,
                in: repository)
            throw bad(link, own)
        }
        // A signal during the last checks: nothing is recorded.
        try Interruption.check()
        for link in walked.links where done[link.entry.path] == nil { done[link.entry.path] = .some(nil) }
        // A link with no record that matches it (its backup checked nothing, or it was touched
        // since): its members were just proved against its manifest, the one the delta after it
        // was built on, so it is not "changed" for backup and check. Its own restore was not proved
        // (for a delta, its state): the record says verified, not restorable. A record that matches
        // (the backup's own, a verify's) is left as it is.
        for link in walked.links.dropFirst()
        where sidecars[link.entry.name.fileName].flatMap({ VerificationRecord.decode($0, matching: link.entry) })
            == nil
        {
            var linkRecord = VerificationRecord(entry: link.entry, good: true, reason: nil, check: .full)
            linkRecord.restorable = false
            try? repository.writeRecord(linkRecord, for: link.entry)
        }
        let stores = manifest?.stores.count ?? walked.links[0].manifest.stores.count
        var record = VerificationRecord(entry: entry, good: true, reason: nil, check: .full)
        record.restorable = true
        record.chain = walked.identity
        record.stores = stores
        try repository.writeRecord(record, for: entry)
        var outcome = Outcome(entry: entry, failure: nil, stores: stores, bytes: observer.bytes)
        outcome.chain = walked.links.dropFirst().map(\.entry.name.fileName)
        return outcome
    }

    /// The outcome of a delta verify rebuilt before, when nothing of its chain changed since: its
    /// record still matches it and says it restores, after a full `integrity_check`; every link
    /// its record names is listed with the size and modification stamp it had; no link has a
    /// record that says it is bad or changed. Nil when it must be read again.
    static func unchanged(
        _ entry: RepositoryEntry, archives: [RepositoryEntry], sidecars: [String: [UInt8]]
    ) -> Outcome? {
        guard let bytes = sidecars[entry.name.fileName],
            let record = VerificationRecord.decode(bytes, matching: entry),
            record.result == .ok, record.by == nil, record.restorable == true, record.check == CheckMode.full.rawValue,
            let chain = record.chain, chain.count >= 2,
            chain[0].hasPrefix(entry.name.fileName + " ")
        else { return nil }
        var links: [String] = []
        for line in chain.dropFirst() {
            let parts = line.split(separator: " ", omittingEmptySubsequences: false)
            guard parts.count >= 4 else { return nil }
            let name = parts.dropLast(3).joined(separator: " ")
            guard
                let link = archives.first(where: {
                    $0.name.fileName == name && "\($0.size)" == parts[parts.count - 2]
                        && "\($0.modified)" == parts[parts.count - 1]
                }), ChainLinks.problem(with: link, sidecars: sidecars) == nil
            else { return nil }
            links.append(name)
        }
        var outcome = Outcome(entry: entry, failure: nil, stores: record.stores ?? 0, bytes: 0)
        outcome.chain = links
        outcome.unchangedSince = record.verified
        return outcome
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
