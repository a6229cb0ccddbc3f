import Foundation
import GranaryKit
import Synchronization
import Testing

@testable import GranaryCLI

@Suite("User and store discovery")
struct UserDiscoveryTests {
    @Test(
        "valid ids are accepted verbatim, email addresses included",
        arguments: ["alice@example.com", "Bob Smith", "ünïcode", "a.b", "..hidden-ish"])
    func acceptsIDs(id: String) throws {
        #expect(try UserID(id).rawValue == id)
    }

    @Test(
        "ids that could escape the root are refused with a reason",
        arguments: [
            ("", "is empty"), (".", "relative"), ("..", "relative"), ("a/b", "'/'"), ("-rf", "'-'"),
            ("a\u{0}b", "NUL"), ("tab\there", "control"), ("esc\u{1B}[2J", "control"),
            (String(repeating: "é", count: 128), "255 bytes"),
        ])
    func refusesIDs(id: String, reason: String) {
        let error = #expect(throws: UserError.self) { try UserID(id) }
        #expect(error?.description.contains(reason) == true, "\(String(describing: error))")
        #expect(error?.status == .usage)
        #expect(error?.description.contains("\u{1B}") == false, "control characters must be escaped in messages")
    }

    @Test("a root scan finds users, skips hidden folders and files, and reports invalid folder names")
    func scan() throws {
        let folder = TemporaryFolder()
        let root = folder.child("root")
        try SampleData.generate(in: root, rows: 20)
        try FileSystem.makeDirectory(root + "/.granary")
        try FileSystem.makeDirectory(root + "/-oops")
        try Data("x".utf8).write(to: URL(fileURLWithPath: root + "/file-not-a-user"))
        let (users, ignored) = try Root(path: root).scan()
        #expect(users.map(\.rawValue) == SampleData.users)
        #expect(ignored.map(\.name) == ["-oops", "file-not-a-user"])
        #expect(ignored.map(\.reason) == ["is not a valid user id: it starts with '-'", "is a file, not a folder"])
    }

    @Test("stores are found by content, not by name; companions and junk are not stores")
    func storesByContent() throws {
        let folder = TemporaryFolder()
        let user = folder.child("u")
        try FileSystem.makeDirectory(user)
        try SampleData.makeItemsStore(user + "/data.bin", rows: 5, walOnlyTail: 2)  // a store without .sqlite
        try Data("SQLite format 2 and some text".utf8).write(to: URL(fileURLWithPath: user + "/fake.sqlite"))
        try Data().write(to: URL(fileURLWithPath: user + "/empty.sqlite"))
        try Data(repeating: 7, count: 64).write(to: URL(fileURLWithPath: user + "/gone.sqlite-wal"))
        try Data(repeating: 7, count: 64).write(to: URL(fileURLWithPath: user + "/gone.sqlite-shm"))
        try FileManager.default.createSymbolicLink(
            atPath: user + "/link.sqlite", withDestinationPath: user + "/data.bin")
        try FileSystem.makeDirectory(user + "/.hidden")
        try SampleData.makeRollbackStore(user + "/.hidden/secret.db", rows: 1)
        let scan = UserFolder(id: try UserID("u"), folder: try Folder<UserOwned>.open(path: user)).scan()
        let stores = scan.stores
        #expect(stores.map(\.name) == ["data.bin"])
        // What was passed over is said: the link and the hidden store (not the junk, which is no store).
        #expect(scan.skipped.map(\.name) == [".hidden/secret.db", "link.sqlite"])
        #expect(scan.skipped.last?.reason.contains("symbolic link") == true)
        let store = try #require(stores.first)
        #expect(store.header.isWAL)
        #expect(store.journalKind == "wal")
        #expect((store.walSize ?? 0) > 0)
        #expect(store.hasSHM)
    }

    @Test("a rollback store, a nested store and a Core Data store with external data are described")
    func sampleStores() throws {
        let folder = TemporaryFolder()
        let root = Root(path: folder.child("root"))
        try SampleData.generate(in: root.path, rows: 20)
        let carol = try root.user(UserID("carol@example.com")).stores()
        #expect(carol.map(\.name) == ["Legacy.db"])
        #expect(carol.first?.journalKind == "rollback")
        let dave = try root.user(UserID("dave@example.com")).stores()
        #expect(dave.map(\.name) == ["Data/App.sqlite"])
        let bob = try root.user(UserID("bob@example.com")).stores()
        #expect(bob.first?.hasExternalData == true)
        #expect(bob.first?.externalDataName == ".Notes_SUPPORT/_EXTERNAL_DATA")
        #expect(#expect(throws: UserError.self) { try root.user(UserID("zoe@example.com")) }?.status == .notFound)
    }

