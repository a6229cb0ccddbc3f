import CSQLite
import Foundation

/// The empty copy of a store that `granary reset` puts in place: a new database built from the
/// store's schema, holding no row but those of the tables that record schema state.
///
/// Never by deleting rows: deleting runs the store's own triggers (an audit trigger refills the
/// table just emptied, so "erased" rows survive), leaves FTS5 and R-tree tables inconsistent
/// with their shadow tables, and leaves old bytes in free pages. Instead, in a new file:
///
/// 1. the header fields that are the store's own: page size, auto-vacuum, text encoding (before
///    anything is created), `user_version`, `application_id`;
/// 2. the ordinary tables, in the order they were created, from their `CREATE TABLE` text;
/// 3. the virtual tables (FTS3/4/5, R-tree), which create their own empty shadow tables;
/// 4. the rows of the kept tables, copied (`Z_PRIMARYKEY.Z_MAX` then set to 0), and the
///    `sqlite_sequence` counters of kept tables; an emptied `AUTOINCREMENT` table starts again at
///    1, as in a new database; `sqlite_stat1`/`sqlite_stat4` (statistics of rows now gone) are
///    not carried over;
/// 5. the indexes, then the views, then the triggers: last, so that none fires;
/// 6. the journal mode (WAL stays WAL).
///
/// The result is then checked: no row outside the kept tables, `integrity_check` ok, FTS's
/// `integrity-check` command and R-tree's `rtreecheck()` pass.
///
/// The kept tables are those of `schemaStateTables` and the configured ones
/// (``RunContext/resetKeepTables``, `[reset] keep_tables`), matched as SQLite
/// matches names (ASCII case ignored). Schema text is the store author's: each entry must be one
/// `CREATE` statement (SQLite itself only ever reads the first statement of one, and one could
/// hide another behind it), and only the virtual-table modules above are rebuilt.
///
/// ```swift
/// let live = try Database(path: store, mode: .readOnly)
/// let plan = try EmptyStore.build(from: live, into: staged)
/// ```
public enum EmptyStore {
    /// Tables that hold an application's schema state rather than its data, kept with their rows.
    public static let schemaStateTables = [
        // Core Data: the store's metadata and model, and each entity's key counter (set to 0).
        "Z_METADATA", "Z_PRIMARYKEY", "Z_MODELCACHE",
        // Migration tools: which migrations the schema has had.
        "alembic_version",  // Alembic (SQLAlchemy)
        "schema_migrations", "ar_internal_metadata",  // Rails; also golang-migrate, dbmate
        "django_migrations",  // Django
        "__EFMigrationsHistory",  // Entity Framework Core
        "grdb_migrations",  // GRDB
        "room_master_table", "android_metadata",  // Android Room, SQLiteOpenHelper
        "__diesel_schema_migrations",  // Diesel
        "_sqlx_migrations",  // SQLx
        "goose_db_version",  // goose
        "flyway_schema_history",  // Flyway
        "knex_migrations", "knex_migrations_lock",  // Knex
        "SequelizeMeta",  // Sequelize
        "doctrine_migration_versions",  // Doctrine
        "DATABASECHANGELOG", "DATABASECHANGELOGLOCK",  // Liquibase
    ]

    /// The tables a reset keeps: `schemaStateTables` and `configured` (`[reset] keep_tables`,
    /// ``RunContext/resetKeepTables``).
    public static func keptTables(besides configured: [String]) -> [String] { schemaStateTables + configured }

    /// The virtual-table modules a reset rebuilds (and knows how to check).
    public static let modules: Set<String> = ["fts3", "fts4", "fts5", "rtree", "rtree_i32"]

    /// What a reset of one store empties and keeps.
    public struct Plan: Sendable, Equatable, Codable {
        /// One table and its rows (in the live store).
        public struct Table: Sendable, Equatable, Codable {
            public var name: String
            /// Rows now; `nil` when not counted (`build` does not count what it empties).
            public var rows: Int64?
            /// A virtual table (FTS, R-tree): recreated empty.
            public var virtual: Bool
        }

        /// The header fields carried over.
        public struct Header: Sendable, Equatable, Codable {
            public var pageSize: Int
            public var autoVacuum: Int
            public var encoding: String
            public var userVersion: Int64
            public var applicationID: Int64
            public var journalMode: String
        }

