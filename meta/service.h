/*
 * meta service: the request handlers of kvc-meta. Decodes and checks each
 * namespace RPC (names, lengths, masks) and runs it on the meta store.
 * A size-reducing setattr commits the new size first and then cuts the
 * chunks beyond it on the storage servers; the file cannot grow again
 * until they are cut (meta_sizes.c), so growing it later shows zeros, never
 * old data.
 * While the volume of kvc-meta's data is below its reserve (`space`), the
 * messages that grow the databases are refused with -ENOSPC; everything
 * that removes or shrinks goes through (docs/operations.md "Full disks").
 */
#ifndef KVC_META_SERVICE_H
#define KVC_META_SERVICE_H

#include "meta/collector.h"
#include "meta/meta_store.h"
#include "meta/sessions.h"
#include "meta/pool_store.h"
#include "meta/watches.h"
#include "core/reserve.h"
#include "core/server.h"
#include "client/storage_client.h"

struct kvc_meta_service {
	struct kvc_meta_store *store;
	struct kvc_pool_store *pools;
	struct kvc_storage_client *storage;
	struct kvc_meta_collector *collector;
	struct kvc_meta_sessions *sessions;
	struct kvc_reserve *space; /* of the data's volume; NULL: no reserve */
	struct kvc_meta_watches *watches; /* NULL: nobody is told of changes */
};

int kvc_meta_service_handle(void *service, struct kvc_server_conn *conn,
                            const struct kvc_wire_header *header);
/* The server's cleanup of a connection (a client's watches binding). */
void kvc_meta_service_conn_cleanup(void *service, struct kvc_server_conn *conn);
/* Whether a namespace or pool message type has a row (kvc_server_serves). */
bool kvc_meta_service_serves(uint16_t type);

#endif
