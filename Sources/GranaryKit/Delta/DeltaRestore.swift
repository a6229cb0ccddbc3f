import CLinux
import Crypto
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Restores a delta archive (issue 35): the chain from its full is read from the repository,
/// each link checked (the base's manifest has the SHA-256 its delta records), the full extracted
/// and verified into the staging folder, each delta's members verified as they stream and its
/// pages written in place as they come (``DeltaParser``: header, order, range, page size, length),
/// external-data files added and removed; then every rebuilt store must have the state digest the
/// delta records and pass `integrity_check`, before the restore goes on to its commit as for a
/// full.
///
/// ```
/// chain = [delta]; while last(chain) has a base: append base (its manifest digest checked)
/// extract full → staging                      (members' sizes; other members' SHA-256)
///     each store: page by page, written (and written back) and hashed → its hash list;
///     its state digest == the full's
///     its .pages: SHA-256 only, never written
/// for each delta, oldest first:
///     stream its .delta members               (size, SHA-256, structure checked as they come)
///         → header: store and hash list cut or grown to the page count
///         → each record: page written in place, its SHA-256 put in the hash list
///     external: removed, added (through a scratch folder)
/// start writeback of the pages the deltas wrote
/// every store: the hash list's state digest == the newest's, length right; integrity_check == ok
/// fsync the staging
/// ```
///
/// Every byte of the chain is hashed once: a full's store by its pages (their state digest is as
/// strong a proof of its bytes as the member's SHA-256, which it replaces there), and those hashes,
/// patched with each carried page's as it is written, give the rebuilt store's state digest
/// without reading it again. The hashes are of the bytes written, never taken from the archives'
/// `.pages` (a wrong list there cannot hide a wrong page). The other members' SHA-256s are checked
/// as for any archive, and the SQLite check is the one a full's restore runs, on the result.
public enum DeltaRestore {
    /// The longest chain followed (a loop of names ends there).
    static let chainLimit = 1000

