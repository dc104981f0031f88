/* repair: see repair.h. */
#include "storage/repair.h"

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

#define QUEUE 256
#define GIVE_UP_MS 30000

struct item {
	uint32_t target, chunk;
	uint64_t inode;
};

static struct {
	pthread_mutex_t lock; /* leaf: the queue */
	pthread_cond_t work;
	struct item items[QUEUE];
	int head, count;
	bool started;
} q = {.lock = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER};

void kvc_repair_queue(struct kvc_storage_service *svc, uint32_t target, uint64_t inode,
                      uint32_t chunk)
{
	bool queued = false;
	pthread_mutex_lock(&q.lock);
	bool there = false;
	for (int i = 0; i < q.count && !there; i++) {
		const struct item *it = &q.items[(q.head + i) % QUEUE];
		there = it->target == target && it->inode == inode && it->chunk == chunk;
	}
	if (q.started && !there && q.count < QUEUE) {
		q.items[(q.head + q.count++) % QUEUE] = (struct item){target, chunk, inode};
		pthread_cond_signal(&q.work);
		queued = true;
	}
	pthread_mutex_unlock(&q.lock);
	if (queued)
		atomic_fetch_add(&svc->repairs.queued, 1);
}

/* Set the copy read under chain c's version as a change of the target
 * is made: inside its apply gate, while this server still follows that
 * version (-ESTALE else: read again under the new table), so a resync's
 * drain (resync.h) waits it out and it never lands after one. */
static int set_at_version(struct kvc_storage_service *svc, struct kvc_chunk_store *store,
                          const struct item *it, uint32_t c, uint32_t version,
                          const uint8_t *buf, uint32_t present)
{
	unsigned ticket = kvc_inflight_apply_enter(svc->inflight, it->target);
	struct kvc_chain now;
	int rc = kvc_storage_client_chain(svc->peers, c, &now) && now.version == version
	         ? kvc_chunk_store_set(store, it->inode, it->chunk, buf, present) : -ESTALE;
	kvc_inflight_apply_leave(svc->inflight, it->target, ticket);
	return rc;
}

/* Copy the chunk from another member: 0, or -errno. */
static int repair(struct kvc_storage_service *svc, const struct item *it, uint8_t *buf)
{
	struct kvc_chunk_store *store = svc->stores[it->target - svc->first_target];
	struct kvc_chains *table = malloc(sizeof(*table));
	if (!table)
		return -ENOMEM;
	kvc_storage_client_chains(svc->peers, table);
	int c = kvc_chains_of_target(table, it->target), rc = -ENXIO;
	int64_t give_up = (int64_t)kvc_clock_monotonic_ns() + GIVE_UP_MS * 1000000ll;
	for (long wait_ms = 1; c >= 0;) {
		const struct kvc_chain *chain = &table->chains[c];
		int source = -1;
		for (uint32_t m = 0; m < chain->count; m++)
			if (chain->targets[m] != it->target && !((chain->syncing >> m) & 1u))
				source = (int)chain->targets[m]; /* the last serving member */
		if (source < 0) {
			rc = -ENODATA; /* no other copy */
			break;
		}
		uint32_t present = 0;
		rc = kvc_inflight_begin(svc->inflight, it->target, it->inode, it->chunk,
		                        svc->io_timeout_ms);
		if (rc == 0) {
			rc = kvc_storage_target_read_chunk(svc->peers, (uint32_t)source, (uint32_t)c,
			                                   chain->version, it->inode, it->chunk, buf,
			                                   KVC_LAYOUT_MAX_CHUNK, &present);
			if (rc == 0)
				rc = set_at_version(svc, store, it, (uint32_t)c, chain->version, buf,
				                    present);
			kvc_inflight_end(svc->inflight, it->target, it->inode, it->chunk);
		}
		bool again = rc == -EAGAIN || rc == -ETIMEDOUT || rc == -ESTALE;
		if (!again || (int64_t)kvc_clock_monotonic_ns() > give_up)
			break;
		kvc_clock_sleep_ms(wait_ms);
		wait_ms = wait_ms < 50 ? 2 * wait_ms : 50;
		kvc_storage_client_chains(svc->peers, table); /* it may have changed */
		c = kvc_chains_of_target(table, it->target);
	}
	free(table);
	return rc;
}

static void *repair_main(void *arg)
{
	struct kvc_storage_service *svc = arg;
	uint8_t *buf = malloc(KVC_LAYOUT_MAX_CHUNK);
	for (;;) {
		pthread_mutex_lock(&q.lock);
		while (q.count == 0)
			pthread_cond_wait(&q.work, &q.lock);
		struct item it = q.items[q.head];
		pthread_mutex_unlock(&q.lock);
		int rc = buf ? repair(svc, &it, buf) : -ENOMEM;
		pthread_mutex_lock(&q.lock); /* done with it: off the queue */
		q.head = (q.head + 1) % QUEUE;
		q.count--;
		pthread_mutex_unlock(&q.lock);
		if (rc == 0) {
			atomic_fetch_add(&svc->repairs.repaired, 1);
			kvc_log_info("target %u: repaired inode %llu chunk %u from another member",
			             it.target, (unsigned long long)it.inode, it.chunk);
		} else {
			atomic_fetch_add(&svc->repairs.failed, 1);
			kvc_log_warn("target %u: could not repair inode %llu chunk %u: %s", it.target,
			             (unsigned long long)it.inode, it.chunk, strerror(-rc));
		}
	}
	return NULL;
}

int kvc_repair_start(struct kvc_storage_service *svc)
{
	if (!svc->peers)
		return 0;
	pthread_t thread;
	int rc = pthread_create(&thread, NULL, repair_main, svc);
	if (rc)
		return -rc;
	pthread_detach(thread);
	pthread_mutex_lock(&q.lock);
	q.started = true;
	pthread_mutex_unlock(&q.lock);
	return 0;
}
