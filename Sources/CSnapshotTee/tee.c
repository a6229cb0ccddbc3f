#include "granary_tee.h"
#include <pthread.h>
#include <fcntl.h>
#include <assert.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

// Read-ahead: TEE_SLOTS blocks of TEE_BLOCK bytes (1 MiB in all).
#define TEE_BLOCK (64 << 10)
#define TEE_SLOTS 16

// Mapped pages: TEE_MAPS windows of TEE_MAP_WINDOW bytes (2 MiB in all) mapped at most.
#define TEE_MAP_WINDOW (256 << 10)
#define TEE_MAPS 8

typedef struct TeeMap {
    sqlite3_int64 start;          // -1: nothing mapped
    unsigned char *addr;
    size_t length;
    int refs;                     // pages SQLite holds from this window
    unsigned used;                // last use, for eviction
} TeeMap;

typedef struct TeeFile {
    sqlite3_file base;            // pMethods = &tee_io_methods
    granary_tee_track *track;     // NULL: plain pass-through
    granary_tee_track own;        // the track of a file that only gathers writes (FCNTL_COMBINE)
    sqlite3_file *real;           // the wrapped file, in the same allocation, after this struct
    // Write combining (tracked files and FCNTL_COMBINE ones): consecutive writes beyond page 1 gather here and reach
    // the file as one write of up to 64 KiB, instead of one system call per page.
    unsigned char *wbuf;
    sqlite3_int64 wstart;
    int wlen;
    // Read-ahead (SNAPSHOT_TEE_FCNTL_READAHEAD, for a file nothing writes any more): reads are
    // served from a few aligned blocks, each read with one system call. A check walks a b-tree
    // back and forth between neighbouring blocks, so one block would be read again and again.
    unsigned char *rbuf;          // TEE_SLOTS blocks of TEE_BLOCK bytes
    sqlite3_int64 rstart[TEE_SLOTS];  // -1: slot empty
    unsigned rused[TEE_SLOTS];           // last use, for eviction
    int rrefs[TEE_SLOTS];         // pages SQLite holds in place from the block (live read-ahead)
    int rfetch;                   // 1: xFetch hands out pages in place from the blocks (job 7)
    int rdrop;                    // 1: job 7 is off; the blocks go once SQLite holds none
    unsigned rclock;
    sqlite3_int64 rsize;          // the file's size when read-ahead was turned on
    // Mapped pages (also SNAPSHOT_TEE_FCNTL_READAHEAD; used when the connection's mmap_size is
    // set): SQLite's pager takes pages in place (xFetch) from a few read-only windows instead
    // of copying each page out of the page cache, then out of a read-ahead block. A window
    // stays mapped while SQLite holds a page of it; when every window is held, a fetch returns
    // no page and SQLite reads it through xRead.
    const char *name;             // the file's name, valid until xClose
    int mapfd;                    // -1: no mapped pages
    TeeMap maps[TEE_MAPS];
    unsigned mclock;
    sqlite3_int64 fetched;        // pages SQLite took in place (SNAPSHOT_TEE_FCNTL_FETCHED, tests)
    sqlite3_int64 mmap_limit;     // SQLITE_FCNTL_MMAP_SIZE as SQLite set it (kept here, see there)
    granary_tee_hook *hook;       // NULL: no hook (SNAPSHOT_TEE_FCNTL_HOOK)
    // Discarding (SNAPSHOT_TEE_FCNTL_DISCARD): writes at or beyond `dpage` reach only the hook;
    // `lsize` is the size the file would have, `dreads` the reads that touched a discarded byte.
    int discard;
    sqlite3_int64 dpage;
    sqlite3_int64 lsize;
    sqlite3_int64 dreads;
    // Region 0 of the wal-index as SQLite mapped it (NULL until it has, and after xShmUnmap):
    // SNAPSHOT_TEE_FCNTL_WAL_INDEX_HEADER reads the header there and never maps anything itself.
    void volatile *shm0;
    // 1 while this connection holds a read mark of the wal-index (a WAL read transaction is
    // open): job 7 is turned on only then, a promise of the caller the tee checks.
    int readmark;
} TeeFile;

