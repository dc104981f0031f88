/* manager: see manager.h. */
#include "mgmt/manager.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/metrics.h"

/* Remove member pos of chain (keeping the order of the rest). */
static void drop_member(struct kvc_chain *c, uint32_t pos)
{
	uint32_t syncing = 0;
	for (uint32_t i = 0, k = 0; i < c->count; i++) {
		if (i == pos)
			continue;
		if (c->syncing & (1u << i))
			syncing |= 1u << k;
		c->targets[k++] = c->targets[i];
	}
	c->count--;
	c->syncing = syncing;
}

static bool out(const struct kvc_chains *table, const bool *silent, uint64_t drained,
                uint32_t target)
{
	int s = kvc_chains_server_of(table, target);
	return s < 0 || silent[s] || (target < 64 && ((drained >> target) & 1u));
}

bool kvc_manager_plan(const struct kvc_chains *home, const bool *silent, uint64_t drained,
                      const struct kvc_msg_mgmt_synced *reports, uint32_t report_count,
                      struct kvc_chains *table)
{
	bool any = false;
	for (uint32_t c = 0; c < table->count; c++) {
		struct kvc_chain *chain = &table->chains[c];
		bool changed = false;
		/* Silent servers' members leave, never the last one serving. */
		for (uint32_t i = chain->count; i-- > 0;) {
			uint32_t t = chain->targets[i];
			if (!out(table, silent, drained, t))
				continue;
			uint32_t serving = 0;
			for (uint32_t k = 0; k < chain->count; k++)
				serving += !(chain->syncing & (1u << k));
			bool is_serving = !(chain->syncing & (1u << i));
			if (is_serving && serving == 1)
				continue;
			drop_member(chain, i);
			changed = true;
		}
		/* Targets of this chain whose server is back: at the tail, syncing. */
		const struct kvc_chain *h = &home->chains[c];
		for (uint32_t i = 0; i < h->count; i++) {
			uint32_t t = h->targets[i];
			if (out(table, silent, drained, t) || kvc_chains_position(chain, t) >= 0 ||
			    chain->count == KVC_WIRE_MAX_REPLICAS)
				continue;
			chain->syncing |= 1u << chain->count;
			chain->targets[chain->count++] = t;
			changed = true;
		}
		/* Caught up at this version: serving. */
		for (uint32_t r = 0; r < report_count && !changed; r++) {
			int pos = kvc_chains_position(chain, reports[r].target);
			if (pos >= 0 && (chain->syncing & (1u << pos)) &&
			    reports[r].chain_version == chain->version) {
				chain->syncing &= ~(1u << pos);
				changed = true;
			}
		}
		if (changed) {
			chain->version++;
			any = true;
		}
	}
	if (any)
		table->version++;
	return any;
}

/* The table as etcd keeps it (manager.h: kvc_mgmt_routing_blob). */
static void *blob_of(const struct kvc_chains *t, size_t *len)
{
	size_t chains = t->count * sizeof(struct kvc_wire_chain);
	*len = sizeof(struct kvc_mgmt_routing_blob) + chains +
	       t->server_count * sizeof(struct kvc_wire_server);
	uint8_t *blob = malloc(*len);
	if (!blob)
		return NULL;
	struct kvc_mgmt_routing_blob head = {.version = t->version, .chain_count = t->count,
	                                     .magic = KVC_MGMT_ROUTING_MAGIC2};
	memcpy(blob, &head, sizeof(head));
	kvc_chains_encode(t, (struct kvc_wire_chain *)(void *)(blob + sizeof(head)));
	kvc_chains_encode_servers(t, (struct kvc_wire_server *)(void *)(blob + sizeof(head) +
	                                                                chains));
	return blob;
}

