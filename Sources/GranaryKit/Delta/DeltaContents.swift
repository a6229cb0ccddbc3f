import Foundation

/// What a delta archive carries, as `inspect` shows it (issue 35): per store the pages it
/// carries of the resulting page count, and the state digest of the result; the external-data
/// files it carries (added or changed since its base) and those its base had that are gone.
/// Everything comes from its manifest; telling an added file from a changed one needs the base's
/// manifest (``resolvingBase(in:user:)``).
public struct DeltaContents: Sendable, Codable, Equatable {
    /// One store of the delta's resulting state.
    public struct Store: Sendable, Codable, Equatable {
        public var name: String
        public var pageSize: Int
        /// The pages of the resulting database.
        public var pageCount: Int
        /// The pages this delta carries (those that differ from its base).
        public var pagesCarried: Int
        /// The state digest of the resulting database file (``PageFiles``).
        public var stateDigest: String
        /// `wal` or `rollback` (the resulting store's, as its manifest records it).
        public var journalMode: String?
    }

    /// The archive it is built on (its file name in the user's folder) and the SHA-256 of that
    /// archive's manifest, as this delta recorded them.
    public var base: String
    public var baseManifestSHA256: String
    /// Deltas from the chain's full to this archive (1: the first delta).
    public var chainLength: Int
    /// When the chain's full was made.
    public var fullCreated: Date
    public var stores: [Store]
    /// The external-data files it carries (new or changed since its base).
    public var carried: [Manifest.File]
    /// Of `carried`, those its base did not have, and those it had with other content; nil when
    /// the base's manifest could not be read (`baseProblem`).
    public var added: [String]?
    public var changed: [String]?
    /// Its base's external-data files that are gone.
    public var removed: [String]
    /// Why the base's manifest could not be read, when it was looked for and not found.
    public var baseProblem: String?

    /// The contents `manifest` records, when it is a delta's.
    public init?(_ manifest: Manifest) {
        guard let info = manifest.delta, let base = info.base else { return nil }
        self.base = base.name
        baseManifestSHA256 = base.manifestSHA256
        chainLength = info.chainLength
        fullCreated = info.fullCreated
        stores = info.stores.map { store in
            Store(
                name: store.name, pageSize: store.pageSize, pageCount: store.pageCount,
                pagesCarried: store.changedPages ?? 0, stateDigest: store.stateDigest,
                journalMode: manifest.stores.first { $0.name == store.name }?.journalMode)
        }
        carried = manifest.files.filter { $0.kind == .external }
        removed = info.removed ?? []
    }

    /// Splits the carried files into added and changed with the manifest of the base, found by
    /// name among `user`'s archives in `repository` and checked against the SHA-256 this delta
    /// recorded; when it cannot be, says why in ``baseProblem`` (the rest stands).
    public func resolvingBase(in repository: any Repository, user: UserID) -> DeltaContents {
        var resolved = self
        do {
            guard let entry = try repository.archives(of: user).first(where: { $0.name.isNamed(base) }) else {
                resolved.baseProblem = "\(base) is not in \(repository.location)"
                return resolved
            }
            let head = try repository.head(of: entry)
            let (manifest, digest) = (head.manifest, head.sha256)
            guard digest == baseManifestSHA256 else {
                resolved.baseProblem = "\(base) in \(repository.location) is not the archive this delta was built on"
                return resolved
            }
            let before = Set(
                (manifest.isDelta
                    ? (manifest.delta?.external ?? []) : manifest.files.filter { $0.kind == .external }).map(\.path))
            resolved.added = carried.map(\.path).filter { !before.contains($0) }
            resolved.changed = carried.map(\.path).filter { before.contains($0) }
        } catch {
            resolved.baseProblem =
                "\(base) cannot be read (\((error as? any GranaryError)?.description ?? "\(error)"))"
        }
        return resolved
    }
}
