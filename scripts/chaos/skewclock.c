/*
 * skewclock: an LD_PRELOAD shim that moves the wall clock of one process by
 * CHAOS_CLOCK_OFFSET_MS milliseconds (negative: behind), for the chaos
 * suite's clock-skew scenario (scripts/chaos.sh builds it with cc).
 *
 * Only the wall clock moves: clock_gettime of the CLOCK_REALTIME family,
 * gettimeofday and time. Monotonic clocks stay true, as on a real machine
 * whose wall clock is off.
 *
 * Debian's libfaketime hangs a jemalloc-built redis-server at start: it
 * looks up the real functions with dlsym, which allocates while jemalloc
 * initialises. This shim looks nothing up: it asks the kernel directly
 * (syscall(2)), so it allocates nothing and needs no libdl. A system call
 * costs more than the vDSO, which a test server can afford.
 */
#define _GNU_SOURCE
/* Keep the headers' own prototypes of the functions defined here out of
 * the way: their exact parameter types differ between C libraries. */
#define gettimeofday skewclock_hidden_gettimeofday
#define time skewclock_hidden_time
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#undef gettimeofday
#undef time

static long long offset_ns;

__attribute__((constructor)) static void skewclock_init(void)
{
	const char *s = getenv("CHAOS_CLOCK_OFFSET_MS");
	if (s != NULL)
		offset_ns = strtoll(s, NULL, 10) * 1000000LL;
}

static int wall(clockid_t clk)
{
	switch (clk) {
	case CLOCK_REALTIME:
#ifdef CLOCK_REALTIME_COARSE
	case CLOCK_REALTIME_COARSE:
#endif
#ifdef CLOCK_REALTIME_ALARM
	case CLOCK_REALTIME_ALARM:
#endif
#ifdef CLOCK_TAI
	case CLOCK_TAI:
#endif
		return 1;
	}
	return 0;
}

int clock_gettime(clockid_t clk, struct timespec *ts)
{
	long long ns;

	if (syscall(SYS_clock_gettime, clk, ts) != 0)
		return -1;
	if (offset_ns != 0 && wall(clk)) {
		ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_ns;
		ts->tv_sec = (time_t)(ns / 1000000000LL);
		ts->tv_nsec = (long)(ns % 1000000000LL);
		if (ts->tv_nsec < 0) {
			ts->tv_nsec += 1000000000L;
			ts->tv_sec--;
		}
	}
	return 0;
}

int gettimeofday(struct timeval *tv, void *tz)
{
	struct timespec ts;

	(void)tz; /* obsolete; Linux callers pass NULL */
	if (tv == NULL)
		return 0;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
		return -1;
	tv->tv_sec = ts.tv_sec;
	tv->tv_usec = ts.tv_nsec / 1000;
	return 0;
}

time_t time(time_t *t)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
		return (time_t)-1;
	if (t != NULL)
		*t = ts.tv_sec;
	return ts.tv_sec;
}
