"""Reports who owns every file the moment it appears in a folder tree (inotify).

    created.py FOLDER

Watches FOLDER and every folder under it (and those created later); for each entry created or
moved in, prints "path uid gid mode type" as lstat(2) sees it right then. Prints "ready" once
watching; exits on SIGTERM.
"""
import os
import signal
import stat
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import linux  # noqa: E402


def main():
    linux.unblock_signals()
    top = sys.argv[1]
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    watcher = linux.Inotify()
    mask = linux.IN_CREATE | linux.IN_MOVED_TO

    def add(folder):
        try:
            watcher.watch(folder, mask)
        except OSError:
            return
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if os.path.isdir(path) and not os.path.islink(path):
                add(path)

    add(top)
    print("ready", flush=True)
    for wd, _mask, name in watcher.events():
        path = os.path.join(watcher.folders[wd], name)
        try:
            info = os.lstat(path)
        except OSError:
            print("%s gone" % os.path.relpath(path, top), flush=True)
            continue
        kind = "dir" if stat.S_ISDIR(info.st_mode) else "file" if stat.S_ISREG(info.st_mode) else "other"
        print("%s %d %d %o %s" % (os.path.relpath(path, top), info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode), kind), flush=True)
        if kind == "dir":
            add(path)


if __name__ == "__main__":
    main()
