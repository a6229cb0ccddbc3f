import CSQLite
import CSQLiteLimits
import CSnapshotTee
import Foundation

/// One SQLite connection. It owns its handle and closes it in `deinit`.
///
/// Opening is explicit about flags (we never want SQLite to create a missing store by
/// accident) and sets a busy timeout so that short locks held by an owning process are
/// waited out rather than failed. Not thread-safe: use one connection per thread.
///
/// ```swift
/// let db = try Database(path: "/data/alice/Local.sqlite", mode: .readOnly)
/// let mode = try db.journalMode()
/// ```
/// See <https://www.sqlite.org/c3ref/open.html>.
public final class Database {
    /// How to open the file.
    public enum OpenMode: Sendable {
        /// `SQLITE_OPEN_READONLY`: the file must exist.
        case readOnly
        /// `SQLITE_OPEN_READWRITE`: the file must exist.
        case readWrite
        /// `SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE`.
        case create

        var flags: Int32 {
            switch self {
            case .readOnly: return SQLITE_OPEN_READONLY
            case .readWrite: return SQLITE_OPEN_READWRITE
            case .create: return SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
            }
        }
    }

    /// The raw handle, for the other wrapper types in this folder only.
    let handle: OpaquePointer
    /// The path this connection was opened with (for a store beneath a ``Folder``, its display path).
    public let path: String
    /// For a connection beneath a folder: the registration SQLite's file names resolve through,
    /// kept as long as the connection (released after the handle is closed).
    private let beneath: SQLiteName?
    /// The connection's time budget and memory ceiling.
    let budget: ContentBudget
    /// The size of the database file when it was opened, which its time budget was made for.
    public let contentSize: Int64
    /// Whether SQLite's default page cache is still to be set (see `capCache`).
    private var cachePending: Bool

    /// Opens `path`. `busyTimeout` is how long a statement waits for another connection's lock;
    /// `vfs` names a registered VFS (nil: the default).
    ///
    /// Every connection works under `limits` (nil: the `account`'s, else `ContentLimits.defaults`;
    /// a run passes its own, ``RunContext/limits``): its time budget is
    /// that of a store the size of the database file (or of `budgetSize` bytes, when given), and
    /// its memory ceiling applies to everything SQLite allocates in its calls. A statement stopped
    /// by either throws an `SQLiteError` whose `limit` says which. See `ContentLimits`.
    public convenience init(
        path: String, mode: OpenMode, busyTimeout: Duration = .seconds(5), vfs: String? = nil,
        limits: ContentLimits? = nil,
        budgetSize: Int64? = nil, account: ContentAccount? = nil
    ) throws(SQLiteError) {
        // SQLite's unix VFS takes paths of at most 512 bytes; a store deep in granary's staging
        // folder (a 255-byte user id, a long store name) is opened beneath its folder instead,
        // under a short name.
        if FolderName.encode(path).count > Database.longPath,
            let folder = try? Folder<GranaryOwned>.open(path: PathText.parent(path)),
            let name = try? folder.sqliteName(PathText.lastComponent(path))
        {
            try self.init(
                opening: name.path, display: path, beneath: name, mode: mode, busyTimeout: busyTimeout, vfs: vfs,
                limits: limits,
                budgetSize: budgetSize, account: account)
            return
        }
        try self.init(
            opening: path, display: path, beneath: nil, mode: mode, busyTimeout: busyTimeout, vfs: vfs, limits: limits,
            budgetSize: budgetSize, account: account)
    }

    /// Paths longer than this are opened beneath their folder (SQLite's limit is 512 bytes, and it
    /// appends `-journal` to it).
    static let longPath = 480

