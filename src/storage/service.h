/*
 * storage service: the request handlers of kvc-storage. Owns the chunk
 * stores of the targets this server serves and answers chunk RPCs for
 * them through one dispatch table (type, body-size rule, data section or
 * not, handler): a type without a row is -EOPNOTSUPP, a body that breaks
 * its row's rule -EINVAL (docs/protocol.md). Every count, length and
 * offset in a request is checked against the wire limits and the chunk
 * size before it reaches a chunk store. No lock of the chunk stores is
 * held while a reply is sent.
 *
 * Each connection owns an io_uring and a write buffer (service_state), so
 * a multi-chunk read queues the readahead of all its pieces at once.
 */
#ifndef KVC_STORAGE_SERVICE_H
#define KVC_STORAGE_SERVICE_H

#include <stdint.h>

#include "core/server.h"
#include "storage/chunk_store.h"

struct kvc_storage_service {
	uint32_t first_target;
	uint32_t target_count;
	struct kvc_chunk_store *stores[KVC_WIRE_MAX_TARGETS];
};

int kvc_storage_service_handle(void *service, struct kvc_server_conn *conn,
                               const struct kvc_wire_header *header);
void kvc_storage_service_cleanup(void *service, struct kvc_server_conn *conn);
/* Whether the dispatch table has a row for type (kvc_server_serves). */
bool kvc_storage_service_serves(uint16_t type);

#endif
