"""Swaps a name for a link at the moment granary touches a file (inotify-timed).

    race.py --watch DIR --event OPEN --name Local.sqlite --count 1 \
            (--exchange A B | --rename A B) [--timeout SECONDS]

Watches DIR; at the COUNT-th EVENT on NAME it performs the swap at once: --exchange swaps A and B
atomically (renameat2 RENAME_EXCHANGE), --rename renames A over B. Prints "ready" when watching,
"swapped" after the swap (or "missed" when the timeout passed first), then exits.
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
    parser.add_argument("--watch", required=True)
    parser.add_argument("--event", required=True, choices=sorted(linux.EVENTS))
    parser.add_argument("--name", required=True)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--exchange", nargs=2)
    parser.add_argument("--rename", nargs=2)
    parser.add_argument("--timeout", type=float, default=30)
    args = parser.parse_args()
    if bool(args.exchange) == bool(args.rename):
        parser.error("give one of --exchange and --rename")

    def give_up(*_):
        print("missed", flush=True)
        os._exit(0)

    signal.signal(signal.SIGALRM, give_up)
    signal.signal(signal.SIGTERM, give_up)
    signal.setitimer(signal.ITIMER_REAL, args.timeout)
    watcher = linux.Inotify()
    wanted = linux.EVENTS[args.event]
    watcher.watch(args.watch, wanted)
    print("ready", flush=True)
    seen = 0
    for _wd, mask, name in watcher.events():
        if name != args.name or not mask & wanted:
            continue
        seen += 1
        if seen < args.count:
            continue
        if args.exchange:
            linux.exchange(*args.exchange)
        else:
            os.rename(*args.rename)
        signal.setitimer(signal.ITIMER_REAL, 0)
        print("swapped", flush=True)
        return


if __name__ == "__main__":
    main()
