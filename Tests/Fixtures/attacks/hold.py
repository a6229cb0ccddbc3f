"""Holds a lock on something in the user's own folder until killed.

    hold.py sqlite DATABASE     BEGIN EXCLUSIVE on a SQLite database
    hold.py flock FOLDER        flock(LOCK_EX) on a folder (what granary's commit lock takes)

Prints "ready" once the lock is held.
"""
import fcntl
import os
import sqlite3
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import linux  # noqa: E402


def main():
    linux.unblock_signals()
    kind, path = sys.argv[1], sys.argv[2]
    if kind == "sqlite":
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("BEGIN EXCLUSIVE")
    else:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(fd, fcntl.LOCK_EX)
    print("ready", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
