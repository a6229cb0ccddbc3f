import Foundation
import GranaryDigest

/// When `backup --delta` writes a delta and when a full (issue 35). The defaults suit an hourly
/// backup: a full at least once a day (23 deltas after it), once a week whatever the pace, and
/// whenever more than half of the pages changed (a VACUUM rewrites them all).
public struct DeltaPolicy: Sendable, Equatable {
    /// The most deltas after a full (`23`: with hourly backups, a full a day).
    public var maxChain = 23
    /// A full when more than this share of the pages changed (`0.5`).
    public var maxChangedShare = 0.5
    /// A full when the chain's full is older than this (`7` days).
    public var maxAge: TimeInterval = 7 * 86_400
    /// `backup --full`: a full (with page hashes) whatever the rest says.
    public var forceFull = false
    /// Phase 2 (issue 51): how many deltas in a row of a chain may be checked by the pages they
    /// read alone (``PageCheck``, `check: pages`) before one runs the configured check on the whole
    /// store again (`5`: with hourly backups, a quick_check at least every six hours, and on every
    /// full); 0: the configured check on every delta, as before.
    public var maxPagesChecks = 5
    public init() {}
}

/// What `backup --delta` wrote.
public struct DeltaOutcome: Sendable, Equatable {
    /// A delta (else a full with page hashes).
    public var isDelta: Bool
    /// The delta's base (its file name).
    public var base: String?
    /// Why a full was written.
    public var reason: String?
    /// Pages the delta carries, and all pages of the stores.
    public var changedPages: Int
    public var pages: Int
    /// Phase 2 (issue 51): the stores whose pages came from `follow`'s record (only the pages it
    /// saw change were hashed), those pages' count, and why a store's pages were all hashed (the
    /// first such store; nil when none was, or phase 2 was not tried: no follow source).
    public var followedStores = 0
    public var candidatePages = 0
    public var followedFallback: String?
    /// Phase 2's copy: the stores whose candidates were read alone (no copy through SQLite's
    /// backup API), and why a store's copy went through the backup API after all (the first).
    public var pagesReadStores = 0
    public var backupAPIReason: String?
    /// Phase 2's check: the stores checked by the pages read alone (`check: pages`), and why a
    /// store had the configured check after all (the first; nil when none had, or it was not tried).
    public var pagesCheckedStores = 0
    public var fullCheckReason: String?
}

/// Turns a backup's snapshots into a full with page hashes or a delta against the newest backup
/// (the hook in `BackupOperation.runLocked`). Everything is streamed through files in the
/// backup's private work folder: memory stays flat.
enum DeltaBackup {
    /// A file to pack: where it is now and its manifest entry (`BackupOperation.Packed`).
    struct File {
        var source: String
        var file: Manifest.File
    }

    /// What to pack instead of the snapshots alone.
    struct Plan {
        var info: DeltaInfo
        var files: [File]
        var label: String?
        var outcome: DeltaOutcome
        /// The complete `.pages` file of each store, in order (kept by ``PageHashCache``).
        var pageLists: [String] = []
        /// A delta's base chain (``ChainLinks/identity``), proved whole before it was written;
        /// empty for a full. The page-hash cache keys the new archive's lists by it.
        var baseChain: [String] = []
    }

    /// What is decided before any store is copied: a full (and why), or the base a delta would be
    /// built on. The questions that do not need the new page hashes are answered here (`--full`,
    /// no earlier backup, a base without page hashes, another set of stores, the chain's length and
    /// age, format 2's file list); the page size and journal mode of each store are compared as it
    /// is opened, the changed share once the pages are hashed.
    enum Start {
        case full(String)
        case base(Base)
    }

    /// A base found before the copy.
    struct Base {
        var entry: RepositoryEntry
        var head: BaseHead
        var deltaLabel: String
        var policy: DeltaPolicy

        /// The page size and journal mode `store` had in the base.
        func store(_ name: String) -> (pageSize: Int, journalMode: String, pages: String)? {
            guard let info = head.manifest.delta?.stores.first(where: { $0.name == name }),
                let mode = head.manifest.stores.first(where: { $0.name == name })?.journalMode,
                let pages = head.pages[name]
            else { return nil }
            return (info.pageSize, mode, pages)
        }