// Write-combining size: SQLite's unix VFS writes at most 128 KiB in one call (it masks the
// length with 0x1ffff), so gathered writes stay below that.
#define TEE_WBLOCK (64 << 10)
// The wal-index header: two copies of SQLite's 48-byte WalIndexHdr at the start of region 0
// (https://www.sqlite.org/walformat.html, "The WAL-Index Header").
#define TEE_WAL_INDEX_HEADER 96

static sqlite3_vfs tee_vfs;
static sqlite3_vfs *real_vfs;
static int register_rc = SQLITE_ERROR;
static pthread_once_t register_once = PTHREAD_ONCE_INIT;

// The invariants between the jobs of one file, checked on entry to every method in debug builds
// (assert: the debug build is what `make test` runs). Which jobs exclude which: tracking and
// write gathering (1, 2) never with discarding (6); live read-ahead (7) never with tracking,
// discarding or mapped fetch (4).
static void teeCheck(const struct TeeFile *p);

#define REAL(f) (((TeeFile *)(f))->real)
#define TRACK(f) (((TeeFile *)(f))->track)

static int64_t load64(const int64_t *p) { return atomic_load((_Atomic int64_t *)p); }
static void store64(int64_t *p, int64_t v) { atomic_store((_Atomic int64_t *)p, v); }
static void store32(int32_t *p, int32_t v) { atomic_store((_Atomic int32_t *)p, v); }

