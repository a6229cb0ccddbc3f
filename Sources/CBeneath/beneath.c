// See include/granary_beneath.h for what this file is for.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "granary_beneath.h"
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

// ---------------------------------------------------------------------------------------------
// Per-thread credentials.
//
// Linux keeps credentials per thread; glibc's setgroups/setfsuid wrappers either broadcast to
// every thread (setgroups) or not (setfsuid). The raw system calls below change the calling
// thread only, which is what a scoped "act as the owner" needs in a process with other threads
// (zstd workers, the CPU monitor). Changing the fsuid from 0 drops CAP_DAC_OVERRIDE and the other
// file-system capabilities from the thread's effective set; changing it back restores them
// (capabilities(7)), so inside enter()/leave() the kernel checks permissions as the owner.

static gid_t root_groups[64];
static int root_group_count = -1;
static pthread_once_t groups_once = PTHREAD_ONCE_INIT;

static void save_groups(void) {
    int n = getgroups(64, root_groups);
    root_group_count = n < 0 ? 0 : n;
}

int granary_creds_enter(uid_t uid, gid_t gid) {
    if (geteuid() != 0 || uid == 0) return 0;
    pthread_once(&groups_once, save_groups);
    if (syscall(SYS_setgroups, 0, NULL) != 0) return -1;
    syscall(SYS_setfsgid, gid);
    syscall(SYS_setfsuid, uid);
    // setfsuid reports the previous value, never an error: read the current one back.
    if ((uid_t)syscall(SYS_setfsuid, (uid_t)-1) != uid || (gid_t)syscall(SYS_setfsgid, (gid_t)-1) != gid) {
        granary_creds_leave(1);
        errno = EPERM;
        return -1;
    }
    return 1;
}

void granary_creds_leave(int entered) {
    if (entered != 1) return;
    int saved = errno;
    syscall(SYS_setfsuid, 0);
    syscall(SYS_setfsgid, 0);
    syscall(SYS_setgroups, root_group_count, root_groups);
    errno = saved;
}

// ---------------------------------------------------------------------------------------------
// Descriptor-relative calls.

int granary_open_beneath(int dirfd, const char *name, int flags, mode_t mode) {
    struct open_how how;
    memset(&how, 0, sizeof how);
    how.flags = (uint64_t)(flags | O_NOFOLLOW | O_CLOEXEC);
    how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
    long fd;
    do { fd = syscall(SYS_openat2, dirfd, name, &how, sizeof how); } while (fd < 0 && errno == EINTR);
    return (int)fd;
}

int granary_link_descriptor(int fd, int dirfd, const char *name) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    return linkat(AT_FDCWD, path, dirfd, name, AT_SYMLINK_FOLLOW);
}

int granary_renameat2(int olddirfd, const char *oldname, int newdirfd, const char *newname, unsigned flags) {
    return (int)syscall(SYS_renameat2, olddirfd, oldname, newdirfd, newname, flags);
}

// ---------------------------------------------------------------------------------------------
// SQLite.

#define PREFIX "/.granary-beneath"
#define PREFIX_LEN (sizeof(PREFIX) - 1)
#define SLOTS 1024

typedef struct Slot {
    int used;
    int fd;
    uid_t uid;
    gid_t gid;
    int check_owner;
} Slot;

static Slot slots[SLOTS];
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread char refusal[512];

typedef int (*open_fn)(const char *, int, int);
typedef int (*access_fn)(const char *, int);
typedef int (*stat_fn)(const char *, struct stat *);
typedef int (*unlink_fn)(const char *);
typedef int (*mkdir_fn)(const char *, mode_t);
typedef ssize_t (*readlink_fn)(const char *, char *, size_t);

static open_fn real_open;
static access_fn real_access;
static stat_fn real_stat, real_lstat;
static unlink_fn real_unlink, real_rmdir;
static mkdir_fn real_mkdir;
static readlink_fn real_readlink;

const char *granary_beneath_refusal(void) { return refusal; }
void granary_beneath_clear_refusal(void) { refusal[0] = 0; }

// 1 once install() replaced SQLite's system calls (granary_beneath_installed).
static _Atomic int installed;

static void refuse(const char *name, const char *why) {
    snprintf(refusal, sizeof refusal, "%s: %s", name, why);
}