        /// Tables recreated empty.
        public var emptied: [Table]
        /// Tables copied with their rows.
        public var kept: [Table]
        /// Counters set back: `Z_PRIMARYKEY.Z_MAX`, and the `sqlite_sequence` entries of emptied tables.
        public var countersReset: [String]
        /// Internal tables not carried over (`sqlite_stat1`, …).
        public var dropped: [String]
        public var indexes: Int
        public var views: Int
        public var triggers: Int
        public var header: Header
    }

    /// What a reset of the store open as `source` would empty and keep (a dry run);
    /// counts the rows of every table. Reads one snapshot of the store.
    /// `keep`: the tables kept (nil: `schemaStateTables`; see ``keptTables(besides:)``).
    public static func plan(of source: Database, keep: [String]? = nil) throws -> Plan {
        try readTransaction(source) {
            let schema = try Schema.read(source, keep: keep ?? schemaStateTables)
            return try schema.plan(counting: source)
        }
    }

    /// Builds the empty copy of the store open as `source` at `path` (a new file), checks it, and
    /// returns what it emptied and kept. `source` is read in one read transaction.
    @discardableResult
    public static func build(from source: Database, into path: String, keep: [String]? = nil) throws -> Plan {
        guard FileSystem.status(path) == nil else { throw FileSystemError("create", path: path, code: EEXIST) }
        return try readTransaction(source) {
            let schema = try Schema.read(source, keep: keep ?? schemaStateTables)
            let destination = try Database(
                path: path, mode: .create, limits: source.budget.limits, budgetSize: source.contentSize)
            try schema.create(in: destination, from: source)
            try schema.check(destination)
            return try schema.plan(counting: nil)
        }
    }

    /// Runs `body` inside one read transaction of `db`, so that the schema and the kept rows come
    /// from the same snapshot of a live store.
    private static func readTransaction<T>(_ db: Database, _ body: () throws -> T) throws -> T {
        try db.execute("BEGIN")
        defer { try? db.execute("COMMIT") }
        return try body()
    }
}

/// Why a store cannot be reset.
public struct EmptyStoreError: GranaryError, Sendable, Equatable {
    /// The live store.
    public let store: String
    /// What is wrong, in a phrase.
    public let reason: String

    public init(store: String, reason: String) {
        self.store = store
        self.reason = reason
    }

    public var description: String { "\(store): \(reason); nothing was changed" }
}

extension EmptyStore {
    /// The schema of a store, sorted into what a rebuild creates in which order.
    struct Schema {
        struct Object {
            var type: String
            var name: String
            var sql: String
        }

        /// The store's path, for messages.
        var store: String
        var tables: [Object] = []
        var virtualTables: [(object: Object, module: String)] = []
        var indexes: [Object] = []
        var views: [Object] = []
        var triggers: [Object] = []
        /// Names of the kept tables that exist, as the store spells them.
        var kept: [String] = []
        /// Internal tables not carried over.
        var dropped: [String] = []
        var hasSequence = false
        var header: Plan.Header

