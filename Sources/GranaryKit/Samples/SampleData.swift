import Foundation
import GranaryDigest

/// The built-in sample data that `make demo` and the tests share.
///
/// `generate(in:)` makes a root with four users:
/// - `alice@example.com`: two WAL stores, `Local.sqlite` and `Cloud.sqlite` (an app with
///   two store configurations); the last commits of `Local.sqlite` are only in its `-wal`;
/// - `bob@example.com`: a Core Data-shaped store `Notes.sqlite` (`Z_METADATA` with a binary
///   `Z_PLIST`, `Z_PRIMARYKEY`, `Z…` entity tables) with external binary data in
///   `.Notes_SUPPORT/_EXTERNAL_DATA/`;
/// - `carol@example.com`: a rollback-journal store `Legacy.db`, a text file and a stray
///   `-wal` with no database beside it (neither is a store);
/// - `dave@example.com`: a store in a sub-folder, `Data/App.sqlite`.
public enum SampleData {
    /// The users `generate` creates.
    public static let users = ["alice@example.com", "bob@example.com", "carol@example.com", "dave@example.com"]

    /// The Core Data entities of bob's store and their model version hashes.
    public static let coreDataEntities = ["Folder", "Note"]

    /// A deterministic 32-byte model version hash for an entity.
    public static func modelHash(_ entity: String) -> Data {
        Data(SHA256.hash(data: Data("granary-sample-model-v1/\(entity)".utf8)))
    }

    /// Creates the sample root at `root` (which must not exist or be empty). `rows` scales the data.
    public static func generate(in root: String, rows: Int = 200) throws {
        try FileSystem.makeDirectory(root, mode: 0o755)
        for user in users { try FileSystem.makeDirectory(root + "/" + user, mode: 0o700) }
        try makeTwoStoreUser(root + "/alice@example.com", rows: rows)
        try makeCoreDataStore(root + "/bob@example.com/Notes.sqlite", notes: rows / 4 + 3)
        try makeRollbackStore(root + "/carol@example.com/Legacy.db", rows: rows)
        try Data("not a database\n".utf8).write(to: URL(fileURLWithPath: root + "/carol@example.com/readme.txt"))
        // A stray -wal whose database is gone: not a store, and not part of any store.
        try Data(repeating: 0x37, count: 32).write(to: URL(fileURLWithPath: root + "/carol@example.com/old.sqlite-wal"))
        try FileSystem.makeDirectory(root + "/dave@example.com/Data", mode: 0o700)
        try makeItemsStore(root + "/dave@example.com/Data/App.sqlite", rows: rows, walOnlyTail: 0)
    }

    private static func makeTwoStoreUser(_ folder: String, rows: Int) throws {
        try makeItemsStore(folder + "/Local.sqlite", rows: rows, walOnlyTail: 10)
        try makeItemsStore(folder + "/Cloud.sqlite", rows: rows / 2 + 1, walOnlyTail: 0)
    }

    /// A WAL store with table `items(id INTEGER PRIMARY KEY, body TEXT, created REAL)` and
    /// `rows` rows; the last `walOnlyTail` of them are committed only in the `-wal`.
    public static func makeItemsStore(_ path: String, rows: Int, walOnlyTail: Int) throws {
        let db = try Database(path: path, mode: .create, limits: .unlimited)
        try db.execute("PRAGMA journal_mode=WAL")
        try db.execute("CREATE TABLE items(id INTEGER PRIMARY KEY, body TEXT NOT NULL, created REAL NOT NULL)")
        try db.execute("CREATE INDEX items_created ON items(created)")
        let firstBatch = max(0, rows - walOnlyTail)
        try insertItems(db, from: 1, count: firstBatch)
        try db.checkpoint(.truncate)
        if walOnlyTail > 0 {
            // Keep these commits in the -wal: no automatic checkpoint, none at close.
            try db.execute("PRAGMA wal_autocheckpoint=0")
            try db.keepWALOnClose()
            for id in (firstBatch + 1)...rows { try insertItems(db, from: id, count: 1) }
        }
    }

    static func insertItems(_ db: Database, from first: Int, count: Int) throws {
        guard count > 0 else { return }
        try db.execute("BEGIN")
        let insert = try db.prepare("INSERT INTO items(id, body, created) VALUES (?, ?, ?)")
        for id in first..<(first + count) {
            try insert.bind([.integer(Int64(id)), .text(sampleText(id)), .real(1_780_000_000 + Double(id))])
            while try insert.step() != nil {}
        }
        try db.execute("COMMIT")
    }