        /// Whether a delta on this base may check `store` by the pages it reads alone
        /// (``PageCheck``): the run of such deltas it would make (1 after a base checked whole),
        /// or why the configured check runs. The base must have been checked (`quick` or `full`, or
        /// `pages` with its run recorded), and the run stay within ``DeltaPolicy/maxPagesChecks``.
        /// Invariant D15 (docs/delta-invariants.md)
        func pagesCheck(of store: String) -> Swift.Result<Int, FollowedFallback> {
            guard policy.maxPagesChecks > 0 else {
                return .failure(
                    .init("the check is set (--check, or check = in the configuration), or delta_pages_checks is 0"))
            }
            let checked = head.manifest.stores.first(where: { $0.name == store })?.check
            let run: Int
            switch checked {
            case CheckMode.quick.rawValue?, CheckMode.full.rawValue?: run = 0
            case PageCheck.name?:
                guard let recorded = head.manifest.delta?.stores.first(where: { $0.name == store })?.pagesChecks else {
                    return .failure(.init("the base does not record its run of pages checks"))
                }
                run = recorded
            default:
                return .failure(.init("the base was not checked (check: \(checked ?? "none"))"))
            }
            guard run < policy.maxPagesChecks else {
                return .failure(
                    .init(
                        "\(run) deltas in a row were checked by their pages alone (delta_pages_checks = \(policy.maxPagesChecks))"
                    ))
            }
            return .success(run + 1)
        }
    }

    /// Answers the questions of ``Start`` for a backup of `storeNames` made at about `created`;
    /// the base's page-hash lists go to a scratch folder in `work` (or come from the cache).
    static func start(
        policy: DeltaPolicy, user: UserID, repository: any Repository, storeNames: [String], work: String,
        label: String?, created: Date, cache: String? = nil, liveFiles: [String] = []
    ) throws -> Start {
        if policy.forceFull { return .full("a full was asked for (--full)") }
        let archives = try repository.archives(of: user)
        guard let entry = archives.last(where: { $0.name.kind == .backup }) else {
            return .full("there is no earlier backup")
        }
        // A restore or a reset since the base: its safety archive is newer (the stores are other
        // files too, which the plan sees even when the restore wrote no safety archive).
        // Names count seconds: one of the base's second may be either side of it, so it counts.
        if let safety = archives.last(where: { $0.name.kind == .safety && $0.name.created >= entry.name.created }) {
            return .full("the user was restored or reset after \(entry.name.fileName) (\(safety.name.fileName))")
        }
        let deltaLabel = ArchiveName.deltaLabel(after: label)
        guard ArchiveName.isValidLabel(deltaLabel) else { return .full("the label is too long to end in -delta") }
        let scratch = try FileSystem.createTemporaryDirectory(in: work, for: "base")
        let base: BaseHead
        switch BaseHead.read(entry, repository: repository, into: scratch, cache: cache) {
        case .failure(let reason): return .full("the newest backup, \(entry.name.fileName), \(reason)")
        case .success(let head): base = head
        }
        guard let baseInfo = base.manifest.delta else {
            return .full("the newest backup, \(entry.name.fileName), has no page hashes (it was not made with --delta)")
        }
        guard Set(baseInfo.stores.map(\.name)) == Set(storeNames), baseInfo.stores.count == storeNames.count else {
            return .full("the stores are not those of \(entry.name.fileName)")
        }
        if baseInfo.chainLength + 1 > policy.maxChain {
            return .full("the chain has \(baseInfo.chainLength) deltas already (at most \(policy.maxChain))")
        }
        if created.timeIntervalSince(baseInfo.fullCreated) > policy.maxAge {
            return .full("the chain's full is older than \(DurationText.format(seconds: Int64(policy.maxAge)))")
        }
        if base.manifest.fileList != nil {
            return .full("the stores have over \(Manifest.fileListThreshold) external-data files")
        }
        for (name, now) in zip(storeNames, liveFiles) {
            if let was = baseInfo.stores.first(where: { $0.name == name })?.liveFile, was != now {
                return .full(
                    "\(name) is another file than in \(entry.name.fileName) (a restore, a reset or a program replaced it)"
                )
            }
        }
        return .base(Base(entry: entry, head: base, deltaLabel: deltaLabel, policy: policy))
    }

