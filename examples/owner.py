#!/usr/bin/env python3
"""An owner of SQLite stores that speaks granary's reopen protocol (man 7 granary-reopen).

    python3 examples/owner.py [--log FILE] [--interval-ms N] [--start-id N] STORE...

It opens each STORE (an existing SQLite database), commits a row into its table demo_writes
every N ms, and serves the reopen protocol for it, so that `granary restore` can replace the
store under it without a restart. SIGTERM or SIGINT stops it cleanly. Standard library only.

Each line of its log (standard output, or --log FILE) is one event, written at once:
    READY pid=<pid>              every store is open and served
    ACK <id> <store>             row <id> is committed into <store>
    PAUSED <store>               the store is closed for granary
    REOPENED <store> <why>       open again (resume, bye, peer-gone, expired, busy, close-failed)
    REFUSED <store> <reason>     a conversation refused (the ERROR sent)
    STOPPED                      SIGTERM or SIGINT: everything closed

How the pieces map to the page: Store is one store's state (open, pausing, paused) and its
connection; Store.transaction() is how the app's work waits while a pause is on; Conversation
is one connection from granary, read line by line under deadlines; parse_request() is the
grammar of MESSAGES.
"""

import argparse
import fcntl
import hashlib
import os
import select
import signal
import socket
import sqlite3
import struct
import sys
import threading
import time

NAME = "granary-reopen"
VERSION = 1
MAX_LINE = 1024  # bytes, line feed included
MAX_LEASE_MS = 3_600_000
IDLE_SECONDS = 10.0  # a connection quiet this long, outside a pause, is closed
STOP = threading.Event()
LOG_LOCK = threading.Lock()
LOG_FD = 1


def log(line):
    """One write(2) per line, so that a kill never leaves half a line."""
    with LOG_LOCK:
        os.write(LOG_FD, (line + "\n").encode())


# ---- MESSAGES: the grammar --------------------------------------------------------------


def words_of(line):
    """The words of a line (bytes, without its line feed), or None when it is not a line of the
    protocol: a byte outside printable ASCII, or an empty word (leading, trailing, doubled space)."""
    if line.endswith(b"\r"):
        line = line[:-1]
    if not line or any(b < 0x20 or b > 0x7E for b in line):
        return None
    words = line.decode("ascii").split(" ")
    return None if "" in words else words


def number(word, maximum):
    """A decimal number from 1 to maximum, without sign or leading zero, else None."""
    if not word or not word.isascii() or not word.isdigit() or word[0] == "0" or len(word) > len(str(maximum)):
        return None
    value = int(word)
    return value if value <= maximum else None


REASONS = {"permission-denied", "bad-hello", "bad-lease", "busy", "close-failed",
           "unexpected-while-paused", "unknown-command"}


def parse_request(line):
    """A client's line as (kind, value): ("hello", [versions]), ("pause", ms), ("resume", None),
    ("bye", None), ("error", reason); or ("bad-hello"|"bad-lease"|"unknown", None) when malformed,
    by its first word: once the one CR before the line feed is dropped, the bytes before the first
    space, compared byte for byte (PAUSE<tab>100 and PAUSE<CR><CR> have no first word PAUSE)."""
    first = (line[:-1] if line.endswith(b"\r") else line).split(b" ", 1)[0]
    malformed = {b"HELLO": "bad-hello", b"PAUSE": "bad-lease"}.get(first, "unknown")
    words = words_of(line)
    if words is None:
        return (malformed, None)
    if words[0] == "HELLO":
        versions = [number(w, 999_999_999) for w in words[2:]]
        if len(words) < 3 or words[1] != NAME or None in versions or len(set(versions)) != len(versions):
            return ("bad-hello", None)
        return ("hello", versions)
    if words[0] == "PAUSE":
        lease = number(words[1], MAX_LEASE_MS) if len(words) == 2 else None
        return ("pause", lease) if lease else ("bad-lease", None)
    if words == ["RESUME"]:
        return ("resume", None)
    if words == ["BYE"]:
        return ("bye", None)
    if words[0] == "ERROR" and len(words) == 2 and words[1] in REASONS:
        return ("error", words[1])
    if words[0] == "ERROR" and len(words) >= 3 and words[1] == "unsupported-version":
        versions = [number(w, 999_999_999) for w in words[2:]]
        if None not in versions and len(set(versions)) == len(versions):
            return ("error", words[1])
    return ("unknown", None)


