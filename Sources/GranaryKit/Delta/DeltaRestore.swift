import CLinux
import Foundation
import GranaryDigest

#if canImport(Glibc)
    import Glibc
#endif

/// Restores a delta archive (issue 35): the chain from its full is read from the repository,
/// each link checked (the base's manifest has the SHA-256 its delta records); each store is
/// rebuilt at the length the newest delta records, the deltas applied newest first (each `.delta`
/// member verified as it streams, its pages written in place as they come, ``DeltaParser``:
/// header, order, range, page size, length), each page only when no newer delta wrote it; then
/// the full extracted and verified, its pages that no delta wrote filling in the rest, in order;
/// then the external-data files of the deltas, oldest first. Every rebuilt store must have the
/// state digest the newest delta records and pass `integrity_check`, before the restore goes on
/// to its commit as for a full.
///
/// ```
/// chain = [delta]; while last(chain) has a base: append base (its manifest digest checked)
/// each store: created at the newest's page count; its hash list, entries of zeros, beside it
/// for each delta, newest first:
///     stream its .delta members               (size, SHA-256, structure checked as they come)
///         → header: checked against its manifest
///         → each record: unless its page's entry is set (a newer delta wrote it): the page
///           written in place, its SHA-256 put in its entry
///     external: extracted into a scratch folder of its own
/// extract the full → staging                  (members' sizes; other members' SHA-256)
///     each store: page by page, hashed (its state digest == the full's) and, where its entry
///     is zeros, written (written back as it goes, with the deltas' pages between) and its
///     hash put in the entry
///     its .pages: SHA-256 only, never written
/// deltas' external files, oldest first: removed, moved in
/// every store: the hash list's state digest == the newest's, length right; integrity_check == ok
/// fsync the staging
/// ```
///
/// Each page of the result is written once, by the newest link that has it: a page of a store
/// that shrank and grew again along the chain is new to the delta that grew it, which carries
/// it (a page no link writes keeps an entry of zeros, which cannot give the recorded digest).
/// Every byte of the chain is hashed once or, for a carried page written, twice: a full's store
/// by its pages (their state digest is as strong a proof of its bytes as the member's SHA-256,
/// which it replaces there), a delta's members by their SHA-256, and each page written by a delta
/// again for its entry. The entries give the rebuilt store's state digest without reading it
/// again; they are of the bytes written, never taken from the archives' `.pages` (a wrong list
/// there cannot hide a wrong page). The SQLite check is the one a full's restore runs, on the
/// result. The hashing and writing run on a thread of their own (``OverlappedSink``) while the
/// archive is decompressed.
public enum DeltaRestore {
    /// The longest chain followed (a loop of names ends there).
    static let chainLimit = 1000

    /// Stages `entry` when it is a delta: its manifest, as a full's would read (its files the
    /// stores and the whole external-data state). Nil when it is not a delta (a full is staged
    /// the usual way). Throws a `VerificationFailure` when the chain is broken or does not
    /// rebuild the recorded state. `room` is called with what the full's files need before any is
    /// written (restore's staging check). `limits`: the budget of each rebuilt store's check.
    ///
    /// `links`, when given, is the chain already walked from its heads (``ChainLinks``, newest
    /// first, each manifest's SHA-256 checked against the delta after it): the heads are not read
    /// again. `observer`, when given, is told the bytes read and, when a link's own members are at
    /// fault, which link.
    public static func stage(
        _ entry: RepositoryEntry, repository: any Repository, into staging: String, user: UserID, durable: Bool = true,
        limits: ContentLimits = .defaults, room: ((ArchiveVerifier.Needs) throws -> Void)? = nil
    ) throws -> Manifest? {
        try stage(
            entry, repository: repository, into: staging, user: user, durable: durable, limits: limits, room: room,
            links: nil, observer: nil)
    }

    /// What a rebuild read: the bytes of the chain's members, and the link whose own members
    /// failed (its size, SHA-256, structure), when one did.
    final class Observer {
        var bytes: Int64 = 0
        var fault: (entry: RepositoryEntry, failure: VerificationFailure)?
    }

