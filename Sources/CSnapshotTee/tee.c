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
// Write-combining size: SQLite's unix VFS writes at most 128 KiB in one call (it masks the
// length with 0x1ffff), so gathered writes stay below that.
#define TEE_WBLOCK (64 << 10)
// The wal-index header: two copies of SQLite's 48-byte WalIndexHdr at the start of region 0
// (https://www.sqlite.org/walformat.html, "The WAL-Index Header").
#define TEE_WAL_INDEX_HEADER 96
// The wal-index's read-mark locks (WAL_READ_LOCK(0) to (4) in SQLite's wal.c): a reader holds one
// shared for as long as its read transaction lasts.
#define TEE_READ_LOCKS_FIRST 3
#define TEE_READ_LOCKS_END 8

// What a file is doing. Each job has a methods table of its own (`tee_methods` below) with only
// the methods the job needs, as SQLite's os_unix.c gives a file one io_methods table per locking
// style: nothing in a method asks which job its file has. A file opens as TEE_PASS (a journal, a
// -wal, a temporary file: no job can start) or TEE_MAIN (the main database file) and changes job
// only in teeBecome, whose list of moves (teeMayBecome) is the one place that says which jobs
// exclude which; a file control asking for any other move returns SQLITE_MISUSE.
typedef enum TeeJob {
    TEE_PASS,            // every call passes through
    TEE_MAIN,            // passes through; watches the wal-index (job 8, and job 7's read mark)
    TEE_RECORD,          // job 5: every write and truncate to the hook, then to the file
    TEE_GATHER,          // jobs 1 and 2 (tracking, write gathering)
    TEE_GATHER_RECORD,   // jobs 1 and 2 after job 5
    TEE_DISCARD,         // job 6
    TEE_DISCARD_RECORD,  // job 6 after job 5
    TEE_READAHEAD,       // jobs 3 and 4 (a finished snapshot being checked)
    TEE_LIVE,            // job 7 on
    TEE_LIVE_DRAIN,      // job 7 turned off while SQLite still holds pages of its blocks
    TEE_JOBS
} TeeJob;

typedef struct TeeMap {
    sqlite3_int64 start;          // -1: nothing mapped
    unsigned char *addr;
    size_t length;
    int refs;                     // pages SQLite holds from this window
    unsigned used;                // last use, for eviction
} TeeMap;

// Read-ahead blocks (jobs 3 and 7): reads are served from a few aligned blocks, each read with
// one system call. A check walks a b-tree back and forth between neighbouring blocks, so one
// block would be read again and again.
typedef struct TeeBlocks {
    unsigned char *buf;           // TEE_SLOTS blocks of TEE_BLOCK bytes
    sqlite3_int64 start[TEE_SLOTS];  // -1: slot empty
    unsigned used[TEE_SLOTS];     // last use, for eviction
    int refs[TEE_SLOTS];          // pages SQLite holds in place from the block (job 7)
    unsigned clock;
    sqlite3_int64 size;           // the file's size when the read-ahead began
} TeeBlocks;

typedef struct TeeFile {
    sqlite3_file base;            // pMethods = &tee_methods[job]
    TeeJob job;
    sqlite3_file *real;           // the wrapped file, in the same allocation, after this struct
    const char *name;             // the file's name, valid until xClose
    sqlite3_int64 fetched;        // pages SQLite took in place (SNAPSHOT_TEE_FCNTL_FETCHED, tests)
    sqlite3_int64 mmap_limit;     // SQLITE_FCNTL_MMAP_SIZE as SQLite set it (kept here, see there)
    sqlite3_int64 dreads;         // reads that touched a discarded byte (job 6)
    granary_tee_hook *hook;       // job 5's hook (TEE_*RECORD), NULL otherwise
    // Region 0 of the wal-index as SQLite mapped it (TEE_MAIN and job 7 only; NULL until SQLite
    // has mapped it, and after xShmUnmap): job 8 reads the header there and never maps anything.
    void volatile *shm0;
    // 1 while this connection holds a read mark of the wal-index (a WAL read transaction is
    // open; TEE_MAIN and job 7 only): job 7 is turned on only then, a promise of the caller the
    // tee checks.
    int readmark;
    // What only one job uses; what another job would leave behind cannot be seen by the next.
    union {
        // Jobs 1 and 2: consecutive writes beyond page 1 gather in `wbuf` and reach the file as
        // one write of up to 64 KiB, instead of one system call per page.
        struct {
            granary_tee_track *track;  // the caller's (FCNTL_TRACK) or `own` (FCNTL_COMBINE)
            granary_tee_track own;
            unsigned char *wbuf;       // NULL: writes go one at a time (no memory for it)
            sqlite3_int64 wstart;
            int wlen;
        } gather;
        // Job 6: writes at or beyond `dpage` reach only the hook; `lsize` is the size the file
        // would have.
        struct {
            sqlite3_int64 dpage;
            sqlite3_int64 lsize;
        } discard;
        // Jobs 3 and 4: the blocks, and SQLite's pages in place from a few read-only windows of
        // the file (used when the connection's mmap_size is set) instead of copying each page out
        // of the page cache, then out of a block. A window stays mapped while SQLite holds a page
        // of it; when every window is held, a fetch returns no page and SQLite reads it through
        // xRead.
        struct {
            TeeBlocks blocks;
            int mapfd;                 // -1: no mapped pages
            TeeMap maps[TEE_MAPS];
            unsigned mclock;
        } readahead;
        // Job 7 (and its draining): the blocks, pages in place handed out of them.
        TeeBlocks live;
    } u;
} TeeFile;