        static func read(_ db: Database, keep: [String]) throws -> Schema {
            let store = db.path
            func fail(_ reason: String) -> EmptyStoreError { EmptyStoreError(store: store, reason: reason) }
            func integer(_ pragma: String) throws -> Int64 { try db.scalar("PRAGMA \(pragma)")?.integer ?? 0 }
            let encoding = try db.scalar("PRAGMA encoding")?.text ?? "UTF-8"
            guard ["UTF-8", "UTF-16le", "UTF-16be"].contains(encoding) else {
                throw fail("has text encoding \(encoding)")
            }
            var schema = Schema(
                store: store,
                header: Plan.Header(
                    pageSize: Int(try integer("page_size")), autoVacuum: Int(try integer("auto_vacuum")),
                    encoding: encoding,
                    userVersion: try integer("user_version"), applicationID: try integer("application_id"),
                    journalMode: try db.journalMode()))
            // Shadow tables belong to a virtual table, which creates them again.
            let shadows = Set(
                try db.rows("SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'shadow'").compactMap {
                    $0[0].text
                }
                .map(Self.folded))
            let wanted = Set(keep.map(Self.folded))
            for row in try db.rows("SELECT type, name, sql FROM sqlite_schema ORDER BY rowid") {
                guard let type = row[0].text, let name = row[1].text else { continue }
                // Automatic indexes (UNIQUE, PRIMARY KEY) have no text: their table makes them.
                guard let sql = row[2].text else { continue }
                let object = Object(type: type, name: name, sql: sql)
                // SQLite reads only entries that start so (and only their first statement).
                guard sql.utf8.count > 7, sql.prefix(7).lowercased() == "create " else {
                    throw fail("has a schema entry for \(name.debugDescription) that is not a CREATE statement")
                }
                switch type {
                case "table":
                    if name.lowercased().hasPrefix("sqlite_") {
                        if Self.folded(name) == "sqlite_sequence" {
                            schema.hasSequence = true
                        } else {
                            schema.dropped.append(name)
                        }
                        continue
                    }
                    if shadows.contains(Self.folded(name)) { continue }
                    if let module = try Self.virtualModule(sql) {
                        guard let module, EmptyStore.modules.contains(module.lowercased()) else {
                            throw fail(
                                "has virtual table \(name.debugDescription) of module \(module ?? "?"), which reset cannot rebuild (it rebuilds \(EmptyStore.modules.sorted().joined(separator: ", ")))"
                            )
                        }
                        schema.virtualTables.append((object, module.lowercased()))
                    } else {
                        schema.tables.append(object)
                    }
                    if wanted.contains(Self.folded(name)) { schema.kept.append(name) }
                case "index": schema.indexes.append(object)
                case "view": schema.views.append(object)
                case "trigger": schema.triggers.append(object)
                default: throw fail("has a schema entry of unknown type \(type.debugDescription)")
                }
            }
            return schema
        }

        /// SQLite compares names with ASCII case folded.
        static func folded(_ name: String) -> String {
            String(decoding: name.utf8.map { $0 >= 0x41 && $0 <= 0x5A ? $0 + 0x20 : $0 }, as: UTF8.self)
        }

        static func quoted(_ name: String) -> String { "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\"" }

        func isKept(_ name: String) -> Bool { kept.contains { Self.folded($0) == Self.folded(name) } }

        /// The plan; with `source`, the rows of every table counted there.
        func plan(counting source: Database?) throws -> Plan {
            func entry(_ name: String, virtual: Bool) throws -> Plan.Table {
                let rows = try source?.scalar("SELECT count(*) FROM \(Self.quoted(name))")?.integer
                return Plan.Table(name: name, rows: rows, virtual: virtual)
            }
            var emptied: [Plan.Table] = []
            var keptTables: [Plan.Table] = []
            for (name, virtual) in tables.map({ ($0.name, false) }) + virtualTables.map({ ($0.object.name, true) }) {
                let table = try entry(name, virtual: virtual)
                if isKept(name) { keptTables.append(table) } else { emptied.append(table) }
            }
            var counters: [String] = []
            if kept.contains(where: { Self.folded($0) == "z_primarykey" }) { counters.append("Z_PRIMARYKEY.Z_MAX") }
            if hasSequence, let source {
                for row in try source.rows("SELECT name FROM sqlite_sequence ORDER BY name") {
                    if let name = row[0].text, !isKept(name) { counters.append("sqlite_sequence(\(name))") }
                }
            }
            return Plan(
                emptied: emptied, kept: keptTables, countersReset: counters, dropped: dropped, indexes: indexes.count,
                views: views.count, triggers: triggers.count, header: header)
        }

