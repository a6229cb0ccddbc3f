"""Flips two names back and forth with renameat2(RENAME_EXCHANGE) until stopped.

    flip.py A B

Prints "ready", then exchanges A and B as fast as it can; on SIGTERM it puts them back in their
first order, prints "flips N" and exits.
"""
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import linux  # noqa: E402

stop = False


def main():
    linux.unblock_signals()
    a, b = sys.argv[1], sys.argv[2]

    def request_stop(*_):
        global stop
        stop = True

    signal.signal(signal.SIGTERM, request_stop)
    print("ready", flush=True)
    flips = 0
    while not stop:
        linux.exchange(a, b)
        flips += 1
    if flips % 2:
        linux.exchange(a, b)
    print("flips %d" % flips, flush=True)


if __name__ == "__main__":
    main()