static int table_of(const struct kvc_config *config, const uint8_t *blob, size_t len,
                    struct kvc_chains *out)
{
	struct kvc_mgmt_routing_blob head;
	if (len < sizeof(head))
		return -EBADMSG;
	memcpy(&head, blob, sizeof(head));
	size_t chains = (size_t)head.chain_count * sizeof(struct kvc_wire_chain);
	size_t rest = len - sizeof(head) - (chains < len - sizeof(head) ? chains : 0);
	if ((head.magic != KVC_MGMT_ROUTING_MAGIC && head.magic != KVC_MGMT_ROUTING_MAGIC2) ||
	    head.chain_count > KVC_WIRE_MAX_TARGETS || len < sizeof(head) + chains ||
	    (head.magic == KVC_MGMT_ROUTING_MAGIC && rest) ||
	    rest % sizeof(struct kvc_wire_server) ||
	    rest / sizeof(struct kvc_wire_server) > KVC_WIRE_MAX_SERVERS)
		return -EBADMSG;
	uint32_t server_count = (uint32_t)(rest / sizeof(struct kvc_wire_server));
	struct kvc_wire_chain *c = malloc(chains + 1);
	struct kvc_wire_server *servers = malloc(KVC_WIRE_MAX_SERVERS * sizeof(*servers));
	struct kvc_chains *file = malloc(sizeof(*file));
	int rc = c && servers && file ? 0 : -ENOMEM;
	if (rc == 0 && head.magic == KVC_MGMT_ROUTING_MAGIC) { /* before hosts: the file's */
		rc = kvc_chains_build(config, file);
		server_count = file->server_count;
		if (rc == 0)
			kvc_chains_encode_servers(file, servers);
	} else if (rc == 0) {
		memcpy(servers, blob + sizeof(head) + chains, rest);
	}
	if (rc == 0) {
		memcpy(c, blob + sizeof(head), chains);
		rc = kvc_chains_decode(c, head.chain_count, head.version, servers, server_count, out);
	}
	free(c);
	free(servers);
	free(file);
	return rc;
}

/* Write table to etcd if we still lead and nobody wrote it since
 * expect_mod. Returns 1 (written, *mod its revision), 0 (not: we lost the
 * lead or the table moved), -errno. */
static int store(struct kvc_manager *m, const struct kvc_chains *table,
                 const struct kvc_chains *home, uint64_t drained, int64_t expect_mod,
                 int64_t *mod)
{
	size_t len, home_len;
	void *blob = blob_of(table, &len), *home_blob = blob_of(home, &home_len);
	if (!blob || !home_blob) {
		free(blob);
		free(home_blob);
		return -ENOMEM;
	}
	struct kvc_etcd_cmp cmp[2] = {
		{.key = KVC_MGMT_ROUTING_KEY, .target = KVC_ETCD_CMP_MOD, .result = KVC_ETCD_EQUAL,
		 .number = expect_mod},
		{.key = KVC_MGMT_LEADER_KEY, .target = KVC_ETCD_CMP_VALUE, .result = KVC_ETCD_EQUAL,
		 .value = m->name, .value_len = strlen(m->name)},
	};
	struct kvc_etcd_op put[3] = {
		{.kind = KVC_ETCD_OP_PUT, .key = KVC_MGMT_ROUTING_KEY, .value = blob, .value_len = len},
		{.kind = KVC_ETCD_OP_PUT, .key = KVC_MGMT_DRAINED_KEY, .value = &drained,
		 .value_len = sizeof(drained)},
		{.kind = KVC_ETCD_OP_PUT, .key = KVC_MGMT_HOME_KEY, .value = home_blob,
		 .value_len = home_len}};
	struct kvc_etcd_txn txn = {.cmp = cmp, .n_cmp = 2, .success = put, .n_success = 3};
	struct kvc_etcd_kvs out = {0};
	int rc = kvc_etcd_txn(m->etcd, &txn, &out);
	if (rc == 1)
		*mod = out.revision;
	kvc_etcd_kvs_free(&out);
	free(blob);
	free(home_blob);
	return rc;
}

