import GranaryKit

/// The store the follow suites start from: a WAL store with an `items` table and its first rows,
/// its `-wal` kept on close (a `-wal` follow can read from its start) unless asked otherwise.
enum FollowFixtures {
    static func makeWALStore(
        _ path: String, rows: [String] = ["first"], ledger: Bool = false, keepWAL: Bool = true
    ) throws {
        let db = try Database(path: path, mode: .create)
        try db.execute("PRAGMA journal_mode=WAL")
        try db.execute("CREATE TABLE items(id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
        if ledger {
            try db.execute(
                "CREATE TABLE ledger_writes(seq INTEGER PRIMARY KEY, writer TEXT NOT NULL, at REAL NOT NULL)")
        }
        for row in rows { try db.run("INSERT INTO items(body) VALUES (?)", [.text(row)]) }
        if keepWAL { try db.keepWALOnClose() }
    }
}
