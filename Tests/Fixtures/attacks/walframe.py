"""Appends to a store's -wal one frame that continues its chain: valid salts and checksums.

    walframe.py STORE PAGE COMMIT_PAGES

Walks STORE-wal's chain from its header (https://www.sqlite.org/fileformat2.html#walformat:
each frame's salts must be the header's and its checksum must continue the chain) and writes,
right after the last frame that checks out, one frame of page PAGE whose "size of the database
after commit" field is COMMIT_PAGES (0: not a commit), its page image the newest page 1 with
its in-header size zeroed (PAGE 1) or a copy of the first frame's, its checksum continuing the chain in the byte order the magic says. SQLite would take
it as a commit of the owner's. Prints "ready OFFSET".
"""
import struct
import sys


def checksum(data, big, s0, s1):
    words = struct.unpack(("<" if not big else ">") + "%dI" % (len(data) // 4), data)
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & 0xFFFFFFFF
        s1 = (s1 + words[i + 1] + s0) & 0xFFFFFFFF
    return s0, s1


def main():
    store, page, commit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    wal = store + "-wal"
    with open(wal, "rb") as f:
        data = f.read()
    magic, _, size, _, salt1, salt2, s0, s1 = struct.unpack(">8I", data[:32])
    big = magic & 1
    frame = 24 + size
    offset = 32
    while offset + frame <= len(data):
        head = data[offset:offset + 24]
        _, _, f1, f2, c1, c2 = struct.unpack(">6I", head)
        if (f1, f2) != (salt1, salt2):
            break
        t0, t1 = checksum(head[:8], big, s0, s1)
        t0, t1 = checksum(data[offset + 24:offset + frame], big, t0, t1)
        if (t0, t1) != (c1, c2):
            break
        s0, s1 = t0, t1
        offset += frame
    if page == 1:
        # The newest page 1 (the chain's, else the database file's), its in-header size zeroed so
        # that SQLite takes the commit frame's (as wal.py does).
        image = None
        at = 32
        while at < offset:
            if struct.unpack(">I", data[at:at + 4])[0] == 1:
                image = data[at + 24:at + frame]
            at += frame
        if image is None:
            with open(store, "rb") as f:
                image = f.read(size)
        image = image[:28] + b"\0\0\0\0" + image[32:]
    else:
        image = data[32 + 24:32 + frame]
    head = struct.pack(">4I", page, commit, salt1, salt2)
    t0, t1 = checksum(head[:8], big, s0, s1)
    t0, t1 = checksum(image, big, t0, t1)
    with open(wal, "r+b") as f:
        f.seek(offset)
        f.write(head + struct.pack(">2I", t0, t1) + image)
    print("ready", offset, flush=True)


if __name__ == "__main__":
    main()
