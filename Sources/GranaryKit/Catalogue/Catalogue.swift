import Foundation

/// The archives in the repository as an operator sees them: each with what its manifest
/// says and whether it verified. Reads only the manifest at the head of each archive.
public struct Catalogue: Sendable {
    public let repository: Repository

    public init(repository: Repository) {
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

        /// The archive's time: the manifest's, else the name's.
        public var created: Date { manifest?.created ?? name.created }
        public var verified: Verified {
            guard let record else { return .unverified }
            return record.isGood ? .verified : .bad
        }
        /// What the archive is: its manifest's `kind`, else what its name's label says.
        public var kind: ArchiveKind { manifest?.kind ?? name.kind }
        /// The store names the manifest lists.
        public var stores: [String] { manifest?.stores.map(\.name) ?? [] }
    }

    /// The archives of `users` (every user in the repository when empty), newest first within
    /// each user, users in order.
    public func items(users: [UserID] = []) -> [Item] {
        let ids = users.isEmpty ? repository.users() : users
        return ids.flatMap { user in repository.archives(of: user).reversed().map(Self.item) }
    }

    /// Reads one archive's head.
    public static func item(_ entry: Repository.Entry) -> Item {
        var manifest: Manifest?
        var problem: String?
        do { manifest = try readManifest(entry.path) } catch { problem = (error as? GranaryError)?.description ?? "\(error)" }
        return Item(
            user: entry.user, name: entry.name, path: entry.path, size: entry.size, manifest: manifest, problem: problem,
            record: VerificationRecord.read(for: entry.path))
    }

    /// The manifest at the head of `archive`, reading nothing after it.
    public static func readManifest(_ archive: String) throws -> Manifest {
        let reader = try ArchiveReader(path: archive, blockSize: 64 * 1024)
        guard let first = try reader.next(), first.name == Manifest.memberName, first.kind == .regular else {
            throw ManifestError.missing(source: archive)
        }
        return try Manifest.decode(try reader.readAll(limit: Manifest.sizeLimit), source: archive)
    }

    /// A user's newest regular backup that passed verification, if any (safety and final
    /// archives are never "the user's backups").
    public func newestVerified(of user: UserID) -> Repository.Entry? {
        repository.archives(of: user).last { $0.name.kind == .backup && VerificationRecord.read(for: $0.path)?.isGood == true }
    }
}
