import CSQLite

#if canImport(Glibc)
    import Glibc
#endif

// granary-ledger-writer: a process outside the reopen protocol (an app's helper, a sync agent, a
// CLI) that writes into a user's store with plain SQLite while granary works on it, for tests and
// the soak only. Each transaction inserts one row (table ledger_writes: seq, writer, at); the
// row's sequence number is appended to the ledger file only after COMMIT returned SQLITE_DONE, one
// write(2) per line, so the ledger holds exactly what was acknowledged (a kill between COMMIT and
// the ledger line leaves a row that is not in the ledger, never the other way round).
//
//   granary-ledger-writer --ledger FILE [--name NAME] [--start N] [--interval-ms MS]
//       [--connection keep|per-write] [--count N [--hold]] [--fsync] [--times]
//       [--checkpoint-every N [--checkpoint-mode MODE]] [--parts N] STORE
//
// --connection keep (the default) opens the store once and keeps that connection for the whole
// run; per-write opens and closes it around every transaction, as a command-line tool does.
// --count N exits 0 after N acknowledged rows; with --hold it stays instead, its kept connection
// open (idle), until the process is killed. The journal mode is the store's own: the writer never
// changes it. Messages go to standard error; the writer runs until killed (SIGTERM or SIGKILL).
// --times adds to each ledger line the moment COMMIT returned (microseconds since 1970, after a
// space); --checkpoint-every N runs a checkpoint after every N acknowledged rows, PASSIVE, RESTART
// and TRUNCATE in turn, on the writer's own connection (as apps checkpoint); --checkpoint-mode
// PASSIVE, RESTART or TRUNCATE runs that one mode every time instead. --parts N makes each
// transaction insert N rows more into table ledger_parts (seq, part), so that a reader can check
// a transaction is there whole or not at all. SIGTERM is held back while a transaction and its
// ledger line are under way: a writer stopped with SIGTERM has every committed row in its ledger.

/// Writes `text` to standard error (one write(2)).
func say(_ text: String) {
    let bytes = Array(text.utf8)
    _ = bytes.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
}

struct Options {
    var ledger = ""
    var name = "ledger"
    var start: Int64 = 1
    var intervalMs = 5
    var keep = true
    var count: Int64?
    var hold = false
    var fsync = false
    var store = ""
    var times = false
    var checkpointEvery = 0
    var checkpointMode: String?
    var parts = 0
}

let synopsis =
    "usage: granary-ledger-writer --ledger FILE [--name NAME] [--start N] [--interval-ms MS] "
    + "[--connection keep|per-write] [--count N [--hold]] [--fsync] [--times] [--checkpoint-every N [--checkpoint-mode MODE]] [--parts N] STORE\n"

func usage(_ message: String) -> Never {
    say("granary-ledger-writer: \(message)\n")
    say(synopsis)
    exit(64)
}

/// `--help`: what it does and its options, on standard output.
func help() -> Never {
    let text =
        synopsis + """

            A process outside the reopen protocol that writes into STORE with plain SQLite (for tests and
            the soak): each transaction inserts one row into table ledger_writes (seq, writer, at), and the
            row's number is appended to the ledger FILE only after COMMIT returned, one line each.

              --ledger FILE         where acknowledged row numbers go (appended)
              --name NAME           the writer column (default ledger)
              --start N             the first row number (default 1)
              --interval-ms MS      pause between transactions (default 5)
              --connection keep     one connection for the whole run (default)
              --connection per-write
                                    open and close the store around every transaction
              --count N             exit 0 after N acknowledged rows
              --hold                with --count: stay instead, the kept connection open and idle
              --fsync               fsync the ledger after each line
              --times               add the moment COMMIT returned (microseconds since 1970) to each line
              --checkpoint-every N  a checkpoint after every N rows: PASSIVE, RESTART, TRUNCATE in turn
              --checkpoint-mode MODE
                                    with --checkpoint-every: always PASSIVE, RESTART or TRUNCATE
              --parts N             N rows more per transaction in table ledger_parts (seq, part)
              --help                this text

            """
    _ = Array(text.utf8).withUnsafeBytes { write(STDOUT_FILENO, $0.baseAddress, $0.count) }
    exit(0)
}

