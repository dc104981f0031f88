/*
 * heartbeat: a storage server's heartbeats to the leading manager
 * (kvc-mgmt; docs/protocol.md MGMT_HEARTBEAT): every heartbeat_ms, with
 * the routing version the server knows and the targets that finished
 * catching up since the last one. A reply with a newer version makes the
 * server fetch the table at once (its peers client also follows it with
 * long polls). Managers that do not lead answer -EAGAIN: the next one is
 * asked. A thread of its own; nothing else waits on it.
 */
#ifndef KVC_STORAGE_HEARTBEAT_H
#define KVC_STORAGE_HEARTBEAT_H

#include <stdint.h>

#include <stdbool.h>

#include "storage/service.h"

/* Start heartbeats of server `server` (its index in the cluster file)
 * when the cluster file names managers. Returns 0 or -errno. */
int kvc_heartbeat_start(struct kvc_storage_service *svc, const struct kvc_config *config,
                        uint32_t server);

/* Before a server of a cluster with managers opens its targets: which
 * index and target ids the managers' table gives it (never its file's:
 * a host added later has only its own section, whose ids start at 0).
 * MGMT_REGISTER to the managers in turn every heartbeat_ms until the
 * leader answers that it is admitted, logging once that it waits (for a
 * leader; join: for kvc-admin add-host). *out: its server index and
 * target ids. Returns 0, or -errno when the leader refuses it (-ENOENT:
 * not a member and not joining; -EEXIST: an admitted host of that name
 * has another address or target count). */
int kvc_heartbeat_register(const struct kvc_config *config, const struct kvc_config_server *me,
                           bool join, struct kvc_msg_mgmt_register_reply *out);

/* Report that target caught up with its chain at chain_version (sent with
 * the next heartbeats until the table shows it serving). */
void kvc_heartbeat_report_synced(uint32_t target, uint32_t chain_version);

#endif
