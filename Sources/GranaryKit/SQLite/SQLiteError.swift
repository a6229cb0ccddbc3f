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

    public init(code: Int32, message: String, path: String? = nil, operation: String? = nil) {
        self.code = code
        self.message = message
        self.path = path
        self.operation = operation
    }

    /// The primary result code (the low byte of the extended code).
    public var primaryCode: Int32 { code & 0xFF }

    public var kind: Kind {
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
        var text = ""
        if let path { text += "\(path): " }
        text += message
        text += " (SQLite code \(code)"
        if let operation { text += " in \(operation)" }
        text += ")"
        return text
    }
}
