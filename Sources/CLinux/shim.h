#ifndef GRANARY_CLINUX_SHIM_H
#define GRANARY_CLINUX_SHIM_H
// Linux calls that Swift's Glibc module leaves out (they need _GNU_SOURCE).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

// Starts writeback of a written range without waiting for it (sync_file_range(2)).
static inline int granary_start_writeback(int fd, long long offset, long long count) {
    return sync_file_range(fd, offset, count, SYNC_FILE_RANGE_WRITE);
}

// The calling thread's id (what /proc/self/task lists and sched_setscheduler takes).
static inline int granary_gettid(void) { return (int)syscall(SYS_gettid); }

static inline int granary_sched_idle(void) { return SCHED_IDLE; }
static inline int granary_sched_other(void) { return SCHED_OTHER; }

// Puts thread `tid` (0: the calling thread) under SCHED_IDLE (idle != 0) or SCHED_OTHER; its
// nice value is kept. 0 or -1 with errno, as sched_setscheduler(2).
static inline int granary_set_idle(int tid, int idle) {
    struct sched_param param = {0};
    return sched_setscheduler(tid, idle ? SCHED_IDLE : SCHED_OTHER, &param);
}

static inline void *granary_probe_idle(void *result) {
    *(int *)result = granary_set_idle(0, 1) == 0 && granary_set_idle(0, 0) == 0;
    return 0;
}

// Whether a thread of this process may go under SCHED_IDLE and come back: coming back needs
// CAP_SYS_NICE or an RLIMIT_NICE that allows the thread's nice value (sched(7)). Tried on a
// thread of its own, so that a "no" leaves no thread stuck idle.
static inline int granary_can_leave_idle(void) {
    pthread_t thread;
    int result = 0;
    if (pthread_create(&thread, 0, granary_probe_idle, &result) != 0) return 0;
    pthread_join(thread, 0);
    return result;
}
// A pipe whose ends are closed on exec from the start: another thread's child never inherits
// them (a leaked write end would keep a reader waiting for an end that never comes).
static inline int granary_pipe_cloexec(int fds[2]) { return pipe2(fds, O_CLOEXEC); }

// Moves `from` to `to` unless `to` exists (renameat2(2) with RENAME_NOREPLACE): -1 with EEXIST
// then, EINVAL where the file system cannot promise it.
static inline int granary_rename_noreplace(const char *from, const char *to) {
    return (int)syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, 1 /* RENAME_NOREPLACE */);
}

#endif