func parse(_ arguments: [String]) -> Options {
    var options = Options()
    var index = 0
    func value(_ flag: String) -> String {
        index += 1
        guard index < arguments.count else { usage("\(flag) needs a value") }
        return arguments[index]
    }
    var stores: [String] = []
    while index < arguments.count {
        let argument = arguments[index]
        switch argument {
        case "--ledger": options.ledger = value(argument)
        case "--name": options.name = value(argument)
        case "--start":
            guard let n = Int64(value(argument)), n >= 1 else { usage("--start must be a number from 1") }
            options.start = n
        case "--interval-ms":
            guard let n = Int(value(argument)), n >= 0, n <= 3_600_000 else {
                usage("--interval-ms must be from 0 to 3600000")
            }
            options.intervalMs = n
        case "--connection":
            switch value(argument) {
            case "keep": options.keep = true
            case "per-write": options.keep = false
            default: usage("--connection must be keep or per-write")
            }
        case "--count":
            guard let n = Int64(value(argument)), n >= 0 else { usage("--count must be a number from 0") }
            options.count = n
        case "--fsync": options.fsync = true
        case "--hold": options.hold = true
        case "--times": options.times = true
        case "--checkpoint-every":
            guard let n = Int(value(argument)), n >= 0 else { usage("--checkpoint-every must be a number from 0") }
            options.checkpointEvery = n
        case "--checkpoint-mode":
            let mode = value(argument).uppercased()
            guard ["PASSIVE", "RESTART", "TRUNCATE"].contains(mode) else {
                usage("--checkpoint-mode must be PASSIVE, RESTART or TRUNCATE")
            }
            options.checkpointMode = mode
        case "--parts":
            guard let n = Int(value(argument)), n >= 0, n <= 1000 else { usage("--parts must be from 0 to 1000") }
            options.parts = n
        case "--help", "-h": help()
        default:
            if argument.hasPrefix("-") { usage("unknown option \(argument)") }
            stores.append(argument)
        }
        index += 1
    }
    guard stores.count == 1 else { usage("give exactly one store") }
    guard !options.ledger.isEmpty else { usage("give --ledger FILE") }
    options.store = stores[0]
    return options
}

/// One SQLite connection; every failure is a message, never a crash.
final class Connection {
    let db: OpaquePointer

    init?(_ path: String) {
        var handle: OpaquePointer?
        // No SQLITE_OPEN_CREATE: the store must exist (a writer never makes a store appear).
        let status = sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE, nil)
        guard status == SQLITE_OK, let handle else {
            say("granary-ledger-writer: cannot open \(path): \(String(cString: sqlite3_errstr(status)))\n")
            if let handle { sqlite3_close_v2(handle) }
            return nil
        }
        db = handle
        sqlite3_busy_timeout(db, 5000)
    }

    deinit { sqlite3_close_v2(db) }

    /// Runs `sql`; nil when it succeeded, else SQLite's message.
    func execute(_ sql: String) -> String? {
        var message: UnsafeMutablePointer<CChar>?
        let status = sqlite3_exec(db, sql, nil, nil, &message)
        defer { sqlite3_free(message) }
        if status == SQLITE_OK { return nil }
        return message.map { String(cString: $0) } ?? String(cString: sqlite3_errstr(status))
    }

    /// One transaction inserting row `seq`; true only when COMMIT returned SQLITE_DONE.
    func insert(seq: Int64, writer: String, parts: Int) -> Bool {
        if let failure = execute("BEGIN IMMEDIATE") {
            say("granary-ledger-writer: BEGIN for \(seq): \(failure)\n")
            return false
        }
        var statement: OpaquePointer?
        let sql = "INSERT INTO ledger_writes(seq, writer, at) VALUES (?, ?, julianday('now'))"
        var ok = sqlite3_prepare_v2(db, sql, -1, &statement, nil) == SQLITE_OK
        if ok {
            sqlite3_bind_int64(statement, 1, seq)
            ok = writer.withCString { sqlite3_bind_text(statement, 2, $0, -1, granary_sqlite_transient()) } == SQLITE_OK
            ok = ok && sqlite3_step(statement) == SQLITE_DONE
        }
        sqlite3_finalize(statement)
        if ok && parts > 0 {
            var part: OpaquePointer?
            ok =
                sqlite3_prepare_v2(db, "INSERT INTO ledger_parts(seq, part) VALUES (?, ?)", -1, &part, nil) == SQLITE_OK
            for index in 0..<parts where ok {
                sqlite3_reset(part)
                sqlite3_bind_int64(part, 1, seq)
                sqlite3_bind_int64(part, 2, Int64(index))
                ok = sqlite3_step(part) == SQLITE_DONE
            }
            sqlite3_finalize(part)
        }
        if !ok {
            say("granary-ledger-writer: INSERT of \(seq): \(String(cString: sqlite3_errmsg(db)))\n")
            _ = execute("ROLLBACK")
            return false
        }
        // COMMIT through step, so that the acknowledgement is exactly SQLITE_DONE.
        var commit: OpaquePointer?
        guard sqlite3_prepare_v2(db, "COMMIT", -1, &commit, nil) == SQLITE_OK else {
            _ = execute("ROLLBACK")
            return false
        }
        let status = sqlite3_step(commit)
        sqlite3_finalize(commit)
        if status != SQLITE_DONE {
            say("granary-ledger-writer: COMMIT of \(seq): \(String(cString: sqlite3_errmsg(db)))\n")
            _ = execute("ROLLBACK")
            return false
        }
        return true
    }
}