static sqlite3_vfs tee_vfs;
static sqlite3_vfs *real_vfs;
static int register_rc = SQLITE_ERROR;
static pthread_once_t register_once = PTHREAD_ONCE_INIT;
static const sqlite3_io_methods tee_methods[TEE_JOBS];

#define REAL(f) (((TeeFile *)(f))->real)

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

// ---------------------------------------------------------------------------------------------
// The invariants of each job, checked on entry to its methods in debug builds (assert: the debug
// build is what `make test` runs).

static void blocksCheck(const TeeBlocks *b, int held) {
    (void)b;
    (void)held;
    assert(b->buf != NULL && b->size >= 0);
#ifndef NDEBUG
    for (int i = 0; i < TEE_SLOTS; i++) assert(b->refs[i] >= 0 && (held || b->refs[i] == 0));
#endif
}

static void teeCheck(const TeeFile *p) {
    (void)p;
    assert(p->job >= TEE_PASS && p->job < TEE_JOBS && p->base.pMethods == &tee_methods[p->job]);
    // The hook belongs to job 5, the wal-index watch to TEE_MAIN and job 7.
    assert((p->hook != NULL) == (p->job == TEE_RECORD || p->job == TEE_GATHER_RECORD || p->job == TEE_DISCARD_RECORD));
    assert(p->job == TEE_MAIN || p->job == TEE_LIVE || p->job == TEE_LIVE_DRAIN || (p->shm0 == NULL && !p->readmark));
    switch (p->job) {
    case TEE_GATHER:
    case TEE_GATHER_RECORD:
        assert(p->u.gather.track != NULL && p->u.gather.track->page_size >= 512);
        assert(p->u.gather.wlen >= 0 && p->u.gather.wlen <= TEE_WBLOCK);
        assert(p->u.gather.wlen == 0 || p->u.gather.wbuf != NULL);
        break;
    case TEE_DISCARD:
    case TEE_DISCARD_RECORD:
        assert(p->u.discard.dpage >= 512 && p->u.discard.lsize >= 0);
        break;
    case TEE_READAHEAD:
        blocksCheck(&p->u.readahead.blocks, 0);
#ifndef NDEBUG
        for (int i = 0; i < TEE_MAPS; i++) {
            const TeeMap *m = &p->u.readahead.maps[i];
            assert(m->refs >= 0 && (m->refs == 0 || m->start >= 0));
            assert(m->start < 0 || p->u.readahead.mapfd >= 0);
        }
#endif
        break;
    case TEE_LIVE:
        // Only within a read transaction: serving stops when its read mark is released.
        assert(p->readmark);
        blocksCheck(&p->u.live, 1);
        break;
    case TEE_LIVE_DRAIN:
        // Serves nothing: every block is forgotten, and one is still held (else it is TEE_MAIN).
        blocksCheck(&p->u.live, 1);
#ifndef NDEBUG
        {
            int held = 0;
            for (int i = 0; i < TEE_SLOTS; i++) {
                assert(p->u.live.start[i] < 0);
                held |= p->u.live.refs[i] > 0;
            }
            assert(held);
        }
#endif
        break;
    default:
        break;
    }
}

// Which job may follow which: the one place that says which jobs exclude which. Write gathering
// and discarding (1-2, 6) never together, nor with a read-ahead (3-4, 7); the hook (5) only before
// gathering or discarding starts; the read-aheads only on a file no other job had.
static int teeMayBecome(TeeJob from, TeeJob to) {
    switch (from) {
    case TEE_MAIN:
        return to == TEE_RECORD || to == TEE_GATHER || to == TEE_DISCARD || to == TEE_READAHEAD || to == TEE_LIVE;
    case TEE_RECORD:
        return to == TEE_GATHER_RECORD || to == TEE_DISCARD_RECORD;
    case TEE_LIVE:
        return to == TEE_MAIN || to == TEE_LIVE_DRAIN;
    case TEE_LIVE_DRAIN:
        return to == TEE_MAIN;
    default:
        return 0;
    }
}

// Moves `p` to job `to` (whose fields the caller sets right after); a job that leaves the watch of
// the wal-index forgets what it saw.
static void teeBecome(TeeFile *p, TeeJob to) {
    assert(teeMayBecome(p->job, to));
    if (to != TEE_MAIN && to != TEE_LIVE && to != TEE_LIVE_DRAIN) {
        p->shm0 = NULL;
        p->readmark = 0;
    }
    p->job = to;
    p->base.pMethods = &tee_methods[to];
}

// ---------------------------------------------------------------------------------------------
// Pass-through: the methods no job changes.

