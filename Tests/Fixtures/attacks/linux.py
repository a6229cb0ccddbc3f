"""System calls Python's standard library does not wrap: renameat2(2) and inotify(7).

The attack helpers run as an unprivileged user against granary (running as root); they need
an atomic exchange of two names and to learn, within microseconds, when granary touches a file.
"""
import ctypes
import ctypes.util
import os
import signal
import struct

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)

def unblock_signals():
    """Unblocks every signal: a parent may have started us with some blocked (Foundation's
    Process on Linux does), and then SIGTERM would never reach our handlers."""
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
_SYS_RENAMEAT2 = 316  # x86_64
if os.uname().machine in ("aarch64", "arm64"):
    _SYS_RENAMEAT2 = 276


def renameat2(old, new, flags=0, olddir=AT_FDCWD, newdir=AT_FDCWD):
    """renameat2(2); raises OSError."""
    rc = _libc.syscall(_SYS_RENAMEAT2, olddir, os.fsencode(old), newdir, os.fsencode(new), flags)
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), old)


def exchange(a, b):
    """Swaps two names atomically (RENAME_EXCHANGE): both must exist."""
    renameat2(a, b, RENAME_EXCHANGE)


IN_ACCESS = 0x001
IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_CLOSE_NOWRITE = 0x010
IN_OPEN = 0x020
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_ALL_EVENTS = 0xFFF

EVENTS = {
    "ACCESS": IN_ACCESS, "MODIFY": IN_MODIFY, "ATTRIB": IN_ATTRIB, "CLOSE_WRITE": IN_CLOSE_WRITE,
    "CLOSE_NOWRITE": IN_CLOSE_NOWRITE, "OPEN": IN_OPEN, "MOVED_FROM": IN_MOVED_FROM,
    "MOVED_TO": IN_MOVED_TO, "CREATE": IN_CREATE, "DELETE": IN_DELETE,
}


class Inotify:
    """A blocking inotify instance: watch(folder) then events() yields (wd, mask, name)."""

    def __init__(self):
        self.fd = _libc.inotify_init1(os.O_CLOEXEC)
        if self.fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), "inotify_init1")
        self.folders = {}

    def watch(self, folder, mask=IN_ALL_EVENTS):
        wd = _libc.inotify_add_watch(self.fd, os.fsencode(folder), mask)
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), folder)
        self.folders[wd] = folder
        return wd

    def events(self):
        while True:
            data = os.read(self.fd, 65536)
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, length = struct.unpack_from("iIII", data, offset)
                raw = data[offset + 16: offset + 16 + length].rstrip(b"\0")
                offset += 16 + length
                yield wd, mask, os.fsdecode(raw)
