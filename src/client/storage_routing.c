/* storage_routing: the storage client's chain table (storage_client.h):
 * copies in and out under a leaf rwlock, and the thread that follows the
 * managers' routing table (MGMT_ROUTING long polls, docs/protocol.md). */
#include "client/storage_client_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/metrics.h"

/* A round in which no manager answered is followed by this pause. */
#define ROUND_PAUSE_MS 200

bool kvc_storage_client_chain(struct kvc_storage_client *client, uint32_t id,
                              struct kvc_chain *out)
{
	pthread_rwlock_rdlock(&client->chains_lock);
	bool found = id < client->chains.count;
	if (found)
		*out = client->chains.chains[id];
	pthread_rwlock_unlock(&client->chains_lock);
	return found;
}

bool kvc_storage_client_sole_copy(struct kvc_storage_client *client, uint32_t target)
{
	pthread_rwlock_rdlock(&client->chains_lock);
	int c = kvc_chains_of_target(&client->chains, target);
	bool sole = c >= 0 && client->chains.chains[c].count == 1;
	pthread_rwlock_unlock(&client->chains_lock);
	return sole;
}

int kvc_storage_client_serves(struct kvc_storage_client *client, uint32_t target)
{
	pthread_rwlock_rdlock(&client->chains_lock);
	int c = kvc_chains_of_target(&client->chains, target), serves = 0;
	if (c >= 0) {
		const struct kvc_chain *chain = &client->chains.chains[c];
		int others = 0;
		for (uint32_t i = 0; i < chain->count; i++)
			others += chain->targets[i] != target && !(chain->syncing & (1u << i));
		serves = others ? 1 : 2;
	}
	pthread_rwlock_unlock(&client->chains_lock);
	return serves;
}

void kvc_storage_client_chains(struct kvc_storage_client *client, struct kvc_chains *out)
{
	pthread_rwlock_rdlock(&client->chains_lock);
	*out = client->chains;
	pthread_rwlock_unlock(&client->chains_lock);
}

uint32_t kvc_storage_client_chain_count(struct kvc_storage_client *client)
{
	pthread_rwlock_rdlock(&client->chains_lock);
	uint32_t count = client->chains.count;
	pthread_rwlock_unlock(&client->chains_lock);
	return count;
}

/* The servers and targets of table beyond the client's: checked against
 * those the client has, then added (pools first, counts last). Called
 * with hosts_lock held. Returns 0 or -EINVAL (the table disagrees),
 * -ENOMEM. */
static int grow_hosts(struct kvc_storage_client *client, const struct kvc_chains *table)
{
	uint32_t have = client->server_count;
	for (uint32_t s = 0; s < have && s < table->server_count; s++) {
		const struct kvc_chains_server *sv = &table->servers[s];
		for (uint32_t i = 0; i < sv->target_count; i++)
			if (sv->first_target + i < client->target_count &&
			    client->target_server[sv->first_target + i] != s)
				return -EINVAL;
		if (strcmp(client->server_address[s], sv->address) != 0)
			return -EINVAL;
	}
	for (uint32_t s = have; s < table->server_count; s++) {
		const struct kvc_chains_server *sv = &table->servers[s];
		if (sv->first_target < client->target_count)
			return -EINVAL; /* a new server claiming targets we know */
		int rc = kvc_rpc_pool_init(&client->pools[s], sv->address, &client->cred,
		                           client->connect_timeout_ms, client->io_timeout_ms);
		if (rc < 0)
			return rc;
		strcpy(client->server_address[s], sv->address);
		kvc_transport_place_add_server(client, s);
		for (uint32_t i = 0; i < sv->target_count; i++)
			client->target_server[sv->first_target + i] = s;
		__atomic_store_n(&client->target_count, sv->first_target + sv->target_count,
		                 __ATOMIC_RELEASE);
		__atomic_store_n(&client->server_count, s + 1, __ATOMIC_RELEASE);
		kvc_log_info("storage server %s (%s): targets %u..%u", sv->name, sv->address,
		             sv->first_target, sv->first_target + sv->target_count - 1);
	}
	return 0;
}

int kvc_storage_client_set_chains(struct kvc_storage_client *client,
                                  const struct kvc_chains *table)
{
	int installed = 0;
	pthread_mutex_lock(&client->hosts_lock);
	pthread_rwlock_rdlock(&client->chains_lock);
	bool newer = table->version > client->chains.version;
	pthread_rwlock_unlock(&client->chains_lock);
	int rc = newer ? grow_hosts(client, table) : 0;
	if (rc < 0) {
		pthread_mutex_unlock(&client->hosts_lock);
		return rc;
	}
	pthread_rwlock_wrlock(&client->chains_lock);
	if (table->version > client->chains.version && table->count >= client->chains.count) {
		client->chains = *table;
		installed = 1;
	}
	pthread_rwlock_unlock(&client->chains_lock);
	pthread_mutex_unlock(&client->hosts_lock);
	if (installed) {
		pthread_mutex_lock(&client->routing_lock);
		pthread_cond_broadcast(&client->routing_changed);
		pthread_mutex_unlock(&client->routing_lock);
	}
	return installed;
}

