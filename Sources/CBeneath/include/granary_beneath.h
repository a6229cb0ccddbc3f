#ifndef GRANARY_BENEATH_H
#define GRANARY_BENEATH_H
// The C half of granary's trust boundary (the Swift half is Sources/GranaryKit/Users/Folder.swift).
//
// granary runs as root over folders that their owners control. Inside such a folder nothing is
// ever reached by a path name: every name is resolved beneath an open descriptor of its folder,
// one component at a time, refusing symbolic links, magic links and mount crossings
// (openat2(2) with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
// RESOLVE_NO_XDEV), and the call is made with the folder owner's file-system credentials
// (setfsuid(2)/setfsgid(2) and no supplementary groups, on the calling thread only), so the
// kernel refuses whatever the owner could not do, and what granary creates there belongs to the
// owner by construction.
//
// SQLite opens its files by name (the database, then "<name>-wal", "<name>-shm",
// "<name>-journal"). So that it, too, opens them beneath a folder's descriptor, granary registers
// the folder and gives SQLite a name of the form "/.granary-beneath/<token>/<file>"; SQLite's
// unix VFS makes its path-based system calls through a table that granary_beneath_install()
// points at functions which resolve such names beneath the registered descriptor with the rules
// above, check what they opened (a regular file, one link, owned by the folder's owner) and pass
// every other name through unchanged. Nothing on SQLite's read and write paths is changed.
#include <stdint.h>
#include <sys/types.h>

// Per-thread credentials. enter() switches the calling thread to the file-system uid and gid of
// an owner with no supplementary groups and returns 1, or returns 0 when there is nothing to
// switch (not running as root, or the owner is root), or -1 with errno. leave() undoes enter().
int granary_creds_enter(uid_t uid, gid_t gid);
void granary_creds_leave(int entered);

// openat2(2) beneath `dirfd` with the resolve flags above; O_NOFOLLOW and O_CLOEXEC are added.
// -1 with errno on failure (ELOOP: a symbolic link; EXDEV: a mount point or an escape).
int granary_open_beneath(int dirfd, const char *name, int flags, mode_t mode);

// Links the open file `fd` into `dirfd` as `name` (linkat(2) through /proc/self/fd, following
// that magic link only): the very inode that was opened and checked, whatever its name is now.
int granary_link_descriptor(int fd, int dirfd, const char *name);

// renameat2(2) with flags (0, 1 = RENAME_NOREPLACE, 2 = RENAME_EXCHANGE).
int granary_renameat2(int olddirfd, const char *oldname, int newdirfd, const char *newname, unsigned flags);

// Installs the system-call overrides into SQLite's unix VFS: a process-wide install, made once
// by the executable at start (GranaryKit's ProcessSetup.install()), after
// granary_limits_install() since it initialises SQLite. Once; thread-safe. SQLITE_OK or an
// SQLite error code.
int granary_beneath_install(void);

// 1 when granary_beneath_install() succeeded: SQLite opens names beneath registered folders.
int granary_beneath_installed(void);

// Registers a folder for SQLite: its descriptor (duplicated: the caller keeps its own), the uid
// and gid every file opened in it must belong to (and whose credentials the opens use; uid 0
// with `check_owner` 0 for granary's own folders), and whether to check the owner. Returns a
// token >= 0, or -1 when the table is full. The name SQLite is given is
// "/.granary-beneath/<token>/<file>".
int granary_beneath_register(int dirfd, uid_t uid, gid_t gid, int check_owner);
void granary_beneath_unregister(int token);

// Why the calling thread's last open of a registered name was refused (empty when none):
// "Local.sqlite-wal: has 2 hard links", … Cleared by granary_beneath_clear_refusal().
const char *granary_beneath_refusal(void);
void granary_beneath_clear_refusal(void);
#endif