let options = parse(Array(CommandLine.arguments.dropFirst()))
let ledger = open(options.ledger, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
if ledger < 0 {
    say("granary-ledger-writer: cannot open the ledger \(options.ledger): \(String(cString: strerror(errno)))\n")
    exit(73)
}
signal(SIGTERM, SIG_DFL)

func connect() -> Connection? {
    guard let connection = Connection(options.store) else { return nil }
    if let failure = connection.execute(
        "CREATE TABLE IF NOT EXISTS ledger_writes(seq INTEGER PRIMARY KEY, writer TEXT NOT NULL, at REAL NOT NULL)")
    {
        say("granary-ledger-writer: cannot create ledger_writes in \(options.store): \(failure)\n")
        return nil
    }
    if options.parts > 0,
        let failure = connection.execute(
            "CREATE TABLE IF NOT EXISTS ledger_parts(seq INTEGER NOT NULL, part INTEGER NOT NULL, PRIMARY KEY(seq, part))"
        )
    {
        say("granary-ledger-writer: cannot create ledger_parts in \(options.store): \(failure)\n")
        return nil
    }
    return connection
}

var kept: Connection? = nil
if options.keep {
    kept = connect()
    if kept == nil { exit(74) }
}
var seq = options.start
var acknowledged: Int64 = 0
/// One transaction; a per-write connection is closed before this returns (not kept over the sleep).
func writeOne(_ seq: Int64, through kept: Connection?) -> Bool {
    guard let connection = kept ?? connect() else { return false }
    return connection.insert(seq: seq, writer: options.name, parts: options.parts)
}

/// SIGTERM, held back from a transaction's BEGIN to its ledger line (its default action, ending
/// the process, then comes between two transactions).
var termination = sigset_t()
sigemptyset(&termination)
sigaddset(&termination, SIGTERM)

while options.count.map({ acknowledged < $0 }) ?? true {
    sigprocmask(SIG_BLOCK, &termination, nil)
    if writeOne(seq, through: kept) {
        var stamp = timespec()
        clock_gettime(CLOCK_REALTIME, &stamp)
        let micros = Int64(stamp.tv_sec) * 1_000_000 + Int64(stamp.tv_nsec) / 1000
        let line = Array((options.times ? "\(seq) \(micros)\n" : "\(seq)\n").utf8)
        _ = line.withUnsafeBytes { write(ledger, $0.baseAddress, $0.count) }
        if options.fsync { fsync(ledger) }
        acknowledged += 1
        if options.checkpointEvery > 0, acknowledged % Int64(options.checkpointEvery) == 0,
            let connection = kept ?? connect()
        {
            let modes = ["PASSIVE", "RESTART", "TRUNCATE"]
            let mode =
                options.checkpointMode ?? modes[Int(acknowledged / Int64(options.checkpointEvery)) % modes.count]
            if let failure = connection.execute("PRAGMA wal_checkpoint(\(mode))") {
                say("granary-ledger-writer: checkpoint \(mode): \(failure)\n")
            }
        }
    }
    sigprocmask(SIG_UNBLOCK, &termination, nil)
    // A failed transaction's number is never used again: every row's number is unique.
    seq += 1
    if options.intervalMs > 0 { usleep(useconds_t(options.intervalMs * 1000)) }
}
// Done writing: exit, or with --hold keep the connection open (a process that holds the store but
// is idle) until killed.
guard options.hold else { exit(0) }
while true { pause() }
