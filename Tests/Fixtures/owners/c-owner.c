/*
 * An owner of one SQLite store that serves granary's reopen protocol, written in C from the text
 * of granary-reopen(7) alone, the way a developer of another application would: libsqlite3 and
 * libc, nothing of granary's.
 *
 *   c-owner STORE LOG MODE INTERVAL_MS START_ID [LATE_MS]
 *
 * It commits a row into demo_writes(id, at) every INTERVAL_MS while the store is open, ids from
 * START_ID, and appends to LOG: READY once it serves the socket; "ACK <id>" after each COMMIT
 * returned; "PAUSED"; "REOPENED <why>"; "IGNORED RESUME"; "FAILED <what>". A write into the new
 * store before RESUME (mode write-after-swap) is logged "ACK <id> post-swap".
 *
 * MODE is conforming, or one rule broken on purpose:
 *   silent            RESUME gets no answer; at the lease's end it reopens but sends nothing
 *                     (granary reports that it did not answer);
 *   expired           RESUME gets no answer; at the lease's end it reopens and sends EXPIRED, as
 *                     the page says of a lease that runs out;
 *   late-resume       RESUME is answered RESUMED only LATE_MS (default 1500) after it was read;
 *   write-after-swap  while paused, once another file is at the store's path, it opens that file
 *                     and commits rows into it until RESUME;
 *   idle-clock        the idle clock keeps running while paused: 11.5 s after the last line the
 *                     connection is closed (and the store reopened), paused or not;
 *   crash-on-resume   on RESUME while paused it exits at once (a crash in the middle of reopening);
 *   crash-after-swap  while paused, once another file is at the store's path, it commits one row
 *                     into it and exits without closing (a WAL store keeps its -wal and -shm).
 *
 * Threads: the writer (the application) and the protocol (one conversation at a time; the page
 * allows that for an owner of one store). The writer may block in SQLite (busy timeout): it is not
 * the thread that answers the protocol.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>
#include <libgen.h>

/* ---- SHA-256 (FIPS 180-4), for the socket name ---- */

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(uint32_t h[8], const unsigned char *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = k + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
        uint32_t t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += k;
}

static void sha256_hex(const unsigned char *data, size_t len, char out[65]) {
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    size_t i = 0;
    for (; i + 64 <= len; i += 64) sha256_block(h, data + i);
    unsigned char tail[128] = {0};
    size_t rest = len - i;
    memcpy(tail, data + i, rest);
    tail[rest] = 0x80;
    size_t blocks = rest + 9 > 64 ? 2 : 1;
    uint64_t bits = (uint64_t)len * 8;
    for (int j = 0; j < 8; j++) tail[blocks * 64 - 1 - j] = (unsigned char)(bits >> (8 * j));
    for (size_t j = 0; j < blocks; j++) sha256_block(h, tail + 64 * j);
    for (int j = 0; j < 8; j++) sprintf(out + 8 * j, "%08x", h[j]);
    out[64] = 0;
}

/* ---- the application: a store and a writer ---- */

static char store_path[PATH_MAX];  /* canonical */
static char folder_path[PATH_MAX]; /* the folder holding it */
static const char *mode = "conforming";
static long interval_ms = 3, late_ms = 1500;
static long long next_id = 1;
static int logfd = -1;

enum state { OPEN, PAUSING, PAUSED };
static pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;
static enum state state = OPEN;
static int running = 0;   /* a transaction is running */
static sqlite3 *db = NULL; /* NULL while paused, or when opening failed */
static int need_schema = 1;

static void logline(const char *format, ...) {
    char text[512];
    va_list args;
    va_start(args, format);
    int n = vsnprintf(text, sizeof text - 1, format, args);
    va_end(args);
    if (n < 0) return;
    if (n > (int)sizeof text - 2) n = sizeof text - 2;
    text[n++] = '\n';
    (void)!write(logfd, text, (size_t)n);
}

