import Crypto
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Restores a delta archive (issue 35): the chain from its full is read from the repository,
/// each link checked (the base's manifest has the SHA-256 its delta records), the full extracted
/// and verified into the staging folder, each delta's members verified (`DeltaCheck`) and its
/// pages written in place, external-data files added and removed; then every rebuilt store must
/// have the state digest the delta records and pass `integrity_check`, before the restore goes
/// on to its commit as for a full.
///
/// ```
/// chain = [delta]; while last(chain) has a base: append base (its manifest digest checked)
/// extract full → staging                      (members checked, as for any full)
/// for each delta, oldest first:
///     extract → scratch                       (members checked, DeltaCheck)
///     store: truncate to page count, write pages; external: remove, add
/// every store: state digest == the newest delta's, integrity_check == ok
/// ```
public enum DeltaRestore {
    /// The longest chain followed (a loop of names ends there).
    static let chainLimit = 1000

    /// Stages `entry` when it is a delta: its manifest, as a full's would read (its files the
    /// stores and the whole external-data state). Nil when it is not a delta (a full is staged
    /// the usual way). Throws a `VerificationFailure` when the chain is broken or does not
    /// rebuild the recorded state. `room` is called with what the full's files need before any is
    /// written (restore's staging check).
    public static func stage(
        _ entry: RepositoryEntry, repository: any Repository, into staging: String, user: UserID, durable: Bool = true,
        room: ((ArchiveVerifier.Needs) throws -> Void)? = nil
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
            // The full, verified as any archive (its page hashes too), without the SQLite check:
            // that runs once, on the rebuilt stores.
            let source = try repository.open(full.entry)
            _ = try ArchiveVerifier.extract(
                source: source, name: full.entry.path, into: staging, check: .none, expectedUser: user.rawValue,
                durable: false, allFiles: true, room: room)
            for store in full.manifest.delta?.stores ?? [] {
                if let pages = store.pages { try FileSystem.removeFile(staging + "/" + pages) }
            }
            let work = (staging as NSString).deletingLastPathComponent
            for link in chain.reversed() {
                try Interruption.check()
                try apply(link.entry, link.manifest, repository: repository, to: staging, work: work, user: user)
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
            let summary = try PageFiles.hash(file: path, pageSize: recorded.pageSize)
            guard summary.stateDigest == recorded.stateDigest, summary.pageCount == recorded.pageCount else {
                throw fail(
                    "rebuilds \(store.name) with state digest \(summary.stateDigest) (\(summary.pageCount) pages), the manifest records \(recorded.stateDigest) (\(recorded.pageCount) pages)"
                )
            }
            let problems: [String]
            do { problems = try Database.openFinished(path: path).integrityCheck(full: true) } catch {
                throw fail("rebuilds \(store.name) that SQLite cannot open: \(error)")
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

    /// One delta applied to the staged state.
    private static func apply(
        _ entry: RepositoryEntry, _ manifest: Manifest, repository: any Repository, to staging: String, work: String,
        user: UserID
    ) throws {
        guard let info = manifest.delta else { return }
        let scratch = try FileSystem.createTemporaryDirectory(in: work, for: "delta")
        defer { FileSystem.removeTree(scratch) }
        _ = try ArchiveVerifier.extract(
            source: try repository.open(entry), name: entry.path, into: scratch, check: .none,
            expectedUser: user.rawValue, durable: false)
        for store in info.stores {
            guard let changes = store.changes else { continue }
            let target = staging + "/" + Manifest.storesFolder + store.name
            guard FileSystem.status(target) != nil else {
                throw DeltaError.malformed(
                    path: entry.path, reason: "changes \(store.name), which its base does not hold")
            }
            _ = try PageChanges.apply(scratch + "/" + changes, to: target, pageSize: store.pageSize)
        }
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