    static func stage(
        _ entry: RepositoryEntry, repository: any Repository, into staging: String, user: UserID, durable: Bool,
        limits: ContentLimits, room: ((ArchiveVerifier.Needs) throws -> Void)?,
        links: [(entry: RepositoryEntry, manifest: Manifest)]?, observer: Observer?
    ) throws -> Manifest? {
        guard entry.name.saysDelta else { return nil }
        func fail(_ reason: String) -> VerificationFailure {
            VerificationFailure(archive: entry.path, reason: reason)
        }
        // The chain, newest first.
        var chain: [(entry: RepositoryEntry, manifest: Manifest)] = links ?? []
        var current = entry
        var expected: String?
        var archives: [RepositoryEntry]?
        while links == nil {
            let head = try repository.head(of: current)
            let (manifest, digest) = (head.manifest, head.sha256)
            if let expected, expected != digest {
                throw fail(
                    "its chain is broken: \(current.name.fileName)'s manifest has SHA-256 \(digest), the delta after it expects \(expected)"
                )
            }
            if chain.isEmpty && !manifest.isDelta { return nil }
            chain.append((current, manifest))
            guard let base = manifest.delta?.base else { break }
            guard chain.count < chainLimit else { throw fail("its chain is longer than \(chainLimit) archives") }
            if archives == nil {
                archives = try repository.archives(of: user)
            }
            guard let found = archives?.first(where: { $0.name.isNamed(base.name) }) else {
                throw fail("its base \(base.name) is not in the repository (a delta needs every archive of its chain)")
            }
            current = found
            expected = base.manifestSHA256
        }
        let full = chain.removeLast()
        let work = (staging as NSString).deletingLastPathComponent
        // Each store's page hashes, kept as the pages are written: a `.pages` file of the rebuilt
        // store's page count, an entry of zeros until its page is written (which tells a page an
        // older link must not write over).
        let hashes = try FileSystem.createTemporaryDirectory(in: work, for: "hashes")
        defer { FileSystem.removeTree(hashes) }
        // Each delta's external-data files, kept until they are moved in, oldest first, over the
        // full's.
        let scratches = try FileSystem.createTemporaryDirectory(in: work, for: "deltas")
        defer { FileSystem.removeTree(scratches) }
        var rebuilt: [String: RebuiltStore] = [:]
        // The link being read, to tell the observer which one a failure of its members is.
        var reading: RepositoryEntry?
        do {
            // The stores as the newest delta records them, created at their length before any page
            // is written: the deltas, newest first, write each page that a newer one has not
            // written; then the full, streamed in order, fills in the rest.
            let recorded = full.manifest.delta?.stores ?? []
            let newest = chain.first?.manifest.delta?.stores ?? []
            for (index, store) in full.manifest.stores.enumerated() {
                guard store.path == Manifest.storesFolder + store.name, ArchiveVerifier.isSafe(store.name),
                    rebuilt[store.name] == nil, recorded.contains(where: { $0.name == store.name }),
                    let final = newest.first(where: { $0.name == store.name }), final.pageSize == store.pageSize
                else { continue }
                try ArchiveVerifier.makeFolders(staging, PathText.parent(store.path))
                rebuilt[store.name] = try RebuiltStore(
                    name: store.name, path: staging + "/" + store.path, hashes: hashes + "/\(index).pages",
                    pageSize: final.pageSize,
                    pageCount: final.pageCount)
            }
            let stores = full.manifest.stores
            var pageSizes = Dictionary(stores.map { ($0.name, $0.pageSize) }, uniquingKeysWith: { first, _ in first })
            var externals: [(info: DeltaInfo, manifest: Manifest, scratch: String)] = []
            for (index, link) in chain.enumerated() {
                try Interruption.check()
                let scratch = scratches + "/\(index)"
                try FileSystem.makeDirectory(scratch)
                reading = link.entry
                // (Not on the right of `observer?.bytes +=`: with no observer it would not run.)
                let read = try apply(
                    link.entry, link.manifest, repository: repository, scratch: scratch, user: user,
                    pageSizes: &pageSizes, stores: rebuilt)
                observer?.bytes += read
                reading = nil
                if let info = link.manifest.delta { externals.append((info, link.manifest, scratch)) }
            }
            // The full, verified as any archive, without the SQLite check (it runs once, on the
            // rebuilt stores): each store hashed page by page as it streams in, its state digest
            // checked (as strong as its SHA-256, which it replaces: each byte is hashed once), the
            // pages no delta wrote written; its own page hashes hashed against the manifest, never
            // written. Its room: what its files need less what the deltas' pages already take.
            let pagesMembers = Set(recorded.compactMap(\.pages))
            let byPath = Dictionary(full.manifest.stores.map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first })
            let taken = rebuilt.values.reduce(Int64(0)) { $0 + $1.allocated }
            let targets = rebuilt
            reading = full.entry
            let read = try ArchiveVerifier.extract(
                source: try repository.open(full.entry), name: full.entry.path, into: staging, check: .none,
                expectedUser: user.rawValue, durable: false, allFiles: true,
                room: room.map { room in
                    { needs in
                        var needs = needs
                        needs.bytes = max(0, needs.bytes - taken)
                        try room(needs)
                    }
                },
                sink: { _, member in
                    if pagesMembers.contains(member) { return Discard() }
                    guard let store = byPath[member], let target = targets[store.name],
                        let state = recorded.first(where: { $0.name == store.name })
                    else { return nil }
                    // Hashed and written on the second core while the next chunk is decompressed.
                    return OverlappedSink(
                        try HashedStore(
                            into: target, state: state, member: member, archive: full.entry.path, durable: durable))
                })
            reading = nil
            observer?.bytes += read.bytes
            // The deltas' external-data files, oldest first, over the full's.
            for (info, manifest, scratch) in externals.reversed() {
                for path in info.removed ?? [] where ArchiveVerifier.isSafe(path) {
                    try FileSystem.removeFile(staging + "/" + path)
                }
                for file in manifest.files where file.kind == .external {
                    let target = staging + "/" + file.path
                    try FileManager.default.createDirectory(
                        atPath: PathText.parent(target), withIntermediateDirectories: true,
                        attributes: [.posixPermissions: 0o700])
                    try FileSystem.removeFile(target)
                    guard rename(scratch + "/" + file.path, target) == 0 else {
                        throw FileSystemError("rename", path: target)
                    }
                }
            }
        } catch let failure as VerificationFailure {
            if let reading, failure.archive == reading.path { observer?.fault = (reading, failure) }
            throw fail(failure.description)
        } catch let error as DeltaError {
            if let reading {
                observer?.fault = (reading, VerificationFailure(archive: reading.path, reason: error.description))
            }
            throw fail(error.description)
        }
        let lists = rebuilt.mapValues { $0.hashes }
        for store in rebuilt.values where !store.filled {
            throw fail("rebuilds \(store.name), which its full does not hold")
        }
        rebuilt.removeAll()
        var result = entry == chain.first?.entry ? chain.first!.manifest : full.manifest
        guard let info = result.delta else { throw fail("has no delta information") }
        for (store, recorded) in zip(result.stores, info.stores) {
            let path = staging + "/" + store.path
            // The state digest of the hashes of the bytes written: the deltas' pages as they were
            // written, the full's as they streamed in.
            guard let list = lists[store.name], FileSystem.status(list) != nil else {
                throw fail("rebuilds \(store.name), which its full does not hold")
            }
            let summary: PageFiles.Summary
            do { summary = try PageFiles.summary(ofPages: list) } catch let error as DeltaError {
                throw fail("rebuilds \(store.name) whose pages cannot be summed up: \(error.description)")
            }
            let length = FileSystem.status(path).map { Int64($0.st_size) } ?? -1
            guard summary.stateDigest == recorded.stateDigest, summary.pageCount == recorded.pageCount,
                summary.pageSize == recorded.pageSize, length == Int64(recorded.pageCount) * Int64(recorded.pageSize)
            else {
                throw fail(
                    "rebuilds \(store.name) with state digest \(summary.stateDigest) (\(summary.pageCount) pages), the manifest records \(recorded.stateDigest) (\(recorded.pageCount) pages)"
                )
            }
            let problems: [String]
            do {
                let db = try Database.openFinished(path: path, limits: limits)
                problems = db.integrityCheck(full: true)
                if let limit = db.exceededLimit {
                    throw VerificationFailure(
                        archive: entry.path, member: store.path, reason: problems.first ?? "stopped at \(limit)",
                        limit: limit)
                }
            } catch let failure as VerificationFailure {
                throw failure
            } catch {
                throw fail(
                    "rebuilds \(store.name) that SQLite cannot open: \((error as? SQLiteError)?.message ?? "\(error)")")
            }
            guard problems == [Database.sound] else {
                throw fail(
                    "rebuilds \(store.name) that fails integrity_check: \(problems.prefix(3).joined(separator: "; "))")
            }
            try FileSystem.removeFile(path + "-wal")
            try FileSystem.removeFile(path + "-shm")
        }
        let external = info.external ?? []
        for file in external {
            guard let status = FileSystem.status(staging + "/" + file.path), Int64(status.st_size) == file.size else {
                throw fail("rebuilds without \(file.path), which its state lists")
            }
        }
        if durable { try ArchiveVerifier.syncTree(staging) }
        result.files =
            result.stores.map {
                Manifest.File(path: $0.path, size: Int64($0.pageCount) * Int64($0.pageSize), sha256: "", kind: .store)
            } + external
        return result
    }

    /// `verify --chain`: rebuilds the delta `entry` from its chain in a scratch folder under `work`
    /// and checks its stores' state digests and `integrity_check`, as a restore would; throws a
    /// `VerificationFailure` naming what broke. Nothing for an archive that is not a delta.
    public static func verifyChain(_ entry: RepositoryEntry, repository: any Repository, work: String) throws {
        _ = try verifyChain(entry, repository: repository, work: work, links: nil, observer: nil)
    }

    /// ``verifyChain(_:repository:work:)`` on a chain already walked (`links`), telling `observer`
    /// what was read; the rebuilt manifest.
    static func verifyChain(
        _ entry: RepositoryEntry, repository: any Repository, work: String,
        links: [(entry: RepositoryEntry, manifest: Manifest)]?, observer: Observer?, limits: ContentLimits = .defaults
    ) throws -> Manifest? {
        let scratch = try FileSystem.createTemporaryDirectory(in: work, for: "chain")
        defer { FileSystem.removeTree(scratch) }
        let staging = scratch + "/staged"
        try FileSystem.makeDirectory(staging)
        do {
            return try stage(
                entry, repository: repository, into: staging, user: entry.user, durable: false, limits: limits,
                room: nil, links: links, observer: observer)
        } catch let failure as VerificationFailure {
            throw VerificationFailure(
                archive: entry.path, reason: "does not rebuild from its chain: \(reason(failure, of: entry))")
        }
    }

    /// What `failure` says, for a message about `entry`: its member and reason, and the archive of
    /// the chain it is about when that is another.
    public static func reason(_ failure: VerificationFailure, of entry: RepositoryEntry) -> String {
        if failure.archive != entry.path { return failure.description }
        return failure.member.map { $0 + " " + failure.reason } ?? failure.reason
    }

    /// The reason given for an archive whose name and manifest disagree.
    public static func impostor(_ problem: String) -> String {
        "is not the archive its name says (\(problem)): it was renamed or put there by hand; do not restore it, look at it with granary inspect"
    }

    /// One delta applied to the staged stores, newest first: its `.delta` members streamed into
    /// them as they are read (``StreamedPages``: each page a newer delta has not written), its
    /// external-data files extracted into `scratch`, which the caller moves in once the full is
    /// there. `pageSizes`: each staged store's page size, which a delta may not change (a new page
    /// size is a full, by rule).
    private static func apply(
        _ entry: RepositoryEntry, _ manifest: Manifest, repository: any Repository, scratch: String, user: UserID,
        pageSizes: inout [String: Int], stores: [String: RebuiltStore]
    ) throws -> Int64 {
        guard let info = manifest.delta else { return 0 }
        func fail(_ member: String?, _ reason: String) -> VerificationFailure {
            VerificationFailure(archive: entry.path, member: member, reason: reason)
        }
        guard Set(info.stores.map(\.name)) == Set(pageSizes.keys) else {
            throw fail(
                Manifest.memberName,
                "lists stores \(info.stores.map(\.name).sorted().joined(separator: ", ")), its base \(pageSizes.keys.sorted().joined(separator: ", "))"
            )
        }
        let sizes = pageSizes
        final class Applied: @unchecked Sendable { var names: Set<String> = [] }
        let applied = Applied()
        let read = try ArchiveVerifier.extract(
            source: try repository.open(entry), name: entry.path, into: scratch, check: .none,
            expectedUser: user.rawValue, durable: false,
            sink: { manifest, member in
                guard let store = manifest.delta?.stores.first(where: { $0.changes == member }) else { return nil }
                // The name decides where the pages go: a store of the staging folder, nothing else.
                guard ArchiveVerifier.isSafe(store.name), member == PageFiles.deltaMember(store.name),
                    let base = sizes[store.name]
                else {
                    throw fail(member, "changes \(store.name.debugDescription), which its base does not hold")
                }
                guard store.pageSize == base else {
                    throw fail(member, "has pages of \(store.pageSize) bytes, its base's \(store.name) of \(base)")
                }
                guard let target = stores[store.name] else {
                    throw fail(member, "changes \(store.name), which its base does not hold")
                }
                applied.names.insert(store.name)
                // Parsed, written and hashed on the second core while the member's next chunk is
                // decompressed and hashed (its SHA-256).
                return OverlappedSink(
                    try StreamedPages(into: target, store: store, member: member, archive: entry.path))
            })
        for store in info.stores where !applied.names.contains(store.name) {
            throw fail(store.changes ?? store.name, "is not in the archive, where its manifest names it")
        }
        for store in info.stores { pageSizes[store.name] = store.pageSize }
        return read.bytes
    }
}

