import Foundation
import GranaryDigest
import GranaryKit

#if canImport(Glibc)
    import Glibc
#endif

/// A running `granary-ledger-writer`: a process outside the reopen protocol that inserts rows into
/// table `ledger_writes` of one store and appends each committed row's number to its ledger.
final class LedgerWriter {
    let process = Process()
    let ledger: String
    let name: String

    /// `connection`: "keep" (one connection for the whole run) or "per-write" (a CLI's open, write,
    /// close); `count`: stop writing after that many rows (`--hold`: a kept connection then stays
    /// open, idle).
    init(
        store: String, ledger: String, name: String = "third", start: Int64 = 1, intervalMs: Int = 2,
        connection: String = "keep", count: Int? = nil
    ) throws {
        self.ledger = ledger
        self.name = name
        process.executableURL = URL(fileURLWithPath: GranaryProcess.binDirectory + "/granary-ledger-writer")
        process.arguments =
            [
                "--ledger", ledger, "--name", name, "--start", String(start), "--interval-ms", String(intervalMs),
                "--connection", connection,
            ] + (count.map { ["--count", String($0), "--hold"] } ?? []) + [store]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
    }

    deinit { stop() }

    var pid: Int32 { process.processIdentifier }

    /// Every acknowledged sequence number, in ledger order.
    var acknowledged: [Int64] {
        ((try? String(contentsOfFile: ledger, encoding: .utf8)) ?? "").split(separator: "\n").compactMap {
            Int64($0)
        }
    }

    /// Waits (up to 20 s) until `count` more rows are acknowledged than now.
    func waitForMoreWrites(_ count: Int) throws {
        let now = acknowledged.count
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            if acknowledged.count >= now + count { return }
            if !process.isRunning { break }
            usleep(10_000)
        }
        throw LedgerError.writerStuck(name, acknowledged.count - now)
    }

    func stop() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }
}

enum LedgerError: Error { case writerStuck(String, Int) }

extension DemoOwner {
    /// Waits until `count` more rows are in the owner's `--ledger` than now: up to 20 s, a bound
    /// (never an assertion on time) that holds however long the owner's log has grown.
    func waitForMoreLedgered(_ count: Int, upTo bound: Duration = .seconds(20)) throws {
        let now = ledgered.count
        let deadline = ContinuousClock.now + bound
        while ContinuousClock.now < deadline {
            if ledgered.count >= now + count { return }
            if !process.isRunning { break }
            usleep(10_000)
        }
        throw LedgerError.writerStuck("owner", ledgered.count - now)
    }

    /// Lets the owner go on after a restore: up to 10 more acknowledged rows, or 3 s. An owner that
    /// reopened the replaced file outside the protocol gets SQLITE_READONLY_DBMOVED for every write
    /// from then on (granary tells it to restart): it acknowledges nothing more, and loses nothing.
    func goOn() {
        _ = try? waitForMoreLedgered(10, upTo: .seconds(3))
    }
}

/// What a ledger test compares: the live store's files (the database and its companions) by
/// identity and content.
struct LiveFiles: Equatable, CustomStringConvertible {
    struct File: Equatable {
        let inode: UInt64
        let digest: String
    }
    /// By suffix: "" (the database), "-wal", "-shm", "-journal"; a missing file is absent.
    let files: [String: File]

    static let suffixes = ["", "-wal", "-shm", "-journal"]

    init(_ store: String) {
        var files: [String: File] = [:]
        for suffix in Self.suffixes {
            var info = stat()
            guard lstat(store + suffix, &info) == 0 else { continue }
            let data = FileManager.default.contents(atPath: store + suffix) ?? Data()
            files[suffix] = File(inode: UInt64(info.st_ino), digest: SHA256.hash(data: data).hex)
        }
        self.files = files
    }

    var inodes: [String: UInt64] { files.mapValues(\.inode) }

    var description: String {
        Self.suffixes.compactMap { suffix in
            files[suffix].map { "store\(suffix): inode \($0.inode) sha256 \($0.digest.prefix(12))" }
        }.joined(separator: "; ")
    }
}

/// One restore's outcome as the ledger tests judge it.
struct RestoreOutcome {
    let status: Int32
    let text: String

    init(_ result: GranaryProcess.Result) {
        status = result.status
        text = result.stdout + result.stderr
    }

    init(status: Int32, text: String) {
        self.status = status
        self.text = text
    }

    /// granary said it changed nothing (and exited non-zero).
    var refused: Bool { status != 0 && text.contains("nothing was changed") }
    /// granary says the restore went through: exit 0, or a report that says it restored.
    var committed: Bool { status == 0 || (!refused && text.contains("restored")) }
}

/// The rows a ledger's writer put in one table of the user's store.
struct LedgerSource {
    let name: String
    let table: String
    let acknowledged: Set<Int64>
}

enum LedgerAudit {
    /// The ids of `table` in every `-pre-restore` safety archive of `user` in `repo`, each
    /// extracted with stock tar and read with SQLite.
    static func safetyArchiveIDs(repo: String, user: String, store: String, table: String, scratch: String) throws
        -> Set<Int64>
    {
        var ids: Set<Int64> = []
        for name in FileSystem.contents(of: repo + "/" + user) where name.contains("-pre-restore.") {
            let folder = scratch + "/" + name + "-" + String(UInt32.random(in: 0...UInt32.max))
            try RestoreFixtures.extract(repo + "/" + user + "/" + name, into: folder)
            let path = folder + "/stores/" + store
            if FileManager.default.fileExists(atPath: path) { ids.formUnion(try Self.ids(path, table: table)) }
        }
        return ids
    }

    /// The row numbers of a writer's table: `seq` of ledger_writes (granary-ledger-writer), `id` of
    /// demo_writes (granary-demo-owner).
    static func ids(_ path: String, table: String) throws -> Set<Int64> {
        let db = try Database(path: path, mode: .readOnly)
        guard try db.hasTable(table) else { return [] }
        let column = table == "ledger_writes" ? "seq" : "id"
        return Set(try db.rows("SELECT \(column) FROM \(table)").compactMap { $0[0].integer })
    }

    /// Acknowledged rows found neither in the live store nor (when `archiveCounts`) in a safety archive.
    static func lost(
        _ sources: [LedgerSource], live: String, repo: String, user: String, storeName: String, scratch: String,
        archiveCounts: Bool
    ) throws -> [String: [Int64]] {
        var lost: [String: [Int64]] = [:]
        for source in sources {
            var kept = try Self.ids(live, table: source.table)
            if archiveCounts {
                kept.formUnion(
                    try safetyArchiveIDs(
                        repo: repo, user: user, store: storeName, table: source.table, scratch: scratch))
            }
            let missing = source.acknowledged.subtracting(kept).sorted()
            if !missing.isEmpty { lost[source.name] = missing }
        }
        return lost
    }

    /// "name: N of M lost (first: …)" for a failure message.
    static func describe(_ lost: [String: [Int64]], _ sources: [LedgerSource]) -> String {
        lost.keys.sorted().map { name in
            let total = sources.first { $0.name == name }?.acknowledged.count ?? 0
            return "\(name): \(lost[name]!.count) of \(total) acknowledged writes lost (first: "
                + "\(lost[name]!.prefix(5).map(String.init).joined(separator: ", ")))"
        }.joined(separator: "; ")
    }
}
