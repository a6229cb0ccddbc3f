import CSQLite
import Foundation

/// A value read from or bound to SQLite.
public enum SQLValue: Sendable, Equatable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])

    /// The value as an integer, when it is one.
    public var integer: Int64? {
        if case .integer(let v) = self { return v }
        return nil
    }

    /// The value as text, when it is text (an integer is rendered too, as `PRAGMA` results may be either).
    public var text: String? {
        switch self {
        case .text(let s): return s
        case .integer(let i): return String(i)
        default: return nil
        }
    }

    /// The value as bytes, when it is a blob.
    public var blob: [UInt8]? {
        if case .blob(let b) = self { return b }
        return nil
    }
}

/// One row of a result.
public struct Row: Sendable {
    public let values: [SQLValue]
    public subscript(_ index: Int) -> SQLValue { values[index] }
}

/// A prepared statement; finalised in `deinit`.
/// See <https://www.sqlite.org/c3ref/stmt.html>.
public final class Statement {
    private let handle: OpaquePointer
    private let database: Database
    private let sql: String

    /// Prepares `sql`. With `single`, text after the first statement (other than white space) is
    /// refused rather than ignored: for statements that come from a store's own schema, where
    /// SQLite itself only ever reads the first.
    init(database: Database, sql: String, single: Bool = false) throws(SQLiteError) {
        var stmt: OpaquePointer?
        var rest = 0
        // Preparing the first statement reads the schema: the store's, counted against its budget.
        let rc = database.charging {
            sql.withCString { text -> Int32 in
                var tail: UnsafePointer<CChar>?
                let rc = sqlite3_prepare_v2(database.handle, text, -1, &stmt, &tail)
                if let tail { rest = strlen(tail) }
                return rc
            }
        }
        guard rc == SQLITE_OK, let stmt else {
            if rc == SQLITE_OK {
                throw SQLiteError(
                    code: SQLITE_MISUSE, message: "no statement to run", path: database.path, operation: sql)
            }
            throw database.lastError(rc, operation: sql)
        }
        self.handle = stmt
        self.database = database
        self.sql = sql
        if single, !sql.utf8.suffix(rest).allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D }) {
            throw SQLiteError(
                code: SQLITE_MISUSE, message: "holds more than one statement", path: database.path, operation: sql)
        }
    }

    deinit { sqlite3_finalize(handle) }

    /// Binds positional arguments (1-based in SQLite, 0-based here).
    public func bind(_ values: [SQLValue]) throws(SQLiteError) {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
        for (offset, value) in values.enumerated() {
            let index = Int32(offset + 1)
            let rc: Int32
            switch value {
            case .null: rc = sqlite3_bind_null(handle, index)
            case .integer(let v): rc = sqlite3_bind_int64(handle, index, v)
            case .real(let v): rc = sqlite3_bind_double(handle, index, v)
            case .text(let v): rc = sqlite3_bind_text(handle, index, v, -1, granary_sqlite_transient())
            case .blob(let v):
                rc = v.withUnsafeBytes { buffer in
                    sqlite3_bind_blob(
                        handle, index, buffer.baseAddress, Int32(buffer.count), granary_sqlite_transient())
                }
            }
            if rc != SQLITE_OK { throw database.lastError(rc, operation: sql) }
        }
    }

    /// Steps once: a row, or `nil` when done.
    public func step() throws(SQLiteError) -> Row? {
        // Reading the columns may convert values (allocations): counted with the step.
        let (rc, row) = database.charging { () -> (Int32, Row?) in
            let rc = sqlite3_step(handle)
            guard rc == SQLITE_ROW else { return (rc, nil) }
            let count = sqlite3_column_count(handle)
            var values: [SQLValue] = []
            values.reserveCapacity(Int(count))
            for column in 0..<count { values.append(value(at: column)) }
            return (rc, Row(values: values))
        }
        switch rc {
        case SQLITE_ROW: return row
        case SQLITE_DONE: return nil
        default: throw database.lastError(rc, operation: sql)
        }
    }

    private func value(at column: Int32) -> SQLValue {
        switch sqlite3_column_type(handle, column) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(handle, column))
        case SQLITE_FLOAT: return .real(sqlite3_column_double(handle, column))
        case SQLITE_TEXT: return .text(String(cString: sqlite3_column_text(handle, column)))
        case SQLITE_BLOB:
            let count = Int(sqlite3_column_bytes(handle, column))
            guard count > 0, let base = sqlite3_column_blob(handle, column) else { return .blob([]) }
            return .blob(Array(UnsafeRawBufferPointer(start: base, count: count)))
        default: return .null
        }
    }
}
