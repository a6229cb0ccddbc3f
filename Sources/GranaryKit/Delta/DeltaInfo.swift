import Foundation

/// What `MANIFEST.json` says, under `"delta"`, of an archive written with `backup --delta`
/// (issue 35; the member formats and the state digest are in ``PageFiles``).
///
/// A **full** written with `--delta` (`base` absent) is an ordinary full archive (stock tar
/// extracts its stores) that also carries each store's page hashes, `stores/NAME.pages`, placed
/// before the stores so that the next backup reads them without reading the pages. A **delta**
/// (`base` present, file name ending in `delta`) carries per store the pages that differ from
/// its base (`stores/NAME.delta`; no hash list: the base's, patched, is its own), and the external-data files that are
/// new or changed; `external` lists every external-data file of the state it produces, so that
/// the next delta and a restore know the whole state from this manifest alone. Its `stores`
/// describe the resulting databases as a full's would; their `path` members are not in it.
/// Both are manifest format 3: a granary that does not know deltas refuses them.
public struct DeltaInfo: Codable, Sendable, Equatable {
    /// The archive a delta applies to.
    public struct Base: Codable, Sendable, Equatable {
        /// Its file name in the user's folder of the repository.
        public var name: String
        /// Lower-case hex SHA-256 of its `MANIFEST.json` bytes.
        public var manifestSHA256: String
    }

    /// One store's state after this archive.
    public struct Store: Codable, Sendable, Equatable {
        public var name: String
        public var pageSize: Int
        public var pageCount: Int
        /// The state digest of the store's database file (``PageFiles``).
        public var stateDigest: String
        /// A full: the member with its page hashes. A delta carries none: its list is its base's
        /// with the hash of each page it carries put in its place, cut or grown to `pageCount`.
        public var pages: String?
        /// A delta: the member with the changed pages.
        public var changes: String?
        /// A delta: how many pages it carries.
        public var changedPages: Int?
        /// The live database file it was taken from, `DEV:INO` (absent in archives made before
        /// 2026-11-28): the next backup writes a full when the store is another file by then.
        public var liveFile: String?
        /// A delta whose store was checked by the pages it read alone (`check: pages`, issue 51):
        /// how many deltas in a row, this one included, were checked so since the store was last
        /// checked whole (absent otherwise, and in archives made before 2026-11-29).
        public var pagesChecks: Int?
    }

    /// The base (absent for a full).
    public var base: Base?
    /// Deltas from the chain's full to this archive: 0 for a full, 1 for the first delta.
    public var chainLength: Int
    /// When the chain's full was made.
    public var fullCreated: Date
    public var stores: [Store]
    /// A delta: every external-data file of the resulting state (those carried and those kept
    /// from the base).
    public var external: [Manifest.File]?
    /// A delta: the base's external-data files that are gone.
    public var removed: [String]?
    /// An archive `prune` wrote by merging (``DeltaMerge``): the names of the archives it
    /// replaces, oldest first (the newest is the one whose time and label it has).
    public var replaces: [String]?

    public var isDelta: Bool { base != nil }
}

extension Manifest {
    /// Whether this is a delta archive (a base to apply to).
    public var isDelta: Bool { delta?.base != nil }
}

extension ArchiveName {
    /// The label every delta archive's name ends with (`…-delta.tar.zst`, or `…-LABEL-delta…`
    /// with `--label`): `list`, `restore` and `prune` see a delta by its name, and read its
    /// manifest to find its base. The manifest decides: a full named so is restored as a full.
    public static let deltaLabel = "delta"

    /// Whether the name says delta.
    public var saysDelta: Bool { label == Self.deltaLabel || (label?.hasSuffix("-" + Self.deltaLabel) ?? false) }

    /// The label of a delta written with `label` asked for.
    public static func deltaLabel(after label: String?) -> String {
        label.map { $0 + "-" + deltaLabel } ?? deltaLabel
    }
}
