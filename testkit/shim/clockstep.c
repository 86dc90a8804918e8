/*
 * clockstep: an LD_PRELOAD shim that steps a process' clocks, for the
 * clock-step arm of quorum-lock's torture test (testkit/src/clock.rs
 * builds it with `cc -shared -fPIC ... -ldl` and starts redis-server
 * with it).
 *
 * It wraps clock_gettime (CLOCK_REALTIME, CLOCK_MONOTONIC and their
 * _COARSE forms: every clock id Redis reads; other ids pass through),
 * gettimeofday and time, and adds one offset to all of them: the wall
 * clock and the monotonic clock step together. The offset is a signed
 * number of nanoseconds in the file named by QUORUM_LOCK_CLOCK_FILE
 * (missing or unreadable: the last offset read, 0 at first). The file is
 * read again at most every REREAD_NS, on the real monotonic clock, so a
 * new offset applies to every clock read that starts REREAD_NS after the
 * file was replaced (replace it by rename(2): a read never sees half a
 * number).
 *
 * Why not libfaketime: it aborts with Debian's redis-server 7 (jemalloc
 * calls clock_gettime during its initialisation, libfaketime's
 * dlsym(RTLD_NEXT) allocates, and the allocation re-enters jemalloc's
 * init). Here the real functions are resolved lazily, once, and every
 * call made while that resolution runs (the nested one among them) goes
 * to the system call itself. Nothing here allocates: the offset is read
 * with open(2)/read(2) into a stack buffer. errno is kept as the caller
 * left it, whatever the file reads did.
 */
#define _GNU_SOURCE
/* glibc's prototype of gettimeofday changed over time (struct timezone *,
 * then void *): keep the header's declaration out of the way of ours. */
#define gettimeofday clockstep_hidden_gettimeofday
#include <sys/time.h>
#undef gettimeofday

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NS_PER_SEC 1000000000LL
/* How old the offset may be before a clock read looks at the file again. */
#define REREAD_NS 2000000LL

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);
typedef int (*gettimeofday_fn)(struct timeval *, void *);

static clock_gettime_fn real_clock_gettime;
static gettimeofday_fn real_gettimeofday;
/* Set once by the first caller that resolves the real functions; calls
 * that find it set and the functions not resolved yet use the system
 * calls. */
static int resolving;

static long long offset_ns;
/* When the file was last looked at (real monotonic ns; 0: never). */
static long long checked_at_ns;

static void resolve(void) {
    if (__atomic_exchange_n(&resolving, 1, __ATOMIC_ACQ_REL)) {
        return;
    }
    void *gt = dlsym(RTLD_NEXT, "gettimeofday");
    void *cg = dlsym(RTLD_NEXT, "clock_gettime");
    __atomic_store_n(&real_gettimeofday, (gettimeofday_fn)gt, __ATOMIC_RELEASE);
    __atomic_store_n(&real_clock_gettime, (clock_gettime_fn)cg, __ATOMIC_RELEASE);
}

static int raw_clock_gettime(clockid_t id, struct timespec *ts) {
    clock_gettime_fn f = __atomic_load_n(&real_clock_gettime, __ATOMIC_ACQUIRE);
    if (f == NULL) {
        resolve();
        f = __atomic_load_n(&real_clock_gettime, __ATOMIC_ACQUIRE);
    }
    if (f != NULL) {
        return f(id, ts);
    }
    return (int)syscall(SYS_clock_gettime, id, ts);
}

static int raw_gettimeofday(struct timeval *tv, void *tz) {
    gettimeofday_fn f = __atomic_load_n(&real_gettimeofday, __ATOMIC_ACQUIRE);
    if (f == NULL) {
        resolve();
        f = __atomic_load_n(&real_gettimeofday, __ATOMIC_ACQUIRE);
    }
    if (f != NULL) {
        return f(tv, tz);
    }
    return (int)syscall(SYS_gettimeofday, tv, tz);
}

/* Parses an optionally signed decimal integer; 0 when there is none. */
static int parse_offset(const char *s, long long *out) {
    long long sign = 1, value = 0;
    int digits = 0;
    while (*s == ' ' || *s == '\t' || *s == '\n') {
        s++;
    }
    if (*s == '-' || *s == '+') {
        sign = *s == '-' ? -1 : 1;
        s++;
    }
    for (; *s >= '0' && *s <= '9' && digits < 18; s++, digits++) {
        value = value * 10 + (*s - '0');
    }
    if (digits == 0) {
        return 0;
    }
    *out = sign * value;
    return 1;
}

static long long current_offset(void) {
    struct timespec now;
    if (raw_clock_gettime(CLOCK_MONOTONIC, &now) != 0) {
        return __atomic_load_n(&offset_ns, __ATOMIC_RELAXED);
    }
    long long now_ns = (long long)now.tv_sec * NS_PER_SEC + now.tv_nsec;
    long long last = __atomic_load_n(&checked_at_ns, __ATOMIC_RELAXED);
    if (last != 0 && now_ns >= last && now_ns - last < REREAD_NS) {
        return __atomic_load_n(&offset_ns, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&checked_at_ns, now_ns, __ATOMIC_RELAXED);
    const char *path = getenv("QUORUM_LOCK_CLOCK_FILE");
    if (path != NULL) {
        int saved = errno;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            char buf[64];
            ssize_t n = read(fd, buf, sizeof buf - 1);
            close(fd);
            long long parsed;
            if (n > 0) {
                buf[n] = '\0';
                if (parse_offset(buf, &parsed)) {
                    __atomic_store_n(&offset_ns, parsed, __ATOMIC_RELAXED);
                }
            }
        }
        errno = saved;
    }
    return __atomic_load_n(&offset_ns, __ATOMIC_RELAXED);
}

static int stepped(clockid_t id) {
    return id == CLOCK_REALTIME || id == CLOCK_MONOTONIC || id == CLOCK_REALTIME_COARSE ||
           id == CLOCK_MONOTONIC_COARSE;
}

/* sec/nsec plus `off` nanoseconds, normalised (0 <= nsec < 1e9). */
static void shift(long long *sec, long long *nsec, long long off) {
    *sec += off / NS_PER_SEC;
    *nsec += off % NS_PER_SEC;
    if (*nsec < 0) {
        *nsec += NS_PER_SEC;
        *sec -= 1;
    } else if (*nsec >= NS_PER_SEC) {
        *nsec -= NS_PER_SEC;
        *sec += 1;
    }
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int rc = raw_clock_gettime(id, ts);
    if (rc == 0 && stepped(id)) {
        long long off = current_offset();
        if (off != 0) {
            long long sec = ts->tv_sec, nsec = ts->tv_nsec;
            shift(&sec, &nsec, off);
            ts->tv_sec = (time_t)sec;
            ts->tv_nsec = (long)nsec;
        }
    }
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    int rc = raw_gettimeofday(tv, tz);
    if (rc == 0 && tv != NULL) {
        long long off = current_offset();
        if (off != 0) {
            long long sec = tv->tv_sec, nsec = (long long)tv->tv_usec * 1000;
            shift(&sec, &nsec, off);
            tv->tv_sec = (time_t)sec;
            tv->tv_usec = (suseconds_t)(nsec / 1000);
        }
    }
    return rc;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return (time_t)-1;
    }
    if (out != NULL) {
        *out = ts.tv_sec;
    }
    return ts.tv_sec;
}
