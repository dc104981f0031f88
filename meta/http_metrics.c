/*
 * http_metrics: GET /metrics (part of kvc-meta's HTTP front, see
 * http_internal.h): Prometheus text with the pools' pages, free and used
 * pages, keys, complete and leased keys, evictions and world size per
 * namespace, and requests, errors and latency per route, exists hits and
 * misses; then the registry of kvc-meta's binary service (per-message
 * requests, errors and latency: core/server.h), when given. Namespaces are bytes a client chose: escaped as label values.
 */
#include "meta/http_internal.h"

#include <stdio.h>
#include <stdlib.h>

struct metrics_out {
	FILE *out;
	struct kvc_pool_store *pools;
};

/* A namespace as a Prometheus label value: backslash, double quote and
 * newline escaped, other control bytes dropped (namespaces are bytes a
 * client chose). */
static void label_value(const char *ns, char *out, size_t cap)
{
	size_t n = 0;
	for (const unsigned char *p = (const unsigned char *)ns; *p && n + 3 < cap; p++) {
		if (*p == '\\' || *p == '"') {
			out[n++] = '\\';
			out[n++] = (char)*p;
		} else if (*p == '\n') {
			out[n++] = '\\';
			out[n++] = 'n';
		} else if (*p >= 0x20 && *p != 0x7f) {
			out[n++] = (char)*p;
		}
	}
	out[n] = '\0';
}

static int metrics_pool(void *arg, const char *raw_ns, uint32_t rank, uint32_t num_pages,
                        uint32_t free_pages)
{
	struct metrics_out *m = arg;
	char ns[2 * KVC_POOL_MAX_NAMESPACE + 1];
	label_value(raw_ns, ns, sizeof(ns));
	fprintf(m->out, "kvc_pool_pages{namespace=\"%s\",rank=\"%u\"} %u\n", ns, rank, num_pages);
	fprintf(m->out, "kvc_pool_pages_free{namespace=\"%s\",rank=\"%u\"} %u\n", ns, rank,
	        free_pages);
	fprintf(m->out, "kvc_pool_pages_used{namespace=\"%s\",rank=\"%u\"} %u\n", ns, rank,
	        num_pages - free_pages);
	struct kvc_pool_stats st;
	if (rank == 0 && kvc_pool_stats(m->pools, raw_ns, 0, kvc_pool_now_ms(m->pools), &st) == 0) {
		fprintf(m->out, "kvc_pool_keys{namespace=\"%s\"} %llu\n", ns,
		        (unsigned long long)st.keys);
		fprintf(m->out, "kvc_pool_keys_complete{namespace=\"%s\"} %llu\n", ns,
		        (unsigned long long)st.complete_keys);
		fprintf(m->out, "kvc_pool_keys_leased{namespace=\"%s\"} %llu\n", ns,
		        (unsigned long long)st.leased_keys);
		fprintf(m->out, "kvc_pool_evictions_total{namespace=\"%s\"} %llu\n", ns,
		        (unsigned long long)st.evictions);
		fprintf(m->out, "kvc_pool_world_size{namespace=\"%s\"} %u\n", ns, st.world_size);
	}
	return 0;
}

void kvc_http_metrics(struct kvc_http_server *s, struct reply *r)
{
	char *text = NULL;
	size_t size = 0;
	FILE *out = open_memstream(&text, &size);
	if (!out) {
		kvc_http_fail(r, 500, "out of memory");
		return;
	}
	struct metrics_out m = {out, s->pools};
	fprintf(out, "# TYPE kvc_pool_pages gauge\n");
	kvc_pool_list(s->pools, metrics_pool, &m);
	fprintf(out, "# TYPE kvc_http_requests_total counter\n");
	for (int i = 0; i < R_COUNT; i++) {
		uint64_t n = atomic_load(&s->requests[i]);
		if (!n)
			continue;
		fprintf(out, "kvc_http_requests_total{route=\"%s\"} %llu\n", kvc_http_route_names[i],
		        (unsigned long long)n);
		fprintf(out, "kvc_http_errors_total{route=\"%s\"} %llu\n", kvc_http_route_names[i],
		        (unsigned long long)atomic_load(&s->errors[i]));
		fprintf(out, "kvc_http_request_seconds_sum{route=\"%s\"} %.6f\n", kvc_http_route_names[i],
		        (double)atomic_load(&s->latency_us[i]) / 1e6);
		fprintf(out, "kvc_http_request_seconds_count{route=\"%s\"} %llu\n", kvc_http_route_names[i],
		        (unsigned long long)n);
	}
	fprintf(out, "kvc_pool_exists_hits_total %llu\nkvc_pool_exists_misses_total %llu\n",
	        (unsigned long long)atomic_load(&s->hits),
	        (unsigned long long)atomic_load(&s->misses));
	if (s->options.metrics) /* the namespace service's, per message (core/server.h) */
		kvc_metrics_render(s->options.metrics, out);
	fclose(out);
	r->status = 200;
	r->text = text;
}