/// A member whose bytes are checked (its size and SHA-256, by `ArchiveVerifier`) and dropped.
final class Discard: MemberSink {
    func consume(_ bytes: UnsafeRawBufferPointer) {}
    func finish() {}
}

/// A store being rebuilt from its chain (issue 35), at the length the newest delta records,
/// with its page hashes beside it (`hashes`, a `.pages` file of that page count): an entry is
/// zeros until its page is written, and a page whose entry is set is not written again. The
/// deltas are applied newest first and the full last, so each page of the result is written once,
/// by the newest link that has it, and the full's pages go in order (written back as they go,
/// with the deltas' pages between them). A page none writes keeps a zero entry, which cannot give
/// the recorded state digest. Granary's own files, in a private folder; a refused restore removes
/// them whole.
final class RebuiltStore: @unchecked Sendable {
    let name: String
    let path: String
    let hashes: String
    let fd: Int32
    let list: Int32
    let pageSize: Int
    let pageCount: Int
    /// Whether the full's store streamed in.
    var filled = false

    init(name: String, path: String, hashes: String, pageSize: Int, pageCount: Int) throws {
        let fd = RawPath.open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        if fd < 0 { throw FileSystemError("create", path: path) }
        let list = RawPath.open(hashes, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        if list < 0 {
            close(fd)
            throw FileSystemError("create", path: hashes)
        }
        self.name = name
        self.path = path
        self.hashes = hashes
        self.fd = fd
        self.list = list
        self.pageSize = pageSize
        self.pageCount = pageCount
        if ftruncate(fd, off_t(pageCount) * off_t(pageSize)) != 0 { throw FileSystemError("truncate", path: path) }
        if ftruncate(list, off_t(PageFiles.pagesHeader) + off_t(pageCount) * 32) != 0 {
            throw FileSystemError("truncate", path: hashes)
        }
        let header = PageFiles.pagesMagic + BigEndian.u32(UInt32(pageSize)) + BigEndian.u64(UInt64(pageCount))
        try header.withUnsafeBytes { try PageFiles.writeFully(list, $0, at: 0, path: hashes) }
    }

    deinit {
        close(fd)
        close(list)
    }

    /// The bytes the store takes on disk so far.
    var allocated: Int64 {
        var info = stat()
        return fstat(fd, &info) == 0 ? Int64(info.st_blocks) * 512 : 0
    }

    /// Reads the hash entries of `count` pages from `first` (1-based) into `buffer`.
    func entries(from first: Int, count: Int, into buffer: UnsafeMutableRawBufferPointer) throws {
        try PageFiles.readFully(
            list, into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<count * 32]),
            at: Int64(PageFiles.pagesHeader) + Int64(first - 1) * 32, path: hashes)
    }

    /// Writes page `number` (1-based) unless a newer link wrote it: its bytes, then its hash.
    func write(page number: Int, _ bytes: UnsafeRawBufferPointer) throws {
        guard number <= pageCount else { return }
        var entry = (UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        try withUnsafeMutableBytes(of: &entry) { try entries(from: number, count: 1, into: $0) }
        guard entry == (0, 0, 0, 0) else { return }
        try PageFiles.writeFully(fd, bytes, at: Int64(number - 1) * Int64(pageSize), path: path)
        try SHA256.hash(data: bytes).withUnsafeBytes {
            try PageFiles.writeFully(list, $0, at: Int64(PageFiles.pagesHeader) + Int64(number - 1) * 32, path: hashes)
        }
    }
}

