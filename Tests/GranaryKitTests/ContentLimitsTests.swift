import Foundation
import GranaryKit
import Testing

@testable import GranaryCLI

/// `ContentLimits`: every SQLite connection granary opens has a time budget and a memory ceiling.
@Suite("SQLite's work on a store is bounded in time and memory")
struct ContentLimitsTests {
    /// A second per store, no more per GiB, and the default ceiling.
    static let oneSecond = ContentLimits(time: .seconds(1), timePerGiB: .zero, memory: ContentLimits.defaults.memory)

    /// A small store whose every row costs the check ~0.1 s and 40 MB: an expression index
    /// (evaluated by integrity_check) or a NOT NULL virtual generated column (quick_check too).
    static func makeExpensiveStore(_ path: String, index: Bool, rows: Int = 200, wal: Bool = true) throws {
        let db = try Database(path: path, mode: .create, limits: .unlimited)
        if wal { try db.execute("PRAGMA journal_mode=WAL") }
        // Creating the expensive version directly costs as much as checking it; the rows are
        // written under a cheap expression of the same value, 2 * (20000000 + x), and the
        // expensive one then swapped in (writable_schema), as an author could, to get a store
        // that is small, sound and slow to check.
        let cheap = "(2 * (20000000 + x))"
        if index {
            try db.execute("CREATE TABLE t(x INTEGER); CREATE INDEX slow ON t(\(cheap))")
        } else {
            try db.execute("CREATE TABLE t(x INTEGER, y INTEGER AS \(cheap) VIRTUAL NOT NULL)")
        }
        try db.execute("BEGIN")
        for x in 1...rows { try db.run("INSERT INTO t(x) VALUES (?)", [.integer(Int64(x))]) }
        try db.execute("COMMIT")
        try db.execute("PRAGMA writable_schema=ON")
        try db.execute(
            "UPDATE sqlite_schema SET sql = replace(sql, '\(cheap)', '(length(hex(zeroblob(20000000 + x))))')")
        try db.execute("PRAGMA writable_schema=OFF")
    }

    @Test(
        "an expression index with an expensive expression stops integrity_check at the time budget",
        arguments: [true, false])
    func expressionIndexStopsAtBudget(wal: Bool) throws {
        let folder = TemporaryFolder()
        let path = folder.child("Slow.sqlite")
        try Self.makeExpensiveStore(path, index: true, wal: wal)
        #expect(FileSystem.size(path) < 64 << 10)
        let db = try Database(path: path, mode: .readOnly, limits: Self.oneSecond)
        let problems = db.integrityCheck(full: true)
        #expect(db.exceededLimit == .time(.seconds(1)))
        #expect(problems.count == 1)
        #expect(problems[0].contains("integrity_check stopped at its time budget of 1s"))
        // The cheap check does not evaluate index expressions: it passes at once.
        let other = try Database(path: path, mode: .readOnly, limits: Self.oneSecond)
        #expect(other.integrityCheck(full: false) == ["ok"])
        #expect(other.exceededLimit == nil)
    }

