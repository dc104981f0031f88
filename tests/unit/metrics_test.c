#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/metrics.h"

static char *render(struct kvc_metrics *m)
{
	size_t len = 0;
	char *text = kvc_metrics_text(m, &len);
	cr_assert_not_null(text);
	cr_assert_eq(strlen(text), len);
	return text;
}

Test(metrics, renders_counters_and_gauges_exactly)
{
	struct kvc_metrics *m = kvc_metrics_create();
	struct kvc_metrics_label read = {"op", "read"}, write = {"op", "write"};
	struct kvc_metrics_counter *r = kvc_metrics_counter(m, "kvc_ops_total", "Ops done.", &read, 1);
	struct kvc_metrics_counter *w =
		kvc_metrics_counter(m, "kvc_ops_total", "ignored", &write, 1);
	struct kvc_metrics_gauge *g = kvc_metrics_gauge(m, "kvc_depth", "Queue\\depth\nnow", NULL, 0);
	kvc_metrics_add(r, 3);
	kvc_metrics_inc(w);
	kvc_metrics_set(g, -7);
	/* Same labels: the same series. */
	cr_assert_eq(kvc_metrics_counter(m, "kvc_ops_total", NULL, &read, 1), r);
	char *text = render(m);
	cr_assert_str_eq(text, "# HELP kvc_ops_total Ops done.\n"
	                       "# TYPE kvc_ops_total counter\n"
	                       "kvc_ops_total{op=\"read\"} 3\n"
	                       "kvc_ops_total{op=\"write\"} 1\n"
	                       "# HELP kvc_depth Queue\\\\depth\\nnow\n"
	                       "# TYPE kvc_depth gauge\n"
	                       "kvc_depth -7\n");
	free(text);
	kvc_metrics_destroy(m);
}

Test(metrics, escapes_label_values)
{
	struct kvc_metrics *m = kvc_metrics_create();
	struct kvc_metrics_label l[2] = {{"path", "a\"b\\c\nd"}, {"t", "0"}};
	kvc_metrics_inc(kvc_metrics_counter(m, "x_total", "x", l, 2));
	char *text = render(m);
	cr_assert_str_eq(text, "# HELP x_total x\n# TYPE x_total counter\n"
	                       "x_total{path=\"a\\\"b\\\\c\\nd\",t=\"0\"} 1\n");
	free(text);
	kvc_metrics_destroy(m);
}

Test(metrics, refuses_bad_names_and_type_clashes)
{
	struct kvc_metrics *m = kvc_metrics_create();
	struct kvc_metrics_label bad = {"a-b", "x"}, le = {"le", "1"}, ok = {"a", "b"};
	cr_assert_null(kvc_metrics_counter(m, "1abc", "", NULL, 0));
	cr_assert_null(kvc_metrics_counter(m, "a b", "", NULL, 0));
	cr_assert_null(kvc_metrics_counter(m, "x", "", &bad, 1));
	cr_assert_null(kvc_metrics_histogram(m, "x", "", &le, 1));
	cr_assert_null(kvc_metrics_counter(m, "x", "", &ok, KVC_METRICS_MAX_LABELS + 1));
	cr_assert_not_null(kvc_metrics_counter(m, "x", "", &ok, 1));
	cr_assert_null(kvc_metrics_gauge(m, "x", "", &ok, 1));
	cr_assert_null(kvc_metrics_counter(NULL, "y", "", NULL, 0));
	/* The hot path takes NULL. */
	kvc_metrics_inc(NULL);
	kvc_metrics_set(NULL, 1);
	kvc_metrics_observe_ns(NULL, 5);
	kvc_metrics_destroy(m);
}

Test(metrics, bucket_placement)
{
	cr_assert_eq(kvc_metrics_bucket_of(0), 0);
	cr_assert_eq(kvc_metrics_bucket_of(1000), 0); /* le is inclusive */
	cr_assert_eq(kvc_metrics_bucket_of(1001), 1);
	cr_assert_eq(kvc_metrics_bucket_of(2500), 1);
	cr_assert_eq(kvc_metrics_bucket_of(2501), 2);
	cr_assert_eq(kvc_metrics_bucket_of(1000000), 9);        /* 1 ms */
	cr_assert_eq(kvc_metrics_bucket_of(10000000000), 21);   /* 10 s */
	cr_assert_eq(kvc_metrics_bucket_of(10000000001), KVC_METRICS_BUCKETS);
	for (int b = 1; b < KVC_METRICS_BUCKETS; b++)
		cr_assert_lt(kvc_metrics_bounds_ns[b - 1], kvc_metrics_bounds_ns[b]);
}

