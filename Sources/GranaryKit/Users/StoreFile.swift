import Foundation

/// What a store's first 100 bytes (the SQLite database header) say, read without opening it.
///
/// Opening a store with SQLite could create `-wal`/`-shm` files or wait on locks; reading
/// the header does neither. See <https://www.sqlite.org/fileformat.html#the_database_header>.
public struct StoreHeader: Sendable, Equatable {
    /// `SQLite format 3\0`.
    public static let magic: [UInt8] = Array("SQLite format 3".utf8) + [0]

    public let pageSize: Int
    /// True when the header's read/write versions are 2 (WAL).
    public let isWAL: Bool
    /// The in-header page count (valid when the file was last written by SQLite 3.7.0 or later).
    public let pageCount: Int

    /// Parses a header; `nil` when the bytes do not start with the SQLite magic.
    public init?(_ bytes: [UInt8]) {
        guard bytes.count >= 32, Array(bytes[0..<16]) == StoreHeader.magic else { return nil }
        let raw = Int(bytes[16]) << 8 | Int(bytes[17])
        pageSize = raw == 1 ? 65536 : raw
        isWAL = bytes[18] == 2 || bytes[19] == 2
        pageCount = Int(bytes[28]) << 24 | Int(bytes[29]) << 16 | Int(bytes[30]) << 8 | Int(bytes[31])
    }

    /// The header of the file at `path`, or `nil` when it is not a SQLite database.
    public static func read(_ path: String) -> StoreHeader? {
        StoreHeader(FileSystem.head(path, count: 100))
    }
}

/// One store in a user's folder, and the companion files that belong to it.
public struct StoreFile: Sendable, Equatable {
    /// Relative path inside the user's folder, for example `Local.sqlite` or `Data/Cloud.sqlite`.
    public let name: String
    /// Absolute path of the database file.
    public let path: String
    public let size: Int64
    public let header: StoreHeader
    /// Size of the `-wal`, when one exists.
    public let walSize: Int64?
    public let hasSHM: Bool
    public let hasJournal: Bool
    /// The Core Data external-data folder, when one exists: `.<Name>_SUPPORT/_EXTERNAL_DATA`.
    public let externalDataPath: String?

    /// `wal` or `rollback`, from the header.
    public var journalKind: String { header.isWAL ? "wal" : "rollback" }

    /// The Core Data external-data folder for a store at `path`, whether or not it exists.
    public static func externalDataFolder(for path: String) -> String {
        let folder = (path as NSString).deletingLastPathComponent
        var base = (path as NSString).lastPathComponent
        if let dot = base.lastIndex(of: "."), dot != base.startIndex { base = String(base[..<dot]) }
        return folder + "/." + base + "_SUPPORT/_EXTERNAL_DATA"
    }
}

