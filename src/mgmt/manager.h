/*
 * manager: the cluster manager's state and its work (kvc-mgmt). Several
 * managers may run; one leads, elected through an etcd lease
 * (KVC_MGMT_LEADER_KEY: put if absent with the manager's lease; the lease
 * is kept alive every heartbeat and lost when the manager dies or cannot
 * reach etcd, so another takes over within the lease's ttl).
 *
 * The leader owns the routing table (core/chains.h: chains, their
 * versions and members catching up), kept in etcd under
 * KVC_MGMT_ROUTING_KEY (binary: kvc_mgmt_routing_blob then the chains as
 * kvc_wire_chain), and in memory. Every change is written to etcd first,
 * with a transaction that holds only while this manager still holds the
 * leader key and nobody wrote the table since it read it; only then is it
 * served. A manager that fails that compare steps down.
 *
 * Storage servers send heartbeats to the leader. One thread (the monitor)
 * makes every change of the table, each pass:
 *   - a server silent for failure_timeout_ms leaves the chains its targets
 *     are in (each such chain's version goes up), except that a chain
 *     never loses its last member serving reads;
 *   - a target of a server that heartbeats again, not in its chain, joins
 *     its chain (the one the cluster file put it in) at the tail,
 *     catching up (syncing: it takes writes, serves no reads);
 *   - a target its server reports caught up at its chain's current
 *     version serves reads again.
 *   - targets in no chain (those of hosts admitted by kvc-admin add-host)
 *     whose servers heartbeat make new chains (core/chains.h
 *     kvc_chains_grow), appended: existing chains never change meaning.
 * After taking the lead, every server gets a full failure_timeout_ms to
 * send its first heartbeat.
 *
 * Hosts: the table carries the storage servers (seeded from the cluster
 * file with the chains). A new host (kvc-storage --join) registers
 * (MGMT_REGISTER) and is listed as pending (in memory: it registers again
 * every heartbeat_ms, so a new leader hears it too); kvc_manager_add_host
 * gives it the next server index and the next target ids, and the next
 * monitor pass stores it in the table. KVC_MGMT_HOME_KEY keeps the chains'
 * home membership (where a returning target belongs), grown with the
 * table.
 *
 * Locking: `lock` guards the table, the servers' last heartbeats and the
 * pending reports; it is never held across an etcd call or a reply (the
 * monitor copies, computes, writes to etcd, then installs under it).
 */
#ifndef KVC_MGMT_MANAGER_H
#define KVC_MGMT_MANAGER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/chains.h"
#include "core/config.h"
#include "mgmt/etcd.h"

#define KVC_MGMT_LEADER_KEY "/kvcfs/leader"
#define KVC_MGMT_ROUTING_KEY "/kvcfs/routing"
#define KVC_MGMT_DRAINED_KEY "/kvcfs/drained" /* u64: a bit per drained target */
#define KVC_MGMT_HOME_KEY "/kvcfs/home"       /* the chains' home membership */
#define KVC_MGMT_META_KEY "/kvcfs/meta"       /* kvc-meta's address (text) */

/* A table in etcd: this head, chain_count kvc_wire_chain, then (magic
 * KVC_MGMT_ROUTING_MAGIC2) server_count kvc_wire_server. A table of the
 * first magic (no servers) takes them from the cluster file. */
struct kvc_mgmt_routing_blob {
	uint64_t version;
	uint32_t chain_count;
	uint32_t magic; /* KVC_MGMT_ROUTING_MAGIC or _MAGIC2 */
};
#define KVC_MGMT_ROUTING_MAGIC 0x4b52544eu  /* "NTRK" */
#define KVC_MGMT_ROUTING_MAGIC2 0x3252544eu /* "NTR2": servers follow */

#define KVC_MGMT_MAX_REPORTS 256
#define KVC_MGMT_MAX_PENDING 32

struct kvc_mgmt_pending {
	char name[KVC_WIRE_HOST_NAME];
	char address[KVC_WIRE_HOST_ADDRESS];
	uint32_t target_count;
	int64_t seen_ns;
};