int64_t granary_tee_high(const granary_tee_track *t) { return load64(&t->high); }
int granary_tee_broken(const granary_tee_track *t) { return atomic_load((_Atomic int32_t *)&t->broken); }
int granary_tee_writes(const granary_tee_track *t) { return atomic_load((_Atomic int32_t *)&t->writes); }
void granary_tee_break(granary_tee_track *t) { store32(&t->broken, 1); }
// Dekker's handshake with sequentially consistent atomics: either the truncating thread sees
// `reading` set and waits, or the follower sees `broken` set and does not map.
int granary_tee_enter(granary_tee_track *t) {
    store32(&t->reading, 1);
    if (granary_tee_broken(t)) {
        granary_tee_leave(t);  // a truncate may already sleep on `reading`
        return 0;
    }
    return 1;
}
// Dekker's handshake again, between `leave` and a truncate waiting for it: either the follower
// sees `waiting` set and wakes the truncate, or the truncate sees `reading` clear and does not
// sleep (FUTEX_WAIT also returns at once when `reading` is no longer 1).
void granary_tee_leave(granary_tee_track *t) {
    store32(&t->reading, 0);
    if (atomic_load((_Atomic int32_t *)&t->waiting)) {
        syscall(SYS_futex, &t->reading, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
}
// Sleeps until the follower has left (`reading` 0).
static void teeWaitForFollower(granary_tee_track *t) {
    store32(&t->waiting, 1);
    while (atomic_load((_Atomic int32_t *)&t->reading)) {
        syscall(SYS_futex, &t->reading, FUTEX_WAIT_PRIVATE, 1, NULL, NULL, 0);
    }
    store32(&t->waiting, 0);
}
void granary_tee_hook_stop(granary_tee_hook *hook) { store32(&hook->stop, 1); }

static void teeCheck(const TeeFile *p) {
    (void)p;
    assert(!(p->track != NULL && p->discard));
    assert(!(p->rfetch && (p->track != NULL || p->discard || p->mapfd >= 0)));
    assert(p->wlen >= 0 && p->wlen <= TEE_WBLOCK);
    assert(p->wlen == 0 || (p->track != NULL && p->wbuf != NULL));
    assert(!p->discard || (p->dpage >= 512 && p->lsize >= 0));
    assert(!p->rfetch || p->rbuf != NULL);
    assert(!p->rdrop || p->rbuf != NULL);
#ifndef NDEBUG
    for (int i = 0; i < TEE_SLOTS; i++) assert(p->rrefs[i] >= 0 && (p->rrefs[i] == 0 || p->rbuf != NULL));
    for (int i = 0; i < TEE_MAPS; i++) assert(p->maps[i].refs >= 0 && (p->maps[i].refs == 0 || p->maps[i].start >= 0));
#endif
}

// Writes what write combining holds, then publishes it.
static int teeFlush(sqlite3_file *f) {
    TeeFile *p = (TeeFile *)f;
    if (p->wlen == 0) return SQLITE_OK;
    // Gathered bytes follow what is published: nothing gathered goes behind `high`.
    assert(p->track != NULL && p->wstart >= p->track->page_size && p->wstart >= load64(&p->track->high));
    int rc = REAL(f)->pMethods->xWrite(REAL(f), p->wbuf, p->wlen, p->wstart);
    sqlite3_int64 end = p->wstart + p->wlen;
    p->wlen = 0;
    if (rc != SQLITE_OK) {
        granary_tee_break(p->track);
    } else {
        store64(&p->track->high, end);
    }
    return rc;
}

static void teeUnmapIdle(TeeFile *p) {
    for (int i = 0; i < TEE_MAPS; i++) {
        if (p->maps[i].start >= 0 && p->maps[i].refs == 0) {
            munmap(p->maps[i].addr, p->maps[i].length);
            p->maps[i].start = -1;
        }
    }
}

static int teeClose(sqlite3_file *f) {
    TeeFile *p = (TeeFile *)f;
    teeCheck(p);
    // SQLite has released every page by now: nothing is held.
    for (int i = 0; i < TEE_MAPS; i++) p->maps[i].refs = 0;
    teeUnmapIdle(p);
    if (p->mapfd >= 0) close(p->mapfd);
    p->mapfd = -1;
    int flushed = teeFlush(f);
    int rc = REAL(f)->pMethods ? REAL(f)->pMethods->xClose(REAL(f)) : SQLITE_OK;
    sqlite3_free(p->wbuf);
    sqlite3_free(p->rbuf);
    p->wbuf = p->rbuf = NULL;
    f->pMethods = NULL;
    return flushed != SQLITE_OK ? flushed : rc;
}
static int teeHeld(const TeeFile *p) {
    for (int i = 0; i < TEE_SLOTS; i++) {
        if (p->rrefs[i] > 0) return 1;
    }
    return 0;
}
static void teeForget(TeeFile *p) {
    for (int i = 0; i < TEE_SLOTS; i++) p->rstart[i] = -1;
}
// Job 7 serves nothing more: the blocks are forgotten, and freed at once unless SQLite still
// holds a page of them (then by the last xUnfetch, or with the file). Returns 1 when one is held.
static int teeStopServing(TeeFile *p) {
    teeForget(p);
    p->rfetch = 0;
    p->rsize = 0;
    if (teeHeld(p)) {
        p->rdrop = 1;
        return 1;
    }
    sqlite3_free(p->rbuf);
    p->rbuf = NULL;
    return 0;
}
// The slot of the block that holds bytes [o, o + n), read into an empty slot or else into the
// least recently used one that SQLite holds no page of; -1 when the bytes span two blocks, when
// every slot is held, or when the read fails (the caller then reads without the blocks).
static int teeBlock(sqlite3_file *f, sqlite3_int64 o, int n) {
    TeeFile *p = (TeeFile *)f;
    sqlite3_int64 block = o / TEE_BLOCK * TEE_BLOCK;
    if (o + n > block + TEE_BLOCK) return -1;
    int slot = -1;
    for (int i = 0; i < TEE_SLOTS && slot < 0; i++) {
        if (p->rstart[i] == block) slot = i;
    }
    if (slot < 0) {
        for (int i = 0; i < TEE_SLOTS; i++) {
            if (p->rrefs[i] > 0) continue;
            if (p->rstart[i] < 0) { slot = i; break; }
            if (slot < 0 || p->rused[i] < p->rused[slot]) slot = i;
        }
        if (slot < 0) return -1;
        sqlite3_int64 length = p->rsize - block < TEE_BLOCK ? p->rsize - block : TEE_BLOCK;
        p->rstart[slot] = -1;
        int rc = REAL(f)->pMethods->xRead(REAL(f), p->rbuf + (size_t)slot * TEE_BLOCK, (int)length, block);
        if (rc != SQLITE_OK) return -1;
        p->rstart[slot] = block;
    }
    p->rused[slot] = ++p->rclock;
    return slot;
}
static int teeRead(sqlite3_file *f, void *b, int n, sqlite3_int64 o) {
    TeeFile *p = (TeeFile *)f;
    teeCheck(p);
    int rc = teeFlush(f);
    if (rc != SQLITE_OK) return rc;
    if (p->discard && o + n > p->dpage) {
        if (o >= p->lsize) {
            // Wholly past the end: what a real file gives (zeros, a short read).
            memset(b, 0, (size_t)n);
            return SQLITE_IOERR_SHORT_READ;
        }
        // A discarded byte: SQLite must not go on with bytes this file does not hold.
        p->dreads++;
        return SQLITE_IOERR_READ;
    }
    if (p->rbuf != NULL && o >= 0 && o + n <= p->rsize) {
        int slot = teeBlock(f, o, n);
        if (slot >= 0) {
            sqlite3_int64 block = o / TEE_BLOCK * TEE_BLOCK;
            memcpy(b, p->rbuf + (size_t)slot * TEE_BLOCK + (o - block), (size_t)n);
            return SQLITE_OK;
        }
    }
    return REAL(f)->pMethods->xRead(REAL(f), b, n, o);
}
static int teeWrite(sqlite3_file *f, const void *b, int n, sqlite3_int64 o) {
    TeeFile *p = (TeeFile *)f;
    teeCheck(p);
    granary_tee_track *t = TRACK(f);
    teeForget(p);
    if (p->hook != NULL) p->hook->write(p->hook->context, b, n, o);
    if (p->discard) {
        if (p->hook != NULL && atomic_load((_Atomic int32_t *)&p->hook->stop)) return SQLITE_IOERR_WRITE;
        if (o + n > p->lsize) p->lsize = o + n;
        // Page 1 (SQLite reads it back to update the schema cookie) is written for real.
        if (o >= p->dpage) return SQLITE_OK;
        return REAL(f)->pMethods->xWrite(REAL(f), b, n, o);
    }
    if (t != NULL && p->wbuf != NULL && o >= t->page_size && n <= TEE_WBLOCK) {
        if (p->wlen > 0 && (o != p->wstart + p->wlen || p->wlen + n > TEE_WBLOCK)) {
            int rc = teeFlush(f);
            if (rc != SQLITE_OK) return rc;
        }
        if (p->wlen == 0) {
            // A write that goes behind what is published breaks the order; it is made directly.
            if (o < load64(&t->high)) {
                granary_tee_break(t);
                return REAL(f)->pMethods->xWrite(REAL(f), b, n, o);
            }
            p->wstart = o;
        }
        atomic_fetch_add((_Atomic int32_t *)&t->writes, 1);
        memcpy(p->wbuf + p->wlen, b, (size_t)n);
        p->wlen += n;
        return SQLITE_OK;
    }
    int flushed = teeFlush(f);
    if (flushed != SQLITE_OK) return flushed;
    int rc = REAL(f)->pMethods->xWrite(REAL(f), b, n, o);
    if (t == NULL) return rc;
    atomic_fetch_add((_Atomic int32_t *)&t->writes, 1);
    int64_t end = (int64_t)o + n;
    if (rc != SQLITE_OK) {
        granary_tee_break(t);
    } else if (o < t->page_size) {
        if (end > t->page_size) granary_tee_break(t);
    } else if (o < load64(&t->high)) {
        granary_tee_break(t);
    } else {
        store64(&t->high, end);  // only the writing thread stores; readers load
    }
    return rc;
}
static int teeTruncate(sqlite3_file *f, sqlite3_int64 size) {
    teeCheck((TeeFile *)f);
    assert(size >= 0);
    int rc = teeFlush(f);
    if (rc != SQLITE_OK) return rc;
    teeForget((TeeFile *)f);
    granary_tee_hook *hook = ((TeeFile *)f)->hook;
    if (hook != NULL) hook->truncate(hook->context, size);
    TeeFile *p = (TeeFile *)f;
    if (p->discard) {
        p->lsize = size;
        sqlite3_int64 real = 0;
        int sized = REAL(f)->pMethods->xFileSize(REAL(f), &real);
        if (sized != SQLITE_OK) return sized;
        return size < real ? REAL(f)->pMethods->xTruncate(REAL(f), size) : SQLITE_OK;
    }
    granary_tee_track *t = TRACK(f);
    if (t != NULL && size < load64(&t->high)) {
        granary_tee_break(t);
        teeWaitForFollower(t);
    }
    return REAL(f)->pMethods->xTruncate(REAL(f), size);
}
static int teeSync(sqlite3_file *f, int flags) {
    int rc = teeFlush(f);
    return rc != SQLITE_OK ? rc : REAL(f)->pMethods->xSync(REAL(f), flags);
}
static int teeFileSize(sqlite3_file *f, sqlite3_int64 *s) {
    TeeFile *p = (TeeFile *)f;
    if (p->discard) {
        *s = p->lsize;
        return SQLITE_OK;
    }
    int rc = teeFlush(f);
    return rc != SQLITE_OK ? rc : REAL(f)->pMethods->xFileSize(REAL(f), s);
}
static int teeLock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xLock(REAL(f), l); }
static int teeUnlock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xUnlock(REAL(f), l); }
static int teeCheckReservedLock(sqlite3_file *f, int *r) { return REAL(f)->pMethods->xCheckReservedLock(REAL(f), r); }
// Attaches `t` and starts write combining (without its buffer, writes go one at a time).
static void teeAttach(TeeFile *p, granary_tee_track *t) {
    p->wbuf = sqlite3_malloc(TEE_WBLOCK);
    p->track = t;
}

