/*
 * clock: the one monotonic clock of kvcfs (timeouts, leases, expiries):
 * CLOCK_MONOTONIC in nanoseconds; and the one wall clock for the times
 * files carry (kvc_clock_wall_ns, CLOCK_REALTIME), never used for a
 * timeout; and the one doubling backoff of the loops that try again
 * (struct kvc_clock_backoff).
 */
#ifndef KVC_CLOCK_H
#define KVC_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t kvc_clock_monotonic_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Now as a file time: nanoseconds since the epoch. */
static inline int64_t kvc_clock_wall_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The monotonic time ms milliseconds from now, as pthread_cond_timedwait
 * takes it from a condition variable made with CLOCK_MONOTONIC. */
static inline struct timespec kvc_clock_deadline(int64_t ms)
{
	int64_t at = kvc_clock_monotonic_ns() + ms * 1000000;
	return (struct timespec){.tv_sec = at / 1000000000, .tv_nsec = at % 1000000000};
}

/* Sleep ms milliseconds. */
static inline void kvc_clock_sleep_ms(int64_t ms)
{
	struct timespec t = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
	nanosleep(&t, NULL);
}

/* A doubling backoff: the delays first_ms, then each twice the one
 * before, up to max_ms, and max_ms from then on (first_ms > 0,
 * max_ms >= first_ms). It keeps no deadline: whether a delay still fits
 * is the caller's. Plain data, one per loop, no lock. */
struct kvc_clock_backoff {
	int64_t next_ms, max_ms;
};

static inline void kvc_clock_backoff_init(struct kvc_clock_backoff *b, int64_t first_ms,
                                          int64_t max_ms)
{
	*b = (struct kvc_clock_backoff){.next_ms = first_ms, .max_ms = max_ms};
}

/* The next delay in ms (the one after it is twice as long, up to max_ms;
 * the doubling never overflows). */
static inline int64_t kvc_clock_backoff_next_ms(struct kvc_clock_backoff *b)
{
	int64_t ms = b->next_ms;
	b->next_ms = ms > b->max_ms / 2 ? b->max_ms : 2 * ms;
	return ms;
}

#endif