struct kvc_manager {
	const struct kvc_config *config;
	const char *name;
	struct kvc_etcd *etcd;
	pthread_mutex_t lock; /* everything below */
	struct kvc_chains home; /* where each target belongs (the cluster file's
	                           chains, then the grown ones) */
	pthread_cond_t changed; /* the table's version went up, or the lead changed */
	bool leader;
	int64_t lease;
	int64_t routing_mod; /* etcd mod_revision of the table we hold */
	struct kvc_chains table;
	int64_t last_heartbeat_ns[KVC_CONFIG_MAX_SERVERS];
	uint64_t drained; /* targets kept out of their chains (kvc-admin drain) */
	uint64_t drained_stored; /* what etcd holds */
	uint32_t report_count;
	struct kvc_msg_mgmt_synced reports[KVC_MGMT_MAX_REPORTS];
	uint64_t changes; /* table changes made by this manager */
	uint64_t heartbeats; /* heartbeats taken while leading */
	bool heard[KVC_WIRE_MAX_SERVERS]; /* a heartbeat since taking the lead */
	uint32_t host_count; /* admitted hosts: the table's, then add-host's */
	struct kvc_chains_server hosts[KVC_WIRE_MAX_SERVERS];
	uint32_t pending_count;
	struct kvc_mgmt_pending pending[KVC_MGMT_MAX_PENDING];
};

struct kvc_metrics;
/* Register the manager's metrics (kvc_mgmt_leader, _routing_version,
 * _table_changes_total, _heartbeats_total, _servers_silent,
 * _hosts{state="admitted|pending"}, _spare_targets) in registry.
 * Returns 0 or -ENOMEM. */
int kvc_manager_metrics(struct kvc_manager *m, struct kvc_metrics *registry);

/* Set up (etcd handle, the cluster file's table) and start the election
 * and monitor threads. Returns 0 or -errno. */
int kvc_manager_start(struct kvc_manager *m, const struct kvc_config *config,
                      const char *name);

/* A heartbeat of server with its caught-up reports. Returns the table's
 * version (> 0), -EAGAIN when this manager does not lead, -EINVAL when
 * the table has no such server or a report names a target not its. */
int64_t kvc_manager_heartbeat(struct kvc_manager *m, uint32_t server,
                              const struct kvc_msg_mgmt_synced *synced, uint32_t count);

/* Drain (or undrain) target: the next monitor pass applies it. Returns
 * the table's version, -EAGAIN (not leading), -EINVAL, -EBUSY (the
 * target is its chain's last member serving reads). */
int64_t kvc_manager_drain(struct kvc_manager *m, uint32_t target, bool drain);

/* A storage server names itself (MGMT_REGISTER). Returns 1 (admitted:
 * *out filled), 0 (join: pending), -ENOENT (not a member, not joining),
 * -EAGAIN, -EEXIST (an admitted host of that name differs), -ENOSPC (too
 * many pending), -EINVAL. */
int kvc_manager_register(struct kvc_manager *m, const char *name, const char *address,
                         uint32_t target_count, bool join,
                         struct kvc_msg_mgmt_register_reply *out);

/* Admit the pending host name: *out says its index and target ids.
 * Returns 0, -EAGAIN, -ENOENT (no such pending host), -EEXIST (admitted
 * already), -ENOSPC (past the table's limits). */
int kvc_manager_add_host(struct kvc_manager *m, const char *name,
                         struct kvc_msg_mgmt_register_reply *out);

/* Every host (admitted, then pending) into out (max records) and the
 * spare targets. Returns the count or -EAGAIN. */
int kvc_manager_hosts(struct kvc_manager *m, struct kvc_wire_host *out, uint32_t max,
                      uint64_t *spare);

/* The table when its version is not `known`, waiting up to wait_ms for a
 * change. Returns 1 (out filled), 0 (still known), -EAGAIN (not leading). */
int kvc_manager_routing(struct kvc_manager *m, uint64_t known, uint32_t wait_ms,
                        struct kvc_chains *out);

/* The changes the monitor makes to `table` for this pass (pure: for tests
 * and the monitor; table's servers say where targets are). silent[s]:
 * server s missed its heartbeats; drained:
 * targets (a bit each) an operator keeps out, as if their server were
 * silent. Returns
 * whether anything changed (versions raised). */
bool kvc_manager_plan(const struct kvc_chains *home, const bool *silent, uint64_t drained,
                      const struct kvc_msg_mgmt_synced *reports, uint32_t report_count,
                      struct kvc_chains *table);

#endif
