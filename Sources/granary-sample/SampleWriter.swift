import Foundation
import GranaryKit

/// The writer and big-store modes of granary-sample, used by the tests, `make demo` and `make bench`.
enum SampleWriter {
    static func fail(_ message: String, _ code: Int32) -> Never {
        FileHandle.standardError.write(Data("granary-sample: \(message)\n".utf8))
        exit(code)
    }

    /// `write STORE [--interval-ms N]`: one row per transaction, ids 1, 2, 3, … in table `seq`.
    static func writeRows(path: String, interval: Int) -> Never {
        do {
            let isNew = !FileManager.default.fileExists(atPath: path)
            let db = try Database(path: path, mode: .create, busyTimeout: .seconds(30), limits: .unlimited)
            // A new store is WAL; an existing one keeps its journal mode (rollback stores are tested too).
            if isNew { _ = try db.rows("PRAGMA journal_mode = wal") }
            try db.execute(
                "CREATE TABLE IF NOT EXISTS seq(id INTEGER PRIMARY KEY, at REAL NOT NULL, payload TEXT NOT NULL)")
            var next = (try db.scalar("SELECT coalesce(max(id), 0) FROM seq")?.integer ?? 0) + 1
            while true {
                let start = ContinuousClock.now
                try db.run(
                    "INSERT INTO seq(id, at, payload) VALUES (?, ?, ?)",
                    [.integer(next), .real(Date().timeIntervalSince1970), .text(String(repeating: "x", count: 100))])
                let took = ContinuousClock.now - start
                let at = Date().timeIntervalSince1970
                let micros = took.components.seconds * 1_000_000 + took.components.attoseconds / 1_000_000_000_000
                // Unbuffered: a reader must see every acknowledged id even when we are killed.
                // Third column: when the commit ended (seconds since the epoch), to place slow commits in time.
                let line = "\(next)\t\(micros)\t\(String(format: "%.4f", at))\n"
                _ = line.withCString { write(1, $0, strlen($0)) }
                next += 1
                if interval > 0 { usleep(UInt32(interval * 1000)) }
            }
        } catch {
            fail("\(path): \(error)", 74)
        }
    }

    /// `big PATH SIZE_MB`: a WAL store of about SIZE_MB MiB of moderately compressible rows.
    static func big(path: String, megabytes: Int) -> Never {
        do {
            let db = try Database(path: path, mode: .create, limits: .unlimited)
            _ = try db.rows("PRAGMA journal_mode = wal")
            try db.execute("PRAGMA synchronous = off")
            try db.execute("CREATE TABLE IF NOT EXISTS bulk(id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
            // Each row is ~1 KiB: half random hex, half repeated text, so zstd has real work and gains.
            let rows = megabytes * 1000
            var done = 0
            while done < rows {
                let batch = min(50_000, rows - done)
                try db.execute(
                    """
                    BEGIN;
                    WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < \(batch))
                    INSERT INTO bulk(body) SELECT hex(randomblob(256)) || printf('%.*c', 500, 'a') FROM n;
                    COMMIT;
                    """)
                done += batch
            }
            _ = try db.checkpoint(.truncate)
        } catch {
            fail("\(path): \(error)", 74)
        }
        exit(0)
    }
}