    /// Stages `entry` when it is a delta: its manifest, as a full's would read (its files the
    /// stores and the whole external-data state). Nil when it is not a delta (a full is staged
    /// the usual way). Throws a `VerificationFailure` when the chain is broken or does not
    /// rebuild the recorded state. `room` is called with what the full's files need before any is
    /// written (restore's staging check). `limits`: the budget of each rebuilt store's check.
    public static func stage(
        _ entry: RepositoryEntry, repository: any Repository, into staging: String, user: UserID, durable: Bool = true,
        limits: ContentLimits = .defaults, room: ((ArchiveVerifier.Needs) throws -> Void)? = nil
    ) throws -> Manifest? {
        guard entry.name.saysDelta else { return nil }
        func fail(_ reason: String) -> VerificationFailure {
            VerificationFailure(archive: entry.path, reason: reason)
        }
        // The chain, newest first.
        var chain: [(entry: RepositoryEntry, manifest: Manifest)] = []
        var current = entry
        var expected: String?
        var archives: [RepositoryEntry]?
        while true {
            let (manifest, digest) = try head(current, repository: repository)
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
            guard let found = archives?.first(where: { $0.name.fileName == base.name }) else {
                throw fail("its base \(base.name) is not in the repository (a delta needs every archive of its chain)")
            }
            current = found
            expected = base.manifestSHA256
        }
        let full = chain.removeLast()
        let work = (staging as NSString).deletingLastPathComponent
        // Each store's page hashes, kept as the pages are written: the full's as its store
        // streams in, each delta's carried pages' as they are written over them.
        let hashes = try FileSystem.createTemporaryDirectory(in: work, for: "hashes")
        defer { FileSystem.removeTree(hashes) }
        var lists: [String: String] = [:]
        for (index, store) in full.manifest.stores.enumerated() { lists[store.name] = hashes + "/\(index).pages" }
        do {
            // The full, verified as any archive, without the SQLite check (it runs once, on the
            // rebuilt stores): each store hashed page by page as it streams into the staging
            // folder, its state digest checked (as strong as its SHA-256, which it replaces: each
            // byte is hashed once); its own page hashes hashed against the manifest, never written.
            let recorded = full.manifest.delta?.stores ?? []
            let pagesMembers = Set(recorded.compactMap(\.pages))
            let byPath = Dictionary(full.manifest.stores.map { ($0.path, $0) }, uniquingKeysWith: { first, _ in first })
            let lists = lists
            _ = try ArchiveVerifier.extract(
                source: try repository.open(full.entry), name: full.entry.path, into: staging, check: .none,
                expectedUser: user.rawValue, durable: false, allFiles: true, room: room,
                sink: { _, member in
                    if pagesMembers.contains(member) { return Discard() }
                    guard let store = byPath[member], store.path == Manifest.storesFolder + store.name,
                        ArchiveVerifier.isSafe(store.name),
                        let state = recorded.first(where: { $0.name == store.name }), let list = lists[store.name]
                    else { return nil }
                    return try HashedStore(
                        into: staging + "/" + member, hashes: list, state: state, member: member,
                        archive: full.entry.path, durable: durable)
                })
            let stores = full.manifest.stores
            var pageSizes = Dictionary(stores.map { ($0.name, $0.pageSize) }, uniquingKeysWith: { first, _ in first })
            for link in chain.reversed() {
                try Interruption.check()
                try apply(
                    link.entry, link.manifest, repository: repository, to: staging, work: work, user: user,
                    pageSizes: &pageSizes, lists: lists)
            }
            // The full was written back as it streamed in (as a full's restore does); the pages
            // the deltas wrote over it go while the stores are checked.
            if durable { for store in stores { startWriteback(staging + "/" + store.path) } }
        } catch let failure as VerificationFailure {
            throw fail(failure.description)
        } catch let error as DeltaError {
            throw fail(error.description)
        }
        var result = entry == chain.first?.entry ? chain.first!.manifest : full.manifest
        guard let info = result.delta else { throw fail("has no delta information") }
        for (store, recorded) in zip(result.stores, info.stores) {
            let path = staging + "/" + store.path
            // The state digest of the hashes of the bytes written: the full's pages as they were
            // streamed in, the carried pages as they were written over them.
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
        if durable { try syncTree(staging) }
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
        let scratch = try FileSystem.createTemporaryDirectory(in: work, for: "chain")
        defer { FileSystem.removeTree(scratch) }
        let staging = scratch + "/staged"
        try FileSystem.makeDirectory(staging)
        do {
            _ = try stage(entry, repository: repository, into: staging, user: entry.user, durable: false)
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

    /// An archive's manifest and the SHA-256 of its bytes, read from its first member alone.
    static func head(_ entry: RepositoryEntry, repository: any Repository) throws -> (Manifest, String) {
        let source = try repository.open(entry)
        defer { _ = source.transferFailure() }
        let reader = try source.reader(name: entry.path)
        guard let first = try reader.next(), first.name == Manifest.memberName else {
            throw VerificationFailure(archive: entry.path, reason: "does not start with \(Manifest.memberName)")
        }
        let bytes = try reader.readAll(limit: Manifest.sizeLimit)
        do {
            return (try Manifest.decode(bytes, source: entry.path), SHA256.hash(data: bytes).hex)
        } catch {
            throw VerificationFailure(archive: entry.path, member: Manifest.memberName, reason: error.reason)
        }
    }

    /// One delta applied to the staged state: its `.delta` members streamed into the staged
    /// stores as they are read (``StreamedPages``), its external-data files extracted into a
    /// scratch folder and moved in. `pageSizes`: each staged store's page size, which a delta may
    /// not change (a new page size is a full, by rule).
    private static func apply(
        _ entry: RepositoryEntry, _ manifest: Manifest, repository: any Repository, to staging: String, work: String,
        user: UserID, pageSizes: inout [String: Int], lists: [String: String]
    ) throws {
        guard let info = manifest.delta else { return }
        func fail(_ member: String?, _ reason: String) -> VerificationFailure {
            VerificationFailure(archive: entry.path, member: member, reason: reason)
        }
        guard Set(info.stores.map(\.name)) == Set(pageSizes.keys) else {
            throw fail(
                Manifest.memberName,
                "lists stores \(info.stores.map(\.name).sorted().joined(separator: ", ")), its base \(pageSizes.keys.sorted().joined(separator: ", "))"
            )
        }
        let scratch = try FileSystem.createTemporaryDirectory(in: work, for: "delta")
        defer { FileSystem.removeTree(scratch) }
        let sizes = pageSizes
        final class Applied: @unchecked Sendable { var names: Set<String> = [] }
        let applied = Applied()
        _ = try ArchiveVerifier.extract(
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
                applied.names.insert(store.name)
                return try StreamedPages(
                    into: staging + "/" + Manifest.storesFolder + store.name, hashes: lists[store.name], store: store,
                    member: member, archive: entry.path)
            })
        for store in info.stores where !applied.names.contains(store.name) {
            throw fail(store.changes ?? store.name, "is not in the archive, where its manifest names it")
        }
        for store in info.stores { pageSizes[store.name] = store.pageSize }
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

    /// Starts writing the file at `path` back to disk, without waiting (the fsync comes later).
    private static func startWriteback(_ path: String) {
        let fd = RawPath.open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return }
        defer { close(fd) }
        var info = stat()
        if fstat(fd, &info) == 0 { _ = granary_start_writeback(fd, 0, Int64(info.st_size)) }
    }

    /// fsyncs every file and folder under `folder` (granary's own staging folder).
    static func syncTree(_ folder: String) throws {
        var paths = [folder]
        if let walker = FileManager.default.enumerator(atPath: folder) {
            while let name = walker.nextObject() as? String { paths.append(folder + "/" + name) }
        }
        for path in paths.reversed() {
            let fd = RawPath.open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
            if fd < 0 { throw FileSystemError("open", path: path) }
            defer { close(fd) }
            if fsync(fd) != 0 { throw FileSystemError("sync", path: path) }
        }
    }
}

/// A member whose bytes are checked (its size and SHA-256, by `ArchiveVerifier`) and dropped.
final class Discard: MemberSink {
    func consume(_ bytes: UnsafeRawBufferPointer) {}
    func finish() {}
}

/// A delta's `.delta` member applied to a staged store as its bytes stream out of the archive:
/// the header must state the page size, page count and number of pages the manifest records;
/// then the store's length is set to the page count (growth and shrink) and each page is written
/// in place as its record completes (``DeltaParser`` checks the order and range), its SHA-256 put
/// in its place in the store's hash list (`hashes`, a `.pages` file cut or grown the same way).
/// Nothing is kept but a record cut by a chunk's end. The staged store is granary's own (a
/// private folder); a refused restore removes it whole.
final class StreamedPages: MemberSink {
    private let fd: Int32
    private let list: Int32
    private let target: String
    private let hashes: String
    private let store: DeltaInfo.Store
    private let member: String
    private let archive: String
    private var parser: DeltaParser

    init(into target: String, hashes: String?, store: DeltaInfo.Store, member: String, archive: String) throws {
        let fd = RawPath.open(target, O_RDWR | O_NOFOLLOW | O_CLOEXEC)
        let list = hashes.map { RawPath.open($0, O_RDWR | O_NOFOLLOW | O_CLOEXEC) } ?? -1
        var info = stat()
        guard fd >= 0, list >= 0, fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
            if fd >= 0 { close(fd) }
            if list >= 0 { close(list) }
            throw VerificationFailure(
                archive: archive, member: member, reason: "changes \(store.name), which its base does not hold")
        }
        self.fd = fd
        self.list = list
        self.target = target
        self.hashes = hashes ?? ""
        self.store = store
        self.member = member
        self.archive = archive
        parser = DeltaParser(name: member)
    }

    deinit {
        close(fd)
        close(list)
    }

    func consume(_ bytes: UnsafeRawBufferPointer) throws {
        let fd = fd, list = list, target = target, hashes = hashes, store = store, member = member
        let archive = archive
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
                    if ftruncate(fd, off_t(header.pageCount) * off_t(header.pageSize)) != 0 {
                        throw FileSystemError("truncate", path: target)
                    }
                    // The list follows: cut or grown (new pages' hashes zeros until a record fills
                    // them in; a page no record fills cannot give the recorded state).
                    if ftruncate(list, off_t(PageFiles.pagesHeader) + off_t(header.pageCount) * 32) != 0 {
                        throw FileSystemError("truncate", path: hashes)
                    }
                    let counts = BigEndian.u32(UInt32(header.pageSize)) + BigEndian.u64(UInt64(header.pageCount))
                    try counts.withUnsafeBytes { try PageFiles.writeFully(list, $0, at: 8, path: hashes) }
                },
                page: { number, bytes in
                    try PageFiles.writeFully(fd, bytes, at: Int64(number - 1) * Int64(store.pageSize), path: target)
                    let digest = SHA256.hash(data: bytes)
                    try digest.withUnsafeBytes {
                        try PageFiles.writeFully(
                            list, $0, at: Int64(PageFiles.pagesHeader) + Int64(number - 1) * 32, path: hashes)
                    }
                })
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

/// A chain's full's store streamed into the staging folder (a new file, zero blocks left as
/// holes, as ``ArchiveVerifier`` writes any member) and hashed page by page on the way: the hashes
/// go to `hashes` (a `.pages` file, which the deltas then patch), and their state digest must be
/// the one the full records — a proof of the bytes as strong as the member's SHA-256, which the
/// verifier then skips (``MemberSink/provesContent``): each byte of the full is hashed once.
final class HashedStore: MemberSink {
    private let fd: Int32
    private let target: String
    private let state: DeltaInfo.Store
    private let member: String
    private let archive: String
    private var writer: SparseWriter
    private var list: BlockWriter
    private var pending: [UInt8] = []
    private var pages = 0
    private var hashes: [UInt8] = []
    private let durable: Bool
    private var writebackFrom: Int64 = 0