/* Just elected: the table and the chains' home from etcd, or the cluster
 * file's when there is none yet (a table stored before homes were: the
 * cluster file's home). Returns 0 or -errno. */
static int take_table(struct kvc_manager *m)
{
	struct kvc_etcd_kvs kvs = {0}, hk = {0};
	struct kvc_chains *t = malloc(sizeof(*t)), *home = malloc(sizeof(*home));
	int64_t mod = 0;
	int rc = t && home ? kvc_chains_build(m->config, home) : -ENOMEM;
	if (rc == 0)
		rc = kvc_etcd_get(m->etcd, KVC_MGMT_ROUTING_KEY, &kvs);
	if (rc == 1) {
		mod = kvs.kvs[0].mod_revision;
		rc = table_of(m->config, kvs.kvs[0].value, kvs.kvs[0].value_len, t);
		if (rc == 0 && kvc_etcd_get(m->etcd, KVC_MGMT_HOME_KEY, &hk) == 1)
			rc = table_of(m->config, hk.kvs[0].value, hk.kvs[0].value_len, home);
		if (rc == 0 && (t->count != home->count || t->server_count != home->server_count))
			rc = -EINVAL; /* the cluster file's targets changed: not handled */
		if (rc < 0)
			kvc_log_error("the routing table in etcd does not fit this cluster file: %s",
			              strerror(-rc));
	} else if (rc == 0) {
		*t = *home;
		rc = store(m, t, home, 0, 0, &mod) == 1 ? 0 : -EAGAIN;
	}
	uint64_t drained = 0;
	struct kvc_etcd_kvs dk = {0};
	if (rc == 0 && kvc_etcd_get(m->etcd, KVC_MGMT_DRAINED_KEY, &dk) == 1 &&
	    dk.kvs[0].value_len == sizeof(drained))
		memcpy(&drained, dk.kvs[0].value, sizeof(drained));
	kvc_etcd_kvs_free(&dk);
	if (rc == 0) {
		pthread_mutex_lock(&m->lock);
		m->table = *t;
		m->home = *home;
		m->routing_mod = mod;
		m->drained = m->drained_stored = drained;
		int64_t now = (int64_t)kvc_clock_monotonic_ns();
		for (uint32_t s = 0; s < KVC_CONFIG_MAX_SERVERS; s++) {
			m->last_heartbeat_ns[s] = now; /* a full timeout to say hello */
			m->heard[s] = false;
		}
		m->host_count = t->server_count;
		memcpy(m->hosts, t->servers, sizeof(m->hosts));
		m->report_count = 0;
		m->leader = true;
		pthread_cond_broadcast(&m->changed);
		pthread_mutex_unlock(&m->lock);
		kvc_log_info("leading: routing table version %llu",
		             (unsigned long long)t->version);
		/* The cluster's state names kvc-meta too (for operators and
		 * tools reading etcd); a failed put only costs that. */
		if (kvc_etcd_put(m->etcd, KVC_MGMT_META_KEY, m->config->meta_address,
		                 strlen(m->config->meta_address), 0, NULL) < 0)
			kvc_log_warn("could not store kvc-meta's address in etcd");
	}
	kvc_etcd_kvs_free(&kvs);
	kvc_etcd_kvs_free(&hk);
	free(t);
	free(home);
	return rc;
}

static void step_down(struct kvc_manager *m, const char *why)
{
	pthread_mutex_lock(&m->lock);
	bool was = m->leader;
	m->leader = false;
	pthread_cond_broadcast(&m->changed);
	pthread_mutex_unlock(&m->lock);
	if (was)
		kvc_log_warn("no longer leading: %s", why);
}

static bool leading(struct kvc_manager *m)
{
	pthread_mutex_lock(&m->lock);
	bool l = m->leader;
	pthread_mutex_unlock(&m->lock);
	return l;
}

/* Hosts admitted since the table was stored join it (their targets in
 * no chain yet). Returns whether any did. */