/// A delta's `.delta` member applied to a store being rebuilt as its bytes stream out of the
/// archive: the header must state the page size, page count and number of pages the manifest
/// records; then each page is written in place as its record completes (``DeltaParser`` checks
/// the order and range) unless a newer delta wrote it (``RebuiltStore``). Nothing is kept but a
/// record cut by a chunk's end.
final class StreamedPages: MemberSink {
    private let target: RebuiltStore
    private let store: DeltaInfo.Store
    private let member: String
    private let archive: String
    private var parser: DeltaParser

    init(into target: RebuiltStore, store: DeltaInfo.Store, member: String, archive: String) throws {
        self.target = target
        self.store = store
        self.member = member
        self.archive = archive
        parser = DeltaParser(name: member)
    }

    func consume(_ bytes: UnsafeRawBufferPointer) throws {
        let target = target, store = store, member = member, archive = archive
        do {
            try parser.feed(
                bytes,
                header: { header in
                    guard header.pageSize == store.pageSize, header.pageCount == store.pageCount,
                        header.changed == store.changedPages
                    else {
                        throw VerificationFailure(
                            archive: archive, member: member,
                            reason:
                                "states \(header.changed) of \(header.pageCount) pages of \(header.pageSize) bytes, the manifest \(store.changedPages ?? 0) of \(store.pageCount) of \(store.pageSize)"
                        )
                    }
                },
                page: { number, bytes in try target.write(page: number, bytes) })
        } catch let error as DeltaError {
            throw VerificationFailure(archive: archive, member: nil, reason: error.description)
        }
    }

