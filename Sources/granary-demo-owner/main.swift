import ArgumentParser
import Foundation
import GranaryKit
import GranaryOwner

#if canImport(Glibc)
    import Glibc
#endif

// granary-demo-owner: an app server in miniature. It owns the stores given on the command line
// through GranaryOwner: one writer commits rows with sequential ids into the first store
// (table demo_writes), one reader reads every store, and `granary restore` can pause it.
// With --break it breaks a rule of the reopen protocol on purpose, for tests.

struct DemoOwnerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "granary-demo-owner",
        abstract: "An app server in miniature that owns SQLite stores through GranaryOwner and keeps writing to them.",
        discussion: """
            One writer commits a row with a sequential id into the first store (table demo_writes) every \
            interval; one reader reads every store every 100 ms; `granary restore` pauses and resumes it \
            through the reopen protocol (man 7 granary-reopen). It runs until killed.

            It logs one line per event, flushed at once (to --log FILE, else standard output):
              READY pid=<pid>            every store is open and served
              ACK <id>                   row <id> is committed (acknowledged)
              WRITE-FAILED <id> <why>    a write failed
              PAUSED <store>             the store is closed for granary
              REOPENED <store> rows=<n> max=<id>
                                         reopened (RESUME, lease end, granary gone)
              EVENT <what>               GranaryOwner's event for a store
              READ <store> rows=<n> max=<id>
                                         what the reader saw
              HOSTILE <what>             what a --break behaviour did

            With --ledger FILE it also appends the id of every row it committed (each ACK, and each row a \
            --break behaviour wrote and saw committed) to FILE, one per line, written only after COMMIT \
            returned: the writes it acknowledged, for tests that prove none is lost.

            --break makes it break a rule on purpose, for tests of granary-reopen-check (each rule \
            names the check that must then fail) and of granary restore against hostile owners. \
            Never use it for anything else.
            """)

    @Option(help: ArgumentHelp("Append the log to this file instead of standard output.", valueName: "file"))
    var log: String?

    @Option(
        help: ArgumentHelp(
            "Append the id of every acknowledged row to this file, one per line (for tests).", valueName: "file"))
    var ledger: String?

    @Option(name: .customLong("interval-ms"), help: ArgumentHelp("Milliseconds between two writes.", valueName: "ms"))
    var intervalMs = 5

    @Option(name: .customLong("start-id"), help: ArgumentHelp("The id of the first row written.", valueName: "id"))
    var startID: Int64 = 1

    @Option(
        name: .customLong("break"),
        help: ArgumentHelp(
            "Break this rule of the reopen protocol on purpose (repeatable; for tests only).", valueName: "rule"))
    var breaks: [Breakage] = []

    @Option(name: .customLong("delay-ms"), help: ArgumentHelp("The delay of --break slow-answers.", valueName: "ms"))
    var delayMs = 3000

    @Argument(help: ArgumentHelp("The stores to own (each must exist).", valueName: "store"))
    var stores: [String] = []

    func validate() throws {
        if stores.isEmpty { throw ValidationError("give at least one store to own") }
        if intervalMs < 0 || intervalMs > 3_600_000 { throw ValidationError("--interval-ms must be from 0 to 3600000") }
        if startID < 1 { throw ValidationError("--start-id must be at least 1") }
        if delayMs < 0 || delayMs > 3_600_000 { throw ValidationError("--delay-ms must be from 0 to 3600000") }
    }

    func run() throws {
        Interruption.unblockSignals()
        DemoOwner(self).run()
    }
}

/// A rule broken on purpose: one of the conversation's (``BrokenRule``), or something the app itself does.
struct Breakage: ExpressibleByArgument, Hashable, Sendable {
    let name: String