static uint64_t version_of(struct kvc_storage_client *client)
{
	pthread_rwlock_rdlock(&client->chains_lock);
	uint64_t v = client->chains.version;
	pthread_rwlock_unlock(&client->chains_lock);
	return v;
}

uint64_t kvc_storage_client_wait_routing(struct kvc_storage_client *client, uint64_t known,
                                         int timeout_ms)
{
	struct timespec deadline = kvc_clock_deadline(timeout_ms);
	uint64_t v = version_of(client);
	pthread_mutex_lock(&client->routing_lock);
	while ((v = version_of(client)) <= known &&
	       pthread_cond_timedwait(&client->routing_changed, &client->routing_lock,
	                              &deadline) == 0)
		;
	pthread_mutex_unlock(&client->routing_lock);
	return version_of(client);
}

int kvc_storage_client_install_reply(struct kvc_storage_client *client, const void *reply,
                                     uint32_t len)
{
	struct kvc_msg_mgmt_routing_reply head;
	if (len < sizeof(head))
		return -EBADMSG;
	memcpy(&head, reply, sizeof(head));
	if (head.chain_count > KVC_WIRE_MAX_TARGETS || head.server_count > KVC_WIRE_MAX_SERVERS ||
	    len != sizeof(head) + head.chain_count * sizeof(struct kvc_wire_chain) +
	                   head.server_count * sizeof(struct kvc_wire_server))
		return -EBADMSG;
	if (head.chain_count == 0 && head.server_count == 0)
		return 0; /* still the table we know */
	const uint8_t *p = (const uint8_t *)reply + sizeof(head);
	struct kvc_wire_chain *chains = malloc(KVC_WIRE_MAX_TARGETS * sizeof(*chains));
	struct kvc_wire_server *servers = malloc(KVC_WIRE_MAX_SERVERS * sizeof(*servers));
	struct kvc_chains *table = malloc(sizeof(*table));
	int rc = chains && servers && table ? 0 : -ENOMEM;
	if (rc == 0) {
		memcpy(chains, p, head.chain_count * sizeof(*chains));
		memcpy(servers, p + head.chain_count * sizeof(*chains),
		       head.server_count * sizeof(*servers));
		rc = kvc_chains_decode(chains, head.chain_count, head.version, servers,
		                       head.server_count, table);
	}
	if (rc == 0)
		rc = kvc_storage_client_set_chains(client, table);
	if (rc == -EINVAL)
		kvc_log_error("a routing table (version %llu) disagrees with the storage servers "
		              "this client knows (another address or other targets): not used",
		              (unsigned long long)head.version);
	free(chains);
	free(servers);
	free(table);
	return rc;
}

/* One MGMT_ROUTING exchange with manager m: installs a newer table.
 * Returns 0 (answered), or -errno (-EAGAIN: not the leader). */
static int ask(struct kvc_storage_client *client, uint32_t m, uint32_t wait_ms)
{
	struct {
		struct kvc_msg_mgmt_routing_reply head;
		struct kvc_wire_chain chains[KVC_WIRE_MAX_TARGETS];
		struct kvc_wire_server servers[KVC_WIRE_MAX_SERVERS];
	} *reply = malloc(sizeof(*reply));
	if (!reply)
		return -ENOMEM;
	struct kvc_msg_mgmt_routing req = {.known_version = version_of(client),
	                                   .wait_ms = wait_ms};
	uint32_t len = 0;
	int rc = kvc_rpc_call(&client->managers[m], KVC_MSG_MGMT_ROUTING, &req, sizeof(req), reply,
	                      sizeof(*reply), &len);
	rc = rc < 0 ? rc : kvc_storage_client_install_reply(client, reply, len);
	if (rc == 1)
		kvc_log_info("routing table version %llu from manager %u",
		             (unsigned long long)reply->head.version, m);
	free(reply);
	return rc < 0 ? rc : 0;
}

/* Ask the managers in turn, from the one that answered last, until one
 * answers. Returns 0 or the last -errno. */
