#ifndef GRANARY_CLINUX_SHIM_H
#define GRANARY_CLINUX_SHIM_H
// Linux calls that Swift's Glibc module leaves out (they need _GNU_SOURCE).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>

// Starts writeback of a written range without waiting for it (sync_file_range(2)).
static inline int granary_start_writeback(int fd, long long offset, long long count) {
    return sync_file_range(fd, offset, count, SYNC_FILE_RANGE_WRITE);
}
#endif
