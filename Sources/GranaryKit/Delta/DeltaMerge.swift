import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Prune's merging of deltas (issue 35): a run of deltas that only a kept delta needs is replaced
/// by one archive built from the archives alone (no live store), written, read back and proven,
/// published, and only then are the archives it replaces removed (write, then delete).
///
/// The rule (docs/delta.md "Prune merges"): a **tip** is a delta that the policy keeps and that no
/// kept delta is built on. Its chain is followed back while each base is a delta kept by nothing but
/// "base of" the archive after it; those bases are the **run**. The archive the walk stops at is the
/// run's base `A`. When the run is empty nothing is merged. Otherwise:
///
/// ```
/// A is a full kept by nothing but the run  → a new full of the tip's state replaces A, the run, the tip
/// otherwise                                 → a merged delta on A replaces the run and the tip
/// stage the tip (chain rebuilt, state digest and integrity_check checked)  in a scratch folder
/// hash its pages; a delta: the pages that differ from A's, external files new or changed since A
/// write → publish (the tip's time and label, the next free sequence: `…_2-delta`; a full drops `-delta`)
/// read it back from the repository, rebuild it, check every store's state digest == the tip's
/// remove the tip, then the run newest first, then A (every remaining chain stays whole at each step)
/// ```
///
/// The merged archive names what it replaces (`delta.replaces`): after a crash between publishing
/// and removing, the next prune sees the replaced tip beside it (same time and label) and removes
/// it rather than keeping or merging it twice.
public enum DeltaMerge {
    /// One merge of a prune plan.
    public struct Merge: Sendable, Equatable {
        /// The kept delta the merge ends at: the merged archive takes its state, time and label.
        public let tip: RepositoryEntry
        /// The deltas between `base` and the tip that nothing else keeps, oldest first.
        public let run: [RepositoryEntry]
        /// The archive the merged delta is built on, or the full a new full replaces.
        public let base: RepositoryEntry
        /// A new full (replacing `base` too) rather than a merged delta on `base`.
        public let full: Bool

        /// What the merged archive replaces, oldest first.
        public var replaced: [RepositoryEntry] { (full ? [base] : []) + run + [tip] }
    }

    /// A label without its `delta` suffix (nil for `delta` alone): the label of a new full that
    /// replaces a delta so labelled, and what twins share.
    public static func stem(_ label: String?) -> String? {
        guard let label else { return nil }
        if label == ArchiveName.deltaLabel { return nil }
        if label.hasSuffix("-" + ArchiveName.deltaLabel) {
            return String(label.dropLast(ArchiveName.deltaLabel.count + 1))
        }
        return label
    }

    /// The merges a prune plan allows, given what it keeps (`kept`: path → reasons, bases
    /// included) of one user's `archives` (oldest first). A chain whose manifests cannot be read
    /// is left as it is.
    public static func plan(
        archives: [RepositoryEntry], kept: [String: [String]], repository: any Repository
    ) -> [Merge] {
        let basePrefix = DeltaChains.baseReason(of: "")
        var merges: [Merge] = []
        for tip in archives where tip.name.saysDelta && tip.name.kind == .backup {
            let reasons = kept[tip.path] ?? []
            guard !reasons.isEmpty, !reasons.contains(where: { $0.hasPrefix(basePrefix) }) else { continue }
            var run: [RepositoryEntry] = []
            var current = tip
            var stop: (entry: RepositoryEntry, isDelta: Bool)?
            while run.count < DeltaRestore.chainLimit {
                guard let (manifest, _) = try? DeltaRestore.head(current, repository: repository),
                    let baseName = manifest.delta?.base?.name,
                    let base = archives.first(where: { $0.name.isNamed(baseName) })
                else { break }
                let baseReasons = kept[base.path] ?? []
                guard let (baseManifest, _) = try? DeltaRestore.head(base, repository: repository) else { break }
                if base.name.kind == .backup, baseManifest.isDelta,
                    baseReasons == [DeltaChains.baseReason(of: current.name.fileName)]
                {
                    run.insert(base, at: 0)
                    current = base
                    continue
                }
                stop = (base, baseManifest.isDelta)
                break
            }
            guard let stop, !run.isEmpty else { continue }
            let full =
                !stop.isDelta && stop.entry.name.kind == .backup
                && (kept[stop.entry.path] ?? []) == [DeltaChains.baseReason(of: run[0].name.fileName)]
            merges.append(Merge(tip: tip, run: run, base: stop.entry, full: full))
        }
        return merges
    }

