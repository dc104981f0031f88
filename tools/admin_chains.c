/* admin_chains: see admin_chains.h. */
#include "admin_chains.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/chains.h"
#include "core/clock.h"
#include "core/rpc.h"

#define WAIT_OUT_S 30   /* a drain shows within a few monitor passes */
#define WAIT_BACK_S 600 /* a target let back in catches up first */

/* One request to the managers in turn until one leads. Returns its
 * status (-ENOTCONN: no manager; -EAGAIN or a transport error: none leads). */
static int call_leader(const struct kvc_config *config, uint16_t type, const void *req,
                       uint32_t req_len, void *reply, uint32_t cap, uint32_t *len)
{
	int rc = -ENOTCONN;
	for (uint32_t i = 0; i < config->manager_count; i++) {
		struct kvc_rpc_pool pool;
		if (kvc_rpc_pool_init(&pool, config->managers[i].address, &config->cred,
		                      config->connect_timeout_ms, config->io_timeout_ms) < 0)
			continue;
		rc = kvc_rpc_call(&pool, type, req, req_len, reply, cap, len);
		kvc_rpc_pool_destroy(&pool);
		if (rc != -EAGAIN && !kvc_rpc_is_transport_error(rc))
			break;
	}
	return rc;
}

/* MGMT_DRAIN to the leader. */
static int ask(const struct kvc_config *config, uint32_t target, bool drain)
{
	struct kvc_msg_mgmt_drain m = {.target = target, .drain = drain};
	struct kvc_msg_mgmt_routing_reply reply;
	uint32_t len = 0;
	return call_leader(config, KVC_MSG_MGMT_DRAIN, &m, sizeof(m), &reply, sizeof(reply), &len);
}

int admin_add_host_run(struct kvc_storage_client *storage, const struct kvc_config *config,
                       const char *name, bool json)
{
	if (config->manager_count == 0) {
		fprintf(stderr, "kvc-admin add-host: the cluster file names no managers ([mgmt "
		                "NAME]): hosts are added through them\n");
		return 1;
	}
	struct kvc_msg_mgmt_add_host m = {{0}};
	if (strlen(name) >= sizeof(m.name) || !*name) {
		fprintf(stderr, "kvc-admin add-host: a host name is 1 to %zu bytes\n",
		        sizeof(m.name) - 1);
		return 1;
	}
	strcpy(m.name, name);
	struct kvc_msg_mgmt_register_reply reply = {0};
	uint32_t len = 0;
	int rc = call_leader(config, KVC_MSG_MGMT_ADD_HOST, &m, sizeof(m), &reply, sizeof(reply),
	                     &len);
	if (rc == 0 && len != sizeof(reply))
		rc = -EBADMSG;
	if (rc < 0) {
		const char *why =
			rc == -ENOENT   ? "no pending host of that name (start its kvc-storage with "
			                  "--join first; 'kvc-admin status' lists pending hosts)"
			: rc == -EEXIST ? "that host is admitted already"
			: rc == -ENOSPC ? "the cluster is full (32 servers, 64 targets)"
			: rc == -EAGAIN || kvc_rpc_is_transport_error(rc) ? "no manager leads now"
			                                                  : strerror(-rc);
		if (json)
			printf("{\"host\":\"%s\",\"added\":false,\"errno\":%d,\"error\":\"%s\"}\n",
			       name, -rc, why);
		fprintf(stderr, "kvc-admin add-host %s: %s\n", name, why);
		return 1;
	}
	/* Wait until the table has it (the leader's next monitor pass). */
	int64_t deadline = (int64_t)kvc_clock_monotonic_ns() + (int64_t)WAIT_OUT_S * 1000000000;
	static struct kvc_chains t;
	bool in = false;
	while (!in && (int64_t)kvc_clock_monotonic_ns() < deadline) {
		kvc_storage_client_refresh(storage);
		kvc_storage_client_chains(storage, &t);
		in = reply.server < t.server_count;
		if (!in)
			kvc_clock_sleep_ms(200);
	}
	if (json)
		printf("{\"host\":\"%s\",\"added\":true,\"server\":%u,\"first_target\":%u,"
		       "\"target_count\":%u,\"in_table\":%s,\"routing_version\":%" PRIu64 "}\n",
		       name, reply.server, reply.first_target, reply.target_count,
		       in ? "true" : "false", t.version);
	else
		printf("host %s admitted: server %u, targets %u..%u%s (routing table version %" PRIu64
		       "); its targets make new chains once it heartbeats\n",
		       name, reply.server, reply.first_target,
		       reply.first_target + reply.target_count - 1, in ? "" : " (not in the table yet)",
		       t.version);
	return in ? 0 : 1;
}