    /// `started`: what ``start(policy:user:repository:storeNames:work:label:created:cache:)``
    /// decided before the copy (nil: decided here, after it). A store whose copy was discarded
    /// (its recorder ``PageRecorder/discarding``) has no snapshot file: its hashes and changed
    /// pages come from its recorder, and when a full is needed after all this throws
    /// ``NoCopyFallback`` (the caller copies the stores again, for real). `secondCopy`: why the
    /// stores were copied again, added to a full's reason.
    static func plan(
        policy: DeltaPolicy, user: UserID, repository: any Repository, stores: [Manifest.Store],
        files: [File], work: String, label: String?, created: Date, recorded: [PageRecorder?] = [],
        cache: String? = nil, liveFiles: [String] = [], started: Start? = nil, secondCopy: String? = nil
    ) throws -> Plan {
        func liveFile(_ index: Int) -> String? { index < liveFiles.count ? liveFiles[index] : nil }
        // 1. The page hashes of every snapshot: those the tee VFS recorded as the snapshot was
        // written (`PageRecorder`), else a second read of the snapshot.
        var summaries: [PageFiles.Summary] = []
        // Each store's new `.pages` file; its member entry (size and SHA-256, one more read of the
        // list) only when a full packs it: a delta carries its changed pages, not the list.
        var lists: [String] = []
        var snapshots: [String] = []
        for (index, store) in stores.enumerated() {
            try Interruption.check()
            guard let snapshot = files.first(where: { $0.file.path == store.path })?.source else {
                throw DeltaError.malformed(path: store.path, reason: "has no snapshot")
            }
            let path = work + "/\(index).pages"
            if index < recorded.count, let recorder = recorded[index], recorder.discarding {
                summaries.append(try recorder.finishDiscarded(writingTo: path))
            } else if index < recorded.count, let recorder = recorded[index] {
                summaries.append(try recorder.finish(snapshot: snapshot, pageSize: store.pageSize, writingTo: path))
            } else {
                summaries.append(try PageFiles.hash(file: snapshot, pageSize: store.pageSize, writingTo: path))
            }
            lists.append(path)
            snapshots.append(snapshot)
        }
        let total = summaries.reduce(0) { $0 + $1.pageCount }
        let discarded = recorded.contains { $0?.discarding == true }
        func full(_ reason: String) throws -> Plan {
            // A full packs the stores: a copy that was discarded must be made again, for real.
            if discarded { throw NoCopyFallback(reason: reason) }
            let pages = try zip(stores, lists).map { store, path in
                let digest = try FileDigest.of(path)
                return File(
                    source: path,
                    file: Manifest.File(
                        path: PageFiles.pagesMember(store.name), size: digest.size, sha256: digest.sha256, kind: .pages)
                )
            }
            let again = " (found during a first copy for a delta: the stores were copied again)"
            let reason = secondCopy == nil ? reason : reason + again
            let info = DeltaInfo(
                base: nil, chainLength: 0, fullCreated: created,
                stores: stores.indices.map { index in
                    DeltaInfo.Store(
                        name: stores[index].name, pageSize: summaries[index].pageSize,
                        pageCount: summaries[index].pageCount, stateDigest: summaries[index].stateDigest,
                        pages: PageFiles.pagesMember(stores[index].name), liveFile: liveFile(index))
                })
            return Plan(
                info: info, files: pages + files, label: label,
                outcome: DeltaOutcome(isDelta: false, base: nil, reason: reason, changedPages: total, pages: total),
                pageLists: lists)
        }
        // 2. The base: this host's newest backup of the user, with page hashes (decided before
        // the copy, or here).
        let started =
            try started
            ?? start(
                policy: policy, user: user, repository: repository, storeNames: stores.map(\.name), work: work,
                label: label, created: created, cache: cache)
        guard case .base(let found) = started else {
            if case .full(let reason) = started { return try full(reason) }
            preconditionFailure()
        }
        let entry = found.entry, base = found.head, deltaLabel = found.deltaLabel
        guard let baseInfo = base.manifest.delta else { return try full("the base has no page hashes") }
        for (index, (store, summary)) in zip(stores, summaries).enumerated() {
            let old = baseInfo.stores.first { $0.name == store.name }!
            if let was = old.liveFile, let now = liveFile(index), was != now {
                return try full(
                    "\(store.name) is another file than in \(entry.name.fileName) (a restore, a reset or a program replaced it)"
                )
            }
            let oldCoreData = base.manifest.stores.first { $0.name == store.name }?.coreData
            if let was = oldCoreData, let now = store.coreData {
                if was.storeUUID != now.storeUUID {
                    return try full("\(store.name) has another Core Data store UUID than in \(entry.name.fileName)")
                }
                if was.modelVersionHashes != now.modelVersionHashes {
                    return try full("\(store.name)'s Core Data model changed since \(entry.name.fileName)")
                }
            }
            if old.pageSize != summary.pageSize {
                return try full("\(store.name) has pages of \(summary.pageSize) bytes, \(old.pageSize) before")
            }
            let oldMode = base.manifest.stores.first { $0.name == store.name }?.journalMode
            if oldMode != store.journalMode {
                return try full("\(store.name) is in journal mode \(store.journalMode), \(oldMode ?? "unknown") before")
            }
        }
        let external = files.filter { $0.file.kind == .external }
        if external.count > Manifest.fileListThreshold {
            return try full("the stores have over \(Manifest.fileListThreshold) external-data files")
        }
        // 3. The changed pages of each store.
        var changes: [File] = []
        var changedPages: [Int] = []
        for (index, store) in stores.enumerated() {
            try Interruption.check()
            guard let basePages = base.pages[store.name] else {
                return try full("\(entry.name.fileName) lacks the page hashes of \(store.name)")
            }
            let path = work + "/\(index).delta"
            let changed: Int
            if index < recorded.count, let recorder = recorded[index], recorder.discarding {
                changed = try recorder.writeChanges(current: lists[index], base: basePages, to: path)
            } else {
                changed = try PageChanges.write(
                    snapshot: snapshots[index], current: lists[index], base: basePages, to: path)
            }
            changedPages.append(changed)
            let digest = try FileDigest.of(path)
            changes.append(
                File(
                    source: path,
                    file: Manifest.File(
                        path: PageFiles.deltaMember(store.name), size: digest.size, sha256: digest.sha256,
                        kind: .pageDelta)))
        }
        let changed = changedPages.reduce(0, +)
        if Double(changed) > policy.maxChangedShare * Double(total) {
            let share = total == 0 ? 100 : changed * 100 / total
            return try full("\(share) % of the pages changed (a full above \(Int(policy.maxChangedShare * 100)) %)")
        }
        // 4. External data: files new or changed go in whole; the whole state is listed.
        let before =
            base.manifest.isDelta
            ? (baseInfo.external ?? []) : base.manifest.files.filter { $0.kind == .external }
        let known = Dictionary(before.map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first })
        let carried = external.filter { known[$0.file.path] != $0.file }
        let now = Set(external.map(\.file.path))
        let removed = before.map(\.path).filter { !now.contains($0) }
        let info = DeltaInfo(
            base: DeltaInfo.Base(name: entry.name.fileName, manifestSHA256: base.manifestSHA256),
            chainLength: baseInfo.chainLength + 1, fullCreated: baseInfo.fullCreated,
            stores: stores.indices.map { index in
                DeltaInfo.Store(
                    name: stores[index].name, pageSize: summaries[index].pageSize,
                    pageCount: summaries[index].pageCount, stateDigest: summaries[index].stateDigest,
                    pages: nil, changes: PageFiles.deltaMember(stores[index].name),
                    changedPages: changedPages[index], liveFile: liveFile(index),
                    pagesChecks: stores[index].check == PageCheck.name
                        ? (try? recorded[index]?.pagesChecked?.get()) : nil)
            },
            external: external.map(\.file), removed: removed)
        var outcome = DeltaOutcome(
            isDelta: true, base: entry.name.fileName, reason: nil, changedPages: changed, pages: total)
        for (store, recorder) in zip(stores, recorded) {
            switch recorder?.followed {
            case .success(let count)?:
                outcome.followedStores += 1
                outcome.candidatePages += count
            case .failure(let why)?:
                if outcome.followedFallback == nil { outcome.followedFallback = "\(store.name): \(why.reason)" }
            case nil: break
            }
            switch recorder?.pagesRead {
            case .success?: outcome.pagesReadStores += 1
            case .failure(let why)?:
                if outcome.backupAPIReason == nil { outcome.backupAPIReason = "\(store.name): \(why.reason)" }
            case nil: break
            }
            switch recorder?.pagesChecked {
            case .success? where store.check == PageCheck.name: outcome.pagesCheckedStores += 1
            case .failure(let why)?:
                if outcome.fullCheckReason == nil { outcome.fullCheckReason = "\(store.name): \(why.reason)" }
            default: break
            }
        }
        return Plan(
            info: info, files: changes + carried, label: deltaLabel, outcome: outcome,
            pageLists: lists, baseChain: base.chain)
    }
}