int granary_beneath_register(int dirfd, uid_t uid, gid_t gid, int check_owner) {
    assert(atomic_load(&installed));  // ProcessSetup.install() first: SQLite would not look here
    int copy = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
    if (copy < 0) return -1;
    pthread_mutex_lock(&slots_lock);
    for (int i = 0; i < SLOTS; i++) {
        if (!slots[i].used) {
            slots[i] = (Slot){1, copy, uid, gid, check_owner};
            pthread_mutex_unlock(&slots_lock);
            return i;
        }
    }
    pthread_mutex_unlock(&slots_lock);
    close(copy);
    errno = EMFILE;
    return -1;
}

void granary_beneath_unregister(int token) {
    assert(token >= 0 && token < SLOTS);  // only a token granary_beneath_register gave
    if (token < 0 || token >= SLOTS) return;
    pthread_mutex_lock(&slots_lock);
    assert(slots[token].used);  // unregistered once
    int fd = slots[token].used ? slots[token].fd : -1;
    slots[token].used = 0;
    pthread_mutex_unlock(&slots_lock);
    if (fd >= 0) close(fd);
}

// Whether `path` is one of ours; fills the slot and the file name ("" for the folder itself).
// 1: ours, 0: not ours, -1: ours but malformed (errno set).
static int lookup(const char *path, Slot *slot, const char **name) {
    if (strncmp(path, PREFIX, PREFIX_LEN) != 0) return 0;
    const char *p = path + PREFIX_LEN;
    if (*p == 0) {  // the prefix folder itself (SQLite's path canonicalisation lstat()s it)
        *name = 0;
        return 1;
    }
    if (*p != '/') return 0;
    p++;
    char *end;
    long token = strtol(p, &end, 10);
    if (end == p || token < 0 || token >= SLOTS || (*end != 0 && *end != '/')) {
        errno = ENOENT;
        return -1;
    }
    pthread_mutex_lock(&slots_lock);
    *slot = slots[token];
    pthread_mutex_unlock(&slots_lock);
    if (!slot->used) {
        errno = ENOENT;
        return -1;
    }
    *name = *end == '/' ? end + 1 : "";
    if (strchr(*name, '/') != 0 || strcmp(*name, ".") == 0 || strcmp(*name, "..") == 0) {
        errno = ENOENT;
        return -1;
    }
    return 1;
}

