import Foundation
import GranaryDigest

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
/// run's base `A`, which stays. When the run is empty nothing is merged. Otherwise a merged delta
/// on A replaces the run and the tip, in time in proportion to what is removed (no store is
/// rebuilt, A's stores are never read):
///
/// ```
/// A's page-hash lists (its chain proved whole; a full's lists are its first members)
/// the chain by heads alone: each replaced delta on the one before it (name, manifest SHA-256)
/// each replaced delta, newest first, read once: a page counts only in the newest delta that
///     carries it (and only below every newer delta's page count); each counted page hashed once
///     onto a copy of A's lists, and kept when its hash differs from A's; pages a newer delta
///     carries again are neither hashed nor kept; external files new or changed since A, from
///     the newest delta that carried them, checked against its manifest
/// the lists must give the tip's state digests (this proves every kept page)
/// the merged changes: the kept pages in order; write → publish (the tip's time and label, the
///     next free sequence: `…_2-delta`)
/// read it back, streamed: each changed-pages member checked against the manifest and its pages
///     hashed onto A's lists, every store's state digest == the tip's
/// remove the tip, then the run newest first (every remaining chain stays whole at each step)
/// ```
///
/// A chain that loses nothing is not read at all; a full is never rewritten (a day's chain pruned
/// to its last delta keeps its full and one merged delta: a little more space than one new full,
/// for a prune that reads only the deltas it removes).
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
        /// The archive the merged delta is built on; it stays.
        public let base: RepositoryEntry

        /// What the merged archive replaces, oldest first.
        public var replaced: [RepositoryEntry] { run + [tip] }
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
                guard let manifest = try? repository.head(of: current).manifest,
                    let baseName = manifest.delta?.base?.name,
                    let base = archives.first(where: { $0.name.isNamed(baseName) })
                else { break }
                let baseReasons = kept[base.path] ?? []
                guard let baseManifest = try? repository.head(of: base).manifest else { break }
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
            merges.append(Merge(tip: tip, run: run, base: stop.entry))
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
            guard !twins.isEmpty, let manifest = try? repository.head(of: merged).manifest,
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
        // 1. The base's page-hash lists (its chain proved whole first, ``ChainLinks``), read once:
        // one copy stays the base's, the other becomes the tip's as each replaced delta is applied
        // to it.
        try FileSystem.makeDirectory(scratch + "/base")
        let head: BaseHead
        switch BaseHead.read(merge.base, repository: repository, into: scratch + "/base") {
        case .failure(let failure):
            throw VerificationFailure(archive: merge.base.path, reason: "cannot serve as a base: \(failure)")
        case .success(let value): head = value
        }
        let lists = try copyLists(head.pages, into: scratch + "/lists")
        guard let baseInfo = head.manifest.delta else {
            throw VerificationFailure(archive: merge.base.path, reason: "has no page hashes")
        }
        // 2. The chain, heads only: each replaced delta built on the archive before it (by name
        // and manifest SHA-256).
        let links = merge.run + [merge.tip]
        var previous = (name: merge.base.name.fileName, digest: head.manifestSHA256)
        var heads: [(manifest: Manifest, info: DeltaInfo)] = []
        for link in links {
            let linkHead = try repository.head(of: link)
            guard let info = linkHead.manifest.delta, let base = info.base, base.name == previous.name,
                base.manifestSHA256 == previous.digest
            else {
                throw VerificationFailure(
                    archive: link.path, reason: "is not a delta on \(previous.name) as the chain records it")
            }
            heads.append((linkHead.manifest, info))
            previous = (link.name.fileName, linkHead.sha256)
        }
        guard case let (tipManifest, tipInfo)? = heads.last else {
            throw VerificationFailure(archive: merge.tip.path, reason: "is not a delta")
        }
        // 3. Each replaced delta, newest first, read once: a page counts only in the newest delta
        // that carries it and only while no newer delta cut the store below it; each such page is
        // hashed once, its hash put in the tip's list (a copy of the base's, cut or grown to the
        // tip's page count) and, when it differs from the base's, its bytes kept in the scratch
        // folder. A page a newer delta carries again is neither hashed nor kept. The tip's lists
        // must then give the state digests the tip records: that proves every kept page (and the
        // base's hash of every page no delta carries) against the tip's manifest.
        var gathered: [String: Gathering] = [:]
        defer { for gathering in gathered.values { gathering.close() } }
        for store in tipInfo.stores {
            guard let list = lists[store.name] else {
                throw VerificationFailure(archive: merge.base.path, reason: "lacks the page hashes of \(store.name)")
            }
            gathered[store.name] = try Gathering(store: store, list: list)
        }
        let external = tipInfo.external ?? []
        let before =
            head.manifest.isDelta ? (baseInfo.external ?? []) : head.manifest.files.filter { $0.kind == .external }
        let known = Dictionary(before.map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first })
        var needed = Dictionary(
            external.filter { known[$0.path] != $0 }.map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first })
        var found: [String: String] = [:]  // external member → its extracted file
        for (index, link) in links.enumerated().reversed() {
            try Interruption.check()
            let (manifest, info) = heads[index]
            var wanted: [String: Gathering] = [:]  // changes member → the store's gathering
            for store in info.stores {
                guard let gathering = gathered[store.name] else { continue }
                gathering.cut(to: store.pageCount)
                if let changes = store.changes { wanted[changes] = gathering }
            }
            ReadTrace.note("read", link.path)
            let source = try repository.open(link)
            defer { _ = source.transferFailure() }
            let reader = try source.reader(name: link.path)
            _ = try reader.next()  // MANIFEST.json
            while let member = try reader.next() {
                guard member.kind == .regular else { continue }
                guard let listed = manifest.files.first(where: { $0.path == member.name }) else {
                    throw VerificationFailure(
                        archive: link.path, member: member.name, reason: "is not listed in the manifest")
                }
                if let gathering = wanted.removeValue(forKey: member.name) {
                    try gathering.take(reader, listed: listed, archive: link.path)
                } else if let file = needed[listed.path], file == listed, listed.kind == .external {
                    let path = scratch + "/\(index)-external-\(found.count)"
                    guard try BaseHead.extract(reader, to: path, listed: listed) else {
                        throw VerificationFailure(
                            archive: link.path, member: member.name, reason: "does not match the manifest")
                    }
                    found[listed.path] = path
                    needed[listed.path] = nil
                }
            }
            if let missing = wanted.values.first {
                throw VerificationFailure(
                    archive: link.path, reason: "lacks the changed pages of \(missing.store.name)")
            }
        }
        for gathering in gathered.values {
            guard try PageFiles.summary(ofPages: gathering.list).stateDigest == gathering.store.stateDigest else {
                throw VerificationFailure(
                    archive: merge.tip.path,
                    reason:
                        "is not given the state its manifest records for \(gathering.store.name) by the deltas it is built on"
                )
            }
        }
        CrashPoint.reach(.mergeStaged)
        // 4. The merged changes of each store: the kept pages in order (each page from the one
        // delta that counted for it).
        var members: [ArchiveBuilder.Member] = []
        func member(_ source: String, _ path: String, _ kind: Manifest.File.Kind, mode: UInt32? = nil) throws {
            let file = try ArchiveBuilder.hash(source, member: path, kind: kind, mode: mode, mappable: false)
            members.append(ArchiveBuilder.Member(source: source, file: file, mappable: false))
        }
        var stores: [DeltaInfo.Store] = []
        for (index, store) in tipInfo.stores.enumerated() {
            try Interruption.check()
            guard let gathering = gathered[store.name] else { continue }
            let path = scratch + "/\(index).delta"
            let changed = try gathering.writeChanges(to: path)
            try member(path, PageFiles.deltaMember(store.name), .pageDelta)
            stores.append(
                DeltaInfo.Store(
                    name: store.name, pageSize: store.pageSize, pageCount: store.pageCount,
                    stateDigest: store.stateDigest, changes: PageFiles.deltaMember(store.name),
                    changedPages: changed, liveFile: store.liveFile, pagesChecks: store.pagesChecks))
        }
        // External data: the tip's whole list; the files new or changed since the base, each from
        // the newest replaced delta that carried it.
        for file in external where known[file.path] != file {
            guard let path = found[file.path] else {
                throw VerificationFailure(
                    archive: merge.tip.path, reason: "records \(file.path), which no delta since the base carries")
            }
            try member(path, file.path, .external, mode: file.mode)
        }
        let now = Set(external.map(\.path))
        var info = DeltaInfo(
            base: DeltaInfo.Base(name: merge.base.name.fileName, manifestSHA256: head.manifestSHA256),
            chainLength: baseInfo.chainLength + 1, fullCreated: baseInfo.fullCreated, stores: stores,
            external: external, removed: before.map(\.path).filter { !now.contains($0) })
        info.replaces = merge.replaced.map(\.name.fileName)
        CrashPoint.reach(.mergeHashed)
        var settings = ArchiveBuilder.Settings()
        settings.kind = .backup
        settings.label = merge.tip.name.label
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
            try prove(
                entry, on: (merge.base, head), states: tipInfo.stores, repository: repository, work: scratch)
        } catch {
            try? repository.removeRecorded([entry])
            throw error
        }
        try? repository.writeRecord(VerificationRecord(entry: entry, good: true, reason: nil, check: .full), for: entry)
        CrashPoint.reach(.mergeProven)
        return entry
    }

    /// Copies each page-hash list of `pages` (store name → file) into `folder`.
    static func copyLists(_ pages: [String: String], into folder: String) throws -> [String: String] {
        try FileSystem.makeDirectory(folder)
        var copies: [String: String] = [:]
        for (index, (store, path)) in pages.sorted(by: { $0.key < $1.key }).enumerated() {
            let copy = folder + "/\(index).pages"
            do { try FileManager.default.copyItem(atPath: path, toPath: copy) } catch {
                throw FileSystemError("copy", path: path)
            }
            copies[store] = copy
        }
        return copies
    }

    /// Reads `entry` back from the repository as a base is read (``BaseHead``: its chain whole,
    /// its manifest the one it was built with, every changed-pages member checked against the
    /// manifest and hashed into its base's lists) and checks that every store gets the state
    /// digest of `states`: the merged delta gives, page for page, the state the tip it replaces
    /// rebuilds to. Only the merged archive's own members are read: its base's lists are those
    /// the merge read (`base`: the base and its head, its chain proved whole), and the merged
    /// archive's chain must lead to that very base (its name and manifest SHA-256).
    static func prove(
        _ entry: RepositoryEntry, on base: (entry: RepositoryEntry, head: BaseHead), states: [DeltaInfo.Store],
        repository: any Repository, work: String
    ) throws {
        let folder = try FileSystem.createTemporaryDirectory(in: work, for: "proof")
        defer { FileSystem.removeTree(folder) }
        let walked: ChainLinks
        switch ChainLinks.walk(entry, repository: repository) {
        case .failure(let broken): throw VerificationFailure(archive: entry.path, reason: broken.description)
        case .success(let links): walked = links
        }
        guard walked.links.count >= 2, walked.links[1].entry.name == base.entry.name,
            walked.links[1].digest == base.head.manifestSHA256, let own = walked.links.first
        else {
            throw VerificationFailure(
                archive: entry.path, reason: "is not a delta on \(base.entry.name.fileName) as the merge wrote it")
        }
        var pages = try copyLists(base.head.pages, into: folder + "/lists")
        try hashPages(of: own.entry, own.manifest, onto: &pages, repository: repository)
        for state in states {
            guard let list = pages[state.name] else {
                throw VerificationFailure(archive: entry.path, reason: "lacks \(state.name)")
            }
            let summary = try PageFiles.summary(ofPages: list)
            guard summary.stateDigest == state.stateDigest else {
                throw VerificationFailure(
                    archive: entry.path,
                    reason: "rebuilds \(state.name) with state digest \(summary.stateDigest), not \(state.stateDigest)")
            }
        }
    }

    /// Hashes the pages of each changed-pages member of the delta `entry` (its manifest
    /// `manifest`) onto `pages` (store name → `.pages` file: its base's lists becoming its own),
    /// as a base is read (``BaseHead/patch(_:with:_:repository:scratch:index:)``) but streamed
    /// from the archive: each member checked against the manifest (size, SHA-256) and its
    /// structure as it comes, each page hashed once, nothing extracted.
    static func hashPages(
        of entry: RepositoryEntry, _ manifest: Manifest, onto pages: inout [String: String], repository: any Repository
    ) throws {
        guard let info = manifest.delta else {
            throw VerificationFailure(archive: entry.path, reason: "has no delta information")
        }
        var wanted: [String: DeltaInfo.Store] = [:]
        for store in info.stores { if let changes = store.changes { wanted[changes] = store } }
        ReadTrace.note("read", entry.path)
        let source = try repository.open(entry)
        defer { _ = source.transferFailure() }
        let reader = try source.reader(name: entry.path)
        _ = try reader.next()  // MANIFEST.json
        while !wanted.isEmpty, let member = try reader.next() {
            guard member.kind == .regular else { continue }
            guard let store = wanted.removeValue(forKey: member.name),
                let listed = manifest.files.first(where: { $0.path == member.name })
            else {
                throw VerificationFailure(
                    archive: entry.path, member: member.name, reason: "comes before its changed pages")
            }
            guard let list = pages[store.name] else {
                throw VerificationFailure(
                    archive: entry.path, reason: "changes \(store.name), which its base does not hold")
            }
            let fd = RawPath.open(list, O_RDWR | O_CLOEXEC)
            if fd < 0 { throw FileSystemError("open", path: list) }
            defer { Glibc.close(fd) }
            var parser = DeltaParser(name: entry.path + ": " + member.name)
            var whole = SHA256()
            let size = try reader.stream(limit: listed.size) { chunk in
                whole.update(bufferPointer: chunk)
                try parser.feed(chunk, header: { _ in }) { number, bytes in
                    let digest = SHA256.hash(data: bytes)
                    try digest.withUnsafeBytes {
                        try PageFiles.writeFully(
                            fd, $0, at: Int64(PageFiles.pagesHeader) + Int64(number - 1) * 32, path: list)
                    }
                }
            }
            let header = try parser.finish()
            guard size == listed.size, whole.finalize().hex == listed.sha256 else {
                throw VerificationFailure(
                    archive: entry.path, member: member.name, reason: "does not match the manifest")
            }
            try Gathering.resize(fd, list: list, pageSize: header.pageSize, pageCount: header.pageCount)
        }
        if let missing = wanted.values.first {
            throw VerificationFailure(archive: entry.path, reason: "lacks the changed pages of \(missing.name)")
        }
    }

    /// One store of a merge (step 3 of ``make(_:repository:user:)``): the tip's page-hash list
    /// built from the base's, the pages already counted, and the file the counted pages that
    /// differ from the base's are kept in (one run of records per delta, each in page order).
    final class Gathering {
        /// The tip's record of the store.
        let store: DeltaInfo.Store
        /// The list (a copy of the base's) becoming the tip's.
        let list: String
        let pageSize: Int
        private let fd: Int32
        /// The pages (from 0) a newer delta already counted.
        private var taken = PageBits()
        /// The smallest page count of the deltas read so far: a page past it was cut off.
        private var limit = Int.max
        /// The page count of the delta being read.
        private var current = 0
        /// The kept pages: records of a page number (8 bytes) and its bytes, one run per delta
        /// that had some (newest first), each in page order.
        private let keptPath: String
        private var kept: BlockWriter
        private var runs: [(start: Int64, count: Int)] = []
        /// The bytes of kept records so far (some may still be in the writer's buffer).
        private var keptBytes: Int64 = 0

        init(store: DeltaInfo.Store, list: String) throws {
            let reader = try PagesReader(path: list)
            let size = reader.pageSize
            reader.close()
            guard size == store.pageSize else {
                throw DeltaError.malformed(path: list, reason: "has pages of \(size) bytes, not \(store.pageSize)")
            }
            let descriptor = RawPath.open(list, O_RDWR | O_CLOEXEC)
            if descriptor < 0 { throw FileSystemError("open", path: list) }
            do {
                try Self.resize(descriptor, list: list, pageSize: size, pageCount: store.pageCount)
            } catch {
                Glibc.close(descriptor)
                throw error
            }
            keptPath = list + ".kept"
            do { kept = try BlockWriter(path: keptPath) } catch {
                Glibc.close(descriptor)
                throw error
            }
            self.store = store
            self.list = list
            pageSize = size
            fd = descriptor
        }

        func close() {
            Glibc.close(fd)
            kept.close()
        }

        /// Sets a `.pages` file's length and header to `pageCount` pages (a page past the old
        /// count gets a hash of zeros until one is written).
        static func resize(_ fd: Int32, list: String, pageSize: Int, pageCount: Int) throws {
            if ftruncate(fd, off_t(PageFiles.pagesHeader) + off_t(pageCount) * 32) != 0 {
                throw FileSystemError("truncate", path: list)
            }
            let counts = BigEndian.u32(UInt32(pageSize)) + BigEndian.u64(UInt64(pageCount))
            try counts.withUnsafeBytes { try PageFiles.writeFully(fd, $0, at: 8, path: list) }
        }

        /// The next (older) delta records `count` pages for the store.
        func cut(to count: Int) {
            current = count
            limit = min(limit, count)
        }

        /// Reads the changed-pages member `listed` of the delta `link` (the current member of
        /// `reader`): the whole member checked against the manifest (size, SHA-256: a damaged
        /// delta fails the merge even where a newer one carries its pages again) and its structure
        /// as it comes; each page that counts hashed, its hash put in the list, and kept when it
        /// differs from the base's.
        func take(_ reader: ArchiveReader, listed: Manifest.File, archive: String) throws {
            let name = archive + ": " + listed.path
            var parser = DeltaParser(name: name)
            let start = keptBytes
            var writer = kept
            var count = 0
            let before = UnsafeMutableRawBufferPointer.allocate(byteCount: 32, alignment: 16)
            defer { before.deallocate() }
            let (pageSize, current, limit, list, fd) = (pageSize, current, limit, list, fd)
            var taken = self.taken
            var whole = SHA256()
            let size = try reader.stream(limit: listed.size) { chunk in
                whole.update(bufferPointer: chunk)
                try parser.feed(
                    chunk,
                    header: { header in
                        guard header.pageSize == pageSize, header.pageCount == current else {
                            throw DeltaError.malformed(
                                path: name,
                                reason:
                                    "states \(header.pageCount) pages of \(header.pageSize) bytes, its manifest \(current) of \(pageSize)"
                            )
                        }
                    }
                ) { number, bytes in
                    guard number <= limit, !taken.contains(number - 1) else { return }
                    taken.insert(number - 1)
                    let offset = Int64(PageFiles.pagesHeader) + Int64(number - 1) * 32
                    try PageFiles.readFully(fd, into: before, at: offset, path: list)
                    let digest = SHA256.hash(data: bytes)
                    guard !digest.elementsEqual(before) else { return }
                    try digest.withUnsafeBytes { try PageFiles.writeFully(fd, $0, at: offset, path: list) }
                    try writer.append(BigEndian.u64(UInt64(number)))
                    try writer.append(bytes)
                    count += 1
                }
            }
            self.taken = taken
            kept = writer
            _ = try parser.finish()
            guard size == listed.size, whole.finalize().hex == listed.sha256 else {
                throw VerificationFailure(
                    archive: archive, member: listed.path, reason: "does not match the manifest")
            }
            keptBytes += Int64(count) * Int64(8 + pageSize)
            if count > 0 { runs.append((start, count)) }
        }

        /// Writes the merged `.delta` file of the store to `output`: the tip's page count and every
        /// kept page in order, each from the one delta that counted for it. Returns their number.
        func writeChanges(to output: String) throws -> Int {
            var writer = try BlockWriter(path: output)
            defer { writer.close() }
            try writer.append(
                PageFiles.deltaMagic + BigEndian.u32(UInt32(pageSize)) + BigEndian.u64(UInt64(store.pageCount))
                    + BigEndian.u64(0))
            try kept.finish()
            let source = RawPath.open(keptPath, O_RDONLY | O_CLOEXEC)
            if source < 0 { throw FileSystemError("open", path: keptPath) }
            defer { Glibc.close(source) }
            let cursors = runs.map {
                ChangeCursor(fd: source, path: keptPath, start: $0.start, count: $0.count, pageSize: pageSize)
            }
            var numbers = try cursors.map { try $0.advance() }
            let page = UnsafeMutableRawBufferPointer.allocate(byteCount: pageSize, alignment: 16)
            defer { page.deallocate() }
            var changed = 0
            while case let (index, number)? = numbers.enumerated().min(by: { $0.element < $1.element }), number != .max
            {
                try cursors[index].read(into: page)
                try writer.append(BigEndian.u64(UInt64(number)))
                try writer.append(UnsafeRawBufferPointer(page))
                changed += 1
                numbers[index] = try cursors[index].advance()
            }
            try writer.patch(BigEndian.u64(UInt64(changed)), at: 20)
            try writer.finish()
            return changed
        }
    }

    /// Reads one run of kept-pages records in order (written by ``Gathering``).
    final class ChangeCursor {
        let fd: Int32
        let path: String
        let pageSize: Int
        let start: Int64
        let changed: Int
        private var index = -1

        init(fd: Int32, path: String, start: Int64, count: Int, pageSize: Int) {
            self.fd = fd
            self.path = path
            self.start = start
            changed = count
            self.pageSize = pageSize
        }

        private var offset: Int64 { start + Int64(index) * Int64(8 + pageSize) }

        /// Moves to the next record: its page number, `Int.max` after the last.
        func advance() throws -> Int {
            index += 1
            guard index < changed else { return .max }
            var bytes = [UInt8](repeating: 0, count: 8)
            try bytes.withUnsafeMutableBytes { try PageFiles.readFully(fd, into: $0, at: offset, path: path) }
            return Int(bytes.reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
        }

        /// The current record's page bytes.
        func read(into page: UnsafeMutableRawBufferPointer) throws {
            guard page.count == pageSize else {
                throw DeltaError.malformed(path: path, reason: "has pages of \(pageSize) bytes, not \(page.count)")
            }
            try PageFiles.readFully(fd, into: page, at: offset + 8, path: path)
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