    @Test(
        "a user's account bounds its checks across stores: stores each under their own budget stop once they are over it together"
    )
    func budgetAcrossStores() throws {
        let folder = TemporaryFolder()
        // Each check costs about 2 rows x 0.1 s, well under the 3 s budget of its store (a loaded
        // machine stays under it); checks of the same store are charged to one account of 3 s
        // until one stops. However fast the machine, some number of them (at most 500) adds up
        // to the account.
        let path = folder.child("Slow.sqlite")
        try Self.makeExpensiveStore(path, index: false, rows: 2, wal: false)
        let limits = ContentLimits(time: .seconds(3), timePerGiB: .zero, memory: ContentLimits.defaults.memory)
        let account = ContentAccount(limits: limits, storesOfSize: 0)
        #expect(account.budget == .seconds(3))
        var passed = 0
        var stopped: Database?
        while passed < 500 {
            let db = try Database(path: path, mode: .readOnly, limits: limits, account: account)
            let problems = db.integrityCheck(full: false)
            if problems != ["ok"] {
                #expect(
                    problems.first?.contains("the user's time budget of 3s for all its stores") == true, "\(problems)")
                stopped = db
                break
            }
            passed += 1
        }
        #expect(stopped?.exceededLimit == .time(.seconds(3), acrossStores: true))
        #expect(passed >= 1, "the first store alone was over the account")
        #expect(account.spent >= .seconds(3))
        // The control: without the account, the same store passes as often (each is under its budget).
        for _ in 0...passed {
            let db = try Database(path: path, mode: .readOnly, limits: limits)
            #expect(db.integrityCheck(full: false) == ["ok"])
        }
    }

    @Test("a NOT NULL virtual generated column stops quick_check at the time budget; the error says which limit")
    func generatedColumnStopsAtBudget() throws {
        let folder = TemporaryFolder()
        let path = folder.child("Slow.sqlite")
        try Self.makeExpensiveStore(path, index: false, wal: false)
        let db = try Database(path: path, mode: .readOnly, limits: Self.oneSecond)
        #expect(db.integrityCheck(full: false).first?.contains("quick_check stopped at its time budget of 1s") == true)
        let again = try Database(path: path, mode: .readOnly, limits: Self.oneSecond)
        let error = #expect(throws: SQLiteError.self) { try again.scalar("SELECT sum(y) FROM t") }
        #expect(error?.kind == .overLimit)
        #expect(error?.limit == .time(.seconds(1)))
        #expect(error?.status == .dataError)
        #expect(
            error?.description.contains("Slow.sqlite: SELECT sum(y) FROM t stopped at its time budget of 1s") == true)
        #expect(error?.hint?.contains("time_per_gib") == true)
    }

    @Test(
        "the process-wide installs are the program's: the test binary made both at start, a second call changes nothing"
    )
    func processSetupIsExplicit() {
        // Made by Tests/CTestSetup before any test, as granary's main makes them: the allocator
        // could not be wrapped any more once a test had opened a database.
        #expect(ContentLimits.memoryCeilingEnforced)
        #expect(ProcessSetup.install() == ProcessSetup.Outcome(memoryCeilings: true, beneath: true))
    }

    @Test(
        "a value over the memory ceiling stops its statement; a connection beside it on another thread is not affected")
    func memoryCeilingPerConnection() throws {
        #expect(ContentLimits.memoryCeilingEnforced)
        let folder = TemporaryFolder()
        let path = folder.child("Big.sqlite")
        let db = try Database(path: path, mode: .create, limits: .unlimited)
        try db.execute(
            "CREATE TABLE t(x INTEGER, y INTEGER AS (length(hex(zeroblob(100000000 + x)))) VIRTUAL NOT NULL)")
        try db.execute("INSERT INTO t(x) VALUES (1), (2)")
        let honest = folder.child("Honest.sqlite")
        try SampleData.makeItemsStore(honest, rows: 2000, walOnlyTail: 100)
        let ceiling = ContentLimits(time: .zero, timePerGiB: .zero, memory: 64 << 20)
        // The honest check runs on another thread while the hostile one hits its ceiling.
        let done = DispatchSemaphore(value: 0)
        let results = Results()
        Thread.detachNewThread {
            let other = try! Database(path: honest, mode: .readOnly, limits: ceiling)
            var good = true
            for _ in 0..<20 { good = good && other.integrityCheck(full: true) == ["ok"] }
            results.honest = good
            done.signal()
        }
        let hostile = try Database(path: path, mode: .readOnly, limits: ceiling)
        let problems = hostile.integrityCheck(full: false)
        done.wait()
        #expect(hostile.exceededLimit == .memory(64 << 20))
        #expect(problems.first?.contains("quick_check stopped at its memory ceiling of 64 MiB") == true)
        #expect(results.honest == true)
        // Without a ceiling the same statement runs (it needs ~200 MB).
        let free = try Database(path: path, mode: .readOnly, limits: .unlimited)
        #expect(free.integrityCheck(full: false) == ["ok"])
    }

    private final class Results: @unchecked Sendable { var honest: Bool? }

    @Test("waiting for another connection's lock is not work: a 1 s budget survives a 3 s wait within the busy timeout")
    func lockWaitIsNotWork() throws {
        let folder = TemporaryFolder()
        let path = folder.child("Legacy.db")
        try SampleData.makeRollbackStore(path, rows: 50)
        let locked = DispatchSemaphore(value: 0)
        let released = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            let holder = try! Database(path: path, mode: .readWrite, limits: .unlimited)
            try! holder.execute("BEGIN EXCLUSIVE")
            locked.signal()
            Thread.sleep(forTimeInterval: 3)
            try? holder.execute("COMMIT")
            released.signal()
        }
        locked.wait()
        let reader = try Database(path: path, mode: .readOnly, busyTimeout: .seconds(10), limits: Self.oneSecond)
        #expect(try reader.scalar("SELECT count(*) FROM items")?.integer == 50)
        #expect(reader.exceededLimit == nil)
        #expect(reader.integrityCheck(full: true) == ["ok"])
        released.wait()
    }

    @Test("the time budget grows with the store's size: time plus time_per_gib for each GiB")
    func budgetScales() {
        let limits = ContentLimits(time: .seconds(30), timePerGiB: .seconds(120), memory: 0)
        #expect(limits.timeBudget(forStoreOfSize: 12 << 10) < .seconds(31))
        #expect(limits.timeBudget(forStoreOfSize: 10 << 30) == .seconds(30 + 1200))
        #expect(ContentLimits.unlimited.timeBudget(forStoreOfSize: 1 << 40) == .zero)
    }

    @Test("honest work under the defaults: a 2 MiB store checks in full, Core Data metadata reads")
    func defaultsPassHonestStores() throws {
        let folder = TemporaryFolder()
        let path = folder.child("Notes.sqlite")
        try SampleData.makeCoreDataStore(path, notes: 400)
        let db = try Database(path: path, mode: .readOnly)
        #expect(db.integrityCheck(full: true) == ["ok"])
        #expect(try CoreDataMetadata.read(db)?.entityRowCounts == ["Folder": 3, "Note": 400])
        #expect(db.exceededLimit == nil)
    }

    @Test("[limits] and [reset] in the configuration file: values, units, and errors naming the key")
    func configuration() throws {
        let config = try ConfigFile.parse(
            """
            [limits]
            time = "10s"
            time_per_gib = "1min"
            memory = "256MiB"

            [reset]
            keep_tables = ["app_settings", "feature_flags"]
            """, path: "/etc/granary/config.toml")
        #expect(config.limits == ContentLimits(time: .seconds(10), timePerGiB: .seconds(60), memory: 256 << 20))
        #expect(config.resetKeepTables == ["app_settings", "feature_flags"])
        let settings = Settings.resolve(rootFlag: nil, repoFlag: nil, config: config, environment: [:])
        #expect(settings.limits.value.memory == 256 << 20)
        #expect(settings.limits.source == .file)
        let partial = try ConfigFile.parse("[limits]\nmemory = 1073741824\n", path: "c.toml")
        #expect(
            partial.limits
                == ContentLimits(
                    time: ContentLimits.defaults.time, timePerGiB: ContentLimits.defaults.timePerGiB, memory: 1 << 30))
        #expect(
            throws: ConfigError.invalidValue(
                path: "c.toml", line: 2, key: "limits.memory",
                message: "\"lots\" is not a size (use a number with KiB, MiB, GiB or TiB, e.g. \"512MiB\")")
        ) {
            try ConfigFile.parse("[limits]\nmemory = \"lots\"\n", path: "c.toml")
        }
        #expect(throws: ConfigError.unknownKey(path: "c.toml", line: 2, key: "limits.cpu")) {
            try ConfigFile.parse("[limits]\ncpu = 1\n", path: "c.toml")
        }
        let wrong = #expect(throws: ConfigError.self) {
            try ConfigFile.parse("[reset]\nkeep_tables = \"notes\"\n", path: "c.toml")
        }
        #expect(wrong?.description == "c.toml:2: reset.keep_tables must be an array of table names, not a string")
        #expect(ByteCountText.bytes("2GiB") == 2 << 30)
        #expect(ByteCountText.bytes("64k") == 64 << 10)
        #expect(ByteCountText.render(512 << 20) == "512 MiB")
        #expect(DurationText.format(.seconds(90)) == "1min30s")
    }
}

@Suite("a store's suggested page cache")
struct SuggestedCacheTests {
    @Test(
        "a store whose header asks for a page cache of 4 GiB is checked with SQLite's default cache, within a 16 MiB ceiling"
    )
    func hugeSuggestedCache() throws {
        let folder = TemporaryFolder()
        let path = folder.child("Greedy.sqlite")
        let db = try Database(path: path, mode: .create, limits: .unlimited)
        // The deprecated default_cache_size is kept in the header and honoured by every reader.
        try db.execute("PRAGMA default_cache_size=1000000; CREATE TABLE t(x BLOB)")
        try db.execute("BEGIN")
        for _ in 0..<2000 { try db.run("INSERT INTO t VALUES (randomblob(32768))") }
        try db.execute("COMMIT")
        #expect(FileSystem.size(path) > 60 << 20)
        let ceiling = ContentLimits(time: .zero, timePerGiB: .zero, memory: 16 << 20)
        let reader = try Database(path: path, mode: .readOnly, limits: ceiling)
        #expect(reader.integrityCheck(full: true) == ["ok"])
        #expect(reader.exceededLimit == nil)
    }
}
