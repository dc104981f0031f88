/*
 * admin_resync: kvc-admin's resync command (docs/operations.md): start a
 * resync of a target from another member of its chain (CHUNK_RESYNC to
 * the target's server), then follow it (CHUNK_RESYNC_STATUS twice a
 * second) and print its progress and a summary, or JSON. kvc-admin.c
 * parses the options; this file talks to the servers.
 */
#ifndef KVC_ADMIN_RESYNC_H
#define KVC_ADMIN_RESYNC_H

#include <stdbool.h>
#include <stdint.h>

#include "client/storage_client.h"

struct admin_resync {
	uint32_t target;
	uint32_t source;
	bool status_only; /* --status: show the last resync, start nothing */
	bool no_wait;     /* --no-wait: start it and return */
	bool json;
};

/* Run the command. Returns the exit status: 0 done, 1 refused or failed. */
int admin_resync_run(struct kvc_storage_client *storage, const struct admin_resync *opts);

#endif