# ---- One store ---------------------------------------------------------------------------


class Stopping(Exception):
    """The process is stopping: no more transactions."""


class Store:
    """One store: the app's connection to it and the pause state of STATES (open, pausing, paused)."""

    def __init__(self, path):
        self.path = os.path.realpath(path)  # the canonical path names the socket
        if not os.path.isfile(self.path):
            raise FileNotFoundError(path)
        self.condition = threading.Condition()
        self.state = "open"
        self.active = 0  # running transactions
        self.connection = None
        self.open_connection()

    def open_connection(self):
        # Afresh by path, every time: after a restore the path names another file.
        self.connection = sqlite3.connect(self.path, timeout=10, isolation_level=None, check_same_thread=False)
        self.connection.execute("CREATE TABLE IF NOT EXISTS demo_writes(id INTEGER PRIMARY KEY, at REAL)").close()

    def close_connection(self):
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    def transaction(self, body):
        """Runs body(connection) as one transaction: it waits while the store is pausing or paused."""
        with self.condition:
            while self.state != "open":
                if STOP.is_set():
                    raise Stopping()
                self.condition.wait(0.1)
            if STOP.is_set():
                raise Stopping()
            self.active += 1
        try:
            if self.connection is None:
                self.open_connection()  # a reopen that failed is tried again here
            return body(self.connection)
        finally:
            with self.condition:
                self.active -= 1
                self.condition.notify_all()

    def descriptors_left(self):
        """Descriptors of this process that still name the store, its -wal or -shm: some SQLite
        bindings keep the file open after close (a statement not finalized keeps a zombie
        connection). Such a descriptor would go on using the replaced file."""
        targets = set()
        for suffix in ("", "-wal", "-shm"):
            try:
                info = os.stat(self.path + suffix)
                targets.add((info.st_dev, info.st_ino))
            except FileNotFoundError:
                pass
        left = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                info = os.stat("/proc/self/fd/" + fd)
            except OSError:
                continue
            if (info.st_dev, info.st_ino) in targets:
                left.append(int(fd))
        return left

    def reopen(self, why):
        try:
            self.open_connection()
            log(f"REOPENED {self.path} {why}")
        except sqlite3.Error as error:
            log(f"REOPEN-FAILED {self.path} {why}: {error}")
        with self.condition:
            self.state = "open"
            self.condition.notify_all()

    def socket_name(self):
        """DISCOVERY: an abstract socket named by the SHA-256 of the canonical path."""
        return "\0granary-reopen/v1/" + hashlib.sha256(os.fsencode(self.path)).hexdigest()


# ---- One conversation --------------------------------------------------------------------


class Closed(Exception):
    """The peer closed the connection, sent an overlong line, or we are stopping."""