static int teeFileControl(sqlite3_file *f, int op, void *arg) {
    TeeFile *p = (TeeFile *)f;
    teeCheck(p);
    if (op == SNAPSHOT_TEE_FCNTL_TRACK || op == SNAPSHOT_TEE_FCNTL_COMBINE) {
        if (p->track != NULL || p->discard) return SQLITE_MISUSE;
        if (op == SNAPSHOT_TEE_FCNTL_TRACK) {
            teeAttach(p, (granary_tee_track *)arg);
            return SQLITE_OK;
        }
        p->own.page_size = *(const int64_t *)arg;
        teeAttach(p, &p->own);
        return p->wbuf != NULL ? SQLITE_OK : SQLITE_NOMEM;
    }
    if (op == SNAPSHOT_TEE_FCNTL_FLUSH) return teeFlush(f);
    if (op == SNAPSHOT_TEE_FCNTL_HOOK) {
        if (p->hook != NULL) return SQLITE_MISUSE;
        p->hook = (granary_tee_hook *)arg;
        return SQLITE_OK;
    }
    if (op == SNAPSHOT_TEE_FCNTL_DISCARD) {
        sqlite3_int64 page = *(const int64_t *)arg;
        if (p->track != NULL || p->discard || page < 512) return SQLITE_MISUSE;
        sqlite3_int64 size = 0;
        int rc = REAL(f)->pMethods->xFileSize(REAL(f), &size);
        if (rc != SQLITE_OK) return rc;
        p->discard = 1;
        p->dpage = page;
        p->lsize = size;
        return SQLITE_OK;
    }
    if (op == SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD) {
        if (p->track != NULL || p->discard || p->mapfd >= 0) return SQLITE_MISUSE;
        if (*(const int *)arg == 0) {
            // SQLite releases every page it took in place before its statements end; a block it
            // still holds is not freed under it.
            return teeStopServing(p) ? SQLITE_BUSY : SQLITE_OK;
        }
        if (p->rdrop || teeHeld(p)) return SQLITE_BUSY;
        // The caller's promise: only within a read transaction of a WAL database (the bytes it
        // reads of the database file do not change while it lasts).
        if (!p->readmark) return SQLITE_MISUSE;
        teeForget(p);
        sqlite3_int64 size = 0;
        int rc = REAL(f)->pMethods->xFileSize(REAL(f), &size);
        if (rc != SQLITE_OK) return rc;
        if (p->rbuf == NULL) p->rbuf = sqlite3_malloc(TEE_BLOCK * TEE_SLOTS);
        if (p->rbuf == NULL) return SQLITE_NOMEM;
        p->rsize = size;
        p->rfetch = 1;
        return SQLITE_OK;
    }
    if (op == SNAPSHOT_TEE_FCNTL_WAL_INDEX_HEADER) {
        // Both copies of the header, the first, then a barrier, then the second (a writer writes
        // them in the other order): a header being written reads as two that differ.
        if (p->shm0 == NULL) return SQLITE_NOTFOUND;
        volatile const unsigned char *from = (volatile const unsigned char *)p->shm0;
        unsigned char *to = (unsigned char *)arg;
        for (int i = 0; i < TEE_WAL_INDEX_HEADER / 2; i++) to[i] = from[i];
        REAL(f)->pMethods->xShmBarrier(REAL(f));
        for (int i = TEE_WAL_INDEX_HEADER / 2; i < TEE_WAL_INDEX_HEADER; i++) to[i] = from[i];
        return SQLITE_OK;
    }
    if (op == SNAPSHOT_TEE_FCNTL_DISCARDED_READS) {
        *(sqlite3_int64 *)arg = p->dreads;
        return SQLITE_OK;
    }
    // The mapping size stays with the tee: the real file never maps anything (its xFetch is
    // never called either), so pages in place come only from the tee's own blocks and windows.
    if (op == SQLITE_FCNTL_MMAP_SIZE) {
        sqlite3_int64 want = *(sqlite3_int64 *)arg;
        *(sqlite3_int64 *)arg = p->mmap_limit;
        if (want >= 0) p->mmap_limit = want;
        return SQLITE_OK;
    }
    // A size hint would make the real file grow (with a chunk size set): nothing to do here.
    if (op == SQLITE_FCNTL_SIZE_HINT && p->discard) return SQLITE_OK;
    if (op == SNAPSHOT_TEE_FCNTL_FETCHED) {
        *(sqlite3_int64 *)arg = p->fetched;
        return SQLITE_OK;
    }
    if (op == SNAPSHOT_TEE_FCNTL_READAHEAD) {
        if (p->track != NULL || p->rfetch || p->rdrop || teeHeld(p)) return SQLITE_MISUSE;
        sqlite3_int64 size = 0;
        int rc = REAL(f)->pMethods->xFileSize(REAL(f), &size);
        if (rc != SQLITE_OK) return rc;
        if (p->rbuf == NULL) p->rbuf = sqlite3_malloc(TEE_BLOCK * TEE_SLOTS);
        if (p->rbuf == NULL) return SQLITE_NOMEM;
        p->rsize = size;
        teeForget(p);
        if (p->mapfd < 0 && p->name != NULL) p->mapfd = open(p->name, O_RDONLY | O_CLOEXEC);
        return SQLITE_OK;
    }
    int rc = teeFlush(f);
    return rc != SQLITE_OK ? rc : REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}