static int ask_round(struct kvc_storage_client *client, uint32_t wait_ms)
{
	int rc = -ENOTCONN;
	uint32_t first = atomic_load(&client->manager_next);
	for (uint32_t k = 0; k < client->manager_count; k++) {
		uint32_t m = (first + k) % client->manager_count;
		rc = ask(client, m, wait_ms);
		if (rc == 0) {
			atomic_store(&client->manager_next, m);
			break;
		}
	}
	return rc;
}

int kvc_storage_client_refresh(struct kvc_storage_client *client)
{
	return client->manager_count ? ask_round(client, 0) : -ENOTCONN;
}

static void *follow_main(void *arg)
{
	struct kvc_storage_client *client = arg;
	for (;;) {
		/* A long poll, well inside the connection's io timeout. */
		if (ask_round(client, (uint32_t)client->managers[0].io_timeout_ms / 2) < 0)
			kvc_clock_sleep_ms(ROUND_PAUSE_MS);
	}
	return NULL;
}

int kvc_storage_client_follow(struct kvc_storage_client *client)
{
	if (client->manager_count == 0 || client->following)
		return 0;
	if (ask_round(client, 0) < 0)
		kvc_log_warn("no manager answered: the cluster file's chain table for now");
	pthread_t thread;
	int rc = pthread_create(&thread, NULL, follow_main, client);
	if (rc)
		return -rc;
	pthread_detach(thread);
	client->following = true;
	return 0;
}

/* The routing metrics of one client (a process has one client that
 * registers them). */
struct routing_metrics {
	struct kvc_storage_client *client;
	struct kvc_metrics *registry;
	char prefix[48];
	struct kvc_metrics_gauge *version;
	struct kvc_metrics_counter *replica_retries, *routing_retries;
	struct kvc_metrics_gauge *chain[KVC_WIRE_MAX_TARGETS][3];
};

static void collect_routing(void *arg)
{
	struct routing_metrics *rm = arg;
	struct kvc_chains *t = malloc(sizeof(*t));
	if (!t)
		return;
	kvc_storage_client_chains(rm->client, t);
	kvc_metrics_set(rm->version, (int64_t)t->version);
	kvc_metrics_counter_set(rm->replica_retries, atomic_load(&rm->client->replica_retries));
	kvc_metrics_counter_set(rm->routing_retries, atomic_load(&rm->client->routing_retries));
	static const char *const names[3] = {"chain_version", "chain_members",
	                                     "chain_catching_up"};
	static const char *const help[3] = {
		"Version of each chain in the routing table (raised by every change).",
		"Members of each chain (targets holding its chunks).",
		"Members of each chain catching up (taking writes, serving no reads)."};
	for (uint32_t c = 0; c < t->count; c++) {
		const struct kvc_chain *ch = &t->chains[c];
		int64_t value[3] = {ch->version, ch->count, __builtin_popcount(ch->syncing)};
		for (int k = 0; k < 3; k++) {
			if (!rm->chain[c][k]) { /* a collector may register series */
				char name[96], id[16];
				snprintf(name, sizeof(name), "%s_%s", rm->prefix, names[k]);
				snprintf(id, sizeof(id), "%u", c);
				const struct kvc_metrics_label label = {"chain", id};
				rm->chain[c][k] = kvc_metrics_gauge(rm->registry, name, help[k], &label, 1);
			}
			kvc_metrics_set(rm->chain[c][k], value[k]);
		}
	}
	free(t);
}

int kvc_storage_client_metrics(struct kvc_storage_client *client, struct kvc_metrics *registry,
                               const char *prefix)
{
	struct routing_metrics *rm = calloc(1, sizeof(*rm)); /* lives as the registry does */
	if (!rm)
		return -ENOMEM;
	char name[96];
	rm->client = client;
	rm->registry = registry;
	snprintf(rm->prefix, sizeof(rm->prefix), "%s", prefix);
	snprintf(name, sizeof(name), "%s_routing_version", prefix);
	rm->version = kvc_metrics_gauge(registry, name,
	                                "Version of the routing table in use (1: the cluster "
	                                "file's; then the managers').", NULL, 0);
	snprintf(name, sizeof(name), "%s_replica_retries_total", prefix);
	rm->replica_retries = kvc_metrics_counter(
		registry, name, "Read pieces read again from another chain member.", NULL, 0);
	snprintf(name, sizeof(name), "%s_routing_retries_total", prefix);
	rm->routing_retries = kvc_metrics_counter(
		registry, name, "Batches run again after the routing table changed.", NULL, 0);
	if (!rm->version || !rm->replica_retries || !rm->routing_retries) {
		free(rm);
		return -ENOMEM;
	}
	return kvc_metrics_collector(registry, collect_routing, rm);
}
