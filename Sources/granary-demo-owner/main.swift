import Foundation
import GranaryKit
import GranaryOwner

#if canImport(Glibc)
    import Glibc
#endif

// granary-demo-owner: an app server in miniature. It owns the stores given on the command line
// through GranaryOwner: one writer commits rows with sequential ids into the first store
// (table demo_writes), one reader reads every store, and `granary restore` can pause it.
//
// usage: granary-demo-owner [--log FILE] [--interval-ms N] [--start-id N] STORE...
//
// It logs, one line each, flushed at once (to --log FILE, else standard output):
//   READY pid=<pid>                     every store is registered and open
//   ACK <id>                            the row <id> is committed (acknowledged to its "client")
//   PAUSED <store>                      the store's connections are closed for granary
//   REOPENED <store> rows=<n> max=<id>  reopened after RESUME (or lease end / granary gone)
//   EVENT <what>                        GranaryOwner's event for the store
//   READ <store> rows=<n> max=<id>      what a reader saw

/// Appends lines to the log with one write(2) each, so that a kill never leaves half a line.
final class Log: @unchecked Sendable {
    let fd: Int32
    init(path: String?) {
        if let path {
            fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
            precondition(fd >= 0, "cannot open \(path)")
        } else {
            fd = STDOUT_FILENO
        }
    }
    func line(_ text: String) {
        let bytes = Array((text + "\n").utf8)
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
            let db = try Database(path: path, mode: .readWrite, busyTimeout: .seconds(10))
            try db.execute("CREATE TABLE IF NOT EXISTS demo_writes(id INTEGER PRIMARY KEY, at REAL)")
            writer = db
        }
        return try body(writer!)
    }

    func withReader<T>(_ body: (Database) throws -> T) throws -> T {
        lock.lock()
        defer { lock.unlock() }
        if reader == nil { reader = try Database(path: path, mode: .readOnly, busyTimeout: .seconds(10)) }
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

Interruption.unblockSignals()
var logPath: String?
var interval = 5
var nextID: Int64 = 1
var stores: [String] = []
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--log": logPath = arguments.popFirst()
    case "--interval-ms": interval = Int(arguments.popFirst() ?? "") ?? 5
    case "--start-id": nextID = Int64(arguments.popFirst() ?? "") ?? 1
    default: stores.append(argument)
    }
}
guard !stores.isEmpty else {
    FileHandle.standardError.write(Data("usage: granary-demo-owner [--log FILE] [--interval-ms N] [--start-id N] STORE...\n".utf8))
    exit(64)
}
let log = Log(path: logPath)
let owner = GranaryOwner(onEvent: { event in log.line("EVENT \(event)") })
let connections = stores.map { Connections(path: $0) }
for store in connections {
    do {
        try owner.register(
            store: store.path,
            close: {
                store.close()
                log.line("PAUSED \(store.path)")
            },
            reopen: {
                let summary = try store.withWriter { store.summary($0) }
                log.line("REOPENED \(store.path) \(summary)")
            })
        _ = try store.withWriter { _ in }
    } catch {
        FileHandle.standardError.write(Data("granary-demo-owner: \(error)\n".utf8))
        exit(1)
    }
}
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
while true {
    let id = nextID
    do {
        try owner.withStore(main.path) {
            try main.withWriter { db in
                try db.run("INSERT INTO demo_writes(id, at) VALUES (?, ?)", [.integer(id), .real(Date().timeIntervalSince1970)])
            }
        }
        log.line("ACK \(id)")
        nextID += 1
    } catch {
        log.line("WRITE-FAILED \(id) \(error)")
    }
    usleep(useconds_t(interval * 1000))
}