int admin_hosts_print(const struct kvc_config *config, bool json)
{
	struct {
		struct kvc_msg_mgmt_hosts_reply head;
		struct kvc_wire_host hosts[KVC_WIRE_MAX_SERVERS + 32];
	} *r = calloc(1, sizeof(*r));
	uint32_t len = 0;
	int rc = !r ? -ENOMEM : config->manager_count == 0 ? -ENOTCONN
	         : call_leader(config, KVC_MSG_MGMT_HOSTS, NULL, 0, r, sizeof(*r), &len);
	if (rc == 0 && (len < sizeof(r->head) ||
	                r->head.count > sizeof(r->hosts) / sizeof(r->hosts[0]) ||
	                len != sizeof(r->head) + r->head.count * sizeof(r->hosts[0])))
		rc = -EBADMSG;
	uint32_t count = rc == 0 ? r->head.count : 0;
	if (json)
		printf("\"hosts\":[");
	else if (rc == 0)
		printf("\n%-8s %-10s %-22s %-9s %-10s %s\n", "HOSTS", "NAME", "ADDRESS", "STATE",
		       "TARGETS", "HEARTBEAT");
	for (uint32_t i = 0; i < count; i++) {
		struct kvc_wire_host *h = &r->hosts[i];
		h->name[sizeof(h->name) - 1] = h->address[sizeof(h->address) - 1] = '\0';
		char targets[32] = "-";
		if (h->admitted)
			snprintf(targets, sizeof(targets), "%u..%u", h->first_target,
			         h->first_target + h->target_count - 1);
		if (json)
			printf("%s{\"name\":\"%s\",\"address\":\"%s\",\"state\":\"%s\",\"server\":%d,"
			       "\"first_target\":%d,\"target_count\":%u,\"heartbeat_age_ms\":%" PRId64 "}",
			       i ? "," : "", h->name, h->address, h->admitted ? "admitted" : "pending",
			       h->admitted ? (int)h->server : -1, h->admitted ? (int)h->first_target : -1,
			       h->target_count, h->heartbeat_age_ms);
		else
			printf("%-8s %-10s %-22s %-9s %-10s %s%" PRId64 " ms ago\n", "", h->name,
			       h->address, h->admitted ? "admitted" : "pending", targets,
			       h->heartbeat_age_ms < 0 ? "never; " : "", h->heartbeat_age_ms);
	}
	uint64_t spare = rc == 0 ? r->head.spare : 0;
	if (json) {
		printf("],\"spare_targets\":[");
		for (uint32_t t = 0, n = 0; t < 64; t++)
			if ((spare >> t) & 1u)
				printf("%s%u", n++ ? "," : "", t);
		printf("]");
	} else if (spare) {
		printf("%-8s spare targets (in no chain yet: too few hosts with spare targets):", "");
		for (uint32_t t = 0; t < 64; t++)
			if ((spare >> t) & 1u)
				printf(" %u", t);
		printf("\n");
	} else if (rc < 0 && config->manager_count) {
		printf("\nHOSTS    the managers did not answer: %s\n", strerror(-rc));
	}
	free(r);
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
	static struct kvc_chains table;
	kvc_storage_client_chains(storage, &table); /* kvc-admin refreshed it */
	if (target >= table.target_count) {
		fprintf(stderr, "kvc-admin %s: no target %u (the cluster has %u)\n", verb, target,
		        table.target_count);
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
