import Foundation

#if canImport(Glibc)
    import Glibc
#endif

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

    /// The header of the file at `path` (a path in granary's own folders), or `nil` when it is
    /// not a SQLite database.
    public static func read(_ path: String) -> StoreHeader? {
        StoreHeader(FileSystem.head(path, count: 100))
    }
}

/// One store in a user's folder, and the companion files that belong to it.
///
/// A store is reached through the open folder that holds it (``folder``) and its name there
/// (``fileName``), never by a path.
public struct StoreFile: Sendable {
    /// Relative path inside the user's folder, for example `Local.sqlite` or `Data/Cloud.sqlite`.
    public let name: String
    /// The open folder that holds the store (the user's folder or one beneath it).
    public let folder: Folder<UserOwned>
    /// The store's name in ``folder``.
    public let fileName: String
    public let size: Int64
    /// Bytes allocated on disk (below `size` for a sparse file).
    public let allocated: Int64
    public let header: StoreHeader
    /// The database file's owner and mode, as the scan saw them.
    public let uid: uid_t
    public let gid: gid_t
    public let mode: mode_t
    /// Size of the `-wal`, when one exists.
    public let walSize: Int64?
    public let hasSHM: Bool
    public let hasJournal: Bool
    /// Whether the store has a Core Data external-data folder: `.<Name>_SUPPORT/_EXTERNAL_DATA`.
    public let hasExternalData: Bool
    /// The database file's device and inode, as the scan saw them: a store replaced by a new file
    /// (a restore, a reset, a program that writes a new file and renames it) has another.
    public let device: UInt64
    public let inode: UInt64

    public init(
        name: String, folder: Folder<UserOwned>, fileName: String, size: Int64, allocated: Int64, header: StoreHeader,
        uid: uid_t,
        gid: gid_t,
        mode: mode_t, walSize: Int64?, hasSHM: Bool, hasJournal: Bool, hasExternalData: Bool, device: UInt64 = 0,
        inode: UInt64 = 0
    ) {
        self.name = name
        self.folder = folder
        self.fileName = fileName
        self.size = size
        self.allocated = allocated
        self.header = header
        self.uid = uid
        self.gid = gid
        self.mode = mode
        self.walSize = walSize
        self.hasSHM = hasSHM
        self.hasJournal = hasJournal
        self.hasExternalData = hasExternalData
        self.device = device
        self.inode = inode
    }

    /// ``device`` and ``inode`` as one text, `DEV:INO` (a delta's manifest records it, issue 35).
    public var fileIdentity: String { "\(device):\(inode)" }

    /// The database file's path, for messages.
    public var path: String { folder.path(fileName) }

    /// `wal` or `rollback`, from the header.
    public var journalKind: String { header.isWAL ? "wal" : "rollback" }

    /// The name SQLite opens this store by, beneath its folder.
    public func sqliteName() throws(FolderError) -> SQLiteName { try folder.sqliteName(fileName) }

    /// The files SQLite keeps beside a database, by the suffix added to its name: the write-ahead
    /// log, its shared-memory index and the rollback journal
    /// (<https://www.sqlite.org/tempfiles.html>). Every rule about a store's companions (what is
    /// scanned, removed before a switch, checked for holders, counted as archived) reads this list.
    public static let companionSuffixes = ["-wal", "-shm", "-journal"]

    /// The names of the companion files of the database `file`: `file-wal`, `file-shm`, `file-journal`.
    public static func companions(of file: String) -> [String] { companionSuffixes.map { file + $0 } }

    /// The bytes of the store as granary counts them everywhere (a user's total in `users`,
    /// retire's plan, the room a restore's safety archive needs, a backup's time budget): the
    /// database file and its `-wal`, which a snapshot folds in.
    public var bytes: Int64 { size + (walSize ?? 0) }

    /// The bytes of every store in `stores` (``bytes`` each).
    public static func bytes(of stores: [StoreFile]) -> Int64 { stores.reduce(0) { $0 + $1.bytes } }

    /// What a snapshot of the store may write before its `-wal` is folded in: the larger of its
    /// file and the pages its header claims (a sparse file can claim far more than it holds).
    public var claimedLength: Int64 { max(size, Int64(header.pageCount) * Int64(header.pageSize)) }

    /// Opens the store's external-data folder (nil when it has none).
    public func externalDataFolder() throws(FolderError) -> Folder<UserOwned>? {
        guard hasExternalData else { return nil }
        return try Self.externalDataFolder(of: fileName, in: folder)
    }

    /// Opens the external-data folder of store `file` in `folder`: nil when there is none, an error
    /// when `.X_SUPPORT` or `_EXTERNAL_DATA` is there but is not a real folder of the owner's (a
    /// link is never followed).
    public static func externalDataFolder<Trust>(of file: String, in folder: Folder<Trust>) throws(FolderError)
        -> Folder<Trust>?
    {
        let support = supportFolderName(for: file)
        guard let entry = folder.entry(support) else { return nil }
        guard entry.kind == .folder else {
            throw entry.kind == .symbolicLink
                ? .symbolicLink(path: folder.path(support)) : .notRegular(path: folder.path(support), kind: entry.kind)
        }
        let supportFolder = try folder.folder(support)
        guard let inner = supportFolder.entry(externalDataFolderName) else { return nil }
        guard inner.kind == .folder else {
            let path = supportFolder.path(externalDataFolderName)
            throw inner.kind == .symbolicLink ? .symbolicLink(path: path) : .notRegular(path: path, kind: inner.kind)
        }
        return try supportFolder.folder(externalDataFolderName)
    }

    /// The external-data folder's path relative to the user's folder, whether or not it exists.
    public var externalDataName: String { Self.externalDataName(for: name) }

    /// `_EXTERNAL_DATA`, inside the support folder.
    public static let externalDataFolderName = "_EXTERNAL_DATA"

    /// `Notes.sqlite` → `Notes` (the name without its extension).
    public static func baseName(_ fileName: String) -> String {
        if let dot = fileName.lastIndex(of: "."), dot != fileName.startIndex { return String(fileName[..<dot]) }
        return fileName
    }

    /// `Notes.sqlite` → `.Notes_SUPPORT`.
    public static func supportFolderName(for fileName: String) -> String {
        "." + baseName(fileName) + "_SUPPORT"
    }

    /// `.Notes_SUPPORT` → `Notes`; nil for any other name.
    public static func supportOwner(_ folderName: String) -> String? {
        guard folderName.hasPrefix("."), folderName.hasSuffix("_SUPPORT"), folderName.count > "._SUPPORT".count else {
            return nil
        }
        return String(folderName.dropFirst().dropLast("_SUPPORT".count))
    }

    /// `Data/Notes.sqlite` → `Data/.Notes_SUPPORT/_EXTERNAL_DATA`.
    public static func externalDataName(for storeName: String) -> String {
        let file = PathText.lastComponent(storeName)
        let folder = PathText.parent(storeName)
        let support = supportFolderName(for: file) + "/" + externalDataFolderName
        return folder.isEmpty ? support : folder + "/" + support
    }
}