static int teeSectorSize(sqlite3_file *f) { return REAL(f)->pMethods->xSectorSize(REAL(f)); }
static int teeDeviceCharacteristics(sqlite3_file *f) { return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f)); }
static int teeShmMap(sqlite3_file *f, int i, int s, int e, void volatile **p) {
    int rc = REAL(f)->pMethods->xShmMap(REAL(f), i, s, e, p);
    if (rc == SQLITE_OK && i == 0 && s >= TEE_WAL_INDEX_HEADER) ((TeeFile *)f)->shm0 = *p;
    return rc;
}
// The wal-index's read-mark locks (WAL_READ_LOCK(0) to (4) in SQLite's wal.c): a reader holds one
// shared for as long as its read transaction lasts.
#define TEE_READ_LOCKS_FIRST 3
#define TEE_READ_LOCKS_END 8
static int teeShmLock(sqlite3_file *f, int o, int n, int fl) {
    TeeFile *p = (TeeFile *)f;
    int rc = REAL(f)->pMethods->xShmLock(REAL(f), o, n, fl);
    int marks = o < TEE_READ_LOCKS_END && o + n > TEE_READ_LOCKS_FIRST;
    if (marks && rc == SQLITE_OK && fl == (SQLITE_SHM_LOCK | SQLITE_SHM_SHARED)) p->readmark = 1;
    if (marks && fl == (SQLITE_SHM_UNLOCK | SQLITE_SHM_SHARED)) p->readmark = 0;
    // The read transaction ended (its read mark released), whether or not the caller turned job 7
    // off first (SQLite ends one itself after an out-of-memory or I/O error): the blocks hold
    // that transaction's bytes, so nothing more is served from them.
    if (p->rfetch && fl == (SQLITE_SHM_UNLOCK | SQLITE_SHM_SHARED) && o < TEE_READ_LOCKS_END &&
        o + n > TEE_READ_LOCKS_FIRST) {
        teeStopServing(p);
    }
    return rc;
}
static void teeShmBarrier(sqlite3_file *f) { REAL(f)->pMethods->xShmBarrier(REAL(f)); }
static int teeShmUnmap(sqlite3_file *f, int d) {
    ((TeeFile *)f)->shm0 = NULL;
    return REAL(f)->pMethods->xShmUnmap(REAL(f), d);
}
// A page in place from a mapped window (a read-ahead file only; no page for any other file, whose
// reads and writes all go through xRead and xWrite).
static int teeFetch(sqlite3_file *f, sqlite3_int64 o, int n, void **pp) {
    TeeFile *p = (TeeFile *)f;
    teeCheck(p);
    *pp = NULL;
    if (p->rfetch && p->rbuf != NULL && o >= 0 && n > 0 && o + n <= p->rsize) {
        int slot = teeBlock(f, o, n);
        if (slot < 0) return SQLITE_OK;
        p->rrefs[slot]++;
        p->fetched++;
        *pp = p->rbuf + (size_t)slot * TEE_BLOCK + (o - o / TEE_BLOCK * TEE_BLOCK);
        return SQLITE_OK;
    }
    if (p->mapfd < 0 || o < 0 || n <= 0 || o + n > p->rsize) return SQLITE_OK;
    sqlite3_int64 start = o / TEE_MAP_WINDOW * TEE_MAP_WINDOW;
    if (o + n > start + TEE_MAP_WINDOW) return SQLITE_OK;
    int slot = -1;
    for (int i = 0; i < TEE_MAPS && slot < 0; i++) {
        if (p->maps[i].start == start) slot = i;
    }
    if (slot < 0) {
        // An empty window, or else the least recently used one that SQLite holds no page of.
        for (int i = 0; i < TEE_MAPS; i++) {
            if (p->maps[i].start < 0) { slot = i; break; }
            if (p->maps[i].refs == 0 && (slot < 0 || p->maps[i].used < p->maps[slot].used)) slot = i;
        }
        if (slot < 0) return SQLITE_OK;
        TeeMap *m = &p->maps[slot];
        if (m->start >= 0) munmap(m->addr, m->length);
        m->start = -1;
        size_t length = (size_t)(p->rsize - start < TEE_MAP_WINDOW ? p->rsize - start : TEE_MAP_WINDOW);
        // Not populated: only the pages touched are mapped (the kernel maps 64 KiB around each
        // fault). A full integrity_check looks index entries up all over the file, and mapping
        // whole windows for one page each made `granary verify` slower than plain reads.
        void *addr = mmap(NULL, length, PROT_READ, MAP_SHARED, p->mapfd, (off_t)start);
        if (addr == MAP_FAILED) return SQLITE_OK;
        m->addr = addr;
        m->length = length;
        m->start = start;
        m->refs = 0;
    }
    TeeMap *m = &p->maps[slot];
    m->refs++;
    m->used = ++p->mclock;
    p->fetched++;
    *pp = m->addr + (o - start);
    return SQLITE_OK;
}
// SQLite releases a page it fetched (`page`), or, with NULL, asks that nothing stay mapped.
static int teeUnfetch(sqlite3_file *f, sqlite3_int64 o, void *page) {
    (void)o;
    TeeFile *p = (TeeFile *)f;
    if (page == NULL) {
        teeUnmapIdle(p);
        return SQLITE_OK;
    }
    unsigned char *at = (unsigned char *)page;
    if (p->rbuf != NULL && at >= p->rbuf && at < p->rbuf + (size_t)TEE_BLOCK * TEE_SLOTS) {
        int slot = (int)((size_t)(at - p->rbuf) / TEE_BLOCK);
        if (p->rrefs[slot] > 0) p->rrefs[slot]--;
        if (p->rdrop && !teeHeld(p)) {
            sqlite3_free(p->rbuf);
            p->rbuf = NULL;
            p->rdrop = 0;
        }
        return SQLITE_OK;
    }
    for (int i = 0; i < TEE_MAPS; i++) {
        TeeMap *m = &p->maps[i];
        if (m->start >= 0 && (unsigned char *)page >= m->addr && (unsigned char *)page < m->addr + m->length) {
            if (m->refs > 0) m->refs--;
            break;
        }
    }
    return SQLITE_OK;
}