        func create(in db: Database, from source: Database) throws {
            // Before anything is written: these are fixed once the first page exists.
            try db.execute("PRAGMA page_size=\(header.pageSize)")
            try db.execute("PRAGMA auto_vacuum=\(header.autoVacuum)")
            try db.execute("PRAGMA encoding='\(header.encoding)'")
            try db.execute("PRAGMA foreign_keys=OFF")
            try db.execute("BEGIN")
            try db.execute("PRAGMA user_version=\(header.userVersion)")
            try db.execute("PRAGMA application_id=\(header.applicationID)")
            for table in tables { try run(table, in: db) }
            for (table, _) in virtualTables { try run(table, in: db) }
            for name in kept { try copyRows(of: name, from: source, to: db) }
            if kept.contains(where: { Self.folded($0) == "z_primarykey" }),
                try db.rows("SELECT name FROM pragma_table_info('Z_PRIMARYKEY')").contains(where: {
                    $0[0].text == "Z_MAX"
                })
            {
                try db.execute("UPDATE Z_PRIMARYKEY SET Z_MAX = 0")
            }
            if hasSequence, try db.hasTable("sqlite_sequence") {
                try db.execute("DELETE FROM sqlite_sequence")
                for row in try source.rows("SELECT name, seq FROM sqlite_sequence") {
                    guard let name = row[0].text, isKept(name) else { continue }
                    try db.run("INSERT INTO sqlite_sequence(name, seq) VALUES(?, ?)", [.text(name), row[1]])
                }
            }
            // An FTS table whose content is another (kept) table indexes that table's rows;
            // for the others, there is nothing to index. Contentless tables refuse 'rebuild'.
            for (table, module) in virtualTables where module.hasPrefix("fts") {
                let name = Self.quoted(table.name)
                try? db.execute("INSERT INTO \(name)(\(name)) VALUES('rebuild')")
            }
            for index in indexes { try run(index, in: db) }
            for view in views { try run(view, in: db) }
            // Last: a trigger created before the copies above would have fired on them.
            for trigger in triggers { try run(trigger, in: db) }
            try db.execute("COMMIT")
            if header.journalMode == "wal" { try db.execute("PRAGMA journal_mode=WAL") }
        }

        private func run(_ object: Object, in db: Database) throws {
            do { try db.runSingle(object.sql) } catch {
                if error.limit != nil { throw error }
                throw EmptyStoreError(
                    store: store,
                    reason: "cannot recreate \(object.type) \(object.name.debugDescription): \(error.message)")
            }
        }

        /// Copies every row of `table` (its stored columns, and the rowid of a rowid table).
        private func copyRows(of table: String, from source: Database, to db: Database) throws {
            let quoted = Self.quoted(table)
            let info = try source.rows(
                "SELECT type, wr FROM pragma_table_list WHERE schema = 'main' AND name = ?", [.text(table)])
            let virtual = info.first?[0].text == "virtual"
            let withoutRowid = info.first?[1].integer == 1
            // hidden: 0 an ordinary column, 1 a virtual table's hidden one, 2 and 3 generated.
            let columns = try source.rows("SELECT name, hidden FROM pragma_table_xinfo(?)", [.text(table)])
                .filter { $0[1].integer == 0 }.compactMap { $0[0].text }
            var names = columns.map(Self.quoted)
            if !virtual && !withoutRowid,
                let alias = ["rowid", "_rowid_", "oid"].first(where: { alias in
                    !columns.contains { Self.folded($0) == alias }
                })
            {
                names.insert(alias, at: 0)
            }
            guard !names.isEmpty else { return }
            let select = try source.prepare("SELECT \(names.joined(separator: ", ")) FROM \(quoted)")
            let insert = try db.prepare(
                "INSERT INTO \(quoted)(\(names.joined(separator: ", "))) VALUES(\(Array(repeating: "?", count: names.count).joined(separator: ", ")))"
            )
            try select.bind([])
            while let row = try select.step() {
                try insert.bind(row.values)
                while try insert.step() != nil {}
            }
        }

