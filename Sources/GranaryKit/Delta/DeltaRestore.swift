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
/// extract full → staging                      (members' sizes and SHA-256; its .pages only hashed)
/// start writeback of the staged stores
/// for each delta, oldest first:
///     stream its .delta members               (size, SHA-256, structure checked as they come)
///         → header: length set to the page count; each record: page written in place
///     external: removed, added (through a scratch folder)
/// every store, on two threads at once: state digest == the newest's ‖ integrity_check == ok
/// fsync the staging
/// ```
///
/// Each page is hashed once for the state digest, in one read of the rebuilt store: the full's own
/// state digest (which `verify` checks) says nothing a rebuilt store's does not. The member
/// SHA-256s of every archive of the chain are checked as for any archive, and the SQLite check is
/// the one a full's restore runs, on the result.
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
        do {
            // The full, verified as any archive, without the SQLite check (it runs once, on the
            // rebuilt stores) and without its page hashes: they are hashed against the manifest
            // as they stream past, never written.
            let pagesMembers = Set((full.manifest.delta?.stores ?? []).compactMap(\.pages))
            _ = try ArchiveVerifier.extract(
                source: try repository.open(full.entry), name: full.entry.path, into: staging, check: .none,
                expectedUser: user.rawValue, durable: false, allFiles: true, room: room,
                sink: { _, member in pagesMembers.contains(member) ? Discard() : nil })
            guard let stores = full.manifest.delta?.stores else { throw fail("its full has no page hashes") }
            // The disk writes the full while the deltas are applied and the result checked; the
            // fsync at the end finds little left.
            if durable { for store in stores { startWriteback(staging + "/" + Manifest.storesFolder + store.name) } }
            var pageSizes = Dictionary(stores.map { ($0.name, $0.pageSize) }, uniquingKeysWith: { first, _ in first })
            let work = (staging as NSString).deletingLastPathComponent
            for link in chain.reversed() {
                try Interruption.check()
                try apply(
                    link.entry, link.manifest, repository: repository, to: staging, work: work, user: user,
                    pageSizes: &pageSizes)
            }
        } catch let failure as VerificationFailure {
            throw fail(failure.description)
        } catch let error as DeltaError {
            throw fail(error.description)
        }
        var result = entry == chain.first?.entry ? chain.first!.manifest : full.manifest
        guard let info = result.delta else { throw fail("has no delta information") }
        for (store, recorded) in zip(result.stores, info.stores) {
            let path = staging + "/" + store.path
            // One read for the state digest beside SQLite's check: two cores, two reads of
            // the same pages from the page cache.
            let (digest, checked) = try Parallel.both(
                { Result { try PageFiles.hash(file: path, pageSize: recorded.pageSize) } },
                {
                    Result { () throws -> ([String], ContentLimit?) in
                        let db = try Database.openFinished(path: path, limits: limits)
                        return (db.integrityCheck(full: true), db.exceededLimit)
                    }
                })
            let summary = try digest.get()
            guard summary.stateDigest == recorded.stateDigest, summary.pageCount == recorded.pageCount else {
                throw fail(
                    "rebuilds \(store.name) with state digest \(summary.stateDigest) (\(summary.pageCount) pages), the manifest records \(recorded.stateDigest) (\(recorded.pageCount) pages)"
                )
            }
            let problems: [String]
            switch checked {
            case .success(let (found, limit)):
                if let limit {
                    throw VerificationFailure(
                        archive: entry.path, member: store.path,
                        reason: "rebuilt, " + (found.first ?? "stopped at \(limit)"), limit: limit)
                }
                problems = found
            case .failure(let error):
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
        user: UserID, pageSizes: inout [String: Int]
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
                    into: staging + "/" + Manifest.storesFolder + store.name, store: store, member: member,
                    archive: entry.path)
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
/// in place as its record completes (``DeltaParser`` checks the order and range). Nothing is kept
/// but a record cut by a chunk's end. The staged store is granary's own (a private folder); a
/// refused restore removes it whole.
final class StreamedPages: MemberSink {
    private let fd: Int32
    private let target: String
    private let store: DeltaInfo.Store
    private let member: String
    private let archive: String
    private var parser: DeltaParser

    init(into target: String, store: DeltaInfo.Store, member: String, archive: String) throws {
        let fd = RawPath.open(target, O_RDWR | O_NOFOLLOW | O_CLOEXEC)
        var info = stat()
        guard fd >= 0, fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
            if fd >= 0 { close(fd) }
            throw VerificationFailure(
                archive: archive, member: member, reason: "changes \(store.name), which its base does not hold")
        }
        self.fd = fd
        self.target = target
        self.store = store
        self.member = member
        self.archive = archive
        parser = DeltaParser(name: member)
    }

    deinit { close(fd) }

    func consume(_ bytes: UnsafeRawBufferPointer) throws {
        let fd = fd, target = target, store = store, member = member, archive = archive
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
                },
                page: { number, bytes in
                    try PageFiles.writeFully(fd, bytes, at: Int64(number - 1) * Int64(store.pageSize), path: target)
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