static int beneath_open(const char *path, int flags, int mode) {
    Slot slot;
    const char *name;
    int ours = lookup(path, &slot, &name);
    if (ours == 0) return real_open(path, flags, mode);
    if (ours < 0) return -1;
    if (name == 0) {
        errno = ENOENT;
        return -1;
    }
    if (*name == 0) {  // the folder itself: SQLite opens it to fsync it
        return fcntl(slot.fd, F_DUPFD_CLOEXEC, 3);
    }
    int creds = granary_creds_enter(slot.uid, slot.gid);
    if (creds < 0) return -1;
    int fd = granary_open_beneath(slot.fd, name, flags | O_NONBLOCK, (mode_t)mode);
    int saved = errno;
    granary_creds_leave(creds);
    if (fd < 0) {
        if (saved == ELOOP) refuse(name, "is a symbolic link");
        else if (saved == EXDEV) refuse(name, "is a mount point");
        else if (saved == EACCES || saved == EPERM) refuse(name, "cannot be opened with its folder owner's permissions");
        errno = saved;
        return -1;
    }
    struct stat info;
    const char *why = 0;
    if (fstat(fd, &info) != 0) why = "cannot be examined";
    else if (!S_ISREG(info.st_mode)) why = S_ISFIFO(info.st_mode) ? "is a FIFO, not a regular file"
        : S_ISDIR(info.st_mode) ? "is a folder, not a regular file" : "is a device or socket, not a regular file";
    else if (info.st_nlink != 1) why = "has more than one hard link";
    else if (slot.check_owner && info.st_uid != slot.uid) why = "is not owned by its folder's owner";
    if (why) {
        refuse(name, why);
        close(fd);
        errno = EPERM;
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

static int beneath_stat_common(const char *path, struct stat *buf, stat_fn real, int refuse_links) {
    Slot slot;
    const char *name;
    int ours = lookup(path, &slot, &name);
    if (ours == 0) return real(path, buf);
    if (ours < 0) return -1;
    if (name == 0) {  // report the prefix as a plain root-owned folder
        memset(buf, 0, sizeof *buf);
        buf->st_mode = S_IFDIR | 0700;
        return 0;
    }
    if (*name == 0) return fstat(slot.fd, buf);
    int creds = granary_creds_enter(slot.uid, slot.gid);
    if (creds < 0) return -1;
    int rc = fstatat(slot.fd, name, buf, AT_SYMLINK_NOFOLLOW);
    int saved = errno;
    granary_creds_leave(creds);
    // SQLite's path canonicalisation lstat()s the database name and would readlink() a link
    // (which fails here): refuse it now, with the reason, as an open would. (Its stat() calls ask
    // whether a -journal or -wal exists: a link does, and the open that follows refuses it.)
    if (rc == 0 && refuse_links && S_ISLNK(buf->st_mode)) {
        refuse(name, "is a symbolic link");
        errno = ELOOP;
        return -1;
    }
    errno = saved;
    return rc;
}

static int beneath_stat(const char *path, struct stat *buf) { return beneath_stat_common(path, buf, real_stat, 0); }
static int beneath_lstat(const char *path, struct stat *buf) { return beneath_stat_common(path, buf, real_lstat, 1); }

static int beneath_access(const char *path, int mode) {
    Slot slot;
    const char *name;
    int ours = lookup(path, &slot, &name);
    if (ours == 0) return real_access(path, mode);
    if (ours < 0) return -1;
    if (name == 0 || *name == 0) return 0;
    int creds = granary_creds_enter(slot.uid, slot.gid);
    if (creds < 0) return -1;
    int rc = faccessat(slot.fd, name, mode, AT_SYMLINK_NOFOLLOW | AT_EACCESS);
    granary_creds_leave(creds);
    return rc;
}

static int beneath_unlink(const char *path) {
    Slot slot;
    const char *name;
    int ours = lookup(path, &slot, &name);
    if (ours == 0) return real_unlink(path);
    if (ours < 0) return -1;
    if (name == 0 || *name == 0) {
        errno = EPERM;
        return -1;
    }
    int creds = granary_creds_enter(slot.uid, slot.gid);
    if (creds < 0) return -1;
    int rc = unlinkat(slot.fd, name, 0);
    granary_creds_leave(creds);
    return rc;
}

// SQLite makes folders only for its dot-file and proxy locking, which granary never uses.
static int beneath_mkdir(const char *path, mode_t mode) {
    if (strncmp(path, PREFIX, PREFIX_LEN) == 0) {
        errno = EPERM;
        return -1;
    }
    return real_mkdir(path, mode);
}

static int beneath_rmdir(const char *path) {
    if (strncmp(path, PREFIX, PREFIX_LEN) == 0) {
        errno = EPERM;
        return -1;
    }
    return real_rmdir(path);
}

// Nothing under the prefix is a link (lstat refuses one); a readlink there is refused.
static ssize_t beneath_readlink(const char *path, char *buf, size_t size) {
    if (strncmp(path, PREFIX, PREFIX_LEN) == 0) {
        errno = EINVAL;
        return -1;
    }
    return real_readlink(path, buf, size);
}

static int install_rc = SQLITE_ERROR;
static pthread_once_t install_once = PTHREAD_ONCE_INIT;

static void install(void) {
    sqlite3_vfs *vfs = sqlite3_vfs_find(0);
    if (!vfs || vfs->iVersion < 3 || !vfs->xSetSystemCall || !vfs->xGetSystemCall) return;
#define TAKE(var, name, type) var = (type)vfs->xGetSystemCall(vfs, name); if (!var) return;
    TAKE(real_open, "open", open_fn)
    TAKE(real_access, "access", access_fn)
    TAKE(real_stat, "stat", stat_fn)
    TAKE(real_lstat, "lstat", stat_fn)
    TAKE(real_unlink, "unlink", unlink_fn)
    TAKE(real_rmdir, "rmdir", unlink_fn)
    TAKE(real_mkdir, "mkdir", mkdir_fn)
    TAKE(real_readlink, "readlink", readlink_fn)
#undef TAKE
#define SET(name, fn) if (vfs->xSetSystemCall(vfs, name, (sqlite3_syscall_ptr)fn) != SQLITE_OK) return;
    SET("open", beneath_open)
    SET("access", beneath_access)
    SET("stat", beneath_stat)
    SET("lstat", beneath_lstat)
    SET("unlink", beneath_unlink)
    SET("rmdir", beneath_rmdir)
    SET("mkdir", beneath_mkdir)
    SET("readlink", beneath_readlink)
#undef SET
    install_rc = SQLITE_OK;
    atomic_store(&installed, 1);
}

int granary_beneath_install(void) {
    pthread_once(&install_once, install);
    return install_rc;
}

int granary_beneath_installed(void) { return atomic_load(&installed); }
