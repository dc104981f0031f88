/*
 * admin_chains: kvc-admin's drain and undrain commands (docs/operations.md
 * "Replicas and failures"): ask the leading manager (MGMT_DRAIN) to take
 * a target out of its chain and keep it out, or to let it back in, then
 * follow the routing table until it shows that (a target let back in:
 * until it caught up and serves reads), printing where it stands, or
 * JSON; add-host (MGMT_ADD_HOST: admit a pending host) and status's hosts
 * (MGMT_HOSTS). kvc-admin.c parses the options; this file talks to the
 * managers.
 */
#ifndef KVC_ADMIN_CHAINS_H
#define KVC_ADMIN_CHAINS_H

#include <stdbool.h>
#include <stdint.h>

#include "client/storage_client.h"
#include "core/chains.h"
#include "core/config.h"

/* A target's state in table: "serving" (a member serving reads),
 * "syncing" (a member catching up), "out" (in no chain: its server failed,
 * or it is drained). */
const char *admin_target_state(const struct kvc_chains *table, uint32_t target);

/* status's chains: JSON members `"routing_version":N,"chains":[...]` (the
 * caller writes what surrounds them), or a CHAINS table when replicas > 1. */
void admin_chains_print(const struct kvc_chains *table, bool json, uint32_t replicas,
                        bool managers);

/* Returns the exit status: 0 done, 1 refused, failed or timed out. */
int admin_drain_run(struct kvc_storage_client *storage, const struct kvc_config *config,
                    uint32_t target, bool drain, bool json);

/* add-host NAME: admit the pending host, then wait for the table to
 * have it. Returns the exit status (1: refused, with the reason). */
int admin_add_host_run(struct kvc_storage_client *storage, const struct kvc_config *config,
                       const char *name, bool json);

/* status's hosts: JSON members `"hosts":[...],"spare_targets":[...]`, or
 * a HOSTS table. Returns 0 or the managers' -errno. */
int admin_hosts_print(const struct kvc_config *config, bool json);

#endif
