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

#include "storage/service.h"

/* Start heartbeats of server `server` (its index in the cluster file)
 * when the cluster file names managers. Returns 0 or -errno. */
int kvc_heartbeat_start(struct kvc_storage_service *svc, const struct kvc_config *config,
                        uint32_t server);

/* Report that target caught up with its chain at chain_version (sent with
 * the next heartbeats until the table shows it serving). */
void kvc_heartbeat_report_synced(uint32_t target, uint32_t chain_version);

#endif
