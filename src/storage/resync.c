/* resync: see resync.h for what it does and why it is right. */
#include "storage/resync.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/storage_target.h"
#include "core/clock.h"
#include "core/layout.h"
#include "core/log.h"
#include "storage/service.h"

static struct kvc_resync_state *state_of(struct kvc_storage_service *svc, uint32_t target)
{
	return &svc->resync[target - svc->first_target];
}

static bool local(const struct kvc_storage_service *svc, uint32_t target)
{
	return target >= svc->first_target && target - svc->first_target < svc->target_count;
}

/* Whether target follows the resync's table: a member of chain at
 * version in this server's table. 0, -ENXIO (no such chain), -ESTALE
 * (the chain at another version, or without target); the chain in *copy. */
static int follows(const struct kvc_storage_service *svc, uint32_t chain, uint32_t version,
                   uint32_t target, struct kvc_chain *copy)
{
	if (!kvc_storage_client_chain(svc->peers, chain, copy))
		return -ENXIO;
	return copy->version == version && kvc_chains_position(copy, target) >= 0 ? 0 : -ESTALE;
}

int kvc_resync_check(const struct kvc_storage_service *svc,
                     const struct kvc_msg_chunk_resync *m)
{
	if (!svc->peers)
		return -EOPNOTSUPP;
	if (m->flags || m->reserved || m->source == m->target)
		return -EINVAL;
	if (!local(svc, m->target))
		return -ENXIO;
	struct kvc_chain c;
	int rc = follows(svc, m->chain, m->chain_version, m->target, &c);
	if (rc == 0 && kvc_chains_position(&c, m->source) < 0)
		rc = -ESTALE;
	return rc;
}

/* One resync's working set. */
struct run {
	struct kvc_storage_service *svc;
	struct kvc_chunk_store *store;
	struct kvc_resync_state *st;
	uint32_t target, source, chain, version;
	uint8_t *buf; /* one whole chunk */
	struct kvc_chunk_entry *local_scratch;
	/* the two listings' current pages: [0] the source's, [1] the target's */
	struct kvc_msg_chunk_entry *page[2];
	uint32_t at[2], count[2];
	bool more[2], started[2];
};

/* The next page of side s after its last entry (from the start at
 * first). Returns 0 or -errno. */
static int refill(struct run *r, int s)
{
	struct kvc_msg_chunk_entry last = {0};
	bool after = r->started[s];
	if (after)
		last = r->page[s][r->count[s] - 1];
	int n;
	if (s == 0) {
		n = kvc_storage_target_list(r->svc->peers, r->source, r->chain, r->version, after,
		                            last.inode, last.chunk,
		                            r->page[0], RESYNC_PAGE, &r->more[0]);
	} else {
		n = kvc_chunk_store_list(r->store, after, last.inode, last.chunk, r->local_scratch,
		                         RESYNC_PAGE, &r->more[1]);
		for (int i = 0; i < n; i++)
			r->page[1][i] = (struct kvc_msg_chunk_entry){
				.inode = r->local_scratch[i].inode, .chunk = r->local_scratch[i].chunk,
				.length = r->local_scratch[i].length,
				.chunk_crc = r->local_scratch[i].chunk_crc};
	}
	if (n < 0)
		return n;
	r->count[s] = (uint32_t)n;
	r->at[s] = 0;
	r->started[s] = n > 0 || r->started[s];
	if (n == 0)
		r->more[s] = false;
	return 0;
}

/* Set t's chunk to what the source holds now (resync.h: K held in the
 * in-flight table across the read there and the set here). */
static int sync_chunk(struct run *r, uint64_t inode, uint32_t chunk)
{
	struct kvc_storage_service *svc = r->svc;
	int64_t give_up = kvc_clock_monotonic_ns() + (int64_t)RESYNC_RETRY_MS * 1000000;
	uint32_t present = 0;
	int rc;
	for (long wait_ms = 1;; wait_ms = wait_ms < 50 ? 2 * wait_ms : 50) {
		rc = kvc_inflight_begin(svc->inflight, r->target, inode, chunk, svc->io_timeout_ms);
		bool busy = rc == -ETIMEDOUT; /* a write of K here took long: not the source */
		if (rc == 0) {
			rc = kvc_storage_target_read_chunk(svc->peers, r->source, r->chain, r->version,
			                                   inode, chunk, r->buf, KVC_LAYOUT_MAX_CHUNK,
			                                   &present);
			if (rc == 0)
				rc = kvc_chunk_store_set(r->store, inode, chunk, r->buf, present);
			kvc_inflight_end(svc->inflight, r->target, inode, chunk);
			busy = rc == -EAGAIN;
		}
		/* A write of K in flight at the source, or here: let K go so it
		 * gets through, and come back. */
		if (!busy || kvc_clock_monotonic_ns() > give_up)
			break;
		atomic_fetch_add(&r->st->retries, 1);
		kvc_clock_sleep_ms(wait_ms);
	}
	if (rc < 0)
		return rc;
	struct kvc_resync_state *st = r->st;
	if (present) {
		atomic_fetch_add(&st->copied, 1);
		atomic_fetch_add(&st->total_copied, 1);
		atomic_fetch_add(&st->bytes, present);
		atomic_fetch_add(&st->total_bytes, present);
	} else {
		atomic_fetch_add(&st->dropped, 1);
		atomic_fetch_add(&st->total_dropped, 1);
	}
	return 0;
}

