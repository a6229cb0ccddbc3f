import CSQLite
import CSnapshotTee
import Foundation
import GranaryTestSupport
import Testing

@testable import GranaryKit

/// The page hashes `backup --delta` takes as the `granary-tee` VFS sees SQLite write a snapshot
/// (issue 35, `PageRecorder`): byte for byte the `.pages` file a second read of the finished
/// snapshot gives, on real stores written by a real process during the copy.
@Suite("page hashes taken as the snapshot is written")
struct PageRecorderTests {
    /// The package's debug binaries (granary-ledger-writer), as the end-to-end tests find them.
    static let binDirectory: String = {
        if let dir = ProcessInfo.processInfo.environment["GRANARY_BIN_DIR"], !dir.isEmpty { return dir }
        return URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent(".build/debug").path
    }()

    /// A store of about 3,500 pages of 4 KiB at `path` (more than the 2 MiB page cache of the copy, so
    /// that SQLite writes pages out before the copy ends), in WAL or rollback-journal mode.
    static func makeStore(_ path: String, wal: Bool) throws {
        let db = try Database(path: path, mode: .create)
        if wal { try db.execute("PRAGMA journal_mode=WAL") }
        try db.execute(
            """
            CREATE TABLE t(id INTEGER PRIMARY KEY, body BLOB);
            CREATE INDEX t_body ON t(substr(body, 1, 16));
            WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000)
            INSERT INTO t(body) SELECT randomblob(600) FROM c;
            """)
    }

    /// Starts `granary-ledger-writer` committing a row every millisecond into `store`, and waits
    /// until it has committed some.
    static func startWriter(_ store: String, ledger: String) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binDirectory + "/granary-ledger-writer")
        process.arguments = ["--ledger", ledger, "--interval-ms", "1", store]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            let lines = ((try? String(contentsOfFile: ledger, encoding: .utf8)) ?? "").split(separator: "\n")
            if lines.count >= 20 { return process }
            usleep(10_000)
        }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        throw CancellationError()
    }

    static func bytes(_ path: String) -> Data { FileManager.default.contents(atPath: path) ?? Data() }

    @Test(
        "the hashes recorded during a snapshot with a concurrent writer equal a second read of the file",
        arguments: [true, false], [PageRecorder.WriterHashing.never, .always, .everyOther])
    func concurrentWriter(wal: Bool, writerHashes: PageRecorder.WriterHashing) throws {
        let folder = TemporaryFolder()
        let root = folder.child("root")
        try FileSystem.makeDirectory(root, mode: 0o755)
        try FileSystem.makeDirectory(root + "/alice@example.com", mode: 0o700)
        let live = root + "/alice@example.com/Live.sqlite"
        try Self.makeStore(live, wal: wal)
        let writer = try Self.startWriter(live, ledger: folder.child("ledger"))
        defer {
            if writer.isRunning { kill(writer.processIdentifier, SIGKILL) }
            writer.waitUntilExit()
        }
        let store = try #require(
            try Root(path: root).user(UserID("alice@example.com")).scan().stores.first { $0.name == "Live.sqlite" })
        // A slow, polite copy: the writer commits between its steps, and SQLite starts it again.
        var snapshotter = Snapshotter()
        snapshotter.pagesPerStep = 4
        snapshotter.pause = .milliseconds(3)
        snapshotter.maxRestarts = 3
        let recorder = try PageRecorder(path: folder.child("hashes"))
        // Hashed on the hashing thread alone, on the copy's thread for every batch of whole pages,
        // or for every other one.
        recorder.writerHashes = writerHashes
        let copy = folder.child("copy.sqlite")
        let result = try snapshotter.snapshot(store, to: copy, track: nil, pages: recorder)
        kill(writer.processIdentifier, SIGKILL)
        writer.waitUntilExit()

        let pageSize = try Database(path: copy, mode: .readOnly).pageSize()
        let recorded = try recorder.finish(
            snapshot: copy, pageSize: pageSize, writingTo: folder.child("recorded.pages"))
        let read = try PageFiles.hash(file: copy, pageSize: pageSize, writingTo: folder.child("read.pages"))
        #expect(recorder.attached)
        #expect(recorded == read)
        #expect(Self.bytes(folder.child("recorded.pages")) == Self.bytes(folder.child("read.pages")))
        // The recorder did the work (not a read of the file); in rollback mode the writer's
        // commits between the copy's steps made SQLite start the copy again.
        #expect(recorder.reread == 0)
        #expect(recorder.hashed >= read.pageCount)
        #expect(writerHashes == .never ? recorder.hashedByWriter == 0 : recorder.hashedByWriter > 0)
        #expect(recorder.usedGivenHashes == recorder.hashedByWriter, "the hashing thread took them")
        if !wal { #expect(result.restarts > 0, "the writer committed while the copy went on") }
    }

    @Test(
        "a snapshot file that shrinks, grows again and changes its page size keeps hashes equal to a second read",
        arguments: [PageRecorder.WriterHashing.never, .always, .everyOther])
    func truncateAndPageSize(writerHashes: PageRecorder.WriterHashing) throws {
        let folder = TemporaryFolder()
        #expect(granary_tee_register() == SQLITE_OK)
        for (index, newPageSize) in [4096, 8192].enumerated() {
            let path = folder.child("\(index).sqlite")
            let recorder = try PageRecorder(path: folder.child("\(index).hashes"))
            recorder.writerHashes = writerHashes
            do {
                let db = try Database(path: path, mode: .create, vfs: "granary-tee")
                try db.execute("PRAGMA page_size=4096; PRAGMA journal_mode=OFF; PRAGMA locking_mode=EXCLUSIVE")
                recorder.pageSize = 4096
                recorder.attached =
                    sqlite3_file_control(db.handle, "main", SNAPSHOT_TEE_FCNTL_HOOK, recorder.hook) == SQLITE_OK
                try db.execute(
                    """
                    CREATE TABLE t(id INTEGER PRIMARY KEY, body BLOB);
                    WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 2000)
                    INSERT INTO t(body) SELECT randomblob(900) FROM c;
                    DELETE FROM t WHERE id > 300;
                    """)
                try db.execute("PRAGMA page_size=\(newPageSize); VACUUM")  // truncates the file
                try db.execute(
                    """
                    WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 500)
                    INSERT INTO t(body) SELECT randomblob(700) FROM c;
                    UPDATE t SET body = randomblob(800) WHERE id % 7 = 0;
                    """)
            }
            #expect(recorder.attached)
            let pageSize = try Database(path: path, mode: .readOnly).pageSize()
            #expect(pageSize == newPageSize)
            let recorded = try recorder.finish(
                snapshot: path, pageSize: pageSize, writingTo: folder.child("\(index).recorded"))
            let read = try PageFiles.hash(file: path, pageSize: pageSize, writingTo: folder.child("\(index).read"))
            #expect(recorded == read)
            #expect(Self.bytes(folder.child("\(index).recorded")) == Self.bytes(folder.child("\(index).read")))
            if newPageSize == 4096 {
                // Pages were written more than once (the UPDATE, the VACUUM): the last write won.
                #expect(recorder.hashed > read.pageCount)
                #expect(recorder.reread < read.pageCount / 2, "the recorder did the work")
            }
        }
    }
}
