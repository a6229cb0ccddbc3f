#!/usr/bin/env python3
"""The owners of bench/follow.sh: `make` creates the stores, `write` commits into some of them.

  follow-writer.py make ROOT USERS STORES_PER_USER
      ROOT/uNNNN/sNN.db, WAL stores with one table and a row each (owned by whoever runs it);
      with BENCH_FOLLOW_TABLES=N (1 by default), N-1 more tables with an index each, the schema
      of a small Core Data model (its rows are all written to the first table).
  follow-writer.py hold ROOT USERS STORES
      opens the busy stores of `write`, commits once in each, and keeps them open until killed, as
      apps keep theirs: the
      writers of each phase then never close a store's last connection (which checkpoints and
      removes the -wal, a new generation for follow each time, docs/follow.md).
  follow-writer.py write ROOT USERS STORES RATE SECONDS OUT
      commits RATE rows a second in all, round-robin over store 0 of users 0..USERS-1, then
      store 1 of each, ... (STORES busy stores in all), for SECONDS; each connection is kept
      open, as an app's; SQLite's automatic checkpoints run as in apps, every
      BENCH_FOLLOW_AUTOCHECKPOINT pages (100 by default, not SQLite's 1,000: a store gets about 150
      one-page commits a phase, so at 1,000 no checkpoint would run and the -wal of each phase
      would start where the last one's ended, which made "largest -wal" the sum of two phases).
      OUT gets a line per commit: `USER ACK_US LATENCY_US` (ACK_US: when COMMIT returned,
      microseconds since 1970), then a line `wal-max BYTES` (the largest -wal seen, sampled
      every 100 ms).
"""
import os
import sqlite3
import sys
import time


def path(root, user, store):
    return "%s/u%04d/s%02d.db" % (root, user, store)


def make(root, users, stores):
    for user in range(users):
        os.makedirs("%s/u%04d" % (root, user), exist_ok=True)
        for store in range(stores):
            db = sqlite3.connect(path(root, user, store), isolation_level=None)
            db.execute("PRAGMA synchronous=OFF")  # thousands to make: no fsync for each
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE IF NOT EXISTS items(id INTEGER PRIMARY KEY, body BLOB)")
            for table in range(1, int(os.environ.get("BENCH_FOLLOW_TABLES", "1"))):
                db.execute("CREATE TABLE IF NOT EXISTS z%d(Z_PK INTEGER PRIMARY KEY, Z_ENT INTEGER, "
                           "Z_OPT INTEGER, ZNAME VARCHAR, ZDATE TIMESTAMP, ZDATA BLOB)" % table)
                db.execute("CREATE INDEX IF NOT EXISTS z%d_name ON z%d(ZNAME, ZDATE)" % (table, table))
            db.execute("INSERT INTO items(body) VALUES (randomblob(100))")
            db.close()


def write(root, users, stores, rate, seconds, out):
    busy = []
    for index in range(stores):
        user, store = index % users, index // users
        db = sqlite3.connect(path(root, user, store), isolation_level=None)
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA wal_autocheckpoint=%d" % int(os.environ.get("BENCH_FOLLOW_AUTOCHECKPOINT", "100")))
        busy.append((user, store, db))
    lines = []
    wal_max = 0
    start = time.monotonic()
    next_sample = start
    n = 0
    while True:
        now = time.monotonic()
        if now - start >= seconds:
            break
        due = start + n / rate
        if due > now:
            time.sleep(due - now)
        user, store, db = busy[n % len(busy)]
        began = time.monotonic()
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO items(body) VALUES (randomblob(200))")
        db.execute("COMMIT")
        ended = time.monotonic()
        lines.append("%d %d %d\n" % (user, time.time_ns() // 1000, int((ended - began) * 1e6)))
        n += 1
        if ended >= next_sample:
            next_sample = ended + 0.1
            for u in range(min(users, len(busy))):
                try:
                    wal_max = max(wal_max, os.stat(path(root, u, 0) + "-wal").st_size)
                except OSError:
                    pass
    with open(out, "w") as f:
        f.writelines(lines)
        f.write("wal-max %d\n" % wal_max)
    for _, _, db in busy:
        db.close()


def hold(root, users, stores):
    held = []
    for index in range(stores):
        db = sqlite3.connect(path(root, index % users, index // users), isolation_level=None)
        # One commit, so that the -wal has begun before follow starts (a -wal that begins later
        # costs a generation: follow cannot tell it from one it missed).
        db.execute("INSERT INTO items(body) VALUES (randomblob(100))")
        held.append(db)
    print("held", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    if sys.argv[1] == "hold":
        hold(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        write(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]), sys.argv[7])