    /// Every value, with what it does and what catches it.
    static let table: [(name: String, help: String)] = [
        ("hello-without-pid", "answer HELLO without the pid (check handshake)"),
        ("any-version", "answer HELLO with the client's first version, spoken or not (check versions)"),
        ("lenient-hello", "take a HELLO with doubled spaces, tabs, leading zeros or signs (check bad-hello)"),
        ("ignore-unknown", "answer nothing to an unknown or malformed line (check unknown-command)"),
        ("lenient-lease", "take a lease of 0, +5, 05 or over an hour (check bad-lease)"),
        ("cap-lease", "refuse leases over a minute (check lease-bounds)"),
        ("refuse-resume-when-open", "answer RESUME with an error when not paused (check resume-when-open)"),
        ("any-line-ends-pause", "reopen on any line while paused (check while-paused)"),
        ("stay-paused-on-bye", "stay paused after BYE (check bye)"),
        ("stay-paused-when-gone", "stay paused until the lease ends when the connection closes (check peer-gone)"),
        ("ignore-client-error", "answer a client's ERROR instead of ending the conversation (check client-error)"),
        ("early-expiry", "expire at half the lease (check expire)"),
        ("no-commit-lock", "reopen at the lease's end without taking the commit lock (check commit-lock)"),
        ("no-idle-timeout", "never close an idle connection (check idle-timeout)"),
        ("long-lines", "take lines of up to 64 KiB (check overlong-line)"),
        ("any-uid", "talk to a peer of any uid (check credentials, run as root)"),
        ("one-thread", "serve one conversation at a time over all stores (check several-stores)"),
        ("early-resumed", "send RESUMED 50 ms after PAUSED, unasked, and reopen (check pause-resume)"),
        ("early-expired", "send EXPIRED 50 ms after PAUSED, unasked, and reopen"),
        ("hang-up-after-paused", "close the connection right after PAUSED and reopen"),
        (
            "keep-writing",
            "answer PAUSED while keeping a connection to the store open, and commit a row through it every interval"
        ),
        ("skip-descriptor-check", "answer PAUSED without checking that no descriptor of the store is left open"),
        ("keep-descriptor", "answer PAUSED while keeping a descriptor of the store open (check pause-resume)"),
        (
            "write-while-paused",
            "between PAUSED and RESUME, open the store again and commit a row through a new connection every interval"
        ),
        (
            "reinject-wal",
            "save the -wal before closing and write it back when granary unlinks the stale -shm, before RESUME"
        ),
        (
            "dry-run-differs",
            "answer each store's first HELLO correctly and every later one without the pid (a dry run passes, the restore after it must not)"
        ),
        ("slow-answers", "wait --delay-ms before every answer"),
        ("huge-answer", "answer everything with 1 MiB of x and no line feed"),
        ("loose-first-word", "take PAUSE<tab>100 for a PAUSE and answer ERROR bad-lease (check unknown-command)"),
        ("any-error-ends", "end the conversation on any line starting with ERROR (check unknown-command)"),
        (
            "ignore-gone-while-pausing",
            "answer PAUSED into a connection the client closed while pausing, and stay paused until the lease ends (check gone-while-pausing)"
        ),
        ("idle-while-paused", "close the connection, and reopen, 10 s into a pause (check idle-timeout)"),
        ("late-idle-close", "close an idle connection after 14 s instead of 10 (check idle-timeout)"),
        ("bye-lingers", "after BYE, wait for the client to close the connection (check restore-conversations)"),
        (
            "foreign-companions",
            "give the store's -wal, -shm and -journal to uid 65534 every interval (check file-owners; as root)"
        ),
    ]

    init?(argument: String) {
        guard Self.table.contains(where: { $0.name == argument }) else { return nil }
        name = argument
    }

    static var allValueStrings: [String] { table.map(\.name) }
    static var allValueDescriptions: [String: String] {
        Dictionary(uniqueKeysWithValues: table.map { ($0.name, $0.help) })
    }
    var defaultValueDescription: String { name }

    /// The conversation's part of it (``HostileConversation``).
    var rules: Set<BrokenRule> {
        if name == "keep-descriptor" || name == "keep-writing" { return [.skipDescriptorCheck] }
        return BrokenRule(rawValue: name).map { [$0] } ?? []
    }
}

/// Appends lines to the log with one write(2) each, so that a kill never leaves half a line.
final class Log: @unchecked Sendable {
    let fd: Int32
    init(path: String?) {
        if let path {
            fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
            if fd < 0 {
                FileHandle.standardError.write(
                    Data("granary-demo-owner: cannot open \(path): \(String(cString: strerror(errno)))\n".utf8))
                exit(73)
            }
        } else {
            fd = STDOUT_FILENO
        }
    }
    func line(_ text: String) {
        let bytes = Array((text + "\n").utf8)
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }
}

