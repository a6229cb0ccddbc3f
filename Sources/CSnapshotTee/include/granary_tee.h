#ifndef GRANARY_TEE_H
#define GRANARY_TEE_H
// "granary-tee": a pass-through SQLite VFS over the default one, used for granary's own scratch
// files (a snapshot being written, then checked) and, read-only, for a user's WAL store during a
// `backup --delta` (job 7). Except a discarding file (job 6), it never changes what is written or
// read; it changes how many system calls that takes and lets another thread follow the copy.
// It has eight jobs, each switched on per file by a file control:
//
// 1. Tracking (SNAPSHOT_TEE_FCNTL_TRACK): publishes how far a snapshot that SQLite's backup API
//    is writing is final, for OverlappedPack's follower (Sources/GranaryKit/FastPath).
//    Invariant: every byte at or beyond `page_size` and below `high` is final while `broken` is
//    0 -- no write has gone behind `high`, none straddled page 1, no truncate cut into it. Page 1
//    is the backup's last write and is read only once the copy is done.
// 2. Write gathering (with tracking, or SNAPSHOT_TEE_FCNTL_COMBINE alone): writes beyond page 1
//    that follow each other reach the file 64 KiB at a time instead of one page per call.
//    Invariant: `high` covers only what has reached the file; SNAPSHOT_TEE_FCNTL_FLUSH (called
//    when the copy is done) writes the rest and reports a full disk, which xClose could not.
// 3. Read-ahead (SNAPSHOT_TEE_FCNTL_READAHEAD, for a finished snapshot being checked): reads come
//    from a few aligned 64 KiB blocks (1 MiB in all). Invariant: only for a file nothing
//    writes any more; the blocks are never invalidated.
// 4. Mapped fetch (with read-ahead, when the connection's mmap_size is above 0): SQLite takes
//    pages in place from at most 8 read-only windows of 256 KiB. Invariant: a window stays
//    mapped while SQLite holds a page of it; when all are held, a fetch returns no page and
//    SQLite reads through job 3.
// 5. A write hook (SNAPSHOT_TEE_FCNTL_HOOK, `backup --delta`): every write and truncate of the
//    file is handed to the caller first, in SQLite's order (PageRecorder hashes the pages).
//    Invariant: the hook sees each write's bytes before job 2 gathers them, never changes them.
//
// 6. Discarding (SNAPSHOT_TEE_FCNTL_DISCARD, `backup --delta` of a WAL store): the hook gets
//    every write, and only page 1 (the bytes below the page size) reaches the file; the file
//    keeps a logical size (xFileSize, xTruncate) as if everything had been written. A read that
//    touches a discarded byte fails with SQLITE_IOERR_READ and is counted: SQLite then fails
//    loudly, never reads wrong bytes. Invariant: nothing reads back a discarded byte unnoticed.
// 7. Live read-ahead (SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD, a user's WAL store opened read-only
//    through the tee for a `backup --delta` without a snapshot file): job 3's blocks, turned on
//    after a read transaction began and off before it ends. With the connection's mmap_size
//    above 0, SQLite's pager takes pages in place from the blocks (xFetch hands out a pointer
//    into one) instead of copying each out of them: a block SQLite holds a page of is not read
//    over until SQLite releases it (xUnfetch), and when every block is held a fetch returns no
//    page and SQLite reads it through xRead. Turned off while SQLite still holds a page, it
//    serves nothing more and says SQLITE_BUSY; the blocks are freed once the last page is
//    released (or with the file). A read transaction that ends while it is on (SQLite releases
//    its read mark, e.g. after an error rolled it back) also ends the serving.
//    Invariant: only within one read transaction of a WAL database, whose database-file bytes
//    that SQLite reads do not change while it lasts (a checkpoint copies no frame past the oldest
//    reader's snapshot, and none while a reader ignores the WAL); SQLite reads the pages it
//    takes from the WAL from the -wal file, never from these blocks. Never a mapping of a
//    user's file: the blocks are memory granary allocated, filled by read(2), and the real
//    file never hears the mapping size (SQLITE_FCNTL_MMAP_SIZE stays with the tee).
// 8. The wal-index header (SNAPSHOT_TEE_FCNTL_WAL_INDEX_HEADER): a copy of the header of the
//    -shm mapping SQLite made, for telling whether anything committed between two moments.
//    Invariant: reads SQLite's own mapping only while SQLite has it mapped; maps nothing.
//
// Each job has its own sqlite3_io_methods table in tee.c, as SQLite's os_unix.c has one per
// locking style: a file opens as the main database file (or, any other file SQLite opens through
// the tee, as a plain pass-through that no file control moves) and a file control moves it to
// another job only along these moves, every other one SQLITE_MISUSE with the file unchanged:
//   none -> 5 (the hook) -> 1+2 or 6; none -> 1+2 (a track, or FCNTL_COMBINE), 6, 3+4 or 7;
//   7 -> none (off; through draining while SQLite still holds a page of its blocks).
// Job 8 is served only while the file has no job but 7.
//
// The follower itself maps the tracked file; `granary_tee_enter`/`leave` below make a truncate
// wait for it, so that it never touches a page a truncate cut off (SIGBUS).
#include <stdint.h>
#include <sqlite3.h>