    static func sampleText(_ id: Int) -> String {
        let words = ["granary", "barley", "wheat", "harvest", "silo", "mill", "sheaf", "chaff", "grain", "store"]
        return (0..<12).map { words[($0 * 7 + id) % words.count] }.joined(separator: " ") + " #\(id)"
    }

    /// A rollback-journal (DELETE mode) store with the same `items` table.
    public static func makeRollbackStore(_ path: String, rows: Int) throws {
        let db = try Database(path: path, mode: .create, limits: .unlimited)
        try db.execute("PRAGMA journal_mode=DELETE")
        try db.execute("CREATE TABLE items(id INTEGER PRIMARY KEY, body TEXT NOT NULL, created REAL NOT NULL)")
        try insertItems(db, from: 1, count: rows)
    }

    /// A Core Data-shaped store: `Folder` and `Note` entities, `Z_PRIMARYKEY`, `Z_METADATA`
    /// with a binary plist, and every third note's attachment stored as external data.
    public static func makeCoreDataStore(_ path: String, notes: Int) throws {
        let db = try Database(path: path, mode: .create, limits: .unlimited)
        try db.execute("PRAGMA journal_mode=WAL")
        try db.execute(
            """
            CREATE TABLE ZFOLDER ( Z_PK INTEGER PRIMARY KEY, Z_ENT INTEGER, Z_OPT INTEGER, ZNAME VARCHAR );
            CREATE TABLE ZNOTE ( Z_PK INTEGER PRIMARY KEY, Z_ENT INTEGER, Z_OPT INTEGER, ZFOLDER INTEGER,
                ZCREATED TIMESTAMP, ZTITLE VARCHAR, ZBODY VARCHAR, ZATTACHMENT BLOB );
            CREATE INDEX ZNOTE_ZFOLDER_INDEX ON ZNOTE (ZFOLDER);
            CREATE TABLE Z_PRIMARYKEY (Z_ENT INTEGER PRIMARY KEY, Z_NAME VARCHAR, Z_SUPER INTEGER, Z_MAX INTEGER);
            CREATE TABLE Z_METADATA (Z_VERSION INTEGER PRIMARY KEY, Z_UUID VARCHAR(255), Z_PLIST BLOB);
            CREATE TABLE Z_MODELCACHE (Z_CONTENT BLOB);
            """)
        let storeUUID = "6F1C2A44-93B1-4C1E-8E0B-5A7D2C9E1F00"
        let hashes = Dictionary(uniqueKeysWithValues: coreDataEntities.map { ($0, modelHash($0)) })
        try db.run(
            "INSERT INTO Z_METADATA(Z_VERSION, Z_UUID, Z_PLIST) VALUES (1, ?, ?)",
            [.text(storeUUID), .blob(CoreDataMetadata.makePlist(storeUUID: storeUUID, modelVersionHashes: hashes))])
        let folders = ["Inbox", "Recipes", "Archive"]
        try db.execute("BEGIN")
        for (index, name) in folders.enumerated() {
            try db.run("INSERT INTO ZFOLDER VALUES (?, 1, 1, ?)", [.integer(Int64(index + 1)), .text(name)])
        }
        let external =
            PathText.parent(path) + "/"
            + StoreFile.externalDataName(for: PathText.lastComponent(path))
        try FileSystem.makeDirectory(external, mode: 0o700)
        for pk in 1...notes {
            var attachment: SQLValue = .null
            if pk % 3 == 0 {
                // Core Data's external reference: 0x02, then the file's UUID name.
                let name = String(format: "A1B2C3D4-0000-4000-8000-%012d", pk)
                let content = Data((0..<(4096 + pk * 37)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ pk) })
                try content.write(to: URL(fileURLWithPath: external + "/" + name))
                attachment = .blob([0x02] + Array(name.utf8) + [0])
            } else if pk % 3 == 1 {
                attachment = .blob([0x01] + Array("inline-\(pk)".utf8))
            }
            try db.run(
                "INSERT INTO ZNOTE VALUES (?, 2, 1, ?, ?, ?, ?, ?)",
                [
                    .integer(Int64(pk)), .integer(Int64(pk % folders.count + 1)), .real(800_000_000 + Double(pk)),
                    .text("Note \(pk)"), .text(sampleText(pk)), attachment,
                ])
        }
        try db.run("INSERT INTO Z_PRIMARYKEY VALUES (1, 'Folder', 0, ?)", [.integer(Int64(folders.count))])
        try db.run("INSERT INTO Z_PRIMARYKEY VALUES (2, 'Note', 0, ?)", [.integer(Int64(notes))])
        try db.execute("COMMIT")
    }
}
