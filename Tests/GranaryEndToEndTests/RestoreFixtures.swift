import Foundation
import GranaryDigest
import GranaryKit

#if canImport(Glibc)
    import Glibc
#endif

/// Builds real archives for restore tests until `granary backup` exists on this branch:
/// each store is snapshotted with the SQLite backup API and packed with ArchiveWriter + Manifest
/// (through SafetyArchive, which writes the repository's format).
enum RestoreFixtures {
    /// Snapshots every store of `user` under `root` and writes an archive of them into `repo`.
    @discardableResult
    static func archive(root: String, repo: String, user: String, label: String? = nil) throws -> String {
        let id = try UserID(user)
        let folder = try Root(path: root).user(id)
        let snapshots = root + "/.fixture-snapshots-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileSystem.makeDirectory(snapshots)
        defer { FileSystem.removeTree(snapshots) }
        var items: [SafetyArchive.Item] = []
        for store in folder.stores() {
            let copy = snapshots + "/" + store.name
            try FileSystem.makeDirectory((copy as NSString).deletingLastPathComponent)
            let source = try Database(path: store.path, mode: .readOnly, busyTimeout: .seconds(10))
            let destination = try Database(path: copy, mode: .create)
            let backup = try SQLiteBackup(from: source, to: destination)
            while try backup.step(pages: -1) != .done { usleep(10_000) }
            try backup.finish()
            let external = store.hasExternalData ? folder.path + "/" + store.externalDataName : nil
            items.append(SafetyArchive.Item(name: store.name, database: copy, external: external))
        }
        return try SafetyArchive.write(user: id, items: items, repository: LocalRepository(path: repo), label: label)
    }

    /// The Core Data external-data folder of the store at `path`: `.<Name>_SUPPORT/_EXTERNAL_DATA` beside it.
    static func externalFolder(of path: String) -> String {
        (path as NSString).deletingLastPathComponent + "/"
            + StoreFile.externalDataName(for: (path as NSString).lastPathComponent)
    }

    /// Every `id` of `table` in the store at `path`.
    static func ids(_ path: String, table: String = "demo_writes") throws -> Set<Int64> {
        let db = try Database(path: path, mode: .readOnly)
        guard try db.hasTable(table) else { return [] }
        return Set(try db.rows("SELECT id FROM \(table)").compactMap { $0[0].integer })
    }

    /// Logical content of a store: every table's rows, in order, as text.
    static func dump(_ path: String) throws -> String {
        let db = try Database(path: path, mode: .readOnly)
        var text = ""
        for table in try db.tableNames() {
            text += "## \(table)\n"
            for row in try db.rows("SELECT * FROM \"\(table)\" ORDER BY 1") {
                text += row.values.map { "\($0)" }.joined(separator: "|") + "\n"
            }
        }
        return text
    }

    static func sha256(_ path: String) -> String {
        SHA256.hash(data: FileManager.default.contents(atPath: path) ?? Data()).hex
    }

    /// Extracts an archive with stock tar into a new folder.
    static func extract(_ archive: String, into folder: String) throws {
        try FileSystem.makeDirectory(folder)
        let result = try GranaryProcess.runExecutable("/usr/bin/tar", ["-xf", archive, "-C", folder])
        precondition(result.status == 0, "tar failed: \(result.stderr)")
    }
}

/// A running `granary-demo-owner` and its log.
final class DemoOwner: OwnerLog {
    let process = Process()
    let log: String
    /// `--ledger`: the file of every acknowledged row id (granary-demo-owner only).
    let ledger: String?

    /// `granary-demo-owner` (with `breaking`: `--break` each), or with `python`, `examples/owner.py`.
    init(
        stores: [String], log: String, intervalMs: Int = 3, startID: Int64 = 1, breaking: [String] = [],
        python: Bool = false, ledger: String? = nil
    ) throws {
        self.log = log
        self.ledger = ledger
        let options =
            ["--log", log, "--interval-ms", String(intervalMs), "--start-id", String(startID)]
            + breaking.flatMap { ["--break", $0] } + (ledger.map { ["--ledger", $0] } ?? [])
        if python {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            process.arguments = [GranaryProcess.packageDirectory + "/examples/owner.py"] + options + stores
        } else {
            process.executableURL = URL(fileURLWithPath: GranaryProcess.binDirectory + "/granary-demo-owner")
            process.arguments = options + stores
        }
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        try waitFor { $0.contains { $0.hasPrefix("READY") } }
    }

    deinit { if process.isRunning { kill(process.processIdentifier, SIGKILL); process.waitUntilExit() } }

    var pid: Int32 { process.processIdentifier }

    /// Acknowledged write ids, in log order (`ACK <id>`, or `ACK <id> <store>` from owner.py).
    var acked: [Int64] { lines.compactMap { $0.hasPrefix("ACK ") ? Int64($0.split(separator: " ")[1]) : nil } }

    /// The ids in the `--ledger` file: every row the owner saw committed, its misdeeds' included.
    var ledgered: Set<Int64> {
        guard let ledger else { return [] }
        return Set(
            ((try? String(contentsOfFile: ledger, encoding: .utf8)) ?? "").split(separator: "\n").compactMap {
                Int64($0)
            })
    }

    /// Acknowledged write ids into `store` (owner.py's `ACK <id> <store>` lines).
    func acked(into store: String) -> Set<Int64> {
        Set(
            lines.compactMap { line in
                let words = line.split(separator: " ", maxSplits: 2)
                return words.count == 3 && words[0] == "ACK" && words[2] == store ? Int64(words[1]) : nil
            })
    }

    func stop() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }
}

enum DemoOwnerError: Error { case timedOut(String) }

/// The named points of a debug build's fault injection, as the `GRANARY_TEST_*_AT` variables take
/// them: each name of `names`, then `NAME:2` … up to `NAME:times` (a per-store point is reached
/// once per store).
enum CrashPoints {
    static func plan(_ names: [CrashPoint.Name], times: Int = 1) -> [String] {
        (1...times).flatMap { n in names.map { n == 1 ? $0.rawValue : "\($0.rawValue):\(n)" } }
    }

    /// Whether a point leaves every live file of the user as it was (nothing changed yet).
    static func untouched(_ point: String) -> Bool {
        CrashPoint.Name(rawValue: String(point.split(separator: ":")[0])).map {
            CrashPoint.Name.untouched.contains($0)
        } ?? false
    }
}