static double now_monotonic(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double now_wall(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* Opens the store afresh by its path. Returns 0 on success; on failure db stays NULL and the
 * writer tries again. */
static int open_store(void) {
    sqlite3 *handle = NULL;
    if (sqlite3_open_v2(store_path, &handle, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        logline("FAILED open %s", handle ? sqlite3_errmsg(handle) : "out of memory");
        sqlite3_close(handle);
        db = NULL;
        return -1;
    }
    sqlite3_busy_timeout(handle, 2000);
    db = handle;
    need_schema = 1;
    return 0;
}

static int insert(sqlite3 *handle, long long id) {
    sqlite3_stmt *stmt = NULL;
    if (sqlite3_prepare_v2(handle, "INSERT INTO demo_writes(id, at) VALUES(?, ?)", -1, &stmt, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_int64(stmt, 1, id);
    sqlite3_bind_double(stmt, 2, now_wall());
    int rc = sqlite3_step(stmt);
    sqlite3_finalize(stmt);
    return rc == SQLITE_DONE ? 0 : -1;
}

static void *writer(void *unused) {
    (void)unused;
    for (;;) {
        pthread_mutex_lock(&gate);
        while (state != OPEN) {
            pthread_mutex_unlock(&gate);
            usleep(500);
            pthread_mutex_lock(&gate);
        }
        running = 1;
        pthread_mutex_unlock(&gate);
        if (db == NULL) open_store();
        int ok = 0;
        if (db != NULL) {
            if (need_schema &&
                sqlite3_exec(db, "CREATE TABLE IF NOT EXISTS demo_writes(id INTEGER PRIMARY KEY, at REAL)", NULL,
                             NULL, NULL) == SQLITE_OK)
                need_schema = 0;
            ok = !need_schema && insert(db, next_id) == 0;
            if (ok) logline("ACK %lld", next_id++);
            else logline("FAILED write %s", sqlite3_errmsg(db));
        }
        pthread_mutex_lock(&gate);
        running = 0;
        pthread_mutex_unlock(&gate);
        usleep((useconds_t)interval_ms * 1000);
    }
    return NULL;
}

/* Does any descriptor of this process still name the database, -wal, -shm or -journal? */
static int store_descriptor_open(void) {
    static const char *suffixes[] = {"", "-wal", "-shm", "-journal"};
    struct stat named[4];
    int exists[4];
    for (int i = 0; i < 4; i++) {
        char path[PATH_MAX + 16];
        snprintf(path, sizeof path, "%s%s", store_path, suffixes[i]);
        exists[i] = stat(path, &named[i]) == 0;
    }
    DIR *fds = opendir("/proc/self/fd");
    if (fds == NULL) return 1; /* cannot tell: say yes */
    int found = 0;
    struct dirent *entry;
    while ((entry = readdir(fds)) != NULL && !found) {
        if (entry->d_name[0] == '.') continue;
        int fd = atoi(entry->d_name);
        if (fd == dirfd(fds)) continue;
        struct stat st;
        if (fstat(fd, &st) != 0) continue;
        for (int i = 0; i < 4; i++)
            if (exists[i] && st.st_dev == named[i].st_dev && st.st_ino == named[i].st_ino) found = 1;
    }
    closedir(fds);
    return found;
}

/* ---- the protocol ---- */

#define MAX_LINE 1024

struct conn {
    int fd;
    char buf[MAX_LINE + 1];
    size_t have;
    int gone; /* end of file or an error */
};

static int send_line(struct conn *c, const char *text) {
    char line[MAX_LINE + 1];
    int n = snprintf(line, sizeof line, "%s\n", text);
    size_t done = 0;
    while (done < (size_t)n) {
        ssize_t sent = send(c->fd, line + done, (size_t)n - done, MSG_NOSIGNAL);
        if (sent < 0 && errno == EINTR) continue;
        if (sent <= 0) {
            c->gone = 1;
            return -1;
        }
        done += (size_t)sent;
    }
    return 0;
}

/* Has the peer closed its side (or the connection failed)? Reads nothing. */
static int peer_gone(struct conn *c) {
    struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) return 1;
    return 0;
}

enum got { LINE, TIMEOUT, GONE, OVERLONG };

static void write_after_swap(void);
static int swapping_mode(void) {
    return strcmp(mode, "write-after-swap") == 0 || strcmp(mode, "crash-after-swap") == 0;
}

/* Waits until `deadline` (monotonic seconds; < 0: forever) for a line; on LINE it is in `out`
 * (line feed and one carriage return before it removed, `*len` bytes, not NUL-terminated for the
 * protocol but terminated for convenience). */
static enum got read_line(struct conn *c, double deadline, char *out, size_t *len) {
    for (;;) {
        char *lf = memchr(c->buf, '\n', c->have);
        if (lf != NULL) {
            size_t n = (size_t)(lf - c->buf);
            memcpy(out, c->buf, n);
            if (n > 0 && out[n - 1] == '\r') n--;
            out[n] = 0;
            *len = n;
            size_t used = (size_t)(lf - c->buf) + 1;
            memmove(c->buf, c->buf + used, c->have - used);
            c->have -= used;
            return LINE;
        }
        if (c->have >= MAX_LINE) return OVERLONG;
        if (c->gone) return GONE;
        int wait = -1;
        if (deadline >= 0) {
            double left = deadline - now_monotonic();
            if (left <= 0) return TIMEOUT;
            wait = (int)(left * 1000) + 1;
        }
        if (swapping_mode() && state == PAUSED && (wait < 0 || wait > 1)) wait = 1;
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        int r = poll(&p, 1, wait);
        if (r < 0 && errno != EINTR) return GONE;
        if (r <= 0) {
            if (swapping_mode() && state == PAUSED) write_after_swap();
            continue;
        }
        ssize_t got = recv(c->fd, c->buf + c->have, MAX_LINE - c->have, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            c->gone = 1;
            continue;
        }
        c->have += (size_t)got;
    }
}

/* A number: decimal, no sign, no leading zero, at least 1, at most `max`. */
static int parse_number(const char *word, size_t len, long long max, long long *value) {
    if (len == 0 || len > 10 || word[0] < '1' || word[0] > '9') return 0;
    long long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (word[i] < '0' || word[i] > '9') return 0;
        v = v * 10 + (word[i] - '0');
    }
    if (v > max) return 0;
    *value = v;
    return 1;
}

/* Splits a well-formed line into words; returns the count, or -1 if the line is malformed
 * (empty, a byte outside 0x20-0x7E, a leading, trailing or doubled space). */
#define MAX_WORDS 128
static int split(const char *line, size_t len, const char *words[], size_t lens[]) {
    if (len == 0) return -1;
    int count = 0;
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && ((unsigned char)line[i] < 0x20 || (unsigned char)line[i] > 0x7e)) return -1;
        if (i == len || line[i] == ' ') {
            if (i == start) return -1;
            if (count == MAX_WORDS) return -1;
            words[count] = line + start;
            lens[count] = i - start;
            count++;
            start = i + 1;
        }
    }
    return count;
}

static int word_is(const char *word, size_t len, const char *text) {
    return len == strlen(text) && memcmp(word, text, len) == 0;
}

/* Versions from words[from..count): well-formed and distinct? Sets *has1. */
static int versions(const char *words[], size_t lens[], int from, int count, int *has1) {
    long long seen[MAX_WORDS];
    *has1 = 0;
    if (from >= count) return 0;
    for (int i = from; i < count; i++) {
        if (!parse_number(words[i], lens[i], 999999999LL, &seen[i])) return 0;
        for (int j = from; j < i; j++)
            if (seen[j] == seen[i]) return 0;
        if (seen[i] == 1) *has1 = 1;
    }
    return 1;
}

/* 0: not a HELLO message; 1: a HELLO that lists version 1; 2: a HELLO without version 1. */
static int client_hello(const char *line, size_t len) {
    const char *words[MAX_WORDS];
    size_t lens[MAX_WORDS];
    int n = split(line, len, words, lens), has1;
    if (n < 3 || !word_is(words[0], lens[0], "HELLO") || !word_is(words[1], lens[1], "granary-reopen")) return 0;
    if (!versions(words, lens, 2, n, &has1)) return 0;
    return has1 ? 1 : 2;
}

/* A well-formed ERROR line (which ends the conversation like BYE)? */
static int client_error(const char *line, size_t len) {
    static const char *reasons[] = {"permission-denied", "bad-hello", "bad-lease", "busy",
                                    "close-failed", "unexpected-while-paused", "unknown-command"};
    const char *words[MAX_WORDS];
    size_t lens[MAX_WORDS];
    int n = split(line, len, words, lens), has1;
    if (n < 2 || !word_is(words[0], lens[0], "ERROR")) return 0;
    if (word_is(words[1], lens[1], "unsupported-version")) return versions(words, lens, 2, n, &has1);
    if (n != 2) return 0;
    for (size_t i = 0; i < sizeof reasons / sizeof *reasons; i++)
        if (word_is(words[1], lens[1], reasons[i])) return 1;
    return 0;
}

static int exactly(const char *line, size_t len, const char *text) { return word_is(line, len, text); }

static int first_word_is(const char *line, size_t len, const char *word) {
    const char *space = memchr(line, ' ', len);
    size_t n = space ? (size_t)(space - line) : len;
    return word_is(line, n, word);
}

/* PAUSE with a good lease? */
static int pause_lease(const char *line, size_t len, long long *lease) {
    const char *words[MAX_WORDS];
    size_t lens[MAX_WORDS];
    int n = split(line, len, words, lens);
    return n == 2 && word_is(words[0], lens[0], "PAUSE") && parse_number(words[1], lens[1], 3600000LL, lease);
}

/* The end of a pause, however it ends: open the store again and let the held transactions go. */
static void end_pause(const char *why) {
    pthread_mutex_lock(&gate);
    open_store();
    state = OPEN;
    pthread_mutex_unlock(&gate);
    logline("REOPENED %s", why);
}

static ino_t paused_inode;
static long long post_id;

/* Modes write-after-swap and crash-after-swap: a rule broken on purpose. */
static void write_after_swap(void) {
    struct stat st;
    if (stat(store_path, &st) != 0 || st.st_ino == paused_inode) return;
    sqlite3 *handle = NULL;
    if (sqlite3_open_v2(store_path, &handle, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK) {
        sqlite3_busy_timeout(handle, 0);
        if (sqlite3_exec(handle, "CREATE TABLE IF NOT EXISTS demo_writes(id INTEGER PRIMARY KEY, at REAL)", NULL,
                         NULL, NULL) == SQLITE_OK &&
            insert(handle, post_id) == 0) {
            logline("ACK %lld post-swap", post_id++);
            if (strcmp(mode, "crash-after-swap") == 0) {
                logline("CRASHED");
                _exit(3);
            }
        }
    }
    sqlite3_close(handle);
}

/* PAUSE read with a good lease: returns 1 if paused (PAUSED sent), 0 if the store is open again
 * (an ERROR sent, or the client gone: c->gone). */
static int pause_store(struct conn *c, double lease_end) {
    pthread_mutex_lock(&gate);
    state = PAUSING;
    while (running && now_monotonic() < lease_end && !peer_gone(c)) {
        pthread_mutex_unlock(&gate);
        usleep(200);
        pthread_mutex_lock(&gate);
    }
    if (peer_gone(c)) {
        state = OPEN;
        pthread_mutex_unlock(&gate);
        c->gone = 1;
        return 0;
    }
    if (running) {
        state = OPEN;
        pthread_mutex_unlock(&gate);
        send_line(c, "ERROR busy");
        return 0;
    }
    struct stat st;
    paused_inode = stat(store_path, &st) == 0 ? st.st_ino : 0;
    int closed = db == NULL || sqlite3_close(db) == SQLITE_OK;
    if (closed) db = NULL;
    if (!closed || store_descriptor_open()) {
        if (db != NULL) sqlite3_close_v2(db);
        open_store();
        state = OPEN;
        pthread_mutex_unlock(&gate);
        send_line(c, "ERROR close-failed");
        return 0;
    }
    if (now_monotonic() >= lease_end) {
        open_store();
        state = OPEN;
        pthread_mutex_unlock(&gate);
        send_line(c, "ERROR busy");
        return 0;
    }
    state = PAUSED;
    pthread_mutex_unlock(&gate);
    if (peer_gone(c)) {
        c->gone = 1;
        end_pause("peer-gone");
        return 0;
    }
    logline("PAUSED");
    if (send_line(c, "PAUSED") != 0) {
        end_pause("peer-gone");
        return 0;
    }
    post_id = 1000000000LL + next_id;
    return 1;
}

/* The lease ran out while paused: the commit lock, reopen, release, then EXPIRED (or, in mode
 * silent, nothing). */
static void expire(struct conn *c) {
    int folder = open(folder_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (folder >= 0) flock(folder, LOCK_EX);
    end_pause("expired");
    if (folder >= 0) close(folder);
    if (strcmp(mode, "silent") == 0) {
        /* Says nothing, and waits for the client to close. */
        char sink[256];
        while (recv(c->fd, sink, sizeof sink, 0) > 0) {}
        return;
    }
    send_line(c, "EXPIRED");
}

static const double IDLE = 10.5;
static const double IDLE_WHILE_PAUSED = 11.5; /* mode idle-clock */

static void converse(int fd) {
    struct conn c = {.fd = fd};
    char line[MAX_LINE + 1];
    size_t len;
    double idle_from = now_monotonic();
    int first = 1;

    struct ucred peer;
    socklen_t size = sizeof peer;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0 ||
        (peer.uid != geteuid() && peer.uid != 0)) {
        send_line(&c, "ERROR permission-denied");
        return;
    }
    double lease_end = 0;
    for (;;) {
        enum got got;
        if (state == PAUSED) {
            double deadline = lease_end;
            if (strcmp(mode, "idle-clock") == 0 && idle_from + IDLE_WHILE_PAUSED < deadline)
                deadline = idle_from + IDLE_WHILE_PAUSED;
            got = read_line(&c, deadline, line, &len);
            if (got == TIMEOUT && now_monotonic() >= lease_end) {
                expire(&c);
                return;
            }
            if (got == TIMEOUT) { /* idle-clock: the rule broken */
                end_pause("idle");
                return;
            }
            if (got != LINE) {
                end_pause(got == OVERLONG ? "overlong" : "peer-gone");
                return;
            }
            if (now_monotonic() >= lease_end) { /* reads no line from the lease's end on */
                expire(&c);
                return;
            }
            if (exactly(line, len, "RESUME")) {
                if (strcmp(mode, "silent") == 0 || strcmp(mode, "expired") == 0) {
                    logline("IGNORED RESUME");
                    continue;
                }
                if (strcmp(mode, "late-resume") == 0) usleep((useconds_t)late_ms * 1000);
                if (strcmp(mode, "crash-on-resume") == 0) {
                    logline("CRASHED");
                    _exit(3);
                }
                end_pause("resume");
                if (send_line(&c, "RESUMED") != 0) return;
                idle_from = now_monotonic();
            } else if (exactly(line, len, "BYE") || client_error(line, len)) {
                end_pause("bye");
                return;
            } else {
                if (send_line(&c, "ERROR unexpected-while-paused") != 0) {
                    end_pause("peer-gone");
                    return;
                }
                idle_from = now_monotonic();
            }
            continue;
        }
        got = read_line(&c, idle_from + IDLE, line, &len);
        if (got != LINE) return; /* idle, overlong, gone: close without a word */
        if (first) {
            first = 0;
            int hello = client_hello(line, len);
            if (hello == 1) {
                char greeting[64];
                snprintf(greeting, sizeof greeting, "HELLO granary-reopen 1 %d", (int)getpid());
                if (send_line(&c, greeting) != 0) return;
            } else {
                send_line(&c, hello == 2 ? "ERROR unsupported-version 1" : "ERROR bad-hello");
                return;
            }
        } else if (first_word_is(line, len, "PAUSE")) {
            long long lease;
            if (!pause_lease(line, len, &lease)) {
                if (send_line(&c, "ERROR bad-lease") != 0) return;
            } else {
                lease_end = now_monotonic() + lease / 1000.0;
                if (pause_store(&c, lease_end)) {
                    idle_from = now_monotonic();
                    continue;
                }
                if (c.gone) return;
            }
        } else if (exactly(line, len, "RESUME")) {
            if (send_line(&c, "RESUMED") != 0) return;
        } else if (exactly(line, len, "BYE") || client_error(line, len)) {
            return;
        } else {
            if (send_line(&c, "ERROR unknown-command") != 0) return;
        }
        idle_from = now_monotonic();
    }
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: c-owner STORE LOG MODE INTERVAL_MS START_ID [LATE_MS]\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if (realpath(argv[1], store_path) == NULL) {
        perror(argv[1]);
        return 1;
    }
    char copy[PATH_MAX];
    snprintf(copy, sizeof copy, "%s", store_path);
    snprintf(folder_path, sizeof folder_path, "%s", dirname(copy));
    logfd = open(argv[2], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    mode = argv[3];
    interval_ms = atol(argv[4]);
    next_id = atoll(argv[5]);
    if (argc > 6) late_ms = atol(argv[6]);
    if (logfd < 0) {
        perror(argv[2]);
        return 1;
    }

    char digest[65];
    sha256_hex((const unsigned char *)store_path, strlen(store_path), digest);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    char name[83];
    int n = snprintf(name, sizeof name, "granary-reopen/v1/%s", digest);
    memcpy(address.sun_path + 1, name, (size_t)n); /* sun_path[0] = NUL: the abstract namespace */
    int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener < 0 || bind(listener, (struct sockaddr *)&address, (socklen_t)(sizeof(sa_family_t) + 1 + n)) != 0 ||
        listen(listener, 8) != 0) {
        perror("socket");
        return 1;
    }
    if (open_store() != 0) return 1;
    pthread_t thread;
    pthread_create(&thread, NULL, writer, NULL);
    logline("READY");
    for (;;) {
        int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        converse(fd);
        close(fd);
    }
}
