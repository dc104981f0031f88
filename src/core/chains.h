/*
 * chains: the chain table. A chain is an ordered list of targets on
 * distinct storage servers that hold the same chunks (chain replication,
 * docs/architecture.md "Chains"): writes enter at the head (member 0) and
 * each member forwards to the next; the tail (the last member) answers
 * only once it applied the write, so an acknowledged write is on every
 * member. Files stripe over chains: a layout's first_chain and
 * chain_count index this table.
 *
 * Every chain has a version that changes whenever its membership does;
 * requests carry the version their sender routed by, and a target refuses
 * a version that is not its own (-ESTALE): the sender refreshes its table.
 *
 * A target is a member of one chain only (as in 3FS): what a target holds
 * is exactly its chain's chunks, so a target that comes back or is new
 * catches up by comparing itself, whole, with another member.
 *
 * The table of a cluster file (kvc_chains_build): chain after chain, a
 * target from each of the `replicas` servers with the most targets not yet
 * in a chain (ties broken from server c on, so heads rotate over the
 * servers); the members of a chain are on distinct servers. With
 * replicas = 1, chain i is target i alone: the layouts of clusters made
 * before chains name the same places. The target count must be a multiple
 * of replicas and no server may hold more than count / replicas targets
 * (config.c says so). Chain ids never change meaning.
 *
 * The table also carries the storage servers (hosts: name, address, their
 * targets' ids, which are dense: server i's follow server i - 1's), so a
 * client needs no [storage] sections: the managers' table says where
 * every target is. Servers and targets are only ever appended (kvc-admin
 * add-host): an index names the same server, an id the same target, in
 * every later table. kvc_chains_grow makes chains of targets in none.
 */
#ifndef KVC_CHAINS_H
#define KVC_CHAINS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/wire.h"

struct kvc_config;

struct kvc_chain {
	uint32_t version;
	uint32_t count; /* members; 0: the chain has none serving */
	uint32_t targets[KVC_WIRE_MAX_REPLICAS];
	uint32_t syncing; /* a bit per position: catching up, no reads from it */
};

struct kvc_chains_server {
	char name[KVC_WIRE_HOST_NAME];
	char address[KVC_WIRE_HOST_ADDRESS];
	uint32_t first_target;
	uint32_t target_count;
};

struct kvc_chains {
	uint64_t version; /* of the whole table: 1 from the cluster file, then
	                     the manager's (every change raises it) */
	uint32_t count;
	struct kvc_chain chains[KVC_WIRE_MAX_TARGETS];
	uint32_t server_count;
	uint32_t target_count; /* the servers' targets, all together */
	struct kvc_chains_server servers[KVC_WIRE_MAX_SERVERS];
};

/* The chain table of a checked cluster file (config->replicas members
 * each, version 1). Returns 0 or -EINVAL (fewer servers than replicas). */
int kvc_chains_build(const struct kvc_config *config, struct kvc_chains *out);

/* The server (index) holding target, or -1 when the table has no such
 * target. */
int kvc_chains_server_of(const struct kvc_chains *table, uint32_t target);

/* Make new chains of `replicas` members on distinct servers from the
 * targets of home in no chain of home whose server is eligible
 * (eligible[s]; NULL: all), greedily as kvc_chains_build (the servers
 * with the most such targets first, ties to the lower index); each new
 * chain (version 1, every member serving) is appended to home and table
 * alike (their counts must be equal). Targets left (too few servers with
 * spare ones) stay spare. Returns the count of chains made. */
uint32_t kvc_chains_grow(struct kvc_chains *home, struct kvc_chains *table, uint32_t replicas,
                         const bool *eligible);

/* Targets (a bit each, ids < 64) of table in none of its chains. */
uint64_t kvc_chains_spare(const struct kvc_chains *table);

/* Position of target in chain, or -1. */
int kvc_chains_position(const struct kvc_chain *chain, uint32_t target);

/* The chain that has target as a member, or -1. */
int kvc_chains_of_target(const struct kvc_chains *table, uint32_t target);

/* A table to and from its wire form (kvc_wire_chain records, then
 * kvc_wire_server records). decode checks what a manager sent: counts
 * within the limits, servers with a non-empty NUL-terminated name (no two
 * alike) and a host:port address, target ids dense from 0 (each server's
 * first_target where the one before ended, at most KVC_WIRE_MAX_TARGETS
 * in all), chain members below the target count and distinct, syncing
 * bits within the count, and never every member syncing; -EBADMSG
 * otherwise. */
void kvc_chains_encode(const struct kvc_chains *table, struct kvc_wire_chain *out);
void kvc_chains_encode_servers(const struct kvc_chains *table, struct kvc_wire_server *out);
int kvc_chains_decode(const struct kvc_wire_chain *in, uint32_t count, uint64_t version,
                      const struct kvc_wire_server *servers, uint32_t server_count,
                      struct kvc_chains *out);

#endif