    /// Opens a file beneath a folder (``Folder/sqliteName(_:)``): SQLite reaches the database and
    /// its `-wal`, `-shm` and `-journal` only beneath the folder's descriptor, never following a
    /// link, and refuses any of them that is not a regular file with one link owned by the
    /// folder's owner (the error then names the file and why: ``SQLiteError/refusal``). `limits`
    /// and `budgetSize` as for a path.
    public convenience init(
        _ name: SQLiteName, mode: OpenMode, busyTimeout: Duration = .seconds(5), limits: ContentLimits? = nil,
        budgetSize: Int64? = nil, account: ContentAccount? = nil, vfs: String? = nil
    ) throws(SQLiteError) {
        try self.init(
            opening: name.path, display: name.display, beneath: name, mode: mode, busyTimeout: busyTimeout, vfs: vfs,
            limits: limits,
            budgetSize: budgetSize, account: account)
    }

    private init(
        opening: String, display: String, beneath: SQLiteName?, mode: OpenMode, busyTimeout: Duration, vfs: String?,
        limits: ContentLimits?, budgetSize: Int64?, account: ContentAccount? = nil
    ) throws(SQLiteError) {
        let budget = ContentBudget(limits: limits ?? account?.limits ?? .defaults, account: account)
        var db: OpaquePointer?
        SQLiteName.clearRefusal()
        // SQLITE_OPEN_NOMUTEX: each connection is confined to one thread.
        // A path of granary's own may hold a name that is not UTF-8 (escaped in the string): SQLite
        // gets its bytes.
        let rc = budget.charging {
            FolderName.withRaw(opening) {
                sqlite3_open_v2($0, &db, mode.flags | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE, vfs)
            }
        }
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(rc))
            let code = db.map { sqlite3_extended_errcode($0) } ?? rc
            if let db { sqlite3_close_v2(db) }
            throw SQLiteError(
                code: code, message: message, path: display, operation: "open", refusal: Database.refusal(near: display)
            )
        }
        self.handle = db
        self.path = display
        self.beneath = beneath
        self.budget = budget
        // The size through SQLite's own open file (beneath a folder too: no second lookup by path).
        self.contentSize = budgetSize ?? granary_database_size(db)
        budget.setTime(forStoreOfSize: contentSize)
        self.cachePending = mode != .create && budget.memory > 0
        sqlite3_extended_result_codes(db, 1)
        budget.watch(db, busyTimeout: busyTimeout.clampedMilliseconds)
    }

    /// Opens a file that nothing writes any more and nobody else can reach (a finished snapshot,
    /// a store extracted into granary's private work folder) for reading through the tee: SQLite
    /// takes its pages in place from a few mapped windows (2 MiB at most), and reads any other
    /// page through 1 MiB of read-ahead. A check then makes no copy out of the page cache and
    /// one system call per window instead of one per page. Falls back to a plain read-only
    /// connection. Never for a user's live store: mapped pages of a file that another process
    /// truncates kill the reader (SIGBUS).
    /// `account`: the user's time across stores, charged too (`ContentAccount`).
    public static func openFinished(
        path: String, limits: ContentLimits? = nil, account: ContentAccount? = nil
    ) throws(SQLiteError) -> Database {
        guard granary_tee_register() == SQLITE_OK else {
            return try Database(path: path, mode: .readOnly, limits: limits, account: account)
        }
        let db = try Database(path: path, mode: .readOnly, vfs: "granary-tee", limits: limits, account: account)
        if sqlite3_file_control(db.handle, "main", SNAPSHOT_TEE_FCNTL_READAHEAD, nil) == SQLITE_OK {
            // Pages in place from the tee's mapped windows (SQLite clamps the size to its
            // limit; the tee maps 2 MiB at most, whatever it is).
            try? db.execute("PRAGMA mmap_size=\(Int64(1) << 40)")
        }
        return db
    }

    deinit {
        sqlite3_close_v2(handle)
    }

    /// The error for the connection's last failure.
    func lastError(_ rc: Int32, operation: String?) -> SQLiteError {
        let code = sqlite3_extended_errcode(handle)
        return error(
            code: code == SQLITE_OK ? rc : code, message: String(cString: sqlite3_errmsg(handle)), operation: operation)
    }

    /// An error of this connection: one caused by the connection's budget says so; one of a store
    /// beneath a folder names the file granary refused, if it refused one.
    private func error(code: Int32, message: String, operation: String?) -> SQLiteError {
        let refusal = beneath == nil ? nil : Database.refusal(near: path)
        if let limit = budget.exceeded {
            return SQLiteError(
                code: code, message: "stopped at \(limit)", path: path, operation: operation, refusal: refusal,
                limit: limit)
        }
        return SQLiteError(code: code, message: message, path: path, operation: operation, refusal: refusal)
    }

    /// The file beneath the folder that was refused on this thread (a `-wal` that is a hard link,
    /// a `-shm` that is a FIFO…), as a display path, when one was.
    static func refusal(near display: String) -> String? {
        guard let refusal = SQLiteName.lastRefusal() else { return nil }
        SQLiteName.clearRefusal()
        return PathText.parent(display) + "/" + refusal
    }

    /// The limit the connection ran into, if one stopped a statement (`ContentLimits`).
    public var exceededLimit: ContentLimit? { budget.exceeded }

    /// Runs `body` (calls into SQLite on this connection) against the connection's budget.
    @inline(__always)
    func charging<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        try budget.charging(body)
    }

    /// Runs one or more statements that return no rows we need.
    public func execute(_ sql: String) throws(SQLiteError) {
        var errmsg: UnsafeMutablePointer<CChar>?
        if beneath != nil { SQLiteName.clearRefusal() }
        let rc = charging { sqlite3_exec(handle, sql, nil, nil, &errmsg) }
        // Taken before capCache(), whose own statement (after a connection's first) resets it:
        // a store busy on a first statement was said to fail with code 0, of no kind.
        let code = rc == SQLITE_OK ? SQLITE_OK : sqlite3_extended_errcode(handle)
        capCache()
        if rc != SQLITE_OK {
            let message = errmsg.map { String(cString: $0) } ?? String(cString: sqlite3_errstr(rc))
            sqlite3_free(errmsg)
            throw error(code: code == SQLITE_OK ? rc : code, message: message, operation: sql)
        }
    }

    /// Begins a read transaction and reads the header through it, without reading the schema:
    /// the connection then holds its snapshot until `COMMIT` (in WAL mode, a read mark in the
    /// `-shm` that keeps a checkpoint from restarting the `-wal`, while the `-wal` holds frames not
    /// yet checkpointed: when every frame is, SQLite reads the database file alone and the owner
    /// may restart the `-wal` meanwhile). It costs the same for a store of a
    /// hundred tables as for one of one (SQLite parses every `CREATE` in the schema the first time
    /// a statement needs it, and so does the page cache's cap, ``capCache()``, which is left
    /// pending: no page but the header is read, and a header's suggested cache size is applied
    /// only when the schema is read). The schema cookie.
    public func beginReadWithoutSchema() throws(SQLiteError) -> Int64 {
        if beneath != nil { SQLiteName.clearRefusal() }
        try executeUncapped("BEGIN")
        do {
            let statement = try Statement(database: self, sql: "PRAGMA schema_version")
            return try statement.step()?[0].integer ?? 0
        } catch {
            // No transaction left open behind a failure.
            _ = charging { sqlite3_exec(handle, "ROLLBACK", nil, nil, nil) }
            throw error
        }
    }

    /// Ends the read transaction ``beginReadWithoutSchema()`` began, still without reading the
    /// schema (`execute("COMMIT")` would cap the page cache first, which reads it).
    public func endReadWithoutSchema() throws(SQLiteError) {
        try executeUncapped("COMMIT")
    }

    /// Runs `sql` (no rows) without capping the page cache first, which would read the schema.
    private func executeUncapped(_ sql: String) throws(SQLiteError) {
        var errmsg: UnsafeMutablePointer<CChar>?
        let rc = charging { sqlite3_exec(handle, sql, nil, nil, &errmsg) }
        if rc != SQLITE_OK {
            let message = errmsg.map { String(cString: $0) } ?? String(cString: sqlite3_errstr(rc))
            sqlite3_free(errmsg)
            throw error(code: sqlite3_extended_errcode(handle), message: message, operation: sql)
        }
    }

    /// The bytes SQLite holds for the connection's schema (0 until a statement has read it).
    public var schemaMemory: Int {
        var current: Int32 = 0
        var highest: Int32 = 0
        sqlite3_db_status(handle, SQLITE_DBSTATUS_SCHEMA_USED, &current, &highest, 0)
        return Int(current)
    }

    /// Prepares a statement.
    public func prepare(_ sql: String) throws(SQLiteError) -> Statement {
        let statement = try Statement(database: self, sql: sql)
        capCache()
        return statement
    }

    /// SQLite's default page cache (2000 KiB) on a connection under a memory ceiling: a store's
    /// header may suggest any size (the deprecated `default_cache_size`), and every page read would
    /// stay in memory up to it (the backup API's reads too, which are not charged to the budget).
    /// Set once the first statement has read the schema, which applies the header's suggestion:
    /// the pragma then needs neither I/O nor a lock, and the statement has not run yet.
    private func capCache() {
        guard cachePending else { return }
        cachePending = false
        _ = charging { sqlite3_exec(handle, "PRAGMA cache_size=-2000", nil, nil, nil) }
    }

    /// Runs exactly one statement, refusing text after it: for SQL read from a store's schema
    /// (which SQLite only ever runs the first statement of, and which could hide another).
    public func runSingle(_ sql: String) throws(SQLiteError) {
        let statement = try Statement(database: self, sql: sql, single: true)
        capCache()
        while try statement.step() != nil {}
    }

    /// Runs `sql` with `arguments` and returns every row.
    public func rows(_ sql: String, _ arguments: [SQLValue] = []) throws(SQLiteError) -> [Row] {
        let statement = try prepare(sql)
        try statement.bind(arguments)
        var result: [Row] = []
        while let row = try statement.step() { result.append(row) }
        return result
    }

    /// Runs `sql` and returns the first column of the first row, or `nil` when there is none.
    public func scalar(_ sql: String, _ arguments: [SQLValue] = []) throws(SQLiteError) -> SQLValue? {
        let statement = try prepare(sql)
        try statement.bind(arguments)
        return try statement.step()?[0]
    }

    /// Runs a statement that changes rows, with arguments.
    public func run(_ sql: String, _ arguments: [SQLValue] = []) throws(SQLiteError) {
        let statement = try prepare(sql)
        try statement.bind(arguments)
        while try statement.step() != nil {}
    }

    /// `PRAGMA journal_mode`, lower-cased (`wal`, `delete`, `truncate`, `persist`, `memory`, `off`).
    public func journalMode() throws(SQLiteError) -> String {
        (try scalar("PRAGMA journal_mode")?.text ?? "unknown").lowercased()
    }

    /// `PRAGMA page_size`.
    public func pageSize() throws(SQLiteError) -> Int {
        Int(try scalar("PRAGMA page_size")?.integer ?? 0)
    }

    /// `PRAGMA page_count`.
    public func pageCount() throws(SQLiteError) -> Int {
        Int(try scalar("PRAGMA page_count")?.integer ?? 0)
    }

    /// What SQLite's checks (`integrity_check`, `quick_check`, `rtreecheck()`) answer for a sound
    /// database, and what granary records as a sound store's integrity.
    public static let sound = "ok"

    /// The result of `PRAGMA integrity_check` or `PRAGMA quick_check`: `[Database.sound]` when sound.
    ///
    /// A corrupt file can also make the pragma itself fail; that is reported as a
    /// one-line problem rather than thrown, so callers treat both the same way. So is a check
    /// stopped by the connection's budget ("quick_check stopped at its time budget of …");
    /// `exceededLimit` then tells it from damage.
    public func integrityCheck(full: Bool, maxErrors: Int = 20) -> [String] {
        let pragma = full ? "integrity_check" : "quick_check"
        do {
            return try rows("PRAGMA \(pragma)(\(maxErrors))").map { $0[0].text ?? "" }
        } catch {
            return [error.limit != nil ? "\(pragma) \(error.message)" : error.message]
        }
    }

    /// Names of the tables (virtual ones too), in name order (internal `sqlite_` tables excluded).
    public func tableNames() throws(SQLiteError) -> [String] {
        try rows("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
            .compactMap { $0[0].text }
    }

    /// Whether the connection has a table called `name`.
    public func hasTable(_ name: String) throws(SQLiteError) -> Bool {
        try scalar("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?", [.text(name)]) != nil
    }

    /// The result of `PRAGMA wal_checkpoint(mode)`.
    public struct CheckpointResult: Sendable {
        /// Pages in the WAL, or -1 when the database is not in WAL mode.
        public var logFrames: Int32
        /// Pages moved into the database file.
        public var checkpointedFrames: Int32
    }

    /// Checkpoint modes. See <https://www.sqlite.org/c3ref/wal_checkpoint_v2.html>.
    public enum CheckpointMode: Sendable {
        case passive, full, restart, truncate
        var raw: Int32 {
            switch self {
            case .passive: return SQLITE_CHECKPOINT_PASSIVE
            case .full: return SQLITE_CHECKPOINT_FULL
            case .restart: return SQLITE_CHECKPOINT_RESTART
            case .truncate: return SQLITE_CHECKPOINT_TRUNCATE
            }
        }
    }

    /// Copies WAL content into the database file (`sqlite3_wal_checkpoint_v2`).
    @discardableResult
    public func checkpoint(_ mode: CheckpointMode) throws(SQLiteError) -> CheckpointResult {
        // A connection opens the -wal only on its first read; before that, SQLite reports
        // "not in WAL mode" (-1 frames) and checkpoints nothing. Read the schema first.
        _ = try scalar("SELECT count(*) FROM sqlite_schema")
        var log: Int32 = 0
        var done: Int32 = 0
        let rc = sqlite3_wal_checkpoint_v2(handle, nil, mode.raw, &log, &done)
        if rc != SQLITE_OK { throw lastError(rc, operation: "wal_checkpoint") }
        return CheckpointResult(logFrames: log, checkpointedFrames: done)
    }

    /// Turns off the checkpoint SQLite runs when the last connection closes, so that
    /// committed pages stay in the `-wal` (`SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE`).
    public func keepWALOnClose() throws(SQLiteError) {
        var out: Int32 = 0
        let rc = granary_sqlite_db_config_int(handle, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, &out)
        if rc != SQLITE_OK { throw lastError(rc, operation: "db_config(NO_CKPT_ON_CLOSE)") }
    }

    /// Keeps the `-wal` file when this connection closes (`SQLITE_FCNTL_PERSIST_WAL`): a connection
    /// that outlives a rename of its database must not unlink, by name, a `-wal` that now
    /// belongs to the file at that name.
    public func persistWAL() throws(SQLiteError) {
        var on: Int32 = 1
        let rc = sqlite3_file_control(handle, "main", SQLITE_FCNTL_PERSIST_WAL, &on)
        if rc != SQLITE_OK { throw lastError(rc, operation: "file_control(PERSIST_WAL)") }
    }

    /// Rows changed by the last statement.
    public var changes: Int { Int(sqlite3_changes(handle)) }

    /// The rowid of the last insert.
    public var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }

    /// The SQLite library version, for example `3.40.1`.
    public static var libraryVersion: String { String(cString: sqlite3_libversion()) }
}