        /// The checks of the result: nothing but kept rows, and every structure sound.
        func check(_ db: Database) throws {
            func fail(_ reason: String) -> EmptyStoreError {
                EmptyStoreError(store: store, reason: "the emptied copy \(reason)")
            }
            for table in tables + virtualTables.map(\.object) where !isKept(table.name) {
                let rows = try db.scalar("SELECT count(*) FROM \(Self.quoted(table.name))")?.integer ?? 0
                if rows != 0 { throw fail("still has \(rows) rows in \(table.name)") }
            }
            if try db.hasTable("sqlite_sequence") {
                for row in try db.rows("SELECT name FROM sqlite_sequence") where !isKept(row[0].text ?? "") {
                    throw fail("has a sqlite_sequence counter for \(row[0].text ?? "?")")
                }
            }
            let problems = db.integrityCheck(full: true)
            if let limit = db.exceededLimit {
                throw SQLiteError(
                    code: SQLITE_INTERRUPT, message: "stopped at \(limit)", path: store, operation: "integrity_check",
                    limit: limit)
            }
            guard problems == [Database.sound] else {
                throw fail("fails integrity_check: \(problems.prefix(3).joined(separator: "; "))")
            }
            for (table, module) in virtualTables {
                let name = Self.quoted(table.name)
                do {
                    if module.hasPrefix("fts") {
                        try db.execute("INSERT INTO \(name)(\(name)) VALUES('integrity-check')")
                    } else {
                        let result = try db.scalar("SELECT rtreecheck(?)", [.text(table.name)])?.text ?? ""
                        if result != Database.sound { throw fail("fails rtreecheck on \(table.name): \(result)") }
                    }
                } catch let error as SQLiteError where error.limit == nil {
                    throw fail("fails the \(module) integrity-check of \(table.name): \(error.message)")
                }
            }
        }

        /// The module of a `CREATE VIRTUAL TABLE` statement: `nil` for any other statement,
        /// `.some(nil)` when the module name cannot be read.
        static func virtualModule(_ sql: String) throws -> String?? {
            var tokens = SQLTokens(sql)
            guard tokens.next()?.lowercased() == "create", tokens.next()?.lowercased() == "virtual" else { return nil }
            guard tokens.next()?.lowercased() == "table" else { return .some(nil) }
            var word = tokens.next()
            if word?.lowercased() == "if" {
                _ = tokens.next()  // not
                _ = tokens.next()  // exists
                word = tokens.next()
            }
            // name, or schema . name
            var next = tokens.next()
            if next == "." {
                _ = tokens.next()
                next = tokens.next()
            }
            guard next?.lowercased() == "using", let module = tokens.next() else { return .some(nil) }
            return .some(module)
        }
    }
}

/// The words of an SQL statement, enough to read its first few: identifiers and keywords
/// (quoted ones unquoted), single punctuation; comments and white space skipped.
struct SQLTokens {
    private let bytes: [UInt8]
    private var index = 0

    init(_ sql: String) { bytes = Array(sql.utf8) }

    mutating func next() -> String? {
        while index < bytes.count {
            let byte = bytes[index]
            if byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D || byte == 0x0C {
                index += 1
            } else if byte == 0x2D, index + 1 < bytes.count, bytes[index + 1] == 0x2D {  // -- comment
                while index < bytes.count && bytes[index] != 0x0A { index += 1 }
            } else if byte == 0x2F, index + 1 < bytes.count, bytes[index + 1] == 0x2A {  // /* comment */
                index += 2
                while index + 1 < bytes.count && !(bytes[index] == 0x2A && bytes[index + 1] == 0x2F) { index += 1 }
                index = min(bytes.count, index + 2)
            } else {
                break
            }
        }
        guard index < bytes.count else { return nil }
        let byte = bytes[index]
        let closing: UInt8? =
            switch byte {
            case 0x22: 0x22  // "name"
            case 0x60: 0x60  // `name`
            case 0x27: 0x27  // 'name'
            case 0x5B: 0x5D  // [name]
            default: nil
            }
        if let closing {
            var word: [UInt8] = []
            index += 1
            while index < bytes.count {
                if bytes[index] == closing {
                    // A doubled quote stands for itself (not inside [ ]).
                    if closing != 0x5D, index + 1 < bytes.count, bytes[index + 1] == closing {
                        word.append(closing)
                        index += 2
                        continue
                    }
                    index += 1
                    break
                }
                word.append(bytes[index])
                index += 1
            }
            return String(decoding: word, as: UTF8.self)
        }
        func isWord(_ b: UInt8) -> Bool {
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x5F || b == 0x24
                || b >= 0x80
        }
        if isWord(byte) {
            let start = index
            while index < bytes.count && isWord(bytes[index]) { index += 1 }
            return String(decoding: bytes[start..<index], as: UTF8.self)
        }
        index += 1
        return String(decoding: [byte], as: UTF8.self)
    }
}
