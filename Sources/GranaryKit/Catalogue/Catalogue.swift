import Foundation

/// The archives in the repository as an operator sees them: each with what its manifest
/// says and whether it verified. Reads only the manifest at the head of each archive.
public struct Catalogue: Sendable {
    public let repository: any Repository

    public init(repository: any Repository) {
        self.repository = repository
    }

    /// The verified state of an archive.
    public enum Verified: String, Sendable, Codable {
        /// The last `granary verify` passed and the archive has not changed since.
        case verified
        /// The last `granary verify` failed.
        case bad
        /// Never verified (or changed since).
        case unverified
    }

    /// One archive.
    public struct Item: Sendable {
        public let user: UserID
        public let name: ArchiveName
        public let path: String
        public let size: Int64
        /// The manifest, or `nil` when the head of the archive cannot be read.
        public let manifest: Manifest?
        /// Why the manifest cannot be read.
        public let problem: String?
        public let record: VerificationRecord?
        /// The host its marker names; nil for an archive written before hosts existed.
        public var host: String? = nil

        /// The host to show: its marker's, else (an unmarked archive) the one its manifest recorded.
        public var shownHost: String? { host ?? manifest?.host }

        /// The archive's time: its name's to the microsecond; for a legacy name (whole seconds), the manifest's.
        public var created: Date { name.precise ? name.created : manifest?.created ?? name.created }
        public var verified: Verified {
            guard let record else { return .unverified }
            return record.isVerified ? .verified : record.isGood ? .unverified : .bad
        }
        /// What its record says, in the words `list`, `verify` and `check` share (issue 46).
        public var standing: VerificationRecord.Standing { record?.standing ?? .unverified }
        /// What the archive is: its manifest's `kind`, else what its name's label says.
        public var kind: ArchiveKind { manifest?.kind ?? name.kind }
        /// The store names the manifest lists.
        public var stores: [String] { manifest?.stores.map(\.name) ?? [] }
    }

    /// The archives of `users` (every user in the repository when empty), newest first within
    /// each user, users in order. A remote repository's heads are read a few at a time.
    public func items(users: [UserID] = []) throws -> [Item] {
        let ids = users.isEmpty ? try repository.users() : users
        var items: [Item] = []
        for user in ids {
            let entries = Array(try repository.archives(of: user).reversed())
            let records = repository.records(for: entries)
            let heads = try Self.concurrently(entries, width: repository.isLocal ? 1 : 4) { entry in try head(entry) }
            for (entry, head) in zip(entries, heads) {
                var item = Item(
                    user: entry.user, name: entry.name, path: entry.path, size: entry.size, manifest: head.0,
                    problem: head.1,
                    record: records[entry.path])
                item.host = entry.host
                items.append(item)
            }
        }
        return items
    }

    /// Reads one archive's head.
    public func item(_ entry: RepositoryEntry) throws -> Item {
        let (manifest, problem) = try head(entry)
        var item = Item(
            user: entry.user, name: entry.name, path: entry.path, size: entry.size, manifest: manifest,
            problem: problem,
            record: repository.record(for: entry))
        item.host = entry.host
        return item
    }

    /// The manifest of `entry`, or why it cannot be read; a failed download is thrown (it says
    /// nothing of the archive).
    private func head(_ entry: RepositoryEntry) throws -> (Manifest?, String?) {
        do {
            return (try repository.head(of: entry).manifest, nil)
        } catch let error as RepositoryError {
            throw error
        } catch {
            return (nil, (error as? GranaryError)?.description ?? "\(error)")
        }
    }

    /// `body` over `items`, `width` at a time, results in order.
    static func concurrently<T: Sendable, R: Sendable>(
        _ items: [T], width: Int, _ body: @Sendable @escaping (T) throws -> R
    ) throws -> [R] {
        guard width > 1, items.count > 1 else { return try items.map(body) }
        let results = ResultsBox<R>(count: items.count)
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = width
        for (index, item) in items.enumerated() {
            queue.addOperation { results.set(index, Result { try body(item) }) }
        }
        queue.waitUntilAllOperationsAreFinished()
        return try results.all.map { try $0.get() }
    }

    private final class ResultsBox<R>: @unchecked Sendable {
        private let lock = NSLock()
        private var items: [Result<R, any Error>?]
        init(count: Int) { items = Array(repeating: nil, count: count) }
        func set(_ index: Int, _ result: Result<R, any Error>) { lock.withLock { items[index] = result } }
        var all: [Result<R, any Error>] { lock.withLock { items.map { $0! } } }
    }

    /// A user's newest regular backup that passed verification, if any (safety and final
    /// archives are never "the user's backups").
    public func newestVerified(of user: UserID) throws -> RepositoryEntry? {
        let backups = try repository.archives(of: user).filter { $0.name.kind == .backup }
        let records = repository.records(for: backups)
        return backups.last { records[$0.path]?.isVerified == true }
    }
}
