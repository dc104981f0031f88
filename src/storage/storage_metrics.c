/* storage_metrics: see storage_metrics.h. */
#include "storage/storage_metrics.h"

#include <errno.h>
#include <stdio.h>

#include "core/metrics_http.h"

enum gauge { CHUNKS, TOTAL, FREE, USED, RESERVE, AVAILABLE, REFUSING, GAUGES };

static const struct {
	const char *name, *help;
} gauges[GAUGES] = {
	[CHUNKS] = {"kvc_storage_target_chunks", "Chunks stored on the target."},
	[TOTAL] = {"kvc_storage_target_total_bytes", "Size of the target's filesystem."},
	[FREE] = {"kvc_storage_target_free_bytes", "Free bytes of the target's filesystem."},
	[USED] = {"kvc_storage_target_used_bytes", "Total minus free bytes of the filesystem."},
	[RESERVE] = {"kvc_storage_target_reserve_bytes",
	             "Free space kept back from chunk data (storage_reserve_mb)."},
	[AVAILABLE] = {"kvc_storage_target_available_bytes", "What chunk data may still take."},
	[REFUSING] = {"kvc_storage_target_refusing",
	              "1 while the target is at its reserve (new data gets ENOSPC), else 0."},
};

/* The resync counters of a target (storage/resync.h), since start. */
enum resync_counter { COMPARED, COPIED, DROPPED, BYTES, RUNS, FAILURES, RESYNC_COUNTERS };

static const struct {
	const char *name, *help;
} resync_counters[RESYNC_COUNTERS] = {
	[COMPARED] = {"kvc_storage_resync_chunks_compared_total",
	              "Chunks a resync of the target compared with its source."},
	[COPIED] = {"kvc_storage_resync_chunks_copied_total",
	            "Chunks a resync set to the source's bytes (missing or different)."},
	[DROPPED] = {"kvc_storage_resync_chunks_dropped_total",
	             "Chunks a resync dropped (the source does not have them)."},
	[BYTES] = {"kvc_storage_resync_bytes_total", "Bytes resyncs copied to the target."},
	[RUNS] = {"kvc_storage_resync_runs_total", "Resyncs of the target started."},
	[FAILURES] = {"kvc_storage_resync_failures_total", "Resyncs of the target that failed."},
};

struct target_series {
	struct kvc_metrics_gauge *gauge[GAUGES];
	struct kvc_metrics_counter *refused;
	struct kvc_metrics_counter *resync[RESYNC_COUNTERS];
	struct kvc_metrics_gauge *resync_running;
	/* pieces read at once (cached), by the ring through the page cache,
	 * by the ring with O_DIRECT */
	struct kvc_metrics_counter *reads[3];
};

/* Process-wide: one registry per kvc-storage, alive until exit. */
static struct {
	struct kvc_metrics *registry;
	struct kvc_storage_service *svc;
	struct target_series targets[KVC_WIRE_MAX_TARGETS];
	struct kvc_metrics_counter *space_errors;
	/* reads, read bytes, writes, write bytes, faults, read pieces, read spans */
	struct kvc_metrics_counter *place[7];
	struct kvc_metrics_counter *repairs[3]; /* queued, repaired, failed */
	struct kvc_metrics_counter *pieces_merged;
} metrics;

struct kvc_metrics *kvc_storage_metrics_registry(void)
{
	return metrics.registry;
}