/// A `backup --delta` whose copy of a store was not written (a WAL store, issue 35) needs a real
/// snapshot after all: a full is needed (the changed share is known only once the pages are
/// hashed), or the copy could not be kept without its file (SQLite read back a discarded page, a
/// write was not whole pages, the source's page size or journal mode is not the base's). The
/// caller takes the stores again the way a full does.
struct NoCopyFallback: Error, CustomStringConvertible {
    let reason: String
    var description: String { "a delta without a snapshot file gave up: \(reason)" }
}

/// What a backup needs of its base: the base's manifest (and that manifest's SHA-256) and each
/// store's complete page-hash list. A full's lists are its `.pages` members, which come before its
/// stores (reading stops there); a delta's are rebuilt: the chain is followed back to its full
/// (each manifest's SHA-256 checked against the delta after it), the full's lists taken, and each
/// delta's carried pages hashed into them in order; every rebuilt list must give the state digest
/// its delta records.
struct BaseHead {
    var manifest: Manifest
    var manifestSHA256: String
    /// Store name → its complete `.pages` file, in the scratch folder.
    var pages: [String: String]
    /// The identity of the base's whole chain (``ChainLinks/identity``), newest first: what the
    /// page-hash cache is keyed by.
    var chain: [String] = []
    /// The file names of the chain's archives, newest first.
    var chainNames: [String] { chain.map { String($0.prefix { $0 != " " }) } }

