"""Squats the abstract reopen sockets of another user's stores.

    squat.py (accept|full) LOG CANONICAL_STORE_PATH...

Each socket name is granary's: "granary-reopen/v1/" + hex SHA-256 of the store's canonical path.
accept: listens, accepts every connection, answers nothing and appends what it receives to LOG
(a line "CONNECTED" per connection). full: listens with a backlog of zero and fills it with a
connection of its own, never accepting, so that a blocking connect(2) to it waits forever.
Prints "ready" once every socket is bound.
"""
import hashlib
import os
import select
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import linux  # noqa: E402


def main():
    linux.unblock_signals()
    mode, log, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
    out = open(log, "ab", buffering=0)
    servers = []
    fillers = []
    for path in paths:
        name = "\0granary-reopen/v1/" + hashlib.sha256(os.fsencode(path)).hexdigest()
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(name)
        if mode == "full":
            server.listen(0)
            while True:
                client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                client.setblocking(False)
                try:
                    client.connect(name)
                except BlockingIOError:
                    break
                fillers.append(client)
        else:
            server.listen(16)
        servers.append(server)
    print("ready", flush=True)
    if mode == "full":
        select.select([], [], [])
        return
    clients = []
    while True:
        readable, _, _ = select.select(servers + clients, [], [])
        for sock in readable:
            if sock in servers:
                client, _ = sock.accept()
                clients.append(client)
                out.write(b"CONNECTED\n")
                continue
            data = sock.recv(4096)
            if data:
                out.write(data)
            else:
                clients.remove(sock)
                sock.close()


if __name__ == "__main__":
    main()