static int compare_keys(const struct kvc_msg_chunk_entry *a, const struct kvc_msg_chunk_entry *b)
{
	if (a->inode != b->inode)
		return a->inode < b->inode ? -1 : 1;
	return a->chunk < b->chunk ? -1 : a->chunk > b->chunk;
}

/* Wait out every change of t made under an older table (resync.h
 * "Changes at t under an older table"): t follows the resync's table
 * first (-ESTALE else), then its apply gate drains. Returns 0 or -errno. */
static int drain_local(struct run *r)
{
	struct kvc_chain copy;
	int rc = follows(r->svc, r->chain, r->version, r->target, &copy) == 0 ? 0 : -ESTALE;
	if (rc == 0 && r->svc->inflight)
		rc = kvc_inflight_apply_drain(r->svc->inflight, r->target, r->svc->io_timeout_ms);
	return rc;
}

/* One whole comparison of the two listings. Returns 0 or -errno. */
static int pass(struct run *r)
{
	int rc = 0;
	for (int s = 0; s < 2; s++) {
		r->started[s] = false;
		r->more[s] = true;
		r->count[s] = r->at[s] = 0;
	}
	while (rc == 0) {
		for (int s = 0; s < 2 && rc == 0; s++)
			if (r->at[s] == r->count[s] && r->more[s])
				rc = refill(r, s);
		if (rc < 0)
			break;
		const struct kvc_msg_chunk_entry *p = r->at[0] < r->count[0] ? &r->page[0][r->at[0]]
		                                                             : NULL;
		const struct kvc_msg_chunk_entry *t = r->at[1] < r->count[1] ? &r->page[1][r->at[1]]
		                                                             : NULL;
		if (!p && !t)
			break;
		int order = !p ? 1 : !t ? -1 : compare_keys(p, t);
		const struct kvc_msg_chunk_entry *e = order <= 0 ? p : t;
		bool same = order == 0 && p->length == t->length && p->chunk_crc == t->chunk_crc;
		atomic_fetch_add(&r->st->compared, 1);
		atomic_fetch_add(&r->st->total_compared, 1);
		if (!same)
			rc = sync_chunk(r, e->inode, e->chunk);
		r->at[0] += order <= 0;
		r->at[1] += order >= 0;
	}
	return rc;
}

/* The resync, with the target's syncing flag held; the flag is let go
 * before the final state is published, so whoever sees DONE or FAILED may
 * start the next one at once. */
static int run_held(struct kvc_storage_service *svc, uint32_t target, uint32_t source,
                    uint32_t chain, uint32_t chain_version)
{
	struct run r = {.svc = svc, .store = svc->stores[target - svc->first_target],
	                .st = state_of(svc, target), .target = target, .source = source,
	                .chain = chain, .version = chain_version};
	struct kvc_resync_state *st = r.st;
	atomic_store(&st->source, source);
	atomic_store(&st->chain, chain);
	atomic_store(&st->chain_version, chain_version);
	atomic_store(&st->result, 0);
	atomic_store(&st->passes, 0);
	atomic_store(&st->compared, 0);
	atomic_store(&st->copied, 0);
	atomic_store(&st->dropped, 0);
	atomic_store(&st->bytes, 0);
	atomic_store(&st->retries, 0);
	atomic_store(&st->ended_ns, 0);
	atomic_store(&st->started_ns, (int64_t)kvc_clock_monotonic_ns());
	atomic_store(&st->state, KVC_RESYNC_RUNNING);
	atomic_fetch_add(&st->runs, 1);
	kvc_log_info("resync of target %u from target %u (chain %u version %u) started", target,
	             source, chain, chain_version);
	r.buf = malloc(KVC_LAYOUT_MAX_CHUNK);
	r.local_scratch = malloc(RESYNC_PAGE * sizeof(*r.local_scratch));
	r.page[0] = malloc(RESYNC_PAGE * sizeof(*r.page[0]));
	r.page[1] = malloc(RESYNC_PAGE * sizeof(*r.page[1]));
	int rc = r.buf && r.local_scratch && r.page[0] && r.page[1] ? 0 : -ENOMEM;
	if (rc == 0)
		rc = drain_local(&r);
	if (rc == 0)
		rc = pass(&r);
	if (rc != -ENOMEM)
		atomic_fetch_add(&st->passes, 1);
	/* What was copied must survive a crash before the target serves. */
	if (rc == 0)
		rc = kvc_chunk_store_sync(r.store);
	free(r.buf);
	free(r.local_scratch);
	free(r.page[0]);
	free(r.page[1]);
	int64_t elapsed_ms = ((int64_t)kvc_clock_monotonic_ns() - atomic_load(&st->started_ns)) /
	                     1000000;
	if (rc < 0) {
		atomic_fetch_add(&st->failures, 1);
		kvc_log_error("resync of target %u from target %u failed after %lld ms: %s", target,
		              source, (long long)elapsed_ms, strerror(-rc));
	} else {
		kvc_log_info("resync of target %u from target %u done in %lld ms: %llu chunks "
		             "compared, %llu copied (%llu bytes), %llu dropped", target, source,
		             (long long)elapsed_ms, (unsigned long long)atomic_load(&st->compared),
		             (unsigned long long)atomic_load(&st->copied),
		             (unsigned long long)atomic_load(&st->bytes),
		             (unsigned long long)atomic_load(&st->dropped));
	}
	atomic_store(&st->result, rc);
	atomic_store(&st->ended_ns, (int64_t)kvc_clock_monotonic_ns());
	atomic_store(&st->syncing, false);
	atomic_store(&st->state, rc < 0 ? KVC_RESYNC_FAILED : KVC_RESYNC_DONE);
	return rc;
}