    func finish() throws {
        do { _ = try parser.finish() } catch let error as DeltaError {
            throw VerificationFailure(archive: archive, member: nil, reason: error.description)
        }
    }
}

/// A chain's full's store streamed into the store being rebuilt, hashed page by page on the way:
/// the state digest of those hashes must be the one the full records — a proof of the bytes as
/// strong as the member's SHA-256, which the verifier then skips (``MemberSink/provesContent``):
/// each byte of the full is hashed once. Each page no delta wrote (its entry in the hash list
/// still zeros) is written, runs of them with one `pwrite` (a page of zeros left a hole, as
/// ``SparseWriter`` leaves it), and its hash put in the list; the store is written back as it
/// grows (restore's staging). Pages past the rebuilt store's count are hashed, not written.
final class HashedStore: MemberSink {
    private let target: RebuiltStore
    private let state: DeltaInfo.Store
    private let member: String
    private let archive: String
    private let durable: Bool
    private var digest = SHA256()
    private var pending: [UInt8] = []
    private var pages = 0
    private var bytes: Int64 = 0
    private var writebackFrom: Int64 = 0
    private let hashes: UnsafeMutableRawBufferPointer
    private let entries: UnsafeMutableRawBufferPointer
    private static let batch = 1024

    var provesContent: Bool { true }