    /// What interrupted merges left (a prune stopped after publishing a merged archive, before
    /// removing what it replaces). A merged archive is trusted once proven (its verification
    /// record, written after the proof): the archives it replaces that are still there beside it
    /// (same time and label) are `superseded` and count for no rule. One found unproven (stopped
    /// between publishing and proving) counts for no rule itself (`unproven`): it goes unless a kept
    /// delta was built on it meanwhile, and the merge is made again. Only an archive with a twin
    /// of the same time and label (the `delta` suffix aside: a new full drops it) is read.
    public static func interrupted(in archives: [RepositoryEntry], repository: any Repository) -> (
        superseded: Set<String>, unproven: Set<String>
    ) {
        var superseded: Set<String> = []
        var unproven: Set<String> = []
        for merged in archives {
            let twins = archives.filter {
                $0 != merged && $0.name.created == merged.name.created
                    && stem($0.name.label) == stem(merged.name.label)
            }
            guard !twins.isEmpty, let (manifest, _) = try? DeltaRestore.head(merged, repository: repository),
                let replaces = manifest.delta?.replaces
            else { continue }
            guard repository.records(for: [merged])[merged.path]?.isGood == true else {
                unproven.insert(merged.path)
                continue
            }
            for twin in twins where replaces.contains(where: twin.name.isNamed) { superseded.insert(twin.path) }
        }
        return (superseded, unproven)
    }

    /// Writes the archive `merge` calls for, publishes it, reads it back and proves it (every
    /// store rebuilds to the tip's state digest and passes `integrity_check`), records that
    /// verification, and returns it. Nothing is removed here; on any failure the new archive is
    /// removed again and the old ones are as they were.
    public static func build(_ merge: Merge, repository: any Repository, user: UserID) throws -> RepositoryEntry {
        do {
            return try make(merge, repository: repository, user: user)
        } catch let error as InterruptedError {
            throw error
        } catch {
            throw MergeFailure(
                tip: merge.tip.path, user: user.rawValue, name: merge.tip.name.fileName, underlying: error)
        }
    }

