import CSQLite

/// A failure reported by SQLite, keeping the extended result code.
///
/// `kind` sorts the codes that callers act on differently (a missing file, a file that is
/// not a database, a lock held by another connection, corruption); everything else is
/// `.other` and keeps its code and SQLite's own message.
/// See <https://www.sqlite.org/rescode.html>.
public struct SQLiteError: Error, CustomStringConvertible, Sendable {
    /// What callers distinguish.
    public enum Kind: Sendable, Equatable {
        /// The file could not be opened (missing, a folder, no permission): `SQLITE_CANTOPEN`.
        case cannotOpen
        /// The file is not a SQLite database: `SQLITE_NOTADB`.
        case notADatabase
        /// Another connection holds a lock: `SQLITE_BUSY` or `SQLITE_LOCKED`.
        case busy
        /// The database image is malformed: `SQLITE_CORRUPT`.
        case corrupt
        /// The disk or a file size limit is full: `SQLITE_FULL`.
        case full
        /// Reading or writing failed: `SQLITE_IOERR`.
        case ioError
        /// The database is read-only: `SQLITE_READONLY`.
        case readOnly
        /// A file of the store was refused by granary's checks (a link, a FIFO, a hard link, not
        /// the folder owner's): see ``SQLiteError/refusal``.
        case refused
        /// The connection's time budget or memory ceiling stopped the statement (`limit` says which).
        case overLimit
        /// Any other result code.
        case other
    }

    /// The extended result code (`sqlite3_extended_errcode`).
    public let code: Int32
    /// SQLite's message (`sqlite3_errmsg`) or our own for wrapper-level failures.
    public let message: String
    /// The database file concerned, when known.
    public let path: String?
    /// The statement or operation that failed, when known.
    public let operation: String?
    /// For a store opened beneath a user's folder: the file granary refused to let SQLite open
    /// and why (`/srv/users/alice/Local.sqlite-wal: has more than one hard link`).
    public let refusal: String?
    /// The limit that stopped the statement, when one did (`ContentLimits`).
    public let limit: ContentLimit?

    public init(
        code: Int32, message: String, path: String? = nil, operation: String? = nil, refusal: String? = nil,
        limit: ContentLimit? = nil
    ) {
        self.code = code
        self.message = message
        self.path = path
        self.operation = operation
        self.refusal = refusal
        self.limit = limit
    }

    /// The primary result code (the low byte of the extended code).
    public var primaryCode: Int32 { code & Self.primaryMask }
    /// An extended result code keeps its primary code in its low byte.
    static let primaryMask: Int32 = 0xFF
    /// `SQLITE_IOERR_WRITE` (`SQLITE_IOERR | (3 << 8)` in sqlite3.h, a macro Swift does not import).
    static let ioErrorWrite: Int32 = SQLITE_IOERR | (3 << 8)
    /// `SQLITE_READONLY_ROLLBACK` (`SQLITE_READONLY | (3 << 8)`, 776): the store has a hot journal
    /// (a writer was killed mid-transaction) that must be rolled back, and granary opened the
    /// store read-only, as it opens every live store.
    static let readOnlyRollback: Int32 = SQLITE_READONLY | (3 << 8)
    /// Whether the store has a hot journal that a read-only connection cannot roll back.
    public var isHotJournal: Bool { code == Self.readOnlyRollback }
    /// Whether SQLite failed writing a file (`SQLITE_IOERR_WRITE`).
    public var isWriteError: Bool { code == Self.ioErrorWrite }

    /// SQLite refused something the store's schema asked for (`load_extension()` in a CHECK
    /// constraint, say, with extension loading off): the store's content, not the disk, is at fault.
    public var isNotAuthorized: Bool {
        primaryCode == SQLITE_AUTH || (primaryCode == SQLITE_ERROR && message.hasSuffix("not authorized"))
    }

    public var kind: Kind {
        if refusal != nil { return .refused }
        if limit != nil { return .overLimit }
        switch primaryCode {
        case SQLITE_CANTOPEN: return .cannotOpen
        case SQLITE_NOTADB: return .notADatabase
        case SQLITE_BUSY, SQLITE_LOCKED: return .busy
        case SQLITE_CORRUPT: return .corrupt
        case SQLITE_FULL: return .full
        case SQLITE_IOERR: return .ioError
        case SQLITE_READONLY: return .readOnly
        default: return .other
        }
    }

    public var description: String {
        if let refusal { return refusal + "; granary does not open it" }
        var text = ""
        if let path { text += "\(path): " }
        if isHotJournal {
            return text
                + "has a hot journal left by a writer that was killed mid-transaction; granary opens live stores read-only and cannot roll it back (SQLite code \(code))"
        }
        if limit != nil {
            // "…/Local.sqlite: PRAGMA integrity_check stopped at its time budget of 30s (…)"
            return text + (operation.map { $0 + " " } ?? "") + message
        }
        text += message
        text += " (SQLite code \(code)"
        if let operation { text += " in \(operation)" }
        text += ")"
        return text
    }
}