    var provesContent: Bool { true }

    /// `durable`: written back as it grows (restore's staging), as `ArchiveVerifier` writes it.
    init(
        into target: String, hashes path: String, state: DeltaInfo.Store, member: String, archive: String,
        durable: Bool
    ) throws {
        let fd = RawPath.open(target, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        if fd < 0 { throw FileSystemError("create", path: target) }
        do { list = try BlockWriter(path: path) } catch {
            close(fd)
            throw error
        }
        self.fd = fd
        self.target = target
        self.state = state
        self.member = member
        self.archive = archive
        self.durable = durable
        writer = SparseWriter(fd: fd, path: target)
        // The count is filled in at the end, once known.
        try list.append(PageFiles.pagesMagic + BigEndian.u32(UInt32(state.pageSize)) + BigEndian.u64(0))
        hashes.reserveCapacity(32 * ((1 << 20) / 512 + 1))
    }

    deinit {
        close(fd)
        list.close()
    }

    func consume(_ bytes: UnsafeRawBufferPointer) throws {
        try writer.write(bytes)
        if durable && writer.length - writebackFrom >= ArchiveOutput.writebackStep {
            _ = granary_start_writeback(fd, writebackFrom, writer.length - writebackFrom)
            writebackFrom = writer.length
        }
        let size = state.pageSize
        var input = bytes
        hashes.removeAll(keepingCapacity: true)
        if !pending.isEmpty {
            let take = min(size - pending.count, input.count)
            pending.append(contentsOf: UnsafeRawBufferPointer(rebasing: input[0..<take]))
            input = UnsafeRawBufferPointer(rebasing: input[take...])
            if pending.count == size {
                pending.withUnsafeBytes { hashes.append(contentsOf: SHA256.hash(data: $0)) }
                pending.removeAll(keepingCapacity: true)
            }
        }
        while input.count >= size {
            hashes.append(contentsOf: SHA256.hash(data: UnsafeRawBufferPointer(rebasing: input[0..<size])))
            input = UnsafeRawBufferPointer(rebasing: input[size...])
        }
        if !input.isEmpty { pending.append(contentsOf: input) }
        pages += hashes.count / 32
        try list.append(hashes)
    }

    func finish() throws {
        try writer.finish()
        guard pending.isEmpty else {
            throw VerificationFailure(
                archive: archive, member: member,
                reason: "has \(writer.length) bytes, not a whole number of \(state.pageSize)-byte pages")
        }
        try list.patch(BigEndian.u64(UInt64(pages)), at: 12)
        try list.finish()
        let summary = try PageFiles.summary(ofPages: list.path)
        guard summary.stateDigest == state.stateDigest, pages == state.pageCount else {
            throw VerificationFailure(
                archive: archive, member: member,
                reason:
                    "has state digest \(summary.stateDigest) (\(pages) pages), the manifest says \(state.stateDigest) (\(state.pageCount) pages)"
            )
        }
    }
}