    /// `durable`: written back as it grows (restore's staging), as `ArchiveVerifier` writes files.
    init(into target: RebuiltStore, state: DeltaInfo.Store, member: String, archive: String, durable: Bool) throws {
        self.target = target
        self.state = state
        self.member = member
        self.archive = archive
        self.durable = durable
        digest.update(data: PageFiles.statePrefix)
        digest.update(data: BigEndian.u32(UInt32(state.pageSize)) + BigEndian.u64(UInt64(state.pageCount)))
        hashes = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.batch * 32, alignment: 16)
        entries = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.batch * 32, alignment: 16)
    }

    deinit {
        hashes.deallocate()
        entries.deallocate()
    }

    func consume(_ bytes: UnsafeRawBufferPointer) throws {
        self.bytes += Int64(bytes.count)
        let size = state.pageSize
        var input = bytes
        if !pending.isEmpty {
            let want = min(size - pending.count, input.count)
            pending.append(contentsOf: UnsafeRawBufferPointer(rebasing: input[0..<want]))
            input = UnsafeRawBufferPointer(rebasing: input[want...])
            if pending.count == size {
                try pending.withUnsafeBytes { try take($0) }
                pending.removeAll(keepingCapacity: true)
            }
        }
        while input.count >= size {
            let count = min(input.count / size, Self.batch)
            try take(UnsafeRawBufferPointer(rebasing: input[0..<count * size]))
            input = UnsafeRawBufferPointer(rebasing: input[(count * size)...])
        }
        if !input.isEmpty { pending.append(contentsOf: input) }
        if durable {
            let upto = Int64(min(pages, target.pageCount)) * Int64(size)
            if upto - writebackFrom >= ArchiveOutput.writebackStep {
                _ = granary_start_writeback(target.fd, writebackFrom, upto - writebackFrom)
                writebackFrom = upto
            }
        }
    }

    /// Whole pages, the next of the store: hashed, and those no delta wrote written.
    private func take(_ run: UnsafeRawBufferPointer) throws {
        let size = state.pageSize
        let count = run.count / size
        PageHash.digests(of: run, pageSize: size, into: UnsafeMutableRawBufferPointer(rebasing: hashes[0..<count * 32]))
        digest.update(bufferPointer: UnsafeRawBufferPointer(rebasing: hashes[0..<count * 32]))
        let first = pages + 1
        pages += count
        let kept = max(0, min(count, target.pageCount - first + 1))
        guard kept > 0 else { return }
        try target.entries(from: first, count: kept, into: entries)
        func isSet(_ index: Int) -> Bool {
            !SparseWriter.isZero(UnsafeRawBufferPointer(rebasing: entries[index * 32..<(index + 1) * 32]))
        }
        // The pages no delta wrote: their bytes in runs, each with one `pwrite` (a page of zeros
        // stays a hole of the new file), their hashes put in the entries read, which go back with
        // one write.
        var start: Int?
        for index in 0...kept {
            let skip =
                index == kept || isSet(index)
                || SparseWriter.isZero(UnsafeRawBufferPointer(rebasing: run[index * size..<(index + 1) * size]))
            if index < kept && !isSet(index) {
                UnsafeMutableRawBufferPointer(rebasing: entries[index * 32..<(index + 1) * 32]).copyMemory(
                    from: UnsafeRawBufferPointer(rebasing: hashes[index * 32..<(index + 1) * 32]))
            }
            if skip, let from = start {
                try PageFiles.writeFully(
                    target.fd, UnsafeRawBufferPointer(rebasing: run[from * size..<index * size]),
                    at: Int64(first - 1 + from) * Int64(size), path: target.path)
                start = nil
            } else if !skip && start == nil {
                start = index
            }
        }
        try PageFiles.writeFully(
            target.list, UnsafeRawBufferPointer(rebasing: entries[0..<kept * 32]),
            at: Int64(PageFiles.pagesHeader) + Int64(first - 1) * 32, path: target.hashes)
    }

    func finish() throws {
        guard pending.isEmpty else {
            throw VerificationFailure(
                archive: archive, member: member,
                reason: "has \(bytes) bytes, not a whole number of \(state.pageSize)-byte pages")
        }
        let found = digest.finalize().hex
        guard found == state.stateDigest, pages == state.pageCount else {
            throw VerificationFailure(
                archive: archive, member: member,
                reason:
                    "has state digest \(found) (\(pages) pages), the manifest says \(state.stateDigest) (\(state.pageCount) pages)"
            )
        }
        target.filled = true
        if durable {
            let end = Int64(target.pageCount) * Int64(state.pageSize)
            if end > writebackFrom { _ = granary_start_writeback(target.fd, writebackFrom, end - writebackFrom) }
        }
    }
}