/* At scrape time: the chunk stores' space, as the SPACE message says it. */
static void collect_targets(void *arg)
{
	struct kvc_storage_service *svc = arg;
	kvc_metrics_counter_set(metrics.repairs[0], atomic_load(&svc->repairs.queued));
	kvc_metrics_counter_set(metrics.repairs[1], atomic_load(&svc->repairs.repaired));
	kvc_metrics_counter_set(metrics.repairs[2], atomic_load(&svc->repairs.failed));
	kvc_metrics_counter_set(metrics.pieces_merged, atomic_load(&svc->pieces_merged));
	struct kvc_place_table *place = svc->place;
	if (place) {
		kvc_metrics_counter_set(metrics.place[0], atomic_load(&place->read_ops));
		kvc_metrics_counter_set(metrics.place[1], atomic_load(&place->read_bytes));
		kvc_metrics_counter_set(metrics.place[2], atomic_load(&place->write_ops));
		kvc_metrics_counter_set(metrics.place[3], atomic_load(&place->write_bytes));
		kvc_metrics_counter_set(metrics.place[4], atomic_load(&place->faults));
		kvc_metrics_counter_set(metrics.place[5], atomic_load(&place->read_pieces));
		kvc_metrics_counter_set(metrics.place[6], atomic_load(&place->read_spans));
	}
	for (uint32_t i = 0; i < svc->target_count; i++) {
		struct kvc_chunk_space s;
		struct target_series *t = &metrics.targets[i];
		const struct kvc_resync_state *r = &svc->resync[i];
		const uint64_t resync[RESYNC_COUNTERS] = {
			[COMPARED] = atomic_load(&r->total_compared),
			[COPIED] = atomic_load(&r->total_copied),
			[DROPPED] = atomic_load(&r->total_dropped), [BYTES] = atomic_load(&r->total_bytes),
			[RUNS] = atomic_load(&r->runs), [FAILURES] = atomic_load(&r->failures)};
		for (int c = 0; c < RESYNC_COUNTERS; c++)
			kvc_metrics_counter_set(t->resync[c], resync[c]);
		kvc_metrics_set(t->resync_running, atomic_load(&r->syncing));
		uint64_t reads[3];
		kvc_chunk_store_read_counts(svc->stores[i], &reads[0], &reads[1], &reads[2]);
		for (int k = 0; k < 3; k++)
			kvc_metrics_counter_set(t->reads[k], reads[k]);
		if (kvc_chunk_store_space(svc->stores[i], &s) < 0) {
			kvc_metrics_inc(metrics.space_errors);
			continue;
		}
		const int64_t value[GAUGES] = {
			[CHUNKS] = (int64_t)s.chunks, [TOTAL] = (int64_t)s.total_bytes,
			[FREE] = (int64_t)s.free_bytes,
			[USED] = (int64_t)(s.total_bytes - (s.free_bytes < s.total_bytes ? s.free_bytes
			                                                                  : s.total_bytes)),
			[RESERVE] = (int64_t)s.reserve_bytes, [AVAILABLE] = (int64_t)s.available_bytes,
			[REFUSING] = s.refusing};
		for (int g = 0; g < GAUGES; g++)
			kvc_metrics_set(t->gauge[g], value[g]);
		kvc_metrics_counter_set(t->refused, s.refused_writes);
	}
}