/// The ids of acknowledged rows, one per line (`--ledger`); one write(2) each, after COMMIT returned.
final class Ledger: @unchecked Sendable {
    let fd: Int32
    init(path: String?) {
        guard let path else {
            fd = -1
            return
        }
        fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        if fd < 0 {
            FileHandle.standardError.write(
                Data("granary-demo-owner: cannot open \(path): \(String(cString: strerror(errno)))\n".utf8))
            exit(73)
        }
    }
    func acknowledged(_ id: Int64) {
        guard fd >= 0 else { return }
        let bytes = Array("\(id)\n".utf8)
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }
}

/// The app's connections to one store. `close` drops them; the next use (or `reopen`) opens them.
final class Connections: @unchecked Sendable {
    let path: String
    private let lock = NSLock()
    private var writer: Database?
    private var reader: Database?
    init(path: String) { self.path = path }

    func withWriter<T>(_ body: (Database) throws -> T) throws -> T {
        lock.lock()
        defer { lock.unlock() }
        if writer == nil {
            let db = try Database(path: path, mode: .readWrite, busyTimeout: .seconds(10), limits: .unlimited)
            try db.execute("CREATE TABLE IF NOT EXISTS demo_writes(id INTEGER PRIMARY KEY, at REAL)")
            writer = db
        }
        return try body(writer!)
    }

    func withReader<T>(_ body: (Database) throws -> T) throws -> T {
        lock.lock()
        defer { lock.unlock() }
        if reader == nil {
            reader = try Database(path: path, mode: .readOnly, busyTimeout: .seconds(10), limits: .unlimited)
        }
        return try body(reader!)
    }

    func close() {
        lock.lock()
        // The reader first: the last connection to close checkpoints the WAL and removes it, which
        // a read-only one cannot do; closing the writer last leaves granary a store with no WAL.
        reader = nil
        writer = nil
        lock.unlock()
    }

    func summary(_ db: Database) -> String {
        guard (try? db.hasTable("demo_writes")) == true else { return "rows=0 max=0" }
        let rows = (try? db.scalar("SELECT count(*) FROM demo_writes")?.integer) ?? 0
        let max = (try? db.scalar("SELECT coalesce(max(id), 0) FROM demo_writes")?.integer) ?? 0
        return "rows=\(rows) max=\(max)"
    }
}

/// What the app does wrong while a store is paused (--break keep-descriptor, write-while-paused,
/// reinject-wal), started by `close` and ended by `reopen`.
final class Misdeeds: @unchecked Sendable {
    let store: Connections
    let breaks: Set<String>
    let log: Log
    let ledger: Ledger
    let interval: Int
    private let lock = NSLock()
    private var keptWriter: Database?
    private var nextKeptWrite: Int64 = 800_000_000
    private var keptDescriptor: Int32 = -1
    private var pausedSince: Int = 0
    private var running = false
    private var nextPausedWrite: Int64 = 900_000_000
    private var savedWAL: [UInt8]?
    private var savedSHM: [UInt8]?

    init(store: Connections, breaks: Set<String>, log: Log, ledger: Ledger, interval: Int) {
        self.store = store
        self.breaks = breaks
        self.log = log
        self.ledger = ledger
        self.interval = interval
    }

    /// Before the app's connections close.
    func beforeClose() {
        if breaks.contains("keep-writing") { startKeptWriter() }
        if breaks.contains("reinject-wal") {
            savedWAL = read(store.path + "-wal")
            savedSHM = read(store.path + "-shm")
        }
    }

    /// After they closed (PAUSED is sent next).
    func afterClose() {
        lock.lock()
        running = true
        lock.unlock()
        if breaks.contains("keep-descriptor") {
            keptDescriptor = open(store.path, O_RDONLY | O_CLOEXEC)
            log.line("HOSTILE kept descriptor \(keptDescriptor) of \(store.path) open")
        }
        if breaks.contains("reinject-wal"), savedWAL?.isEmpty == false {
            // A stale -shm for granary to unlink; the moment it does, the old -wal comes back.
            write(savedSHM ?? [UInt8](repeating: 0, count: 32768), to: store.path + "-shm")
            Thread {
                while self.isRunning {
                    if self.reinjectIfUnlinked() { return }
                    usleep(200)
                }
            }.start()
        }
    }