    /// Reads what `entry` gives a backup into `scratch`; a failure is a reason (a full is written
    /// instead). With `cache` (the folder of ``PageHashCache``), the lists cached for `entry` are
    /// used when they are its lists, and only its manifest is read.
    static func read(_ entry: RepositoryEntry, repository: any Repository, into scratch: String, cache: String? = nil)
        -> Swift.Result<
            BaseHead, BaseFailure
        >
    {
        // Invariant D1 (docs/delta-invariants.md)
        // Issue 46: the chain must be whole now, whether or not the cache answers: every link
        // present, the archive its successor was built on, not found bad, not changed since it
        // was written (heads and records only).
        let walked: ChainLinks
        switch ChainLinks.walk(entry, repository: repository) {
        case .failure(let broken): return .failure(BaseFailure(broken.description, archive: broken.archive))
        case .success(let links): walked = links
        }
        do {
            let manifest = walked.links[0].manifest, digest = walked.links[0].digest
            var head = BaseHead(manifest: manifest, manifestSHA256: digest, pages: [:], chain: walked.identity)
            guard manifest.delta != nil else { return .success(head) }
            if let cache,
                let pages = PageHashCache.pages(
                    of: entry, manifest: manifest, chain: walked.identity, in: cache, linkingInto: scratch)
            {
                head.pages = pages
                return .success(head)
            }
            // The chain, newest first, back to its full.
            var chain: [(entry: RepositoryEntry, manifest: Manifest)] = walked.links.map { ($0.entry, $0.manifest) }
            let full = chain.removeLast()
            switch try fullPages(full.entry, full.manifest, repository: repository, into: scratch) {
            case .failure(let failure) where full.entry != entry:
                return .failure(
                    BaseFailure(
                        "is built on \(full.entry.name.fileName), which \(failure.description)",
                        archive: full.entry.name.fileName))
            case .failure(let failure): return .failure(failure)
            case .success(let pages): head.pages = pages
            }
            for (index, link) in chain.reversed().enumerated() {
                if let failure = try patch(
                    &head.pages, with: link.entry, link.manifest, repository: repository, scratch: scratch, index: index
                ) {
                    return .failure(failure)
                }
            }
            return .success(head)
        } catch {
            return .failure(BaseFailure("cannot be read (\((error as? any GranaryError)?.description ?? "\(error)"))"))
        }
    }