    private static func make(_ merge: Merge, repository: any Repository, user: UserID) throws -> RepositoryEntry {
        let work = try repository.prepareWorkFolder()
        let scratch = try FileSystem.createTemporaryDirectory(in: work, for: "merge")
        defer { FileSystem.removeTree(scratch) }
        let staging = scratch + "/staged"
        try FileSystem.makeDirectory(staging)
        let (tipManifest, _) = try DeltaRestore.head(merge.tip, repository: repository)
        guard let tipInfo = tipManifest.delta,
            try DeltaRestore.stage(merge.tip, repository: repository, into: staging, user: user, durable: false)
                != nil
        else {
            throw VerificationFailure(archive: merge.tip.path, reason: "is not a delta")
        }
        CrashPoint.reach(.mergeStaged)
        // Every store of the tip's state, hashed.
        var pages: [String] = []
        for (index, store) in tipInfo.stores.enumerated() {
            try Interruption.check()
            let path = scratch + "/\(index).pages"
            let summary = try PageFiles.hash(
                file: staging + "/" + Manifest.storesFolder + store.name, pageSize: store.pageSize, writingTo: path)
            guard summary.stateDigest == store.stateDigest else {
                throw VerificationFailure(
                    archive: merge.tip.path, reason: "rebuilds \(store.name) with another state digest than it records")
            }
            pages.append(path)
        }
        let external = tipInfo.external ?? []
        var members: [ArchiveBuilder.Member] = []
        var info: DeltaInfo
        func member(_ source: String, _ path: String, _ kind: Manifest.File.Kind, mode: UInt32? = nil) throws {
            let file = try ArchiveBuilder.hash(source, member: path, kind: kind, mode: mode, mappable: false)
            members.append(ArchiveBuilder.Member(source: source, file: file, mappable: false))
        }
        if merge.full {
            info = DeltaInfo(
                base: nil, chainLength: 0, fullCreated: tipManifest.created,
                stores: tipInfo.stores.map {
                    DeltaInfo.Store(
                        name: $0.name, pageSize: $0.pageSize, pageCount: $0.pageCount, stateDigest: $0.stateDigest,
                        pages: PageFiles.pagesMember($0.name), liveFile: $0.liveFile)
                })
            for (index, store) in tipInfo.stores.enumerated() {
                try member(pages[index], PageFiles.pagesMember(store.name), .pages)
            }
            for store in tipManifest.stores {
                try member(staging + "/" + store.path, store.path, .store)
            }
            for file in external { try member(staging + "/" + file.path, file.path, .external, mode: file.mode) }
        } else {
            let baseScratch = scratch + "/base"
            try FileSystem.makeDirectory(baseScratch)
            let head: BaseHead
            switch BaseHead.read(merge.base, repository: repository, into: baseScratch) {
            case .failure(let failure):
                throw VerificationFailure(archive: merge.base.path, reason: "cannot serve as a base: \(failure)")
            case .success(let value): head = value
            }
            guard let baseInfo = head.manifest.delta else {
                throw VerificationFailure(archive: merge.base.path, reason: "has no page hashes")
            }
            var changes: [DeltaInfo.Store] = []
            for (index, store) in tipInfo.stores.enumerated() {
                try Interruption.check()
                guard let basePages = head.pages[store.name] else {
                    throw VerificationFailure(
                        archive: merge.base.path, reason: "lacks the page hashes of \(store.name)")
                }
                let path = scratch + "/\(index).delta"
                let changed = try PageChanges.write(
                    snapshot: staging + "/" + Manifest.storesFolder + store.name, current: pages[index],
                    base: basePages, to: path)
                try member(path, PageFiles.deltaMember(store.name), .pageDelta)
                changes.append(
                    DeltaInfo.Store(
                        name: store.name, pageSize: store.pageSize, pageCount: store.pageCount,
                        stateDigest: store.stateDigest, changes: PageFiles.deltaMember(store.name),
                        changedPages: changed, liveFile: store.liveFile))
            }
            let before =
                head.manifest.isDelta
                ? (baseInfo.external ?? []) : head.manifest.files.filter { $0.kind == .external }
            let known = Dictionary(before.map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first })
            for file in external where known[file.path] != file {
                try member(staging + "/" + file.path, file.path, .external, mode: file.mode)
            }
            let now = Set(external.map(\.path))
            info = DeltaInfo(
                base: DeltaInfo.Base(name: merge.base.name.fileName, manifestSHA256: head.manifestSHA256),
                chainLength: baseInfo.chainLength + 1, fullCreated: baseInfo.fullCreated, stores: changes,
                external: external, removed: before.map(\.path).filter { !now.contains($0) })
        }
        for file in members where file.file.kind == .external {
            guard external.contains(where: { $0.path == file.file.path && $0.sha256 == file.file.sha256 }) else {
                throw VerificationFailure(
                    archive: merge.tip.path, reason: "rebuilds \(file.file.path) with other bytes than it records")
            }
        }
        info.replaces = merge.replaced.map(\.name.fileName)
        CrashPoint.reach(.mergeHashed)
        var settings = ArchiveBuilder.Settings()
        settings.kind = .backup
        // A new full is not named a delta: the tip's label without its `delta` suffix.
        settings.label = merge.full ? stem(merge.tip.name.label) : merge.tip.name.label
        settings.compression = merge.tip.name.compression
        settings.check = .none
        settings.mapStores = false
        let builder = ArchiveBuilder(repository: repository, user: user, settings: settings)
        var manifest = builder.manifest(
            created: tipManifest.created, stores: tipManifest.stores, members: members, folder: tipManifest.folder,
            folders: tipManifest.folders ?? [:])
        manifest.delta = info
        let written = try builder.write(
            manifest, members: members, into: try repository.stagingFolder(for: user), created: merge.tip.name.created)
        var moved = false
        defer {
            close(written.fd)
            if !moved { unlink(written.temporary) }
        }
        CrashPoint.reach(.mergeWritten)
        // The tip's time, the next sequence of that moment: it sorts right after the tip it replaces.
        let sequence =
            (try repository.archives(of: user, host: nil).filter { $0.name.micros == merge.tip.name.micros }
                .map(\.name.sequence).max() ?? merge.tip.name.sequence) + 1
        let entry = try builder.publish(written, created: merge.tip.name.created, sequence: sequence) { moved = true }
        CrashPoint.reach(.mergePublished)
        do {
            // Invariant D11 (docs/delta-invariants.md)
            try prove(entry, states: tipInfo.stores, repository: repository, user: user, work: scratch)
        } catch {
            try? repository.removeRecorded([entry])
            throw error
        }
        try? repository.writeRecord(VerificationRecord(entry: entry, good: true, reason: nil, check: .full), for: entry)
        CrashPoint.reach(.mergeProven)
        return entry
    }

    /// Reads `entry` back from the repository into a scratch folder (a delta rebuilt from its
    /// chain) and checks that every store has the state digest of `states` and passes
    /// `integrity_check`.
    static func prove(
        _ entry: RepositoryEntry, states: [DeltaInfo.Store], repository: any Repository, user: UserID, work: String
    ) throws {
        let folder = try FileSystem.createTemporaryDirectory(in: work, for: "proof")
        defer { FileSystem.removeTree(folder) }
        let manifest: Manifest
        if let staged = try DeltaRestore.stage(entry, repository: repository, into: folder, user: user, durable: false)
        {
            manifest = staged
        } else {
            manifest = try ArchiveVerifier.extract(
                source: try repository.open(entry), name: entry.path, into: folder, check: .full,
                expectedUser: user.rawValue, durable: false
            ).manifest
        }
        for state in states {
            guard let store = manifest.stores.first(where: { $0.name == state.name }) else {
                throw VerificationFailure(archive: entry.path, reason: "lacks \(state.name)")
            }
            let summary = try PageFiles.hash(file: folder + "/" + store.path, pageSize: state.pageSize)
            guard summary.stateDigest == state.stateDigest else {
                throw VerificationFailure(
                    archive: entry.path,
                    reason: "rebuilds \(state.name) with state digest \(summary.stateDigest), not \(state.stateDigest)")
            }
        }
    }
}

/// A merge prune could not make (``DeltaMerge/build(_:repository:user:)``): nothing was removed,
/// and the merged archive, if it was published, was removed again.
public struct MergeFailure: GranaryError, Sendable {
    /// The kept delta whose run was to be merged (its path).
    public let tip: String
    /// Its user and file name (for the hint's `USER/NAME`).
    public let user: String
    public let name: String
    /// What went wrong.
    public let underlying: any Error & Sendable

    public var description: String {
        "cannot merge the deltas before \(tip) (nothing was removed): \((underlying as? any GranaryError)?.description ?? "\(underlying)")"
    }
}
