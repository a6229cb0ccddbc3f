import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

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

/// Polls `condition` (a throw counts as "not yet") every 20 ms until it holds; after `bound`,
/// records "waited in vain for WHAT" (with what `follow` said, when given) and throws.
func waitFor(
    _ what: String, _ follow: FollowProcess? = nil, upTo bound: Duration = .seconds(120),
    _ condition: () throws -> Bool
) throws {
    let deadline = ContinuousClock.now + bound
    while ContinuousClock.now < deadline {
        if (try? condition()) == true { return }
        usleep(20_000)
    }
    let said = follow.map { "; follow said:\n\($0.journal)" } ?? ""
    Issue.record("waited in vain for \(what)\(said)")
    throw CancellationError()
}

/// `granary follow` started by a test in the background (`--interval 100ms` unless asked
/// otherwise), its journal (standard error) in a file of its own, without the test process's
/// GRANARY_ variables but with `environment`'s; killed (SIGKILL) if the test leaves it running.
final class FollowProcess {
    let process = Process()
    let log: String

    init(_ arguments: [String], log: String, interval: String = "100ms", environment: [String: String] = [:]) throws {
        self.log = log
        FileManager.default.createFile(atPath: log, contents: nil)
        process.executableURL = URL(fileURLWithPath: GranaryProcess.binDirectory + "/granary")
        process.arguments = ["follow", "--interval", interval] + arguments
        process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("GRANARY_") }
            .merging(environment) { $1 }
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle(forWritingAtPath: log)
        try process.run()
    }

    convenience init(
        root: String, repo: String, log: String, interval: String = "100ms", environment: [String: String] = [:]
    ) throws {
        try self.init(["--root", root, "--repo", repo], log: log, interval: interval, environment: environment)
    }

    /// What follow has logged so far.
    var journal: String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }

    /// Sends `signal` (if it still runs) and waits for it to end.
    func stop(_ signal: Int32 = SIGTERM) {
        if process.isRunning { kill(process.processIdentifier, signal) }
        process.waitUntilExit()
    }

    deinit { stop(SIGKILL) }
}
