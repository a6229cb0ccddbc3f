#ifndef GRANARY_LIMITS_H
#define GRANARY_LIMITS_H
// Bounds on the work SQLite does for one connection on content granary does not control: a
// time budget (checked from SQLite's progress handler) and a memory ceiling (an account in a
// wrapper around SQLite's allocator). See Sources/GranaryKit/SQLite/ContentLimits.swift.
//
// Why an allocator wrapper and not sqlite3_hard_heap_limit64: the hard heap limit is one
// number for the whole process. With `backup --jobs N`, a hostile store would use it up and the
// honest stores checked beside it would fail with SQLITE_NOMEM, blamed on them. The wrapper
// charges each allocation to the budget of the connection that made it (the budget is "entered"
// on the calling thread around every call into SQLite on that connection; each connection is
// used by one thread at a time), so each connection has a ceiling of its own, whatever runs
// beside it.
#include <stdint.h>
#include <sqlite3.h>

typedef struct granary_budget granary_budget;
// A time account several budgets share: one user's checks across all its stores (a budget per
// connection alone would let a user with many stores spend many budgets).
typedef struct granary_account granary_account;

// What a budget ran into (a bit set).
#define CONTENT_BUDGET_TIME 1
#define CONTENT_BUDGET_MEMORY 2
// The time of the account the budget is charged to (granary_budget_set_account).
#define CONTENT_BUDGET_ACCOUNT 4

// Wraps SQLite's allocator so that each budget's memory ceiling is enforced: a process-wide
// install, made once by the executable at start, before anything initialises SQLite
// (sqlite3_config refuses after; GranaryKit's ProcessSetup.install() calls it first). Once;
// thread-safe. 1 when the wrapper is installed, 0 otherwise.
int granary_limits_install(void);

// 1 when granary_limits_install() installed the allocator wrapper, so that memory ceilings are
// enforced; 0 otherwise.
int granary_limits_memory_enforced(void);

// Bounds what SQLite sleeps on the calling thread from now on to `ns` nanoseconds in all (-1: no
// bound): its waits between tries to begin a read on a WAL store whose -shm its owner controls
// (about 10 s before SQLITE_PROTOCOL otherwise), its default busy handler and the budgets' busy
// handler. Once spent, SQLite tries again at once instead of sleeping, and gives up as it would at
// the end of its waits. Returns the allowance it replaces (restore it after). Works once
// granary_limits_install() ran (granary_sleep_bounded()).
int64_t granary_sleep_allowance_set(int64_t ns);
int granary_sleep_bounded(void);

// A budget of `time_ns` nanoseconds of work inside SQLite calls (0: none) and `memory` bytes
// of SQLite heap (0: none). The caller holds one reference; allocations charged to the budget
// hold one each, so it outlives the connection until its last allocation is freed.
granary_budget *granary_budget_create(int64_t time_ns, int64_t memory);
void granary_budget_release(granary_budget *budget);

// An account of `time_ns` nanoseconds (0: none) for the budgets charged to it; the caller holds
// one reference, each budget charged to it one more.
granary_account *granary_account_create(int64_t time_ns);
void granary_account_release(granary_account *account);
// Nanoseconds spent inside SQLite calls on every budget charged to the account (calls finished).
int64_t granary_account_spent(const granary_account *account);
// The account's time now, in ns (0: none): what it was made with, plus every extension.
int64_t granary_account_limit(const granary_account *account);
// Charges `ns` spent outside SQLite to the account (a copy of the user's bytes).
void granary_account_charge(granary_account *account, int64_t ns);
// Adds `ns` to the account's time, unless it has none (the time a copy of a given size is allowed).
void granary_account_extend(granary_account *account, int64_t ns);
// Charges the budget's time to `account` as well (before granary_budget_watch; once): a
// statement stops when either the budget's own time or the account's is spent.
void granary_budget_set_account(granary_budget *budget, granary_account *account);

// Sets the budget's time, once the connection is open and its store's size known.
void granary_budget_set_time(granary_budget *budget, int64_t time_ns);

// The size of the main database file of `db` as SQLite's open file reports it (0 when unknown):
// no second lookup of the file by its path.
int64_t granary_database_size(sqlite3 *db);

// Installs the progress handler that stops a statement of `db` (SQLITE_INTERRUPT) once the
// budget's time is spent; it runs every `instructions` virtual-machine instructions.
void granary_budget_watch(granary_budget *budget, sqlite3 *db, int instructions);

// SQLite's busy timeout for `db`, with the time slept waiting for another connection's lock
// not counted against the budget (a store whose owner holds it is busy, not expensive).
void granary_budget_busy_timeout(granary_budget *budget, sqlite3 *db, int milliseconds);

// The check the busy handler makes before and after each wait: nonzero stops waiting (the run
// was interrupted by a signal), and the statement fails with SQLITE_BUSY.
void granary_limits_set_interruption(int (*check)(void));

// Around each call into SQLite on the budget's connection: charges the calling thread's SQLite
// allocations to the budget and counts the time until `leave`. `enter` returns what was
// current before; `leave` puts it back. Nested enters of one budget count the time once.
granary_budget *granary_budget_enter(granary_budget *budget);
void granary_budget_leave(granary_budget *budget, granary_budget *previous);

// CONTENT_BUDGET_TIME and/or CONTENT_BUDGET_MEMORY when the budget ran into them; 0 otherwise.
int granary_budget_exceeded(const granary_budget *budget);
// Bytes currently charged, the most ever charged, and the nanoseconds spent inside SQLite.
int64_t granary_budget_memory_used(const granary_budget *budget);
int64_t granary_budget_memory_peak(const granary_budget *budget);
int64_t granary_budget_time_spent(const granary_budget *budget);
#endif
