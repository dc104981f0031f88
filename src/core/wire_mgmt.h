/*
 * wire_mgmt: the routing table as it travels (chains, servers, hosts) and
 * the cluster manager's messages (MGMT_*). Part of core/wire.h; include
 * that, not this. docs/protocol.md describes every message.
 */
#ifndef KVC_WIRE_MGMT_H
#define KVC_WIRE_MGMT_H

#ifndef KVC_WIRE_H
#error "include core/wire.h"
#endif

/* A chain of the routing table (core/chains.h): version, members head
 * first, and which members are catching up (a bit per position: they take
 * writes but serve no reads yet). */
struct kvc_wire_chain {
	uint32_t version;
	uint32_t count;
	uint32_t targets[KVC_WIRE_MAX_REPLICAS];
	uint32_t syncing;
	uint32_t reserved;
};
_Static_assert(sizeof(struct kvc_wire_chain) == 48, "");

/* MGMT_HEARTBEAT: a storage server (its index in the routing table) is
 * alive and knows routing version routing_version; then synced_count
 * kvc_msg_mgmt_synced: its targets that finished catching up with their
 * chain at chain_version. Only the leading manager answers (others:
 * -EAGAIN, ask the next). Reply: kvc_msg_mgmt_routing_reply with no chains. */
#define KVC_WIRE_MAX_SYNCED 64
struct kvc_msg_mgmt_heartbeat {
	uint32_t server;
	uint32_t synced_count;
	uint64_t routing_version;
};
struct kvc_msg_mgmt_synced {
	uint32_t target;
	uint32_t chain_version;
};
/* MGMT_ROUTING: the routing table when its version is not known_version,
 * waiting up to wait_ms (<= KVC_WIRE_MAX_ROUTING_WAIT_MS) for a change.
 * Reply: kvc_msg_mgmt_routing_reply, then chain_count kvc_wire_chain,
 * then server_count kvc_wire_server (both counts 0 when the table is
 * still known_version). The leading manager answers; others -EAGAIN. */
#define KVC_WIRE_MAX_ROUTING_WAIT_MS 10000
struct kvc_msg_mgmt_routing {
	uint64_t known_version;
	uint32_t wait_ms;
	uint32_t reserved;
};
struct kvc_msg_mgmt_routing_reply {
	uint64_t version;
	uint32_t chain_count;
	uint32_t server_count; /* kvc_wire_server records after the chains */
};
_Static_assert(sizeof(struct kvc_msg_mgmt_routing_reply) == 16, "");

/* A storage server of the routing table: index = its position in the
 * table; its targets are ids first_target .. first_target + target_count
 * - 1 (server i's start where server i - 1's end: ids are dense). name
 * and address are NUL-terminated. */
struct kvc_wire_server {
	char name[KVC_WIRE_HOST_NAME];
	char address[KVC_WIRE_HOST_ADDRESS];
	uint32_t first_target;
	uint32_t target_count;
};
_Static_assert(sizeof(struct kvc_wire_server) == 200, "");

/* MGMT_REGISTER: every storage server of a cluster with managers names
 * itself at start, before it opens its targets, and learns its index and
 * target ids from the leader (the table, not its file, says which ids
 * its disks hold); a joining one (kvc-storage --join, flags
 * KVC_MGMT_REGISTER_JOIN) again every heartbeat_ms until admitted. The
 * leader answers kvc_msg_mgmt_register_reply: admitted 1 with its index
 * and target ids, or admitted 0 (JOIN: pending, listed for kvc-admin
 * add-host). -ENOENT: not a member and no JOIN; -EEXIST: an admitted
 * server of that name has another address or target count; -EINVAL: a
 * bad name, address, count or flag. */
#define KVC_MGMT_REGISTER_JOIN 1u
struct kvc_msg_mgmt_register {
	char name[KVC_WIRE_HOST_NAME];
	char address[KVC_WIRE_HOST_ADDRESS];
	uint32_t target_count;
	uint32_t flags;
};
_Static_assert(sizeof(struct kvc_msg_mgmt_register) == 200, "");
struct kvc_msg_mgmt_register_reply {
	uint32_t admitted;
	uint32_t server;
	uint32_t first_target;
	uint32_t target_count;
};

/* MGMT_ADD_HOST: admit the pending host `name` (kvc-admin add-host). Reply:
 * kvc_msg_mgmt_register_reply (admitted 1: the index and ids it gets; the
 * leader's next monitor pass stores it). -ENOENT: no pending host of that
 * name; -EEXIST: already admitted; -ENOSPC: past KVC_WIRE_MAX_SERVERS or
 * KVC_WIRE_MAX_TARGETS. */
struct kvc_msg_mgmt_add_host {
	char name[KVC_WIRE_HOST_NAME];
};

/* MGMT_HOSTS: every host the leader knows (empty body). Reply: the head,
 * then count kvc_wire_host. spare: a bit per target in no chain yet (too
 * few hosts with spare targets to make one of `replicas`). */
struct kvc_msg_mgmt_hosts_reply {
	uint32_t count;
	uint32_t reserved;
	uint64_t spare;
};
struct kvc_wire_host {
	char name[KVC_WIRE_HOST_NAME];
	char address[KVC_WIRE_HOST_ADDRESS];
	uint32_t admitted;     /* 1: in the table; 0: pending */
	uint32_t server;       /* its index (admitted) */
	uint32_t first_target; /* admitted */
	uint32_t target_count;
	int64_t heartbeat_age_ms; /* -1: none heard while this manager leads */
};
_Static_assert(sizeof(struct kvc_wire_host) == 216, "");

/* MGMT_DRAIN: take target out of its chain and keep it out (drain 1), or
 * let it back in, catching up (drain 0). The leader answers at once
 * (kvc_msg_mgmt_routing_reply, no chains: the version before the change,
 * which its next monitor pass makes); -EBUSY when the target is its
 * chain's last member serving reads. */
struct kvc_msg_mgmt_drain {
	uint32_t target;
	uint32_t drain;
};

#endif