    /// A full's `.pages` members, extracted and checked against its manifest.
    static func fullPages(
        _ entry: RepositoryEntry, _ manifest: Manifest, repository: any Repository, into scratch: String
    ) throws -> Swift.Result<[String: String], BaseFailure> {
        guard let info = manifest.delta else { return .failure(BaseFailure("has no page hashes")) }
        ReadTrace.note("read", entry.path)
        let source = try repository.open(entry)
        defer { _ = source.transferFailure() }
        let reader = try source.reader(name: entry.path)
        _ = try reader.next()  // MANIFEST.json
        if manifest.fileList != nil {
            _ = try reader.next()
            try reader.skip()
        }
        var pages: [String: String] = [:]
        for (index, store) in info.stores.enumerated() {
            var next = try reader.next()
            // (The `stores/` folder and the folders above a store's hashes come first.)
            while let entry = next, entry.kind == .directory { next = try reader.next() }
            guard let member = next, let name = store.pages, member.name == name,
                let listed = manifest.files.first(where: { $0.path == name })
            else { return .failure(BaseFailure("lacks the page hashes of \(store.name) before its stores")) }
            let path = scratch + "/\(index).pages"
            guard try extract(reader, to: path, listed: listed) else {
                return .failure(BaseFailure("has page hashes of \(store.name) that do not match its manifest"))
            }
            pages[store.name] = path
        }
        return .success(pages)
    }

    /// Puts the hashes of the pages the delta `entry` carries into `pages` (each list cut or grown
    /// to its page count), then checks each list against the state digest the delta records.
    static func patch(
        _ pages: inout [String: String], with entry: RepositoryEntry, _ manifest: Manifest, repository: any Repository,
        scratch: String, index: Int
    ) throws -> BaseFailure? {
        guard let info = manifest.delta else { return BaseFailure("\(entry.name.fileName) has no delta information") }
        var wanted: [String: DeltaInfo.Store] = [:]
        for store in info.stores { if let changes = store.changes { wanted[changes] = store } }
        ReadTrace.note("read", entry.path)
        let source = try repository.open(entry)
        defer { _ = source.transferFailure() }
        let reader = try source.reader(name: entry.path)
        _ = try reader.next()  // MANIFEST.json
        var count = 0
        while !wanted.isEmpty, let member = try reader.next() {
            guard member.kind == .regular else { continue }
            guard let store = wanted.removeValue(forKey: member.name) else {
                return BaseFailure("\(entry.name.fileName) has \(member.name) before its changed pages")
            }
            count += 1
            let path = scratch + "/\(index)-\(count).delta"
            guard let listed = manifest.files.first(where: { $0.path == member.name }),
                try extract(reader, to: path, listed: listed)
            else { return BaseFailure("\(entry.name.fileName) has changed pages that do not match its manifest") }
            guard let list = pages[store.name] else {
                return BaseFailure("\(entry.name.fileName) changes \(store.name), which its base does not hold")
            }
            try PageChanges.applyHashes(path, to: list)
            try FileSystem.removeFile(path)
            guard try PageFiles.summary(ofPages: list).stateDigest == store.stateDigest else {
                return BaseFailure(
                    "\(entry.name.fileName) does not give the state its manifest records for \(store.name)")
            }
        }
        return wanted.isEmpty ? nil : BaseFailure("\(entry.name.fileName) lacks some of its changed pages")
    }

    /// Writes the current member to `path`, checking its size and SHA-256 against `listed`.
    static func extract(_ reader: ArchiveReader, to path: String, listed: Manifest.File) throws -> Bool {
        var writer = try BlockWriter(path: path)
        defer { writer.close() }
        var hasher = SHA256()
        try reader.stream(limit: listed.size) { chunk in
            hasher.update(bufferPointer: chunk)
            try writer.append(chunk)
        }
        try writer.finish()
        return writer.written == listed.size && hasher.finalize().hex == listed.sha256
    }
}

/// Why an archive's head cannot serve as a base.
struct BaseFailure: Error, CustomStringConvertible {
    let description: String
    /// The archive of the chain at fault, when a link is (missing, replaced, bad, changed).
    var archive: String?
    init(_ description: String, archive: String? = nil) {
        self.description = description
        self.archive = archive
    }
}

extension BaseFailure {
    var reason: String { description }
}