static int register_targets(struct kvc_metrics *m, struct kvc_storage_service *svc)
{
	static const char *const results[3] = {"queued", "repaired", "failed"};
	for (int k = 0; k < 3; k++) {
		const struct kvc_metrics_label label = {"result", results[k]};
		metrics.repairs[k] = kvc_metrics_counter(
			m, "kvc_storage_repairs_total",
			"Bad chunk copies found by reads: queued for repair, repaired from another "
			"member, repairs that failed.", &label, 1);
		if (!metrics.repairs[k])
			return -ENOMEM;
	}
	for (uint32_t i = 0; i < svc->target_count; i++) {
		char id[16];
		snprintf(id, sizeof(id), "%u", svc->first_target + i);
		const struct kvc_metrics_label label = {"target", id};
		struct target_series *t = &metrics.targets[i];
		for (int g = 0; g < GAUGES; g++)
			if (!(t->gauge[g] = kvc_metrics_gauge(m, gauges[g].name, gauges[g].help, &label, 1)))
				return -ENOMEM;
		t->refused = kvc_metrics_counter(m, "kvc_storage_target_refused_writes_total",
		                                 "Writes refused for the reserve since start.",
		                                 &label, 1);
		if (!t->refused)
			return -ENOMEM;
		static const char *const paths[3] = {"cached", "io_uring", "direct"};
		for (int k = 0; k < 3; k++) {
			const struct kvc_metrics_label labels[2] = {label, {"path", paths[k]}};
			t->reads[k] = kvc_metrics_counter(
				m, "kvc_storage_target_piece_reads_total",
				"Chunk file pieces read: at once from the page cache, checked as they "
				"landed (cached), through the io_uring by the page cache (io_uring), or "
				"through the io_uring with O_DIRECT (direct).", labels, 2);
			if (!t->reads[k])
				return -ENOMEM;
		}
		for (int c = 0; c < RESYNC_COUNTERS; c++)
			if (!(t->resync[c] = kvc_metrics_counter(m, resync_counters[c].name,
			                                         resync_counters[c].help, &label, 1)))
				return -ENOMEM;
		t->resync_running = kvc_metrics_gauge(
			m, "kvc_storage_resync_running",
			"1 while a resync of the target runs (it serves no reads meanwhile), else 0.",
			&label, 1);
		if (!t->resync_running)
			return -ENOMEM;
	}
	metrics.space_errors = kvc_metrics_counter(
		m, "kvc_storage_target_space_errors_total",
		"Scrapes that could not look at a target's space (its gauges kept their values).",
		NULL, 0);
	metrics.place[0] = kvc_metrics_counter(
		m, "kvc_storage_place_reads_total",
		"PLACE_READ requests served (same-host placement into client memory).", NULL, 0);
	metrics.place[1] = kvc_metrics_counter(m, "kvc_storage_place_read_bytes_total",
	                                       "Bytes placed into client memory.", NULL, 0);
	metrics.place[2] = kvc_metrics_counter(m, "kvc_storage_place_writes_total",
	                                       "PLACE_WRITE requests applied.", NULL, 0);
	metrics.place[3] = kvc_metrics_counter(m, "kvc_storage_place_write_bytes_total",
	                                       "Bytes taken from client memory.", NULL, 0);
	metrics.place[4] = kvc_metrics_counter(
		m, "kvc_storage_place_faults_total",
		"Placed pieces whose client memory was gone (EFAULT for that piece).", NULL, 0);
	metrics.place[5] = kvc_metrics_counter(m, "kvc_storage_place_read_pieces_total",
	                                       "Pieces of the PLACE_READs served.", NULL, 0);
	metrics.place[6] = kvc_metrics_counter(
		m, "kvc_storage_place_read_spans_total",
		"Places in client memory the PLACE_READs' pieces went to (more than their pieces: a "
		"piece scattered, as a ring key's segments are).", NULL, 0);
	metrics.pieces_merged = kvc_metrics_counter(
		m, "kvc_storage_read_pieces_merged_total",
		"Read pieces served with the piece before them by one chunk read (pieces that "
		"continue each other in a chunk: a ring key's segments).", NULL, 0);
	for (int i = 0; i < 7; i++)
		if (!metrics.place[i] || !metrics.pieces_merged)
			return -ENOMEM;
	return metrics.space_errors ? kvc_metrics_collector(m, collect_targets, svc) : -ENOMEM;
}

int kvc_storage_metrics_start(struct kvc_storage_service *svc, struct kvc_server *server,
                              struct kvc_server *place, const char *address)
{
	struct kvc_metrics_http *http;
	struct kvc_metrics *m = kvc_metrics_create();
	if (!m)
		return -ENOMEM;
	int rc = kvc_server_metrics_register(server, m, "kvc_storage", kvc_storage_service_serves);
	if (rc == 0 && place)
		rc = kvc_server_metrics_register(place, m, "kvc_storage_placement",
		                                 kvc_storage_service_serves);
	if (rc == 0)
		rc = register_targets(m, svc);
	if (rc == 0 && svc->peers)
		rc = kvc_storage_client_metrics(svc->peers, m, "kvc_storage");
	if (rc == 0 && *address)
		rc = kvc_metrics_http_start(address, m, &http); /* serves until exit */
	if (rc < 0) {
		server->metrics = NULL; /* no counting into a registry about to go */
		if (place)
			place->metrics = NULL;
		kvc_metrics_destroy(m);
		return rc;
	}
	metrics.registry = m;
	metrics.svc = svc;
	return 0;
}