Test(metrics, renders_a_histogram_exactly)
{
	struct kvc_metrics *m = kvc_metrics_create();
	struct kvc_metrics_label l = {"type", "read"};
	struct kvc_metrics_histogram *h = kvc_metrics_histogram(m, "lat_seconds", "Latency.", &l, 1);
	kvc_metrics_observe_ns(h, 500);         /* 0.000001 */
	kvc_metrics_observe_ns(h, 3000);        /* 0.000005 */
	kvc_metrics_observe_ns(h, 2000000000);  /* 2.5 */
	kvc_metrics_observe_ns(h, 60000000000); /* +Inf */
	kvc_metrics_observe_ns(h, -5);          /* clamped to 0 */
	char *text = render(m);
	static const char *const le[] = {
		"0.000001", "0.0000025", "0.000005", "0.00001", "0.000025", "0.00005",
		"0.0001",   "0.00025",   "0.0005",   "0.001",   "0.0025",   "0.005",
		"0.01",     "0.025",     "0.05",     "0.1",     "0.25",     "0.5",
		"1",        "2.5",       "5",        "10",      "+Inf"};
	static const int cumulative[] = {2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3,
	                                 3, 3, 3, 3, 3, 3, 3, 4, 4, 4, 5};
	char expect[4096];
	int n = snprintf(expect, sizeof(expect),
	                 "# HELP lat_seconds Latency.\n# TYPE lat_seconds histogram\n");
	for (int b = 0; b <= KVC_METRICS_BUCKETS; b++)
		n += snprintf(expect + n, sizeof(expect) - (size_t)n,
		              "lat_seconds_bucket{type=\"read\",le=\"%s\"} %d\n", le[b], cumulative[b]);
	snprintf(expect + n, sizeof(expect) - (size_t)n,
	         "lat_seconds_sum{type=\"read\"} 62.000003500\n"
	         "lat_seconds_count{type=\"read\"} 5\n");
	cr_assert_str_eq(text, expect);
	free(text);
	kvc_metrics_destroy(m);
}

static void collect(void *arg)
{
	struct kvc_metrics_gauge **g = arg;
	kvc_metrics_gauge_add(*g, 10);
}

Test(metrics, collectors_run_before_rendering)
{
	struct kvc_metrics *m = kvc_metrics_create();
	struct kvc_metrics_gauge *g = kvc_metrics_gauge(m, "g", "", NULL, 0);
	cr_assert_eq(kvc_metrics_collector(m, collect, &g), 0);
	char *text = render(m);
	cr_assert_str_eq(text, "# HELP g \n# TYPE g gauge\ng 10\n");
	free(text);
	kvc_metrics_destroy(m);
}

#define THREADS 4
#define ROUNDS 200000

struct hammer {
	struct kvc_metrics_counter *c;
	struct kvc_metrics_histogram *h;
	int id;
};

static void *hammer_main(void *arg)
{
	struct hammer *w = arg;
	for (int i = 0; i < ROUNDS; i++) {
		kvc_metrics_inc(w->c);
		kvc_metrics_observe_ns(w->h, (int64_t)(i % 7) * 1000 * (w->id + 1));
	}
	return NULL;
}

Test(metrics, concurrent_observations_sum_right)
{
	struct kvc_metrics *m = kvc_metrics_create();
	struct hammer w[THREADS];
	pthread_t t[THREADS];
	struct kvc_metrics_counter *c = kvc_metrics_counter(m, "c_total", "", NULL, 0);
	struct kvc_metrics_histogram *h = kvc_metrics_histogram(m, "h_seconds", "", NULL, 0);
	for (int i = 0; i < THREADS; i++) {
		w[i] = (struct hammer){c, h, i};
		cr_assert_eq(pthread_create(&t[i], NULL, hammer_main, &w[i]), 0);
	}
	/* Scrape while they run: must not crash, and _count must be the +Inf bucket. */
	for (int i = 0; i < 20; i++)
		free(render(m));
	uint64_t sum = 0;
	for (int i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
		for (int k = 0; k < ROUNDS; k++)
			sum += (uint64_t)(k % 7) * 1000 * (uint64_t)(i + 1);
	}
	cr_assert_eq(atomic_load(&c->value), (uint64_t)THREADS * ROUNDS);
	uint64_t total = 0;
	for (int b = 0; b <= KVC_METRICS_BUCKETS; b++)
		total += atomic_load(&h->buckets[b]);
	cr_assert_eq(total, (uint64_t)THREADS * ROUNDS);
	cr_assert_eq(atomic_load(&h->sum_ns), sum);
	kvc_metrics_destroy(m);
}
