import Foundation
import GranaryOwner

#if canImport(Glibc)
    import Glibc
#endif

/// An owner of one store written from man 7 granary-reopen alone, in Python with the standard
/// library (a test target's peer, not GranaryOwner), with a mode per rule it breaks on purpose:
///
/// - `conforming`: breaks nothing;
/// - `ignore-resume`: takes RESUME and answers nothing, stays paused until its lease ends, then
///   takes the commit lock, reopens and sends EXPIRED, as the page says of a lease that runs out;
/// - `write-after-swap`: while paused, watches the store's path and, as soon as another file is
///   there (granary's rename), opens it and commits rows into it until RESUME.
///
/// It commits a row (table demo_writes, ids from `startID`) every `intervalMs` while open and logs
/// `ACK <id>` after each COMMIT returned; a write after the swap is `ACK <id> post-swap`. Its log
/// also has `PAUSED`, `REOPENED <why>` and `IGNORED RESUME`.
final class MisbehavingOwner: OwnerLog {
    let process = Process()
    let log: String

    init(store: String, mode: String, log: String, intervalMs: Int = 3, startID: Int64 = 1) throws {
        self.log = log
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [
            "-c", Self.script, store, try ReopenAddress(store: store).name, mode, log, String(intervalMs),
            String(startID),
        ]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        for _ in 0..<2000 where !lines.contains("READY") { usleep(10_000) }
        guard lines.contains("READY") else { throw DemoOwnerError.timedOut(lines.joined(separator: "\n")) }
    }

    deinit { stop() }

    var pid: Int32 { process.processIdentifier }

    /// Every id the owner acknowledged (after its COMMIT returned), post-swap writes included.
    var acked: Set<Int64> {
        Set(lines.compactMap { $0.hasPrefix("ACK ") ? Int64($0.split(separator: " ")[1]) : nil })
    }

    func stop() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    static let script = #"""
        import fcntl, os, select, socket, sqlite3, sys, threading, time
        path, name, mode, logpath = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
        interval, next_id = int(sys.argv[5]) / 1000.0, int(sys.argv[6])
        logfd = os.open(logpath, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        def log(text): os.write(logfd, (text + "\n").encode())
        # Held by a transaction, and for the whole of a pause: new transactions wait.
        gate = threading.Lock()
        db = None
        def open_store():
            global db
            db = sqlite3.connect(path, isolation_level=None, timeout=2, check_same_thread=False)
            db.execute("CREATE TABLE IF NOT EXISTS demo_writes(id INTEGER PRIMARY KEY, at REAL)")
        def writer():
            global next_id
            while True:
                with gate:
                    try:
                        db.execute("INSERT INTO demo_writes(id, at) VALUES(?, ?)", (next_id, time.time()))
                        log("ACK %d" % next_id)
                        next_id += 1
                    except sqlite3.Error as error:
                        log("FAILED %s" % error)
                time.sleep(interval)
        paused = threading.Event()
        def write_after_swap(closed_inode):
            # A rule broken: the store is opened while paused, once granary renamed the new file in.
            post_id = 1_000_000_000 + next_id
            while paused.is_set():
                try:
                    if os.stat(path).st_ino != closed_inode:
                        c = sqlite3.connect(path, isolation_level=None, timeout=0)
                        c.execute("CREATE TABLE IF NOT EXISTS demo_writes(id INTEGER PRIMARY KEY, at REAL)")
                        c.execute("INSERT INTO demo_writes(id, at) VALUES(?, ?)", (post_id, time.time()))
                        log("ACK %d post-swap" % post_id)
                        post_id += 1
                        c.close()
                except (sqlite3.Error, OSError):
                    pass
                time.sleep(0.001)
        def serve(c):
            global db
            buf, lease_end = b"", None
            while True:
                while b"\n" not in buf:
                    wait = None
                    if paused.is_set():
                        wait = lease_end - time.monotonic()
                        if wait <= 0: break
                    ready, _, _ = select.select([c], [], [], wait)
                    if not ready: break
                    chunk = c.recv(4096)
                    if not chunk:
                        if paused.is_set():
                            open_store(); paused.clear(); gate.release(); log("REOPENED peer-gone")
                        return
                    buf += chunk
                if b"\n" not in buf:
                    # The lease ran out: the commit lock, reopen, EXPIRED, the conversation ends.
                    folder = os.open(os.path.dirname(os.path.realpath(path)), os.O_RDONLY | os.O_DIRECTORY)
                    fcntl.flock(folder, fcntl.LOCK_EX)
                    open_store()
                    os.close(folder)
                    paused.clear(); gate.release(); log("REOPENED expired")
                    c.sendall(b"EXPIRED\n")
                    return
                line, buf = buf.split(b"\n", 1)
                word = line.split(b" ")[0]
                if word == b"HELLO":
                    c.sendall(b"HELLO granary-reopen 1 %d\n" % os.getpid())
                elif word == b"PAUSE":
                    lease_end = time.monotonic() + int(line.split(b" ")[1]) / 1000.0
                    gate.acquire()
                    inode = os.stat(path).st_ino
                    db.close(); db = None
                    paused.set()
                    if mode == "write-after-swap":
                        threading.Thread(target=write_after_swap, args=(inode,), daemon=True).start()
                    log("PAUSED")
                    c.sendall(b"PAUSED\n")
                elif word == b"RESUME":
                    if not paused.is_set():
                        c.sendall(b"RESUMED\n")
                    elif mode == "ignore-resume":
                        log("IGNORED RESUME")
                    else:
                        paused.clear(); open_store(); gate.release(); log("REOPENED resume")
                        c.sendall(b"RESUMED\n")
                elif word == b"BYE":
                    if paused.is_set():
                        open_store(); paused.clear(); gate.release(); log("REOPENED bye")
                    return
                else:
                    c.sendall(b"ERROR unknown-command\n")
        open_store()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind("\0" + name); s.listen(8)
        threading.Thread(target=writer, daemon=True).start()
        log("READY")
        while True:
            c, _ = s.accept()
            try: serve(c)
            except OSError: pass
            c.close()
        """#
}