static bool admit(struct kvc_chains *t, struct kvc_chains *home, const struct kvc_manager *m,
                  uint32_t host_count)
{
	bool any = false;
	while (t->server_count < host_count) {
		const struct kvc_chains_server *h = &m->hosts[t->server_count];
		t->servers[t->server_count++] = *h;
		home->servers[home->server_count++] = *h;
		t->target_count = home->target_count = h->first_target + h->target_count;
		any = true;
	}
	return any;
}

/* One pass of the monitor: plan, store, install. */
static void monitor_pass(struct kvc_manager *m)
{
	struct kvc_chains *t = malloc(sizeof(*t)), *home = malloc(sizeof(*home));
	if (!t || !home) {
		free(t);
		free(home);
		return;
	}
	bool silent[KVC_CONFIG_MAX_SERVERS] = {false}, eligible[KVC_CONFIG_MAX_SERVERS];
	struct kvc_msg_mgmt_synced reports[KVC_MGMT_MAX_REPORTS];
	pthread_mutex_lock(&m->lock);
	int64_t now = (int64_t)kvc_clock_monotonic_ns(), mod = m->routing_mod;
	for (uint32_t s = 0; s < KVC_CONFIG_MAX_SERVERS; s++) {
		silent[s] = now - m->last_heartbeat_ns[s] >
		            (int64_t)m->config->failure_timeout_ms * 1000000;
		eligible[s] = m->heard[s] && !silent[s];
	}
	uint32_t nreports = m->report_count;
	memcpy(reports, m->reports, nreports * sizeof(reports[0]));
	m->report_count = 0;
	*t = m->table;
	*home = m->home;
	bool grew = admit(t, home, m, m->host_count);
	uint64_t drained = m->drained;
	bool drain_changed = drained != m->drained_stored;
	pthread_mutex_unlock(&m->lock);
	uint32_t replicas = m->config->replicas ? m->config->replicas : 1;
	grew |= kvc_chains_grow(home, t, replicas, eligible) > 0;
	bool planned = kvc_manager_plan(home, silent, drained, reports, nreports, t);
	if (grew && !planned)
		t->version++;
	if (planned || grew || drain_changed) {
		int64_t new_mod = 0;
		int rc = store(m, t, home, drained, mod, &new_mod);
		if (rc == 1) {
			pthread_mutex_lock(&m->lock);
			m->table = *t;
			m->home = *home;
			m->routing_mod = new_mod;
			m->drained_stored = drained;
			m->changes++;
			pthread_cond_broadcast(&m->changed);
			pthread_mutex_unlock(&m->lock);
			kvc_log_info("routing table version %llu (%u chains, %u servers)",
			             (unsigned long long)t->version, t->count, t->server_count);
		} else if (rc == 0) {
			step_down(m, "the table or the lead changed in etcd");
		} else {
			/* etcd unreachable: try again next pass (reports kept) */
			pthread_mutex_lock(&m->lock);
			for (uint32_t r = 0; r < nreports && m->report_count < KVC_MGMT_MAX_REPORTS; r++)
				m->reports[m->report_count++] = reports[r];
			pthread_mutex_unlock(&m->lock);
		}
	}
	free(t);
	free(home);
}

