/* admin_chains: see admin_chains.h. */
#include "admin_chains.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/chains.h"
#include "core/clock.h"
#include "core/rpc.h"

#define WAIT_OUT_S 30   /* a drain shows within a few monitor passes */
#define WAIT_BACK_S 600 /* a target let back in catches up first */

/* MGMT_DRAIN to the managers in turn until one leads. */
static int ask(const struct kvc_config *config, uint32_t target, bool drain)
{
	int rc = -ENOTCONN;
	for (uint32_t i = 0; i < config->manager_count; i++) {
		struct kvc_rpc_pool pool;
		if (kvc_rpc_pool_init(&pool, config->managers[i].address, &config->cred,
		                      config->connect_timeout_ms, config->io_timeout_ms) < 0)
			continue;
		struct kvc_msg_mgmt_drain m = {.target = target, .drain = drain};
		struct kvc_msg_mgmt_routing_reply reply;
		uint32_t len = 0;
		rc = kvc_rpc_call(&pool, KVC_MSG_MGMT_DRAIN, &m, sizeof(m), &reply, sizeof(reply),
		                  &len);
		kvc_rpc_pool_destroy(&pool);
		if (rc != -EAGAIN && !kvc_rpc_is_transport_error(rc))
			break;
	}
	return rc;
}

/* Where target stands: its chain (-1: in none), and whether it serves. */
static int where(struct kvc_storage_client *storage, uint32_t target, bool *serving,
                 uint64_t *version)
{
	static struct kvc_chains t;
	kvc_storage_client_refresh(storage);
	kvc_storage_client_chains(storage, &t);
	*version = t.version;
	int c = kvc_chains_of_target(&t, target);
	*serving = c >= 0 && !((t.chains[c].syncing >> kvc_chains_position(&t.chains[c], target)) &
	                       1u);
	return c;
}

int admin_drain_run(struct kvc_storage_client *storage, const struct kvc_config *config,
                    uint32_t target, bool drain, bool json)
{
	const char *verb = drain ? "drain" : "undrain";
	if (config->manager_count == 0) {
		fprintf(stderr, "kvc-admin %s: the cluster file names no managers ([mgmt NAME]): "
		                "chains change only through them\n", verb);
		return 1;
	}
	if (target >= config->target_count) {
		fprintf(stderr, "kvc-admin %s: no target %u (the cluster has %u)\n", verb, target,
		        config->target_count);
		return 1;
	}
	int rc = ask(config, target, drain);
	if (rc < 0) {
		fprintf(stderr, "kvc-admin %s: %s\n", verb,
		        rc == -EBUSY ? "the target is its chain's last member serving reads: it "
		                       "holds the only readable copy"
		        : rc == -EAGAIN || kvc_rpc_is_transport_error(rc) ? "no manager leads now"
		                                                            : strerror(-rc));
		return 1;
	}
	int64_t deadline = (int64_t)kvc_clock_monotonic_ns() +
	                   (int64_t)(drain ? WAIT_OUT_S : WAIT_BACK_S) * 1000000000;
	bool serving = false, done = false;
	uint64_t version = 0;
	int c = -1;
	while (!done && (int64_t)kvc_clock_monotonic_ns() < deadline) {
		c = where(storage, target, &serving, &version);
		done = drain ? c < 0 : serving;
		if (!done) {
			if (!json && !drain)
				fprintf(stderr, "target %u: %s\n", target,
				        c < 0 ? "waiting to rejoin its chain" : "catching up");
			kvc_clock_sleep_ms(drain ? 200 : 500);
		}
	}
	if (json)
		printf("{\"target\":%u,\"drained\":%s,\"done\":%s,\"chain\":%d,\"serving\":%s,"
		       "\"routing_version\":%" PRIu64 "}\n",
		       target, drain ? "true" : "false", done ? "true" : "false", c,
		       serving ? "true" : "false", version);
	else if (done && drain)
		printf("target %u drained: in no chain (routing table version %" PRIu64 "); "
		       "'kvc-admin undrain %u' lets it back\n", target, version, target);
	else if (done)
		printf("target %u is back in chain %d and serves reads (routing table version "
		       "%" PRIu64 ")\n", target, c, version);
	else
		fprintf(stderr, "kvc-admin %s: target %u is not %s yet (routing table version "
		                "%" PRIu64 "); the manager goes on\n", verb, target,
		        drain ? "out of its chain" : "serving", version);
	return done ? 0 : 1;
}

const char *admin_target_state(const struct kvc_chains *table, uint32_t target)
{
	int c = kvc_chains_of_target(table, target);
	if (c < 0)
		return "out";
	int pos = kvc_chains_position(&table->chains[c], target);
	return (table->chains[c].syncing >> pos) & 1u ? "syncing" : "serving";
}

void admin_chains_print(const struct kvc_chains *chains, bool json, uint32_t replicas,
                        bool managers)
{
	if (json) {
		printf("\"routing_version\":%" PRIu64 ",\"chains\":[", chains->version);
		for (uint32_t c = 0; c < chains->count; c++) {
			const struct kvc_chain *ch = &chains->chains[c];
			printf("%s{\"id\":%u,\"version\":%u,\"targets\":[", c ? "," : "", c,
			       ch->version);
			for (uint32_t m = 0; m < ch->count; m++)
				printf("%s%u", m ? "," : "", ch->targets[m]);
			printf("],\"syncing\":[");
			for (uint32_t m = 0, n = 0; m < ch->count; m++)
				if (ch->syncing & (1u << m))
					printf("%s%u", n++ ? "," : "", ch->targets[m]);
			printf("]}");
		}
		printf("]");
	} else if (replicas > 1) {
		printf("\n%-8s %5s %8s %s (routing table version %" PRIu64 "%s)\n", "CHAINS", "ID",
		       "VERSION", "TARGETS (head ... tail)", chains->version,
		       managers ? ", from the managers" : ", the cluster file's");
		for (uint32_t c = 0; c < chains->count; c++) {
			const struct kvc_chain *ch = &chains->chains[c];
			printf("%-8s %5u %8u ", "", c, ch->version);
			for (uint32_t m = 0; m < ch->count; m++)
				printf("%s%u%s", m ? " -> " : "", ch->targets[m],
				       ch->syncing & (1u << m) ? " (catching up)" : "");
			printf("\n");
		}
	}
}
