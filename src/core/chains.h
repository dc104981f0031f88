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
 */
#ifndef KVC_CHAINS_H
#define KVC_CHAINS_H

#include <stdint.h>

#include "core/wire.h"

struct kvc_config;

struct kvc_chain {
	uint32_t version;
	uint32_t count; /* members; 0: the chain has none serving */
	uint32_t targets[KVC_WIRE_MAX_REPLICAS];
	uint32_t syncing; /* a bit per position: catching up, no reads from it */
};

struct kvc_chains {
	uint64_t version; /* of the whole table: 1 from the cluster file, then
	                     the manager's (every change raises it) */
	uint32_t count;
	struct kvc_chain chains[KVC_WIRE_MAX_TARGETS];
};

/* The chain table of a checked cluster file (config->replicas members
 * each, version 1). Returns 0 or -EINVAL (fewer servers than replicas). */
int kvc_chains_build(const struct kvc_config *config, struct kvc_chains *out);

/* Position of target in chain, or -1. */
int kvc_chains_position(const struct kvc_chain *chain, uint32_t target);

/* The chain that has target as a member, or -1. */
int kvc_chains_of_target(const struct kvc_chains *table, uint32_t target);

/* A table to and from its wire form (kvc_wire_chain records). decode
 * checks what a manager sent: counts within the limits, member targets
 * below target_count and distinct, syncing bits within the count, and
 * never every member syncing; -EBADMSG otherwise. */
void kvc_chains_encode(const struct kvc_chains *table, struct kvc_wire_chain *out);
int kvc_chains_decode(const struct kvc_wire_chain *in, uint32_t count, uint64_t version,
                      uint32_t target_count, struct kvc_chains *out);

#endif