    /// --break keep-writing: a second connection, opened before the pause and never closed, that
    /// commits a row every interval from then on (paused or not) and acknowledges each.
    private func startKeptWriter() {
        lock.lock()
        defer { lock.unlock() }
        guard keptWriter == nil,
            let db = try? Database(path: store.path, mode: .readWrite, busyTimeout: .seconds(1), limits: .unlimited)
        else { return }
        keptWriter = db
        log.line("HOSTILE kept a connection to \(store.path) open, writing through it")
        // Used by this one thread only from here on.
        nonisolated(unsafe) let writer = db
        Thread {
            while true {
                self.lock.lock()
                let id = self.nextKeptWrite
                self.nextKeptWrite += 1
                self.lock.unlock()
                do {
                    try writer.run(
                        "INSERT INTO demo_writes(id, at) VALUES (?, ?)",
                        [.integer(id), .real(Date().timeIntervalSince1970)])
                    self.ledger.acknowledged(id)
                    self.log.line("HOSTILE wrote row \(id) into \(self.store.path) through the kept connection")
                } catch {
                    self.log.line("HOSTILE write of row \(id) through the kept connection failed: \(error)")
                }
                usleep(useconds_t(max(self.interval, 1) * 1000))
            }
        }.start()
    }

    /// Writes the saved -wal back once granary has unlinked the stale -shm (at most once).
    @discardableResult
    private func reinjectIfUnlinked() -> Bool {
        lock.lock()
        defer { lock.unlock() }
        guard let wal = savedWAL, !wal.isEmpty, access(store.path + "-shm", F_OK) != 0 else { return false }
        savedWAL = nil
        write(wal, to: store.path + "-wal")
        log.line("HOSTILE reinjected \(wal.count) bytes of -wal into \(store.path)")
        return true
    }

    /// Right after PAUSED was sent (GranaryOwner's `paused` event, on its listening thread,
    /// which reads RESUME only after this returns).
    func afterPaused() {
        guard breaks.contains("write-while-paused") else { return }
        // The first write here, before RESUME can be read: at least one lands inside the pause.
        writeWhilePaused()
        Thread {
            while self.isRunning {
                usleep(useconds_t(max(self.interval, 1) * 1000))
                self.writeWhilePaused()
            }
        }.start()
    }

    private func writeWhilePaused() {
        lock.lock()
        let id = nextPausedWrite
        nextPausedWrite += 1
        lock.unlock()
        do {
            let db = try Database(path: store.path, mode: .readWrite, busyTimeout: .seconds(1), limits: .unlimited)
            try db.run(
                "INSERT INTO demo_writes(id, at) VALUES (?, ?)", [.integer(id), .real(Date().timeIntervalSince1970)])
            ledger.acknowledged(id)
            log.line("HOSTILE wrote row \(id) into \(store.path) while paused")
        } catch {
            log.line("HOSTILE write of row \(id) while paused failed: \(error)")
        }
    }

    /// Gives the store's companions to uid 65534 every interval, for ever (--break foreign-companions).
    func startForeignCompanions() {
        guard breaks.contains("foreign-companions") else { return }
        Thread {
            while true {
                for suffix in ["-wal", "-shm", "-journal"] {
                    var info = stat()
                    if stat(self.store.path + suffix, &info) == 0 && info.st_uid != 65534 {
                        _ = chown(self.store.path + suffix, 65534, 65534)
                    }
                }
                usleep(useconds_t(max(self.interval, 1) * 1000))
            }
        }.start()
    }

    /// Before the app reopens (RESUMED is sent after it).
    func beforeReopen() {
        // A watcher thread that has not run yet must not miss its moment: still before RESUMED.
        reinjectIfUnlinked()
        lock.lock()
        running = false
        savedWAL = nil
        lock.unlock()
        if keptDescriptor >= 0 {
            close(keptDescriptor)
            keptDescriptor = -1
        }
    }

    private var isRunning: Bool {
        lock.lock()
        defer { lock.unlock() }
        return running
    }

    private func read(_ path: String) -> [UInt8]? {
        FileManager.default.contents(atPath: path).map { [UInt8]($0) }
    }