static void *leader_main(void *arg)
{
	struct kvc_manager *m = arg;
	int beat = m->config->heartbeat_ms;
	int64_t ttl = (m->config->failure_timeout_ms + 999) / 1000;
	if (ttl < 2)
		ttl = 2;
	for (;;) {
		int64_t lease = 0;
		struct kvc_etcd_kvs current = {0};
		int rc = kvc_etcd_lease_grant(m->etcd, ttl, &lease);
		if (rc == 0)
			rc = kvc_etcd_put_if_absent(m->etcd, KVC_MGMT_LEADER_KEY, m->name,
			                            strlen(m->name), lease, &current);
		kvc_etcd_kvs_free(&current);
		if (rc == 1 && take_table(m) == 0) {
			int64_t last_alive = (int64_t)kvc_clock_monotonic_ns();
			while (leading(m)) {
				int64_t left = 0;
				int64_t now = (int64_t)kvc_clock_monotonic_ns();
				if (kvc_etcd_lease_keepalive(m->etcd, lease, &left) == 0 && left > 0)
					last_alive = now;
				else if (now - last_alive > ttl * 1000000000ll / 2)
					step_down(m, "the lead's lease could not be kept alive");
				monitor_pass(m);
				kvc_clock_sleep_ms(beat / 2 > 50 ? beat / 2 : 50);
			}
		}
		if (lease)
			kvc_etcd_lease_revoke(m->etcd, lease);
		kvc_clock_sleep_ms(beat);
	}
	return NULL;
}

int kvc_manager_start(struct kvc_manager *m, const struct kvc_config *config,
                      const char *name)
{
	memset(m, 0, sizeof(*m));
	m->config = config;
	m->name = name;
	pthread_condattr_t attr;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_mutex_init(&m->lock, NULL);
	pthread_cond_init(&m->changed, &attr);
	pthread_condattr_destroy(&attr);
	int rc = kvc_chains_build(config, &m->home);
	m->table = m->home;
	if (rc == 0)
		rc = kvc_etcd_open(config->etcd, config->connect_timeout_ms, &m->etcd);
	pthread_t thread;
	if (rc == 0)
		rc = -pthread_create(&thread, NULL, leader_main, m);
	if (rc == 0)
		pthread_detach(thread);
	return rc;
}

