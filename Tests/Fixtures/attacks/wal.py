"""Writes a WAL store whose -wal claims a database size its owner never wrote.

    wal.py STORE PAGES [--wal-only]

Makes STORE (page size 4096, WAL mode, one small table) and, by hand, STORE-wal: the 32-byte
WAL header and one commit frame of page 1 whose "size of database after commit" field says
PAGES (https://www.sqlite.org/fileformat2.html#walformat), checksums computed as SQLite does.
Page 1's own page count (offset 28) is zeroed, so that SQLite takes the frame's. The files take
a few KiB; SQLite reading the store sees PAGES pages (zeros past the file). Prints "ready".
With --wal-only the database file STORE is kept as it is (the same inode: a delta's base still
recognises it) and only STORE-wal is written again (STORE-shm removed).
"""
import os
import sqlite3
import struct
import sys

PAGE = 4096
MAGIC = 0x377F0683  # big-endian checksums (the low bit set)


def checksum(data, s0=0, s1=0):
    """SQLite's WAL checksum over `data` (a multiple of 8 bytes), big-endian words."""
    words = struct.unpack(">%dI" % (len(data) // 4), data)
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & 0xFFFFFFFF
        s1 = (s1 + words[i + 1] + s0) & 0xFFFFFFFF
    return s0, s1


def main():
    store, pages = sys.argv[1], int(sys.argv[2])
    wal_only = "--wal-only" in sys.argv[3:]
    for suffix in ("-wal", "-shm", "-journal") if wal_only else ("", "-wal", "-shm", "-journal"):
        if os.path.exists(store + suffix):
            os.unlink(store + suffix)
    if not wal_only:
        db = sqlite3.connect(store, isolation_level=None)
        db.execute("PRAGMA page_size=%d" % PAGE)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE notes(body TEXT)")
        db.execute("INSERT INTO notes VALUES ('the owner''s own bytes')")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.close()
    for suffix in ("-wal", "-shm"):
        if os.path.exists(store + suffix):
            os.unlink(store + suffix)
    with open(store, "rb") as f:
        page1 = bytearray(f.read(PAGE))
    page1[28:32] = b"\0\0\0\0"  # no in-header size: the WAL's says how long the database is
    salt1, salt2 = 0x01020304, 0x05060708
    header = struct.pack(">IIIIII", MAGIC, 3007000, PAGE, 0, salt1, salt2)
    s0, s1 = checksum(header)
    header += struct.pack(">II", s0, s1)
    frame = struct.pack(">IIII", 1, pages, salt1, salt2)
    s0, s1 = checksum(frame[:8], s0, s1)
    s0, s1 = checksum(bytes(page1), s0, s1)
    frame += struct.pack(">II", s0, s1)
    with open(store + "-wal", "wb") as f:
        f.write(header + frame + bytes(page1))
    # What a reader of this user's own sees: the claimed size.
    check = sqlite3.connect("file:%s?mode=ro" % store, uri=True)
    print("ready", check.execute("PRAGMA page_count").fetchone()[0], flush=True)
    check.close()


if __name__ == "__main__":
    main()