// Closes the real file (after the job let go of what it held).
static int realClose(sqlite3_file *f) {
    int rc = REAL(f)->pMethods ? REAL(f)->pMethods->xClose(REAL(f)) : SQLITE_OK;
    f->pMethods = NULL;
    return rc;
}
static int passClose(sqlite3_file *f) {
    teeCheck((TeeFile *)f);
    return realClose(f);
}
static int passRead(sqlite3_file *f, void *b, int n, sqlite3_int64 o) { return REAL(f)->pMethods->xRead(REAL(f), b, n, o); }
static int passWrite(sqlite3_file *f, const void *b, int n, sqlite3_int64 o) {
    return REAL(f)->pMethods->xWrite(REAL(f), b, n, o);
}
static int passTruncate(sqlite3_file *f, sqlite3_int64 size) { return REAL(f)->pMethods->xTruncate(REAL(f), size); }
static int passSync(sqlite3_file *f, int flags) { return REAL(f)->pMethods->xSync(REAL(f), flags); }
static int passFileSize(sqlite3_file *f, sqlite3_int64 *s) { return REAL(f)->pMethods->xFileSize(REAL(f), s); }
static int passLock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xLock(REAL(f), l); }
static int passUnlock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xUnlock(REAL(f), l); }
static int passCheckReservedLock(sqlite3_file *f, int *r) { return REAL(f)->pMethods->xCheckReservedLock(REAL(f), r); }
static int passSectorSize(sqlite3_file *f) { return REAL(f)->pMethods->xSectorSize(REAL(f)); }
static int passDeviceCharacteristics(sqlite3_file *f) { return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f)); }
static int passShmMap(sqlite3_file *f, int i, int s, int e, void volatile **p) {
    return REAL(f)->pMethods->xShmMap(REAL(f), i, s, e, p);
}
static int passShmLock(sqlite3_file *f, int o, int n, int fl) { return REAL(f)->pMethods->xShmLock(REAL(f), o, n, fl); }
static void passShmBarrier(sqlite3_file *f) { REAL(f)->pMethods->xShmBarrier(REAL(f)); }
static int passShmUnmap(sqlite3_file *f, int d) { return REAL(f)->pMethods->xShmUnmap(REAL(f), d); }
// No page in place: the real file never maps anything (SQLITE_FCNTL_MMAP_SIZE stays with the
// tee), and SQLite reads the page through xRead.
static int noFetch(sqlite3_file *f, sqlite3_int64 o, int n, void **pp) {
    (void)f;
    (void)o;
    (void)n;
    *pp = NULL;
    return SQLITE_OK;
}
static int noUnfetch(sqlite3_file *f, sqlite3_int64 o, void *page) {
    (void)f;
    (void)o;
    assert(page == NULL);
    return SQLITE_OK;
}
// A write to a file only read (jobs 3, 4 and 7 are for read-only connections): SQLite never makes
// one; were it to, it fails rather than leave the blocks behind the file.
static int readOnlyWrite(sqlite3_file *f, const void *b, int n, sqlite3_int64 o) {
    (void)f;
    (void)b;
    (void)n;
    (void)o;
    assert(!"a write to a file being read ahead");
    return SQLITE_READONLY;
}
static int readOnlyTruncate(sqlite3_file *f, sqlite3_int64 size) {
    (void)f;
    (void)size;
    assert(!"a truncate of a file being read ahead");
    return SQLITE_READONLY;
}

// ---------------------------------------------------------------------------------------------
// The wal-index watch (TEE_MAIN and job 7): region 0 as SQLite maps it (job 8) and the read mark.

static int watchShmMap(sqlite3_file *f, int i, int s, int e, void volatile **p) {
    int rc = REAL(f)->pMethods->xShmMap(REAL(f), i, s, e, p);
    if (rc == SQLITE_OK && i == 0 && s >= TEE_WAL_INDEX_HEADER) ((TeeFile *)f)->shm0 = *p;
    return rc;
}
static int watchShmUnmap(sqlite3_file *f, int d) {
    ((TeeFile *)f)->shm0 = NULL;
    return REAL(f)->pMethods->xShmUnmap(REAL(f), d);
}
// Whether a lock call takes or releases a read mark: 1 taken, -1 released, 0 neither.
static int readMarkChange(int o, int n, int fl) {
    if (o >= TEE_READ_LOCKS_END || o + n <= TEE_READ_LOCKS_FIRST) return 0;
    if (fl == (SQLITE_SHM_LOCK | SQLITE_SHM_SHARED)) return 1;
    if (fl == (SQLITE_SHM_UNLOCK | SQLITE_SHM_SHARED)) return -1;
    return 0;
}
static int watchShmLock(sqlite3_file *f, int o, int n, int fl) {
    TeeFile *p = (TeeFile *)f;
    int rc = REAL(f)->pMethods->xShmLock(REAL(f), o, n, fl);
    int change = readMarkChange(o, n, fl);
    if (change > 0 && rc == SQLITE_OK) p->readmark = 1;
    if (change < 0) p->readmark = 0;
    return rc;
}
static int teeWalIndexHeader(TeeFile *p, unsigned char *to) {
    // Both copies of the header, the first, then a barrier, then the second (a writer writes
    // them in the other order): a header being written reads as two that differ.
    if (p->shm0 == NULL) return SQLITE_NOTFOUND;
    volatile const unsigned char *from = (volatile const unsigned char *)p->shm0;
    for (int i = 0; i < TEE_WAL_INDEX_HEADER / 2; i++) to[i] = from[i];
    REAL(p)->pMethods->xShmBarrier(REAL(p));
    for (int i = TEE_WAL_INDEX_HEADER / 2; i < TEE_WAL_INDEX_HEADER; i++) to[i] = from[i];
    return SQLITE_OK;
}

// ---------------------------------------------------------------------------------------------
// Jobs 1 and 2: tracking and write gathering.

