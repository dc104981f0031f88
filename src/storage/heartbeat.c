/* heartbeat: see heartbeat.h. */
#include "storage/heartbeat.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/log.h"

struct beat {
	struct kvc_storage_service *svc;
	uint32_t server;
	int interval_ms;
	uint32_t count;
	struct kvc_rpc_pool pools[KVC_CONFIG_MAX_MANAGERS];
};

/* Reports of caught-up targets, sent until the table shows them serving. */
static pthread_mutex_t reports_lock = PTHREAD_MUTEX_INITIALIZER; /* leaf */
static struct kvc_msg_mgmt_synced reports[KVC_WIRE_MAX_SYNCED];
static uint32_t report_count;

void kvc_heartbeat_report_synced(uint32_t target, uint32_t chain_version)
{
	pthread_mutex_lock(&reports_lock);
	uint32_t i = 0;
	while (i < report_count && reports[i].target != target)
		i++;
	if (i < KVC_WIRE_MAX_SYNCED) {
		reports[i] = (struct kvc_msg_mgmt_synced){target, chain_version};
		if (i == report_count)
			report_count++;
	}
	pthread_mutex_unlock(&reports_lock);
}

/* Drop the reports of targets the table shows serving (or gone). */
static void prune(struct kvc_storage_client *peers)
{
	pthread_mutex_lock(&reports_lock);
	for (uint32_t i = 0; i < report_count;) {
		struct kvc_chain c;
		bool keep = false;
		for (uint32_t id = 0; kvc_storage_client_chain(peers, id, &c); id++) {
			int pos = kvc_chains_position(&c, reports[i].target);
			if (pos >= 0)
				keep = (c.syncing >> pos) & 1u;
		}
		if (keep)
			i++;
		else
			reports[i] = reports[--report_count];
	}
	pthread_mutex_unlock(&reports_lock);
}

/* Targets of this server the table shows catching up: start their
 * resync from the last member of the chain that serves reads (the one
 * the manager put them behind), and report those done at the chain's
 * version. A resync that failed, or that was done at another version,
 * runs again on a later pass. */
static void catch_up(struct beat *b, const struct kvc_chains *table)
{
	struct kvc_storage_service *svc = b->svc;
	for (uint32_t i = 0; i < svc->target_count; i++) {
		uint32_t t = svc->first_target + i;
		int c = kvc_chains_of_target(table, t);
		if (c < 0)
			continue;
		const struct kvc_chain *chain = &table->chains[c];
		int pos = kvc_chains_position(chain, t);
		if (!((chain->syncing >> pos) & 1u))
			continue;
		struct kvc_resync_state *st = &svc->resync[i];
		uint32_t state = atomic_load(&st->state);
		if (state == KVC_RESYNC_RUNNING)
			continue;
		if (state == KVC_RESYNC_DONE && atomic_load(&st->chain) == (uint32_t)c &&
		    atomic_load(&st->chain_version) == chain->version) {
			kvc_heartbeat_report_synced(t, chain->version);
			continue;
		}
		int source = -1;
		for (uint32_t m = 0; m < chain->count; m++)
			if (!((chain->syncing >> m) & 1u))
				source = (int)m; /* the last member serving reads */
		if (source < 0)
			continue;
		struct kvc_msg_chunk_resync req = {.target = t,
		                                   .source = chain->targets[source],
		                                   .chain = (uint32_t)c,
		                                   .chain_version = chain->version};
		int rc = kvc_resync_start(svc, &req);
		if (rc < 0 && rc != -EBUSY)
			kvc_log_warn("target %u: cannot start catching up from target %u: %s", t,
			             req.source, strerror(-rc));
		else if (rc == 0)
			kvc_log_info("target %u catching up with chain %d (version %u) from target %u", t,
			             c, chain->version, req.source);
	}
}