typedef struct granary_tee_track {
    int64_t page_size;        // set by the caller before the copy starts
    int64_t high;             // atomic: end of the highest write beyond page 1
    int32_t broken;           // atomic: 1 once the order above no longer holds
    int32_t writes;           // atomic: writes seen (tests)
    int32_t reading;          // atomic: 1 while the follower has a mapping of the file (see enter)
    int32_t waiting;          // atomic: 1 while a truncate sleeps until `reading` is 0 (a futex)
} granary_tee_track;

// The file-control opcode that attaches a track to the main database file:
// sqlite3_file_control(db, "main", SNAPSHOT_TEE_FCNTL_TRACK, track).
#define SNAPSHOT_TEE_FCNTL_TRACK 0x47524e01
// Turns on 1 MiB read-ahead for a file that nothing writes any more (a finished snapshot
// being checked): one system call per block instead of one per page. With the connection's
// `PRAGMA mmap_size` above 0, SQLite then takes pages in place from a few read-only mapped
// windows of the file (2 MiB at most) instead, and reads through the read-ahead only when
// every window is held.
#define SNAPSHOT_TEE_FCNTL_READAHEAD 0x47524e02
// Writes what write combining still holds and returns the result (SQLITE_FULL on a full disk):
// called once the copy is done, so that a failure there is not left to xClose, whose result
// SQLite drops.
#define SNAPSHOT_TEE_FCNTL_FLUSH 0x47524e03

// Gathers writes like a tracked file, with a track of its own that nobody follows: for a
// snapshot that is packed after it is written (another compression, a second store). Its
// argument points to the page size, an int64_t.
#define SNAPSHOT_TEE_FCNTL_COMBINE 0x47524e04
// How many pages SQLite has taken in place from mapped windows (an int64_t; for tests).
#define SNAPSHOT_TEE_FCNTL_FETCHED 0x47524e05
// Hands every write SQLite makes to the main file, and every truncate, to a hook (issue 35: the
// page hashes of a snapshot are taken as it is written, not in a second read). The argument is a
// granary_tee_hook *, which must stay valid until the file is closed. The hook sees each write
// before it is gathered (job 2), in the order SQLite makes them: the last write of a byte is
// what the file holds. One hook per file; attaching a second returns SQLITE_MISUSE.
#define SNAPSHOT_TEE_FCNTL_HOOK 0x47524e06
typedef struct granary_tee_hook {
    void *context;
    void (*write)(void *context, const void *bytes, int count, int64_t offset);
    void (*truncate)(void *context, int64_t size);
    int32_t stop;             // atomic: 1 makes every later write of a discarding file fail
    int32_t reserved;
} granary_tee_hook;
// Asks a discarding file (job 6) to fail its next writes with SQLITE_IOERR_WRITE: the copy is
// no longer wanted (any thread may call it).
void granary_tee_hook_stop(granary_tee_hook *hook);

// Discards the file's writes beyond page 1 (job 6). The argument points to the page size, an
// int64_t; call it before anything is written. Writes beyond page 1 then reach only the hook.
#define SNAPSHOT_TEE_FCNTL_DISCARD 0x47524e07
// How many reads touched discarded bytes (an int64_t): non-zero means SQLite's backup needed a
// page the file does not hold, and the copy must be made again without discarding.
#define SNAPSHOT_TEE_FCNTL_DISCARDED_READS 0x47524e08

// Job 7 on (the argument points to an int, 1) or off (0: nothing is served from the blocks any
// more, and they are freed; SQLITE_BUSY while SQLite holds a page of them, which are freed once
// it releases the last one).
#define SNAPSHOT_TEE_FCNTL_LIVE_READAHEAD 0x47524e09

// Job 8: copies the live wal-index header of a WAL database into the argument (96 bytes: both
// copies of the 48-byte header, which are equal unless a writer is writing them), from the mapping
// SQLite made of the -shm file; SQLITE_NOTFOUND while SQLite has none. The header changes with
// every commit (its change counter goes up): the same bytes before and after two connections
// began their read transactions mean both read one state (`backup --delta`'s check beside its
// copy). Read only, never a mapping of its own.
#define SNAPSHOT_TEE_FCNTL_WAL_INDEX_HEADER 0x47524e0a

// Registers the "granary-tee" VFS over the default one (once; not as the default).
// Returns SQLITE_OK or an SQLite error code.
int granary_tee_register(void);

int64_t granary_tee_high(const granary_tee_track *track);
int granary_tee_broken(const granary_tee_track *track);
int granary_tee_writes(const granary_tee_track *track);
void granary_tee_break(granary_tee_track *track);
// The follower reads the file through memory mappings, and touching a mapped page that a
// truncate cut off would kill the process (SIGBUS). It calls `enter` before it maps anything
// and `leave` once it has unmapped it; `enter` returns 0 (and the follower must not map) when
// the track is broken. A truncate that cuts below `high` breaks the track first and then sleeps
// (a futex, not a spin: the follower may run at the idle scheduling class and would never get the
// CPU from a spinning writer) until `leave`, so it never cuts under a mapping.
int granary_tee_enter(granary_tee_track *track);
void granary_tee_leave(granary_tee_track *track);
#endif