// Writes what gathering holds, then publishes it.
static int gatherFlush(TeeFile *p) {
    if (p->u.gather.wlen == 0) return SQLITE_OK;
    granary_tee_track *t = p->u.gather.track;
    // Gathered bytes follow what is published: nothing gathered goes behind `high`.
    assert(p->u.gather.wstart >= t->page_size && p->u.gather.wstart >= load64(&t->high));
    int rc = REAL(p)->pMethods->xWrite(REAL(p), p->u.gather.wbuf, p->u.gather.wlen, p->u.gather.wstart);
    sqlite3_int64 end = p->u.gather.wstart + p->u.gather.wlen;
    p->u.gather.wlen = 0;
    if (rc != SQLITE_OK) {
        granary_tee_break(t);
    } else {
        store64(&t->high, end);
    }
    return rc;
}
static int gatherClose(sqlite3_file *f) {
    TeeFile *p = (TeeFile *)f;
    teeCheck(p);
    int flushed = gatherFlush(p);
    int rc = realClose(f);
    sqlite3_free(p->u.gather.wbuf);
    p->u.gather.wbuf = NULL;
    return flushed != SQLITE_OK ? flushed : rc;
}
static int gatherRead(sqlite3_file *f, void *b, int n, sqlite3_int64 o) {
    teeCheck((TeeFile *)f);
    int rc = gatherFlush((TeeFile *)f);
    return rc != SQLITE_OK ? rc : passRead(f, b, n, o);
}
static int gatherWrite(sqlite3_file *f, const void *b, int n, sqlite3_int64 o) {
    TeeFile *p = (TeeFile *)f;
    teeCheck(p);
    granary_tee_track *t = p->u.gather.track;
    if (p->u.gather.wbuf != NULL && o >= t->page_size && n <= TEE_WBLOCK) {
        if (p->u.gather.wlen > 0 &&
            (o != p->u.gather.wstart + p->u.gather.wlen || p->u.gather.wlen + n > TEE_WBLOCK)) {
            int rc = gatherFlush(p);
            if (rc != SQLITE_OK) return rc;
        }
        if (p->u.gather.wlen == 0) {
            // A write that goes behind what is published breaks the order; it is made directly.
            if (o < load64(&t->high)) {
                granary_tee_break(t);
                return passWrite(f, b, n, o);
            }
            p->u.gather.wstart = o;
        }
        atomic_fetch_add((_Atomic int32_t *)&t->writes, 1);
        memcpy(p->u.gather.wbuf + p->u.gather.wlen, b, (size_t)n);
        p->u.gather.wlen += n;
        return SQLITE_OK;
    }
    int flushed = gatherFlush(p);
    if (flushed != SQLITE_OK) return flushed;
    int rc = passWrite(f, b, n, o);
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
static int gatherTruncate(sqlite3_file *f, sqlite3_int64 size) {
    TeeFile *p = (TeeFile *)f;
    teeCheck(p);
    assert(size >= 0);
    int rc = gatherFlush(p);
    if (rc != SQLITE_OK) return rc;
    granary_tee_track *t = p->u.gather.track;
    if (size < load64(&t->high)) {
        granary_tee_break(t);
        teeWaitForFollower(t);
    }
    return passTruncate(f, size);
}
static int gatherSync(sqlite3_file *f, int flags) {
    teeCheck((TeeFile *)f);
    int rc = gatherFlush((TeeFile *)f);
    return rc != SQLITE_OK ? rc : passSync(f, flags);
}
static int gatherFileSize(sqlite3_file *f, sqlite3_int64 *s) {
    teeCheck((TeeFile *)f);
    int rc = gatherFlush((TeeFile *)f);
    return rc != SQLITE_OK ? rc : passFileSize(f, s);
}

// ---------------------------------------------------------------------------------------------
// Job 5: the hook, before the job's own write or truncate (none, gathering, or discarding).

static void hookWrite(TeeFile *p, const void *b, int n, sqlite3_int64 o) {
    teeCheck(p);
    p->hook->write(p->hook->context, b, n, o);
}
static void hookTruncate(TeeFile *p, sqlite3_int64 size) {
    teeCheck(p);
    p->hook->truncate(p->hook->context, size);
}
static int recordWrite(sqlite3_file *f, const void *b, int n, sqlite3_int64 o) {
    hookWrite((TeeFile *)f, b, n, o);
    return passWrite(f, b, n, o);
}
static int recordTruncate(sqlite3_file *f, sqlite3_int64 size) {
    hookTruncate((TeeFile *)f, size);
    return passTruncate(f, size);
}
static int gatherRecordWrite(sqlite3_file *f, const void *b, int n, sqlite3_int64 o) {
    hookWrite((TeeFile *)f, b, n, o);
    return gatherWrite(f, b, n, o);
}
static int gatherRecordTruncate(sqlite3_file *f, sqlite3_int64 size) {
    // What gathering holds reaches the file first: the hook saw those writes before this.
    int rc = gatherFlush((TeeFile *)f);
    if (rc != SQLITE_OK) return rc;
    hookTruncate((TeeFile *)f, size);
    return gatherTruncate(f, size);
}

// ---------------------------------------------------------------------------------------------
// Job 6: discarding.

static int discardRead(sqlite3_file *f, void *b, int n, sqlite3_int64 o) {
    TeeFile *p = (TeeFile *)f;
    teeCheck(p);
    if (o + n > p->u.discard.dpage) {
        if (o >= p->u.discard.lsize) {
            // Wholly past the end: what a real file gives (zeros, a short read).
            memset(b, 0, (size_t)n);
            return SQLITE_IOERR_SHORT_READ;
        }
        // A discarded byte: SQLite must not go on with bytes this file does not hold.
        p->dreads++;
        return SQLITE_IOERR_READ;
    }
    return passRead(f, b, n, o);
}
static int discardWrite(sqlite3_file *f, const void *b, int n, sqlite3_int64 o) {
    TeeFile *p = (TeeFile *)f;
    teeCheck(p);
    if (o + n > p->u.discard.lsize) p->u.discard.lsize = o + n;
    // Page 1 (SQLite reads it back to update the schema cookie) is written for real.
    if (o >= p->u.discard.dpage) return SQLITE_OK;
    return passWrite(f, b, n, o);
}
static int discardTruncate(sqlite3_file *f, sqlite3_int64 size) {
    TeeFile *p = (TeeFile *)f;
    teeCheck(p);
    assert(size >= 0);
    p->u.discard.lsize = size;
    sqlite3_int64 real = 0;
    int sized = passFileSize(f, &real);
    if (sized != SQLITE_OK) return sized;
    return size < real ? passTruncate(f, size) : SQLITE_OK;
}
static int discardFileSize(sqlite3_file *f, sqlite3_int64 *s) {
    teeCheck((TeeFile *)f);
    *s = ((TeeFile *)f)->u.discard.lsize;
    return SQLITE_OK;
}
static int discardRecordWrite(sqlite3_file *f, const void *b, int n, sqlite3_int64 o) {
    TeeFile *p = (TeeFile *)f;
    hookWrite(p, b, n, o);
    if (atomic_load((_Atomic int32_t *)&p->hook->stop)) return SQLITE_IOERR_WRITE;
    return discardWrite(f, b, n, o);
}
static int discardRecordTruncate(sqlite3_file *f, sqlite3_int64 size) {
    hookTruncate((TeeFile *)f, size);
    return discardTruncate(f, size);
}

// ---------------------------------------------------------------------------------------------
// The blocks of jobs 3 and 7.

static int blocksStart(TeeFile *p, TeeBlocks *b) {
    sqlite3_int64 size = 0;
    int rc = passFileSize((sqlite3_file *)p, &size);
    if (rc != SQLITE_OK) return rc;
    unsigned char *buf = b->buf != NULL ? b->buf : sqlite3_malloc(TEE_BLOCK * TEE_SLOTS);
    if (buf == NULL) return SQLITE_NOMEM;
    memset(b, 0, sizeof(*b));
    b->buf = buf;
    b->size = size;
    for (int i = 0; i < TEE_SLOTS; i++) b->start[i] = -1;
    return SQLITE_OK;
}
static void blocksForget(TeeBlocks *b) {
    for (int i = 0; i < TEE_SLOTS; i++) b->start[i] = -1;
}
static int blocksHeld(const TeeBlocks *b) {
    for (int i = 0; i < TEE_SLOTS; i++) {
        if (b->refs[i] > 0) return 1;
    }
    return 0;
}
// The slot of the block that holds bytes [o, o + n), read into an empty slot or else into the
// least recently used one that SQLite holds no page of; -1 when the bytes are not within the
// file's size, when they span two blocks, when every slot is held, or when the read fails (the
// caller then reads without the blocks).
static int blocksSlot(TeeFile *p, TeeBlocks *b, sqlite3_int64 o, int n) {
    if (o < 0 || n <= 0 || o + n > b->size) return -1;
    sqlite3_int64 block = o / TEE_BLOCK * TEE_BLOCK;
    if (o + n > block + TEE_BLOCK) return -1;
    int slot = -1;
    for (int i = 0; i < TEE_SLOTS && slot < 0; i++) {
        if (b->start[i] == block) slot = i;
    }
    if (slot < 0) {
        for (int i = 0; i < TEE_SLOTS; i++) {
            if (b->refs[i] > 0) continue;
            if (b->start[i] < 0) { slot = i; break; }
            if (slot < 0 || b->used[i] < b->used[slot]) slot = i;
        }
        if (slot < 0) return -1;
        sqlite3_int64 length = b->size - block < TEE_BLOCK ? b->size - block : TEE_BLOCK;
        b->start[slot] = -1;
        int rc = passRead((sqlite3_file *)p, b->buf + (size_t)slot * TEE_BLOCK, (int)length, block);
        if (rc != SQLITE_OK) return -1;
        b->start[slot] = block;
    }
    b->used[slot] = ++b->clock;
    return slot;
}
static int blocksRead(TeeFile *p, TeeBlocks *b, void *to, int n, sqlite3_int64 o) {
    int slot = blocksSlot(p, b, o, n);
    if (slot < 0) return passRead((sqlite3_file *)p, to, n, o);
    memcpy(to, b->buf + (size_t)slot * TEE_BLOCK + (o - o / TEE_BLOCK * TEE_BLOCK), (size_t)n);
    return SQLITE_OK;
}

// ---------------------------------------------------------------------------------------------
// Jobs 3 and 4: a finished snapshot being checked.

static void readaheadUnmapIdle(TeeFile *p) {
    for (int i = 0; i < TEE_MAPS; i++) {
        TeeMap *m = &p->u.readahead.maps[i];
        if (m->start >= 0 && m->refs == 0) {
            munmap(m->addr, m->length);
            m->start = -1;
        }
    }
}
static int readaheadClose(sqlite3_file *f) {
    TeeFile *p = (TeeFile *)f;
    teeCheck(p);
    // SQLite has released every page by now: nothing is held.
    for (int i = 0; i < TEE_MAPS; i++) p->u.readahead.maps[i].refs = 0;
    readaheadUnmapIdle(p);
    if (p->u.readahead.mapfd >= 0) close(p->u.readahead.mapfd);
    p->u.readahead.mapfd = -1;
    sqlite3_free(p->u.readahead.blocks.buf);
    p->u.readahead.blocks.buf = NULL;
    return realClose(f);
}
static int readaheadRead(sqlite3_file *f, void *b, int n, sqlite3_int64 o) {
    TeeFile *p = (TeeFile *)f;
    teeCheck(p);
    return blocksRead(p, &p->u.readahead.blocks, b, n, o);
}
// A page in place from a mapped window.
static int readaheadFetch(sqlite3_file *f, sqlite3_int64 o, int n, void **pp) {
    TeeFile *p = (TeeFile *)f;
    teeCheck(p);
    *pp = NULL;
    sqlite3_int64 size = p->u.readahead.blocks.size;
    if (p->u.readahead.mapfd < 0 || o < 0 || n <= 0 || o + n > size) return SQLITE_OK;
    sqlite3_int64 start = o / TEE_MAP_WINDOW * TEE_MAP_WINDOW;
    if (o + n > start + TEE_MAP_WINDOW) return SQLITE_OK;
    TeeMap *maps = p->u.readahead.maps;
    int slot = -1;
    for (int i = 0; i < TEE_MAPS && slot < 0; i++) {
        if (maps[i].start == start) slot = i;
    }
    if (slot < 0) {
        // An empty window, or else the least recently used one that SQLite holds no page of.
        for (int i = 0; i < TEE_MAPS; i++) {
            if (maps[i].start < 0) { slot = i; break; }
            if (maps[i].refs == 0 && (slot < 0 || maps[i].used < maps[slot].used)) slot = i;
        }
        if (slot < 0) return SQLITE_OK;
        TeeMap *m = &maps[slot];
        if (m->start >= 0) munmap(m->addr, m->length);
        m->start = -1;
        size_t length = (size_t)(size - start < TEE_MAP_WINDOW ? size - start : TEE_MAP_WINDOW);
        // Not populated: only the pages touched are mapped (the kernel maps 64 KiB around each
        // fault). A full integrity_check looks index entries up all over the file, and mapping
        // whole windows for one page each made `granary verify` slower than plain reads.
        void *addr = mmap(NULL, length, PROT_READ, MAP_SHARED, p->u.readahead.mapfd, (off_t)start);
        if (addr == MAP_FAILED) return SQLITE_OK;
        m->addr = addr;
        m->length = length;
        m->start = start;
        m->refs = 0;
    }
    TeeMap *m = &maps[slot];
    m->refs++;
    m->used = ++p->u.readahead.mclock;
    p->fetched++;
    *pp = m->addr + (o - start);
    return SQLITE_OK;
}
// SQLite releases a page it fetched (`page`), or, with NULL, asks that nothing stay mapped.
static int readaheadUnfetch(sqlite3_file *f, sqlite3_int64 o, void *page) {
    (void)o;
    TeeFile *p = (TeeFile *)f;
    teeCheck(p);
    if (page == NULL) {
        readaheadUnmapIdle(p);
        return SQLITE_OK;
    }
    for (int i = 0; i < TEE_MAPS; i++) {
        TeeMap *m = &p->u.readahead.maps[i];
        if (m->start >= 0 && (unsigned char *)page >= m->addr && (unsigned char *)page < m->addr + m->length) {
            assert(m->refs > 0);
            if (m->refs > 0) m->refs--;
            return SQLITE_OK;
        }
    }
    assert(!"a page released that no window holds");
    return SQLITE_OK;
}

// ---------------------------------------------------------------------------------------------
// Job 7: live read-ahead, and its draining once turned off.

// Job 7 serves nothing more: the blocks are forgotten, and freed at once unless SQLite still holds
// a page of them (then the file drains: by the last xUnfetch, or with the file). Returns 1 when
// one is held.
static int liveStop(TeeFile *p) {
    assert(p->job == TEE_LIVE);
    blocksForget(&p->u.live);
    p->u.live.size = 0;
    if (blocksHeld(&p->u.live)) {
        teeBecome(p, TEE_LIVE_DRAIN);
        return 1;
    }
    sqlite3_free(p->u.live.buf);
    memset(&p->u, 0, sizeof(p->u));
    teeBecome(p, TEE_MAIN);
    return 0;
}
static int liveClose(sqlite3_file *f) {
    TeeFile *p = (TeeFile *)f;
    teeCheck(p);
    sqlite3_free(p->u.live.buf);
    p->u.live.buf = NULL;
    return realClose(f);
}
static int liveRead(sqlite3_file *f, void *b, int n, sqlite3_int64 o) {
    TeeFile *p = (TeeFile *)f;
    teeCheck(p);
    return blocksRead(p, &p->u.live, b, n, o);
}
// A page in place from a block: the block is not read over until SQLite releases the page.
static int liveFetch(sqlite3_file *f, sqlite3_int64 o, int n, void **pp) {
    TeeFile *p = (TeeFile *)f;
    teeCheck(p);
    *pp = NULL;
    int slot = blocksSlot(p, &p->u.live, o, n);
    if (slot < 0) return SQLITE_OK;
    p->u.live.refs[slot]++;
    p->fetched++;
    *pp = p->u.live.buf + (size_t)slot * TEE_BLOCK + (o - o / TEE_BLOCK * TEE_BLOCK);
    return SQLITE_OK;
}
// SQLite releases a page it took from a block (TEE_LIVE and TEE_LIVE_DRAIN); the last release of
// a draining file frees the blocks.
static int liveUnfetch(sqlite3_file *f, sqlite3_int64 o, void *page) {
    (void)o;
    TeeFile *p = (TeeFile *)f;
    teeCheck(p);
    if (page == NULL) return SQLITE_OK;
    unsigned char *at = (unsigned char *)page;
    assert(at >= p->u.live.buf && at < p->u.live.buf + (size_t)TEE_BLOCK * TEE_SLOTS);
    int slot = (int)((size_t)(at - p->u.live.buf) / TEE_BLOCK);
    assert(p->u.live.refs[slot] > 0);
    if (p->u.live.refs[slot] > 0) p->u.live.refs[slot]--;
    if (p->job == TEE_LIVE_DRAIN && !blocksHeld(&p->u.live)) {
        sqlite3_free(p->u.live.buf);
        memset(&p->u, 0, sizeof(p->u));
        teeBecome(p, TEE_MAIN);
    }
    return SQLITE_OK;
}
// The read transaction ended (its read mark released), whether or not the caller turned job 7 off
// first (SQLite ends one itself after an out-of-memory or I/O error): the blocks hold that
// transaction's bytes, so nothing more is served from them.
static int liveShmLock(sqlite3_file *f, int o, int n, int fl) {
    TeeFile *p = (TeeFile *)f;
    int rc = watchShmLock(f, o, n, fl);
    if (readMarkChange(o, n, fl) < 0) liveStop(p);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// The file controls (every job's): the moves between jobs, and what each reports.

static int teeFileControl(sqlite3_file *f, int op, void *arg) {
    TeeFile *p = (TeeFile *)f;
    teeCheck(p);
    TeeJob job = p->job;
    int gathering = job == TEE_GATHER || job == TEE_GATHER_RECORD;
    int hooked = job == TEE_RECORD;
    switch (op) {
    case SNAPSHOT_TEE_FCNTL_TRACK:
    case SNAPSHOT_TEE_FCNTL_COMBINE: {
        TeeJob to = hooked ? TEE_GATHER_RECORD : TEE_GATHER;
        if (arg == NULL || !teeMayBecome(job, to)) return SQLITE_MISUSE;
        granary_tee_track *t = (granary_tee_track *)arg;
        int64_t page = op == SNAPSHOT_TEE_FCNTL_TRACK ? t->page_size : *(const int64_t *)arg;
        if (page < 512 || page > 65536) return SQLITE_MISUSE;
        unsigned char *wbuf = sqlite3_malloc(TEE_WBLOCK);
        // Without its buffer a tracked file writes one page at a time; a file that only gathers
        // has nothing to do then.
        if (wbuf == NULL && op == SNAPSHOT_TEE_FCNTL_COMBINE) return SQLITE_NOMEM;
        memset(&p->u, 0, sizeof(p->u));
        if (op == SNAPSHOT_TEE_FCNTL_COMBINE) {
            p->u.gather.own.page_size = page;
            t = &p->u.gather.own;
        }
        p->u.gather.track = t;
        p->u.gather.wbuf = wbuf;
        teeBecome(p, to);
        return SQLITE_OK;
    }
    case SNAPSHOT_TEE_FCNTL_FLUSH:
        return gathering ? gatherFlush(p) : SQLITE_OK;
    case SNAPSHOT_TEE_FCNTL_HOOK: {
        granary_tee_hook *hook = (granary_tee_hook *)arg;
        if (hook == NULL || !teeMayBecome(job, TEE_RECORD)) return SQLITE_MISUSE;
        teeBecome(p, TEE_RECORD);
        p->hook = hook;
        return SQLITE_OK;
    }
    case SNAPSHOT_TEE_FCNTL_DISCARD: {
        TeeJob to = hooked ? TEE_DISCARD_RECORD : TEE_DISCARD;
        if (arg == NULL || !teeMayBecome(job, to) || *(const int64_t *)arg < 512) return SQLITE_MISUSE;
        sqlite3_int64 page = *(const int64_t *)arg;
        sqlite3_int64 size = 0;
        int rc = passFileSize(f, &size);
        if (rc != SQLITE_OK) return rc;
        memset(&p->u, 0, sizeof(p->u));
        p->u.discard.dpage = page;
        p->u.discard.lsize = size;
        teeBecome(p, to);
        return SQLITE_OK;
    }
    case SNAPSHOT_TEE_FCNTL_DISCARDED_READS:
        *(sqlite3_int64 *)arg = p->dreads;
        return SQLITE_OK;
    case SNAPSHOT_TEE_FCNTL_READAHEAD: {
        if (!teeMayBecome(job, TEE_READAHEAD)) return SQLITE_MISUSE;
        memset(&p->u, 0, sizeof(p->u));
        int rc = blocksStart(p, &p->u.readahead.blocks);
        if (rc != SQLITE_OK) return rc;
        p->u.readahead.mapfd = p->name != NULL ? open(p->name, O_RDONLY | O_CLOEXEC) : -1;
        for (int i = 0; i < TEE_MAPS; i++) p->u.readahead.maps[i].start = -1;
        teeBecome(p, TEE_READAHEAD);
        return SQLITE_OK;
    }
    case SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD: {
        if (*(const int *)arg == 0) {
            // SQLite releases every page it took in place before its statements end; a block it
            // still holds is not freed under it.
            if (job == TEE_MAIN) return SQLITE_OK;
            if (job == TEE_LIVE_DRAIN) return SQLITE_BUSY;
            if (job != TEE_LIVE) return SQLITE_MISUSE;
            return liveStop(p) ? SQLITE_BUSY : SQLITE_OK;
        }
        if (job == TEE_LIVE_DRAIN || (job == TEE_LIVE && blocksHeld(&p->u.live))) return SQLITE_BUSY;
        if (job != TEE_LIVE && !teeMayBecome(job, TEE_LIVE)) return SQLITE_MISUSE;
        // The caller's promise: only within a read transaction of a WAL database (the bytes it
        // reads of the database file do not change while it lasts).
        if (!p->readmark) return SQLITE_MISUSE;
        if (job == TEE_MAIN) memset(&p->u, 0, sizeof(p->u));
        int rc = blocksStart(p, &p->u.live);
        if (rc != SQLITE_OK) return rc;
        if (job == TEE_MAIN) teeBecome(p, TEE_LIVE);
        return SQLITE_OK;
    }
    case SNAPSHOT_TEE_FCNTL_WAL_INDEX_HEADER:
        if (job != TEE_MAIN && job != TEE_LIVE && job != TEE_LIVE_DRAIN) return SQLITE_NOTFOUND;
        return teeWalIndexHeader(p, (unsigned char *)arg);
    case SNAPSHOT_TEE_FCNTL_FETCHED:
        *(sqlite3_int64 *)arg = p->fetched;
        return SQLITE_OK;
    // The mapping size stays with the tee: the real file never maps anything (its xFetch is
    // never called either), so pages in place come only from the tee's own blocks and windows.
    case SQLITE_FCNTL_MMAP_SIZE: {
        sqlite3_int64 want = *(sqlite3_int64 *)arg;
        *(sqlite3_int64 *)arg = p->mmap_limit;
        if (want >= 0) p->mmap_limit = want;
        return SQLITE_OK;
    }
    // A size hint would make the real file grow (with a chunk size set): nothing to do when
    // discarding.
    case SQLITE_FCNTL_SIZE_HINT:
        if (job == TEE_DISCARD || job == TEE_DISCARD_RECORD) return SQLITE_OK;
        break;
    default:
        break;
    }
    if (gathering) {
        int rc = gatherFlush(p);
        if (rc != SQLITE_OK) return rc;
    }
    return REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}

// ---------------------------------------------------------------------------------------------
// One methods table per job.

#define TEE_METHODS(close, read, write, truncate, sync, fileSize, shmMap, shmLock, shmUnmap, fetch, unfetch) \
    {3, close, read, write, truncate, sync, fileSize, passLock, passUnlock, passCheckReservedLock, teeFileControl, \
     passSectorSize, passDeviceCharacteristics, shmMap, shmLock, passShmBarrier, shmUnmap, fetch, unfetch}

static const sqlite3_io_methods tee_methods[TEE_JOBS] = {
    [TEE_PASS] = TEE_METHODS(passClose, passRead, passWrite, passTruncate, passSync, passFileSize, passShmMap,
                             passShmLock, passShmUnmap, noFetch, noUnfetch),
    [TEE_MAIN] = TEE_METHODS(passClose, passRead, passWrite, passTruncate, passSync, passFileSize, watchShmMap,
                             watchShmLock, watchShmUnmap, noFetch, noUnfetch),
    [TEE_RECORD] = TEE_METHODS(passClose, passRead, recordWrite, recordTruncate, passSync, passFileSize, passShmMap,
                               passShmLock, passShmUnmap, noFetch, noUnfetch),
    [TEE_GATHER] = TEE_METHODS(gatherClose, gatherRead, gatherWrite, gatherTruncate, gatherSync, gatherFileSize,
                               passShmMap, passShmLock, passShmUnmap, noFetch, noUnfetch),
    [TEE_GATHER_RECORD] = TEE_METHODS(gatherClose, gatherRead, gatherRecordWrite, gatherRecordTruncate, gatherSync,
                                      gatherFileSize, passShmMap, passShmLock, passShmUnmap, noFetch, noUnfetch),
    [TEE_DISCARD] = TEE_METHODS(passClose, discardRead, discardWrite, discardTruncate, passSync, discardFileSize,
                                passShmMap, passShmLock, passShmUnmap, noFetch, noUnfetch),
    [TEE_DISCARD_RECORD] = TEE_METHODS(passClose, discardRead, discardRecordWrite, discardRecordTruncate, passSync,
                                       discardFileSize, passShmMap, passShmLock, passShmUnmap, noFetch, noUnfetch),
    [TEE_READAHEAD] = TEE_METHODS(readaheadClose, readaheadRead, readOnlyWrite, readOnlyTruncate, passSync,
                                  passFileSize, passShmMap, passShmLock, passShmUnmap, readaheadFetch,
                                  readaheadUnfetch),
    [TEE_LIVE] = TEE_METHODS(liveClose, liveRead, readOnlyWrite, readOnlyTruncate, passSync, passFileSize,
                             watchShmMap, liveShmLock, watchShmUnmap, liveFetch, liveUnfetch),
    [TEE_LIVE_DRAIN] = TEE_METHODS(liveClose, passRead, readOnlyWrite, readOnlyTruncate, passSync, passFileSize,
                                   watchShmMap, watchShmLock, watchShmUnmap, noFetch, liveUnfetch),
};

// The job is chosen here: the main database file may take one later (teeFileControl); every other
// file the tee opens only passes through.
static int teeOpen(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *outFlags) {
    (void)vfs;
    TeeFile *p = (TeeFile *)f;
    memset(p, 0, sizeof(TeeFile));
    p->real = (sqlite3_file *)&p[1];
    p->name = name;
    p->job = (flags & SQLITE_OPEN_MAIN_DB) ? TEE_MAIN : TEE_PASS;
    int rc = real_vfs->xOpen(real_vfs, name, p->real, flags, outFlags);
    // SQLite calls xClose only when pMethods is set; the real file sets its own on success.
    p->base.pMethods = p->real->pMethods ? &tee_methods[p->job] : NULL;
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