class Conversation:
    """One connection from granary, served to its end."""

    def __init__(self, store, sock):
        self.store = store
        self.sock = sock
        self.buffer = b""

    def send(self, line):
        try:
            self.sock.sendall((line + "\n").encode("ascii"))
        except OSError:
            raise Closed()

    def read_line(self, deadline):
        """The next line (bytes, no line feed), or None when `deadline` (time.monotonic()) passed."""
        while True:
            newline = self.buffer.find(b"\n")
            if newline >= 0:
                if newline + 1 > MAX_LINE:
                    raise Closed()
                line, self.buffer = self.buffer[:newline], self.buffer[newline + 1:]
                return line
            if len(self.buffer) >= MAX_LINE:
                raise Closed()  # overlong: end the conversation without an answer
            if STOP.is_set():
                raise Closed()
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(min(left, 0.1))
            try:
                chunk = self.sock.recv(4096)
            except socket.timeout:
                continue
            except OSError:
                raise Closed()
            if not chunk:
                raise Closed()
            self.buffer += chunk

    def peer_closed(self):
        """Whether the client closed the connection (or shut down its sending side), without
        reading: lines it sent before stay to be read."""
        poller = select.poll()
        poller.register(self.sock, select.POLLIN | select.POLLRDHUP)
        return any(events & (select.POLLRDHUP | select.POLLHUP | select.POLLERR) for _, events in poller.poll(0))

    def finish(self, line):
        """A last line, then a graceful close: stop writing, drain what the peer still sends."""
        try:
            self.send(line)
            self.sock.shutdown(socket.SHUT_WR)
            end = time.monotonic() + 0.5
            while self.read_line(end) is not None:
                pass
        except Closed:
            pass

    def serve(self):
        pid, uid, _ = struct.unpack("3i", self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
        if uid not in (os.geteuid(), 0):
            log(f"REFUSED {self.store.path} permission-denied (uid {uid})")
            return self.finish("ERROR permission-denied")
        first = self.read_line(time.monotonic() + IDLE_SECONDS)
        if first is None:
            return  # quiet for the idle timeout: close without a word
        kind, versions = parse_request(first)
        if kind != "hello":
            log(f"REFUSED {self.store.path} bad-hello")
            return self.finish("ERROR bad-hello")
        if VERSION not in versions:
            log(f"REFUSED {self.store.path} unsupported-version")
            return self.finish(f"ERROR unsupported-version {VERSION}")
        self.send(f"HELLO {NAME} {VERSION} {os.getpid()}")
        while True:
            line = self.read_line(time.monotonic() + IDLE_SECONDS)
            if line is None:
                return  # idle outside a pause
            kind, value = parse_request(line)
            if kind == "pause":
                if not self.pause(value):
                    return
            elif kind == "resume":
                self.send("RESUMED")  # not paused: nothing to do, so that a retry is harmless
            elif kind in ("bye", "error"):
                return
            elif kind == "bad-lease":
                self.send("ERROR bad-lease")
            else:
                self.send("ERROR unknown-command")

    def pause(self, lease_ms):
        """STATES: pausing, then paused. Returns False when the conversation is over."""
        store = self.store
        # The lease counts from now, PAUSE read: draining and being paused share it.
        lease_end = time.monotonic() + lease_ms / 1000
        with store.condition:
            store.state = "pausing"  # new transactions wait from here
            while store.active > 0 and time.monotonic() < lease_end:
                if self.peer_closed():
                    # Nobody waits for PAUSED any more: give the pause up, without a word.
                    store.state = "open"
                    store.condition.notify_all()
                    log(f"REFUSED {store.path} peer-gone (closed while pausing)")
                    raise Closed()
                store.condition.wait(min(0.05, max(0.0, lease_end - time.monotonic())))
            if store.active > 0:
                store.state = "open"
                store.condition.notify_all()
                log(f"REFUSED {store.path} busy")
                self.send("ERROR busy")
                return True
        try:
            store.close_connection()
        except sqlite3.Error as error:
            store.reopen(f"close-failed ({error})")
            self.send("ERROR close-failed")
            return True
        left = store.descriptors_left()
        if left:
            store.reopen(f"close-failed (descriptors {left} still open)")
            self.send("ERROR close-failed")
            return True
        if time.monotonic() >= lease_end:
            store.reopen("busy (closing took the whole lease)")
            self.send("ERROR busy")
            return True
        if self.peer_closed():
            store.reopen("peer-gone (closed while pausing)")
            raise Closed()
        with store.condition:
            store.state = "paused"
        log(f"PAUSED {store.path}")
        try:
            self.send("PAUSED")
            while True:
                line = self.read_line(lease_end)
                if line is None:
                    # The lease ran out. granary may be committing right now: wait for its commit
                    # lock (flock of the store's folder) so that we open the old file before its
                    # rename or the new one after it, never the old one an instant before.
                    folder = os.open(os.path.dirname(store.path), os.O_RDONLY | os.O_DIRECTORY)
                    try:
                        fcntl.flock(folder, fcntl.LOCK_EX)
                        store.reopen("expired")
                    finally:
                        os.close(folder)
                    self.send("EXPIRED")
                    return False
                kind, _ = parse_request(line)
                if kind == "resume":
                    store.reopen("resume")
                    self.send("RESUMED")
                    return True
                if kind in ("bye", "error"):
                    store.reopen(kind)
                    return False
                self.send("ERROR unexpected-while-paused")  # the store stays paused
        except Closed:
            if not STOP.is_set() and store.state == "paused":
                store.reopen("peer-gone")
            raise


# ---- The process ---------------------------------------------------------------------------


def serve_store(store, listener):
    """One thread per store: a paused store never keeps another store's conversation waiting.
    One conversation at a time; the others wait in the listen queue."""
    listener.settimeout(0.1)
    while not STOP.is_set():
        try:
            sock, _ = listener.accept()
        except socket.timeout:
            continue
        with sock:
            try:
                Conversation(store, sock).serve()
            except Closed:
                pass
    listener.close()


def write_forever(store, interval, next_id):
    """The app's work: one committed row per interval, logged only after COMMIT returned."""
    while not STOP.is_set():
        row = next_id()
        try:
            store.transaction(lambda db: db.execute("INSERT INTO demo_writes(id, at) VALUES (?, ?)", (row, time.time())).close())
        except Stopping:
            return
        except sqlite3.Error as error:
            log(f"WRITE-FAILED {row} {store.path} {error}")
            continue
        log(f"ACK {row} {store.path}")
        STOP.wait(interval)


def main():
    global LOG_FD
    parser = argparse.ArgumentParser(description="An owner of SQLite stores that speaks granary's reopen protocol.")
    parser.add_argument("--log", help="append the log to this file instead of standard output")
    parser.add_argument("--interval-ms", type=int, default=5, help="milliseconds between two writes to a store")
    parser.add_argument("--start-id", type=int, default=1, help="the id of the first row written")
    parser.add_argument("stores", nargs="+", metavar="STORE", help="an existing SQLite database")
    options = parser.parse_args()
    if options.log:
        LOG_FD = os.open(options.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    signal.signal(signal.SIGTERM, lambda *_: STOP.set())
    signal.signal(signal.SIGINT, lambda *_: STOP.set())
    # A blocked mask survives exec: a parent that blocks SIGTERM would make it undeliverable.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})

    stores, threads = [], []
    for path in options.stores:
        try:
            store = Store(path)
        except (OSError, sqlite3.Error) as error:
            print(f"owner.py: cannot open {path}: {error}", file=sys.stderr)
            return 66
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(store.socket_name())
        except OSError as error:
            print(f"owner.py: {path} is already served by another process ({error})", file=sys.stderr)
            return 75
        listener.listen(8)
        stores.append(store)
        threads.append(threading.Thread(target=serve_store, args=(store, listener)))
    lock, counter = threading.Lock(), [options.start_id]

    def next_id():
        with lock:
            counter[0] += 1
            return counter[0] - 1
    for store in stores:
        threads.append(threading.Thread(target=write_forever, args=(store, options.interval_ms / 1000, next_id)))
    for thread in threads:
        thread.start()
    log(f"READY pid={os.getpid()}")
    while not STOP.wait(0.2):
        pass
    for store in stores:
        with store.condition:
            store.condition.notify_all()
    for thread in threads:
        thread.join()
    for store in stores:
        store.close_connection()
    log("STOPPED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
