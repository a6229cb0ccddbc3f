// See include/granary_limits.h.
#define _GNU_SOURCE
#include "granary_limits.h"
#include <assert.h>
#include <pthread.h>

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct granary_account {
    _Atomic int64_t time_limit;  // ns; 0: none (grows with the bytes a copy charges to it)
    _Atomic int64_t spent;       // ns inside SQLite calls of every budget charged to it, calls finished, and copies
    _Atomic int64_t references;
};

struct granary_budget {
    granary_account *account;    // NULL: none (one reference held)
    int64_t time_limit;          // ns; 0: none
    int64_t memory_limit;        // bytes; 0: none
    _Atomic int64_t memory_used;
    _Atomic int64_t memory_peak;
    _Atomic int64_t references;  // the owner's, plus one per live allocation
    _Atomic int exceeded;
    // Used only by the thread that has the budget entered (one connection, one thread).
    int64_t spent;               // ns inside SQLite, calls finished
    int64_t entered_at;          // ns; 0 when not inside a call
    int depth;
    int64_t busy_timeout;        // ns a statement waits for another connection's lock
    int64_t busy_waited;         // ns waited so far for the current lock
};

// The coarse monotonic clock: read from the vDSO in a few ns (it is read around every call and
// from the progress handler); its resolution of a few ms is plenty for budgets of seconds.
static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void release_account(granary_account *account) {
    if (account == NULL) return;
    int64_t before = atomic_fetch_sub(&account->references, 1);
    assert(before >= 1);  // a reference released once more than taken
    if (before == 1) free(account);
}

static void unreference(granary_budget *budget) {
    int64_t before = atomic_fetch_sub(&budget->references, 1);
    assert(before >= 1);
    if (before == 1) {
        // The last reference: every block charged to it was freed, and its bytes taken off.
        assert(atomic_load(&budget->memory_used) == 0);
        release_account(budget->account);
        free(budget);
    }
}

// ---- The allocator wrapper -------------------------------------------------------------------
//
// Each block carries a 16-byte header (keeping SQLite's 8-byte alignment and malloc's 16) that
// names the budget it is charged to, so a block freed or resized on another thread, or after
// its connection's calls, is taken off the right account.

enum { HEADER = 16 };
static sqlite3_mem_methods base;
static int installed;
static _Thread_local granary_budget *current;

static granary_budget **header_of(void *block) { return (granary_budget **)((char *)block - HEADER); }

static int over(granary_budget *budget, int64_t more) {
    if (budget == NULL || budget->memory_limit <= 0 || more <= 0) return 0;
    if (atomic_load(&budget->memory_used) + more <= budget->memory_limit) return 0;
    atomic_fetch_or(&budget->exceeded, CONTENT_BUDGET_MEMORY);
    return 1;
}

static void charge(granary_budget *budget, int64_t bytes) {
    int64_t used = atomic_fetch_add(&budget->memory_used, bytes) + bytes;
    int64_t peak = atomic_load(&budget->memory_peak);
    while (used > peak && !atomic_compare_exchange_weak(&budget->memory_peak, &peak, used)) {}
}

static void *wrapped_malloc(int n) {
    granary_budget *budget = current;
    if (n < 0 || n > 0x7fffffff - 2 * HEADER) return NULL;
    if (over(budget, base.xRoundup(n + HEADER))) return NULL;
    char *block = base.xMalloc(n + HEADER);
    if (block == NULL) return NULL;
    *(granary_budget **)block = budget;
    if (budget != NULL) {
        atomic_fetch_add(&budget->references, 1);
        charge(budget, base.xSize(block));
    }
    return block + HEADER;
}

static void wrapped_free(void *pointer) {
    if (pointer == NULL) return;
    assert(installed);  // a block of the wrapper's, so the wrapper is in place
    char *block = (char *)pointer - HEADER;
    granary_budget *budget = *(granary_budget **)block;
    int size = budget != NULL ? base.xSize(block) : 0;
    base.xFree(block);
    if (budget != NULL) {
        int64_t before = atomic_fetch_sub(&budget->memory_used, size);
        assert(before >= size);
        (void)before;
        unreference(budget);
    }
}

static void *wrapped_realloc(void *pointer, int n) {
    if (pointer == NULL) return wrapped_malloc(n);
    if (n < 0 || n > 0x7fffffff - 2 * HEADER) return NULL;
    char *block = (char *)pointer - HEADER;
    granary_budget *budget = *header_of(pointer);
    int before = base.xSize(block);
    if (over(budget, (int64_t)base.xRoundup(n + HEADER) - before)) return NULL;
    char *moved = base.xRealloc(block, n + HEADER);
    if (moved == NULL) return NULL;
    if (budget != NULL) charge(budget, (int64_t)base.xSize(moved) - before);
    return moved + HEADER;
}