    private func write(_ bytes: [UInt8], to path: String) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return }
        _ = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        close(fd)
    }
}

/// The running app.
struct DemoOwner {
    let options: DemoOwnerCommand
    init(_ options: DemoOwnerCommand) { self.options = options }

    func run() -> Never {
        let log = Log(path: options.log)
        let ledger = Ledger(path: options.ledger)
        let rules = options.breaks.reduce(into: Set<BrokenRule>()) { $0.formUnion($1.rules) }
        let names = Set(options.breaks.map(\.name))
        let misdeeds = Dictionary(
            uniqueKeysWithValues: options.stores.map { path in
                (
                    path,
                    Misdeeds(
                        store: Connections(path: path), breaks: names, log: log, ledger: ledger,
                        interval: options.intervalMs)
                )
            })
        let byCanonicalPath = Dictionary(
            misdeeds.values.compactMap { deeds in
                (try? ReopenAddress(store: deeds.store.path)).map { ($0.canonicalPath, deeds) }
            },
            uniquingKeysWith: { first, _ in first })
        let event: @Sendable (GranaryOwner.Event) -> Void = { event in
            log.line("EVENT \(event)")
            if event.kind == .paused { byCanonicalPath[event.store]?.afterPaused() }
        }
        let owner =
            rules.isEmpty
            ? GranaryOwner(onEvent: event)
            : HostileConversation.owner(rules: rules, answerDelay: .milliseconds(options.delayMs), onEvent: event)
        let connections = options.stores.map { misdeeds[$0]!.store }
        for store in connections {
            let misdeeds = misdeeds[store.path]!
            do {
                try owner.register(
                    store: store.path,
                    close: {
                        misdeeds.beforeClose()
                        store.close()
                        log.line("PAUSED \(store.path)")
                        misdeeds.afterClose()
                    },
                    reopen: {
                        misdeeds.beforeReopen()
                        let summary = try store.withWriter { store.summary($0) }
                        log.line("REOPENED \(store.path) \(summary)")
                    })
                _ = try store.withWriter { _ in }
            } catch let error as ReopenError {
                fail("\(error)", status: error.isNotFound ? 66 : 75)
            } catch {
                fail("\(store.path): \(error)", status: 74)
            }
        }
        for deeds in misdeeds.values { deeds.startForeignCompanions() }
        log.line("READY pid=\(getpid())")

        // Readers: each store, every 100 ms, through the owner so that a pause holds them too.
        let readerThread = Thread {
            while true {
                for store in connections {
                    if let summary = try? owner.withStore(store.path, { try store.withReader { store.summary($0) } }) {
                        log.line("READ \(store.path) \(summary)")
                    }
                }
                usleep(100_000)
            }
        }
        readerThread.start()

        // The writer: one committed row per interval, its id logged only after COMMIT returned.
        let main = connections[0]
        var nextID = options.startID
        while true {
            let id = nextID
            do {
                try owner.withStore(main.path) {
                    try main.withWriter { db in
                        try db.run(
                            "INSERT INTO demo_writes(id, at) VALUES (?, ?)",
                            [.integer(id), .real(Date().timeIntervalSince1970)])
                    }
                }
                ledger.acknowledged(id)
                log.line("ACK \(id)")
                nextID += 1
            } catch let error as SQLiteError where error.code == 1555 {
                // SQLITE_CONSTRAINT_PRIMARYKEY on its own id: an earlier attempt that reported a
                // failure had committed the row after all. It was never acknowledged (nothing is
                // claimed of it); the writer moves on to the next id instead of retrying this one.
                log.line("WRITE-FAILED \(id) \(error)")
                nextID += 1
            } catch {
                log.line("WRITE-FAILED \(id) \(error)")
            }
            usleep(useconds_t(options.intervalMs * 1000))
        }
    }

    private func fail(_ message: String, status: Int32) -> Never {
        FileHandle.standardError.write(Data("granary-demo-owner: \(message)\n".utf8))
        exit(status)
    }
}

extension ReopenError {
    var isNotFound: Bool {
        if case .storeNotFound = self { return true }
        return false
    }
}

// GranaryKit's process-wide installs in SQLite, before anything opens a database.
ProcessSetup.install()
DemoOwnerCommand.main()
