/*
 * metrics: a daemon's Prometheus metrics. A registry of families (a name,
 * a help text, a type) each holding series (one fixed label set each):
 * counters, gauges and latency histograms. Series are made at
 * registration (start-up, or the first time a collector meets a target)
 * and live as long as the registry; what the hot path touches is the
 * series itself, through the inline functions below: relaxed atomic adds,
 * no lock, no allocation. Every hot-path function takes NULL (metrics off,
 * or a registration that failed) and does nothing.
 *
 * Histograms have fixed log-spaced buckets, 1 us .. 10 s (1, 2.5, 5 per
 * decade) and +Inf, in seconds. A histogram keeps per-bucket counts (not
 * cumulative) and the sum in nanoseconds; rendering makes the buckets
 * cumulative and takes _count from the +Inf bucket, so _count always
 * equals the +Inf bucket even while observations race the scrape (_sum
 * may be a step behind or ahead of them).
 *
 * Gauges computed at scrape time (space of a target, depth of the rings)
 * come from collectors: callbacks the registry runs, in registration
 * order, before it renders; a collector sets its gauges.
 *
 * Rendering (kvc_metrics_render) writes the Prometheus text exposition
 * format 0.0.4: per family "# HELP" and "# TYPE" then its series in
 * registration order; label values escaped (\\, \", \n), help text
 * escaped (\\, \n).
 *
 * Locking (in the .c): collect_lock guards the collectors and runs them
 * one scrape at a time; lock guards the families and their series lists
 * (registration and rendering take it, observations never do). A
 * collector runs under collect_lock only, so it may register series; it
 * must not render or add a collector.
 */
#ifndef KVC_METRICS_H
#define KVC_METRICS_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "core/clock.h"

#define KVC_METRICS_MAX_LABELS 4
/* Finite histogram bounds; a histogram has one bucket more (+Inf). */
#define KVC_METRICS_BUCKETS 22

struct kvc_metrics;

struct kvc_metrics_label {
	const char *name;  /* [a-zA-Z_][a-zA-Z0-9_]* */
	const char *value; /* any bytes: escaped when rendered */
};

struct kvc_metrics_counter {
	_Atomic uint64_t value;
};

struct kvc_metrics_gauge {
	_Atomic int64_t value;
};

struct kvc_metrics_histogram {
	_Atomic uint64_t buckets[KVC_METRICS_BUCKETS + 1]; /* not cumulative; last: +Inf */
	_Atomic uint64_t sum_ns;
};

/* The finite bucket bounds in nanoseconds, ascending. */
extern const int64_t kvc_metrics_bounds_ns[KVC_METRICS_BUCKETS];

/* A registry; NULL when out of memory. */
struct kvc_metrics *kvc_metrics_create(void);
/* Free a registry and every series it made; safe on NULL. Nobody may
 * still observe into its series. */
void kvc_metrics_destroy(struct kvc_metrics *m);

/* Register a series of family `name` with these labels (count 0..
 * KVC_METRICS_MAX_LABELS; names and values are copied). The family is
 * made by its first series (its help text is that one's); a series with
 * the same labels as an existing one of the family is that one. Returns
 * the series, or NULL: m is NULL, out of memory, a bad metric or label
 * name, too many labels, or `name` is a family of another type. */
struct kvc_metrics_counter *kvc_metrics_counter(struct kvc_metrics *m, const char *name,
                                                const char *help,
                                                const struct kvc_metrics_label *labels,
                                                int label_count);
struct kvc_metrics_gauge *kvc_metrics_gauge(struct kvc_metrics *m, const char *name,
                                            const char *help,
                                            const struct kvc_metrics_label *labels,
                                            int label_count);
struct kvc_metrics_histogram *kvc_metrics_histogram(struct kvc_metrics *m, const char *name,
                                                    const char *help,
                                                    const struct kvc_metrics_label *labels,
                                                    int label_count);

/* Run collect(arg) before each rendering. Returns 0, -EINVAL (m NULL) or
 * -ENOMEM. */
int kvc_metrics_collector(struct kvc_metrics *m, void (*collect)(void *arg), void *arg);

/* Run the collectors, then write every family to out. Returns 0 or -EIO
 * (a write failed). */
int kvc_metrics_render(struct kvc_metrics *m, FILE *out);

/* kvc_metrics_render into a new malloc'ed string (*len its length).
 * Returns it, or NULL when out of memory. */
char *kvc_metrics_text(struct kvc_metrics *m, size_t *len);

/* Which bucket an observation of ns nanoseconds falls in: the first whose
 * bound is >= ns, KVC_METRICS_BUCKETS (+Inf) past the last. */
int kvc_metrics_bucket_of(int64_t ns);

static inline void kvc_metrics_add(struct kvc_metrics_counter *c, uint64_t n)
{
	if (c)
		atomic_fetch_add_explicit(&c->value, n, memory_order_relaxed);
}

static inline void kvc_metrics_inc(struct kvc_metrics_counter *c)
{
	kvc_metrics_add(c, 1);
}

/* For a counter that mirrors a monotonic count kept elsewhere (set by a
 * collector). */
static inline void kvc_metrics_counter_set(struct kvc_metrics_counter *c, uint64_t v)
{
	if (c)
		atomic_store_explicit(&c->value, v, memory_order_relaxed);
}

static inline void kvc_metrics_set(struct kvc_metrics_gauge *g, int64_t v)
{
	if (g)
		atomic_store_explicit(&g->value, v, memory_order_relaxed);
}

static inline void kvc_metrics_gauge_add(struct kvc_metrics_gauge *g, int64_t delta)
{
	if (g)
		atomic_fetch_add_explicit(&g->value, delta, memory_order_relaxed);
}

static inline void kvc_metrics_observe_ns(struct kvc_metrics_histogram *h, int64_t ns)
{
	if (!h)
		return;
	if (ns < 0)
		ns = 0;
	atomic_fetch_add_explicit(&h->buckets[kvc_metrics_bucket_of(ns)], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->sum_ns, (uint64_t)ns, memory_order_relaxed);
}

/* Observe the time since start_ns (kvc_clock_monotonic_ns). */
static inline void kvc_metrics_observe_since(struct kvc_metrics_histogram *h, int64_t start_ns)
{
	if (h)
		kvc_metrics_observe_ns(h, kvc_clock_monotonic_ns() - start_ns);
}

#endif