static void *beat_main(void *arg)
{
	struct beat *b = arg;
	uint32_t next = 0;
	struct {
		struct kvc_msg_mgmt_heartbeat head;
		struct kvc_msg_mgmt_synced synced[KVC_WIRE_MAX_SYNCED];
	} msg;
	for (;;) {
		struct kvc_chains now;
		kvc_storage_client_chains(b->svc->peers, &now);
		prune(b->svc->peers);
		catch_up(b, &now);
		pthread_mutex_lock(&reports_lock);
		msg.head = (struct kvc_msg_mgmt_heartbeat){.server = b->server,
		                                           .synced_count = report_count,
		                                           .routing_version = now.version};
		memcpy(msg.synced, reports, report_count * sizeof(reports[0]));
		pthread_mutex_unlock(&reports_lock);
		uint32_t len = sizeof(msg.head) + msg.head.synced_count * sizeof(msg.synced[0]);
		for (uint32_t k = 0; k < b->count; k++) {
			uint32_t m = (next + k) % b->count;
			struct kvc_msg_mgmt_routing_reply reply;
			uint32_t reply_len = 0;
			int rc = kvc_rpc_call(&b->pools[m], KVC_MSG_MGMT_HEARTBEAT, &msg, len, &reply,
			                      sizeof(reply), &reply_len);
			if (rc == 0 && reply_len == sizeof(reply)) {
				next = m;
				if (reply.version > now.version)
					kvc_storage_client_refresh(b->svc->peers);
				break;
			}
		}
		kvc_clock_sleep_ms(b->interval_ms);
	}
	return NULL;
}

int kvc_heartbeat_register(const struct kvc_config *config, const struct kvc_config_server *me,
                           bool join, struct kvc_msg_mgmt_register_reply *out)
{
	struct kvc_msg_mgmt_register msg = {.target_count = me->target_count,
	                                    .flags = join ? KVC_MGMT_REGISTER_JOIN : 0};
	memcpy(msg.name, me->name, sizeof(msg.name));
	memcpy(msg.address, me->address, sizeof(msg.address));
	bool told = false, told_leader = false;
	for (;;) {
		bool answered = false;
		for (uint32_t m = 0; m < config->manager_count; m++) {
			struct kvc_rpc_pool pool;
			if (kvc_rpc_pool_init(&pool, config->managers[m].address, &config->cred,
			                      config->connect_timeout_ms, config->io_timeout_ms) < 0)
				continue;
			struct kvc_msg_mgmt_register_reply reply;
			uint32_t len = 0;
			int rc = kvc_rpc_call(&pool, KVC_MSG_MGMT_REGISTER, &msg, sizeof(msg), &reply,
			                      sizeof(reply), &len);
			kvc_rpc_pool_destroy(&pool);
			if (rc == -EAGAIN || kvc_rpc_is_transport_error(rc))
				continue; /* not the leader: the next */
			if (rc < 0)
				return rc;
			if (len != sizeof(reply))
				continue;
			if (reply.admitted) {
				*out = reply;
				return 0;
			}
			if (!told && join)
				kvc_log_info("pending: waiting to be admitted ('kvc-admin add-host %s')",
				             me->name);
			told = true;
			answered = true;
			break;
		}
		if (!answered && !told_leader)
			kvc_log_info("waiting for a leading manager to say which targets are %s's",
			             me->name);
		told_leader = told_leader || !answered;
		kvc_clock_sleep_ms(config->heartbeat_ms);
	}
}

int kvc_heartbeat_start(struct kvc_storage_service *svc, const struct kvc_config *config,
                        uint32_t server)
{
	if (config->manager_count == 0)
		return 0;
	struct beat *b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	*b = (struct beat){.svc = svc, .server = server, .interval_ms = config->heartbeat_ms,
	                   .count = config->manager_count};
	int rc = 0;
	for (uint32_t i = 0; i < b->count && rc == 0; i++)
		rc = kvc_rpc_pool_init(&b->pools[i], config->managers[i].address, &config->cred,
		                       config->connect_timeout_ms, config->heartbeat_ms * 2);
	pthread_t thread;
	if (rc == 0)
		rc = -pthread_create(&thread, NULL, beat_main, b);
	if (rc < 0) {
		free(b); /* pools of a failed start hold nothing but their mutex */
		return rc;
	}
	pthread_detach(thread);
	return 0;
}
