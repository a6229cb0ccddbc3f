"""Grows a file of the user's own the moment granary starts reading it (inotify-timed).

    grow.py --watch DIR --name NAME --size BYTES [--event ACCESS] [--timeout SECONDS]
    grow.py --file PATH --size BYTES [--event ACCESS] [--timeout SECONDS]

Watches DIR; at the first EVENT (ACCESS: granary's first read) on NAME it makes DIR/NAME
BYTES long with ftruncate (a hole: it costs the owner nothing). With --file it opens PATH and
watches the file itself (an inotify watch follows the inode, whatever folder it is moved or
linked into, root's own included) and grows it through the descriptor it holds. Prints "ready" when watching,
"grown" after the ftruncate (or "missed" when the timeout passed first), then exits. What an
owner may do to their own file: a copy that reads until read(2) returns 0 would read zeros for a
day.
"""
import argparse
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import linux  # noqa: E402


def main():
    linux.unblock_signals()
    parser = argparse.ArgumentParser()
    parser.add_argument("--watch")
    parser.add_argument("--name")
    parser.add_argument("--file")
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--event", default="ACCESS", choices=sorted(linux.EVENTS))
    parser.add_argument("--timeout", type=float, default=60)
    args = parser.parse_args()

    def give_up(*_):
        print("missed", flush=True)
        os._exit(0)

    signal.signal(signal.SIGALRM, give_up)
    signal.signal(signal.SIGTERM, give_up)
    signal.setitimer(signal.ITIMER_REAL, args.timeout)
    watcher = linux.Inotify()
    if args.file:
        fd = os.open(args.file, os.O_RDWR)
        watcher.watch(args.file, linux.EVENTS[args.event])
        print("ready", flush=True)
        for _event in watcher.events():
            os.ftruncate(fd, args.size)
            print("grown", flush=True)
            os._exit(0)
    watcher.watch(args.watch, linux.EVENTS[args.event])
    print("ready", flush=True)
    for _wd, _mask, name in watcher.events():
        if name != args.name:
            continue
        os.truncate(os.path.join(args.watch, args.name), args.size)
        print("grown", flush=True)
        os._exit(0)


if __name__ == "__main__":
    main()
