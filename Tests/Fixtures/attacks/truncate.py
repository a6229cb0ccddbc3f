"""Truncates a file of the user's own, over and over, until killed.

    truncate.py shm STORE     writes thousands of frames to STORE's -wal, keeps STORE open (so
                              that its -shm stays and granary's SQLite maps it) and truncates
                              STORE-shm to 0 in a loop
    truncate.py store STORE   truncates STORE itself to 0 in a loop, writing it back between
                              (so that granary finds a store to read)

Prints "ready" once the loop runs. What an owner may do to its own files: granary reading them
through a mapping would be killed (SIGBUS) when a mapped page goes past the end of the file.
"""
import os
import sqlite3
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import linux  # noqa: E402


def main():
    linux.unblock_signals()
    kind, store = sys.argv[1], sys.argv[2]
    if kind == "shm":
        # Thousands of frames in the -wal, never checkpointed, and the connection kept open (but
        # idle: it never touches its own mapping again): a reader must rebuild the -shm's index
        # from the -wal and look each page up in it, all through its mapping.
        db = sqlite3.connect(store, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA wal_autocheckpoint=0")
        db.execute("CREATE TABLE IF NOT EXISTS filler(body TEXT)")
        for _ in range(300):
            db.execute("BEGIN")
            for _ in range(10):
                db.execute("INSERT INTO filler VALUES (?)", ("owner's own bytes " * 60,))
            db.execute("COMMIT")
        target = store + "-shm"
        print("ready", flush=True)
        while True:
            try:
                os.truncate(target, 0)
            except OSError:
                pass
    else:
        with open(store, "rb") as f:
            content = f.read()
        print("ready", flush=True)
        while True:
            try:
                os.truncate(store, 0)
                with open(store, "r+b") as f:
                    f.write(content)
            except OSError:
                pass


if __name__ == "__main__":
    main()