static int wrapped_size(void *pointer) { return pointer ? base.xSize((char *)pointer - HEADER) - HEADER : 0; }
static int wrapped_roundup(int n) { return base.xRoundup(n + HEADER) - HEADER; }
static int wrapped_init(void *unused) { (void)unused; return base.xInit(base.pAppData); }
static void wrapped_shutdown(void *unused) { (void)unused; base.xShutdown(base.pAppData); }

static pthread_once_t install_once = PTHREAD_ONCE_INIT;

// ---- Sleeping ---------------------------------------------------------------------------------

// What SQLite may still sleep on this thread, in ns (-1: no bound; granary_sleep_allowance_set).
static _Thread_local int64_t sleep_left = -1;
static int (*real_sleep)(sqlite3_vfs *, int);

// Takes up to `ns` from the thread's allowance: what may be slept now.
static int64_t take_sleep(int64_t ns) {
    if (sleep_left < 0) return ns;
    if (ns > sleep_left) ns = sleep_left;
    sleep_left -= ns;
    return ns;
}

// The default VFS's xSleep, within the thread's allowance. SQLite sleeps here between its tries
// to begin a read on a WAL store (walTryBeginRead: about 10 s in all before SQLITE_PROTOCOL) and
// in its default busy handler; a store's owner controls both (its -shm, its locks).
static int bounded_sleep(sqlite3_vfs *vfs, int microseconds) {
    int64_t ns = take_sleep((int64_t)microseconds * 1000);
    if (ns <= 0) return 0;
    return real_sleep(vfs, (int)(ns / 1000));
}

int64_t granary_sleep_allowance_set(int64_t ns) {
    int64_t before = sleep_left;
    sleep_left = ns < 0 ? -1 : ns;
    return before;
}

int granary_sleep_bounded(void) { return real_sleep != NULL; }

static void install(void) {
    if (sqlite3_config(SQLITE_CONFIG_GETMALLOC, &base) != SQLITE_OK || base.xMalloc == NULL) return;
    static sqlite3_mem_methods wrapped;
    wrapped = (sqlite3_mem_methods){
        wrapped_malloc, wrapped_free, wrapped_realloc, wrapped_size, wrapped_roundup, wrapped_init, wrapped_shutdown, NULL,
    };
    installed = sqlite3_config(SQLITE_CONFIG_MALLOC, &wrapped) == SQLITE_OK;
    // The allocator is configured: the default VFS may be looked up now (it initialises SQLite).
    // Its xSleep is replaced before any connection exists (the granary-tee VFS copies it later).
    sqlite3_vfs *vfs = sqlite3_vfs_find(0);
    if (vfs != NULL && vfs->xSleep != NULL) {
        real_sleep = vfs->xSleep;
        vfs->xSleep = bounded_sleep;
    }
}

// Called by the executable at start, before anything initialises SQLite (sqlite3_config refuses
// after): never from a load-time constructor, so that a program embedding GranaryKit decides.
int granary_limits_install(void) {
    pthread_once(&install_once, install);
    return installed;
}

int granary_limits_memory_enforced(void) { return installed; }

// ---- Budgets ----------------------------------------------------------------------------------

granary_budget *granary_budget_create(int64_t time_ns, int64_t memory) {
    granary_budget *budget = calloc(1, sizeof *budget);
    if (budget == NULL) return NULL;
    budget->time_limit = time_ns > 0 ? time_ns : 0;
    budget->memory_limit = memory > 0 ? memory : 0;
    atomic_store(&budget->references, 1);
    return budget;
}

void granary_budget_release(granary_budget *budget) {
    if (budget != NULL) unreference(budget);
}

void granary_budget_set_time(granary_budget *budget, int64_t time_ns) {
    if (budget != NULL) budget->time_limit = time_ns > 0 ? time_ns : 0;
}

int64_t granary_database_size(sqlite3 *db) {
    sqlite3_file *file = NULL;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &file) != SQLITE_OK || file == NULL || file->pMethods == NULL) return 0;
    sqlite3_int64 size = 0;
    if (file->pMethods->xFileSize(file, &size) != SQLITE_OK) return 0;
    return size;
}

granary_account *granary_account_create(int64_t time_ns) {
    granary_account *account = calloc(1, sizeof *account);
    if (account == NULL) return NULL;
    account->time_limit = time_ns > 0 ? time_ns : 0;
    atomic_store(&account->references, 1);
    return account;
}

void granary_account_release(granary_account *account) { release_account(account); }

int64_t granary_account_spent(const granary_account *account) {
    return account != NULL ? atomic_load(&((granary_account *)account)->spent) : 0;
}

int64_t granary_account_limit(const granary_account *account) {
    return account != NULL ? atomic_load(&((granary_account *)account)->time_limit) : 0;
}