int64_t kvc_manager_heartbeat(struct kvc_manager *m, uint32_t server,
                              const struct kvc_msg_mgmt_synced *synced, uint32_t count)
{
	int64_t rc;
	pthread_mutex_lock(&m->lock);
	if (!m->leader) {
		rc = -EAGAIN;
	} else if (server >= m->table.server_count) {
		rc = -EINVAL;
	} else {
		rc = 0;
		for (uint32_t i = 0; i < count && rc == 0; i++)
			if (kvc_chains_server_of(&m->table, synced[i].target) != (int)server)
				rc = -EINVAL; /* not its target */
	}
	if (rc == 0) {
		m->last_heartbeat_ns[server] = (int64_t)kvc_clock_monotonic_ns();
		m->heard[server] = true;
		m->heartbeats++;
		for (uint32_t i = 0; i < count && m->report_count < KVC_MGMT_MAX_REPORTS; i++)
			m->reports[m->report_count++] = synced[i];
		rc = (int64_t)m->table.version;
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

int64_t kvc_manager_drain(struct kvc_manager *m, uint32_t target, bool drain)
{
	int64_t rc;
	pthread_mutex_lock(&m->lock);
	int c = kvc_chains_of_target(&m->table, target);
	if (!m->leader) {
		rc = -EAGAIN;
	} else if (target >= m->table.target_count || target >= 64) {
		rc = -EINVAL;
	} else if (drain && c >= 0) {
		const struct kvc_chain *ch = &m->table.chains[c];
		uint32_t serving = 0;
		int pos = kvc_chains_position(ch, target);
		for (uint32_t k = 0; k < ch->count; k++)
			serving += !((ch->syncing >> k) & 1u);
		bool is_serving = !((ch->syncing >> pos) & 1u);
		rc = is_serving && serving == 1 ? -EBUSY : (int64_t)m->table.version;
	} else {
		rc = (int64_t)m->table.version;
	}
	if (rc > 0) {
		if (drain)
			m->drained |= 1ull << target;
		else
			m->drained &= ~(1ull << target);
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

int kvc_manager_routing(struct kvc_manager *m, uint64_t known, uint32_t wait_ms,
                        struct kvc_chains *out)
{
	struct timespec deadline = kvc_clock_deadline(wait_ms);
	pthread_mutex_lock(&m->lock);
	while (m->leader && m->table.version == known &&
	       pthread_cond_timedwait(&m->changed, &m->lock, &deadline) == 0)
		;
	int rc = !m->leader ? -EAGAIN : m->table.version != known;
	if (rc == 1)
		*out = m->table;
	pthread_mutex_unlock(&m->lock);
	return rc;
}

struct manager_metrics {
	struct kvc_manager *m;
	struct kvc_metrics_gauge *leader, *version, *silent;
	struct kvc_metrics_gauge *admitted, *pending, *spare;
	struct kvc_metrics_counter *changes, *heartbeats;
};

static void collect(void *arg)
{
	struct manager_metrics *mm = arg;
	struct kvc_manager *m = mm->m;
	pthread_mutex_lock(&m->lock);
	int64_t now = (int64_t)kvc_clock_monotonic_ns(), silent = 0;
	for (uint32_t s = 0; s < m->table.server_count && m->leader; s++)
		silent += now - m->last_heartbeat_ns[s] >
		          (int64_t)m->config->failure_timeout_ms * 1000000;
	kvc_metrics_set(mm->leader, m->leader);
	kvc_metrics_set(mm->version, (int64_t)m->table.version);
	kvc_metrics_set(mm->silent, silent);
	kvc_metrics_set(mm->admitted, m->leader ? m->host_count : 0);
	kvc_metrics_set(mm->pending, m->leader ? m->pending_count : 0);
	kvc_metrics_set(mm->spare, m->leader ? __builtin_popcountll(kvc_chains_spare(&m->home))
	                                     : 0);
	kvc_metrics_counter_set(mm->changes, m->changes);
	kvc_metrics_counter_set(mm->heartbeats, m->heartbeats);
	pthread_mutex_unlock(&m->lock);
}

int kvc_manager_metrics(struct kvc_manager *m, struct kvc_metrics *registry)
{
	struct manager_metrics *mm = calloc(1, sizeof(*mm)); /* lives as the registry does */
	if (!mm)
		return -ENOMEM;
	mm->m = m;
	mm->leader = kvc_metrics_gauge(registry, "kvc_mgmt_leader",
	                               "1 while this manager leads, else 0.", NULL, 0);
	mm->version = kvc_metrics_gauge(registry, "kvc_mgmt_routing_version",
	                                "Version of the routing table this manager holds.", NULL, 0);
	mm->silent = kvc_metrics_gauge(registry, "kvc_mgmt_servers_silent",
	                               "Storage servers past failure_timeout_ms without a "
	                               "heartbeat (leader only).", NULL, 0);
	static const char hosts_help[] = "Storage hosts the manager knows, by state: admitted "
	                                 "(in the table or admitted by add-host), pending (--join, "
	                                 "not admitted yet). Leader only: 0 elsewhere.";
	mm->admitted = kvc_metrics_gauge(registry, "kvc_mgmt_hosts", hosts_help,
	                                 &(struct kvc_metrics_label){"state", "admitted"}, 1);
	mm->pending = kvc_metrics_gauge(registry, "kvc_mgmt_hosts", hosts_help,
	                                &(struct kvc_metrics_label){"state", "pending"}, 1);
	mm->spare = kvc_metrics_gauge(registry, "kvc_mgmt_spare_targets",
	                              "Targets of admitted hosts in no chain yet (leader only).",
	                              NULL, 0);
	mm->changes = kvc_metrics_counter(registry, "kvc_mgmt_table_changes_total",
	                                  "Routing table changes this manager made.", NULL, 0);
	mm->heartbeats = kvc_metrics_counter(registry, "kvc_mgmt_heartbeats_total",
	                                     "Heartbeats taken while leading.", NULL, 0);
	if (!mm->leader || !mm->version || !mm->silent || !mm->admitted || !mm->pending ||
	    !mm->spare || !mm->changes || !mm->heartbeats) {
		free(mm);
		return -ENOMEM;
	}
	return kvc_metrics_collector(registry, collect, mm);
}