int kvc_resync_target(struct kvc_storage_service *svc, uint32_t target, uint32_t source,
                      uint32_t chain, uint32_t chain_version)
{
	if (!local(svc, target) || !svc->peers)
		return -ENXIO;
	bool idle = false;
	if (!atomic_compare_exchange_strong(&state_of(svc, target)->syncing, &idle, true))
		return -EBUSY;
	return run_held(svc, target, source, chain, chain_version);
}

struct job {
	struct kvc_storage_service *svc;
	struct kvc_msg_chunk_resync request;
};

static void *resync_main(void *arg)
{
	struct job *job = arg;
	struct kvc_storage_service *svc = job->svc;
	const struct kvc_msg_chunk_resync *m = &job->request;
	run_held(svc, m->target, m->source, m->chain, m->chain_version);
	free(job);
	return NULL;
}

int kvc_resync_start(struct kvc_storage_service *svc, const struct kvc_msg_chunk_resync *m)
{
	int rc = kvc_resync_check(svc, m);
	if (rc < 0)
		return rc;
	struct kvc_resync_state *st = state_of(svc, m->target);
	bool idle = false;
	if (!atomic_compare_exchange_strong(&st->syncing, &idle, true))
		return -EBUSY;
	struct job *job = malloc(sizeof(*job));
	pthread_t thread;
	pthread_attr_t attr;
	rc = job ? 0 : -ENOMEM;
	if (rc == 0) {
		*job = (struct job){svc, *m};
		/* Running state before the answer: a status asked right after
		 * the reply sees this resync, not the last one. */
		atomic_store(&st->started_ns, (int64_t)kvc_clock_monotonic_ns());
		atomic_store(&st->state, KVC_RESYNC_RUNNING);
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		rc = -pthread_create(&thread, &attr, resync_main, job);
		pthread_attr_destroy(&attr);
	}
	if (rc < 0) {
		free(job);
		atomic_store(&st->state, KVC_RESYNC_FAILED);
		atomic_store(&st->result, rc);
		atomic_store(&st->syncing, false);
	}
	return rc;
}

int kvc_resync_status(const struct kvc_storage_service *svc, uint32_t target,
                      struct kvc_msg_resync_status *out)
{
	if (!local(svc, target))
		return -ENXIO;
	const struct kvc_resync_state *st = &svc->resync[target - svc->first_target];
	uint32_t state = atomic_load(&st->state);
	int64_t started = atomic_load(&st->started_ns), ended = atomic_load(&st->ended_ns);
	int64_t end = state == KVC_RESYNC_RUNNING || !ended ? (int64_t)kvc_clock_monotonic_ns()
	                                                    : ended;
	*out = (struct kvc_msg_resync_status){
		.state = state, .result = atomic_load(&st->result),
		.source = atomic_load(&st->source), .chain = atomic_load(&st->chain),
		.chain_version = atomic_load(&st->chain_version),
		.passes = atomic_load(&st->passes), .compared = atomic_load(&st->compared),
		.copied = atomic_load(&st->copied), .dropped = atomic_load(&st->dropped),
		.bytes = atomic_load(&st->bytes), .retries = atomic_load(&st->retries),
		.elapsed_ms = state == KVC_RESYNC_IDLE || !started ? 0
		                                                   : (uint64_t)(end - started) / 1000000};
	return 0;
}