    @Test(
        "archive names hold a microsecond stamp and the host, round-trip, and sort in the order taken whatever the labels"
    )
    func archiveNames() throws {
        let date = try #require(ArchiveName.parseStamp("20261122T101500Z"))
        let plain = ArchiveName(created: date, host: "web-1", compression: .zstd)
        #expect(plain.fileName == "20261122T101500.000000Z.web-1.tar.zst")
        let later = ArchiveName(
            micros: plain.micros + 1, label: "delta", host: "web-1", compression: .zstd)
        #expect(later.fileName == "20261122T101500.000001Z-delta.web-1.tar.zst")
        #expect(ArchiveName(fileName: later.fileName) == later)
        // A full after a delta in the same second sorts after it: the order is the stamp's, not the label's.
        let full = ArchiveName(micros: plain.micros + 2, host: "web-1", compression: .zstd)
        #expect(later < full && plain < later)
        let merged = later.withSequence(2)
        #expect(merged.fileName == "20261122T101500.000001Z_2-delta.web-1.tar.zst")
        #expect(ArchiveName(fileName: merged.fileName) == merged && later < merged && merged < full)
        // Hosts with dots and underscores, and labels with dashes, parse back.
        let dotted = ArchiveName(
            micros: plain.micros, label: "pre-restore", host: "db.example_1", compression: .gzip)
        #expect(dotted.fileName == "20261122T101500.000000Z-pre-restore.db.example_1.tar.gz")
        #expect(ArchiveName(fileName: dotted.fileName) == dotted)
        #expect(dotted.kind == .safety && dotted.host == "db.example_1")
        // Two hosts' names of one moment differ.
        #expect(plain.fileName != plain.withHost("web-2").fileName)

        // Legacy names (whole seconds, no host) are read, and keep their order among themselves.
        let legacy = try #require(ArchiveName(fileName: "20261122T101500Z_2-pre-restore.tar.gz"))
        #expect(legacy.host == nil && !legacy.precise && legacy.sequence == 2 && legacy.label == "pre-restore")
        #expect(legacy.fileName == "20261122T101500Z_2-pre-restore.tar.gz")
        #expect(
            ArchiveName(fileName: "20261122T101500Z.tar")
                == ArchiveName(created: date, compression: .none, precise: false))
        // A converted legacy name keeps its stamp and answers to its old name (a delta's base).
        let converted = legacy.withHost("web-1")
        #expect(converted.fileName == "20261122T101500Z_2-pre-restore.web-1.tar.gz")
        #expect(ArchiveName(fileName: converted.fileName) == converted)
        #expect(converted.isNamed("20261122T101500Z_2-pre-restore.tar.gz") && converted.isNamed(converted.fileName))
        #expect(!plain.isNamed("20261122T101500Z.tar.zst"), "a name written now answers to itself only")
        for bad in [
            "x.tar.zst", "20261322T101500Z.tar.zst", "20261122T101500Z-Bad.tar.zst", "20261122T101500Z_1.tar",
            "20261122T101500Z.zip", ".20261122T101500Z.tar.zst.tmp-1-2",
            // A precise stamp always comes with its host; a host must be a valid one.
            "20261122T101500.000000Z.tar.zst", "20261122T101500.000000Z.-web.tar.zst",
            "20261122T101500.00000Z.web-1.tar.zst", "20261122T101500.000000Z.web 1.tar.zst",
        ] {
            #expect(ArchiveName(fileName: bad) == nil, "\(bad)")
        }
        // A stamp read back gives itself, to the microsecond.
        for micros: Int64 in [1_764_396_000_123_456, 1_764_396_000_999_999, 1_764_396_001_000_000] {
            let name = ArchiveName(micros: micros, host: "h", compression: .none)
            #expect(ArchiveName(fileName: name.fileName)?.micros == micros)
            #expect(ArchiveName(created: name.created, host: "h", compression: .none).micros == micros)
        }
    }
}

@Suite("the user lock: one holder at a time, and no file left for a user without a folder")
struct UserLockTests {
    @Test("threads taking the lock of a user without a folder never hold it together, and the file goes with the last")
    func exclusiveWhileItsFileIsRemoved() throws {
        let folder = TemporaryFolder()
        let rootPath = folder.child("root")
        try FileSystem.makeDirectory(rootPath, mode: 0o755)
        let root = Root(path: rootPath)
        let user = try UserID("ghost")
        let inside = Mutex(0)
        let overlaps = Mutex(0)
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<40 {
                guard let lock = try? UserLock.acquire(root: root, user: user, timeout: .seconds(60)) else {
                    overlaps.withLock { $0 += 1000 }
                    continue
                }
                let now = inside.withLock { value -> Int in
                    value += 1
                    return value
                }
                if now > 1 { overlaps.withLock { $0 += 1 } }
                usleep(200)
                inside.withLock { $0 -= 1 }
                lock.release()
            }
        }
        #expect(overlaps.withLock { $0 } == 0)
        #expect(access(UserLock.path(root: root, user: user), F_OK) != 0)
    }
}
