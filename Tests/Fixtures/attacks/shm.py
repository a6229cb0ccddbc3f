"""Keeps WAL stores' -shm where SQLite cannot begin a read, and their -wal changing.

    shm.py STORE...

For each STORE (a WAL store of the user's, with a -wal): opens it with SQLite, so that its -shm
is in use, makes the two copies of the WAL-index header in STORE-shm differ, and holds the WAL
write lock (an fcntl lock on byte 120 of the -shm). Another connection that begins a read finds
the header inconsistent, cannot take the write lock to rebuild it, and tries again about 100
times over about 10 s before it fails with SQLITE_PROTOCOL, whatever its busy timeout
(https://www.sqlite.org/walformat.html, "WAL-Index Format"). Then, every 0.2 s, appends a few
bytes to each STORE-wal (no frame: a change for a follower to look at, nothing to read). Prints
"ready".
"""
import fcntl
import os
import sqlite3
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import linux  # noqa: E402

WAL_WRITE_LOCK = 120  # WALINDEX_LOCK_OFFSET: the first lock byte, the write lock


def main():
    linux.unblock_signals()
    held = []
    for store in sys.argv[1:]:
        db = sqlite3.connect(store, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA wal_autocheckpoint=0")
        db.execute("CREATE TABLE IF NOT EXISTS hostile(x)")
        db.execute("INSERT INTO hostile VALUES (1)")
        shm = os.open(store + "-shm", os.O_RDWR)
        os.pwrite(shm, b"\xff\xff\xff\xff", 48 + 16)  # the second copy's salt: the copies differ
        fcntl.lockf(shm, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, WAL_WRITE_LOCK)
        wal = os.open(store + "-wal", os.O_WRONLY | os.O_APPEND)
        held.append((db, shm, wal))
    print("ready", flush=True)
    while True:
        for _, _, wal in held:
            os.write(wal, b"x")
        time.sleep(0.2)


if __name__ == "__main__":
    main()
