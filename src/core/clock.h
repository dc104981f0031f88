/*
 * clock: the one monotonic clock of kvcfs (timeouts, leases, expiries):
 * CLOCK_MONOTONIC in nanoseconds. Wall-clock times (file times) come from
 * CLOCK_REALTIME where they are made, never from here.
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

#endif