static const sqlite3_io_methods tee_io_methods = {
    3, teeClose, teeRead, teeWrite, teeTruncate, teeSync, teeFileSize, teeLock, teeUnlock,
    teeCheckReservedLock, teeFileControl, teeSectorSize, teeDeviceCharacteristics,
    teeShmMap, teeShmLock, teeShmBarrier, teeShmUnmap, teeFetch, teeUnfetch,
};

static int teeOpen(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *outFlags) {
    (void)vfs;
    TeeFile *p = (TeeFile *)f;
    memset(p, 0, sizeof(TeeFile));
    p->real = (sqlite3_file *)&p[1];
    p->name = name;
    p->mapfd = -1;
    for (int i = 0; i < TEE_MAPS; i++) p->maps[i].start = -1;
    teeForget(p);
    int rc = real_vfs->xOpen(real_vfs, name, p->real, flags, outFlags);
    // SQLite calls xClose only when pMethods is set; the real file sets its own on success.
    p->base.pMethods = p->real->pMethods ? &tee_io_methods : NULL;
    return rc;
}

static void do_register(void) {
    real_vfs = sqlite3_vfs_find(NULL);
    if (real_vfs == NULL) return;
    tee_vfs = *real_vfs;
    tee_vfs.iVersion = real_vfs->iVersion;
    tee_vfs.szOsFile = (int)sizeof(TeeFile) + real_vfs->szOsFile;
    tee_vfs.pNext = NULL;
    tee_vfs.zName = "granary-tee";
    tee_vfs.xOpen = teeOpen;
    register_rc = sqlite3_vfs_register(&tee_vfs, 0);
}

int granary_tee_register(void) {
    pthread_once(&register_once, do_register);
    return register_rc;
}