void granary_account_charge(granary_account *account, int64_t ns) {
    if (account != NULL && ns > 0) atomic_fetch_add(&account->spent, ns);
}

void granary_account_extend(granary_account *account, int64_t ns) {
    if (account == NULL || ns <= 0) return;
    int64_t limit = atomic_load(&account->time_limit);
    // An account without a limit keeps none.
    while (limit > 0 && !atomic_compare_exchange_weak(&account->time_limit, &limit, limit + ns)) {}
}

void granary_budget_set_account(granary_budget *budget, granary_account *account) {
    if (budget == NULL || account == NULL || budget->account != NULL) return;
    atomic_fetch_add(&account->references, 1);
    budget->account = account;
}

static int progress(void *context) {
    granary_budget *budget = context;
    if (budget->entered_at == 0) return 0;
    int64_t running = now_ns() - budget->entered_at;
    if (budget->time_limit > 0 && budget->spent + running > budget->time_limit) {
        atomic_fetch_or(&budget->exceeded, CONTENT_BUDGET_TIME);
        return 1;
    }
    // The account: what the user's stores have spent together (a store that is over its own
    // budget is named for that first).
    granary_account *account = budget->account;
    if (account != NULL && account->time_limit > 0 && atomic_load(&account->spent) + running > account->time_limit) {
        atomic_fetch_or(&budget->exceeded, CONTENT_BUDGET_ACCOUNT);
        return 1;
    }
    return 0;
}

void granary_budget_watch(granary_budget *budget, sqlite3 *db, int instructions) {
    if (budget == NULL) return;
    if (budget->time_limit > 0 || (budget->account != NULL && budget->account->time_limit > 0)) {
        sqlite3_progress_handler(db, instructions, progress, budget);
    }
}

#include <errno.h>

static int (*_Atomic interrupted)(void);

void granary_limits_set_interruption(int (*check)(void)) { atomic_store(&interrupted, check); }

static int is_interrupted(void) {
    int (*check)(void) = atomic_load(&interrupted);
    return check != NULL && check();
}

// SQLite's own busy timeout, with the time slept left out of the budget: a store whose owner
// holds its lock is busy, not expensive (the wait has its own bound, the busy timeout). It
// gives up at once when the run has been asked to stop (a user can hold their own store's lock
// forever: an interrupted run must not wait out the whole timeout).
static int busy(void *context, int count) {
    static const int delays[] = {1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100};  // ms, as SQLite's
    granary_budget *budget = context;
    if (is_interrupted()) return 0;
    if (count == 0) budget->busy_waited = 0;
    int64_t delay = (int64_t)(count < 12 ? delays[count] : 100) * 1000000;
    int64_t left = budget->busy_timeout - budget->busy_waited;
    if (left <= 0) return 0;
    if (delay > left) delay = left;
    delay = take_sleep(delay);
    if (delay <= 0) return 0;  // the thread's allowance is spent
    struct timespec pause = {delay / 1000000000, delay % 1000000000};
    while (nanosleep(&pause, &pause) != 0 && errno == EINTR) {}
    budget->busy_waited += delay;
    if (budget->entered_at != 0) budget->entered_at += delay;
    return is_interrupted() ? 0 : 1;
}

void granary_budget_busy_timeout(granary_budget *budget, sqlite3 *db, int milliseconds) {
    if (budget == NULL) {
        sqlite3_busy_timeout(db, milliseconds);
        return;
    }
    budget->busy_timeout = (int64_t)milliseconds * 1000000;
    sqlite3_busy_handler(db, milliseconds > 0 ? busy : NULL, budget);
}

granary_budget *granary_budget_enter(granary_budget *budget) {
    granary_budget *previous = current;
    current = budget;
    if (budget != NULL && budget->depth++ == 0) budget->entered_at = now_ns();
    return previous;
}

void granary_budget_leave(granary_budget *budget, granary_budget *previous) {
    if (budget != NULL && --budget->depth == 0) {
        int64_t elapsed = now_ns() - budget->entered_at;
        budget->spent += elapsed;
        budget->entered_at = 0;
        if (budget->account != NULL) atomic_fetch_add(&budget->account->spent, elapsed);
    }
    current = previous;
}

int granary_budget_exceeded(const granary_budget *budget) { return atomic_load(&budget->exceeded); }
int64_t granary_budget_memory_used(const granary_budget *budget) { return atomic_load(&budget->memory_used); }
int64_t granary_budget_memory_peak(const granary_budget *budget) { return atomic_load(&budget->memory_peak); }
int64_t granary_budget_time_spent(const granary_budget *budget) {
    return budget->spent + (budget->entered_at ? now_ns() - budget->entered_at : 0);
}
