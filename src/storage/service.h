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
 *
 * Chains (core/chains.h): a CHUNK_WRITE names its chain, chain version
 * and the member it is for; a version other than this server's table is
 * -ESTALE. The head takes the chunk in the in-flight table (one write of a
 * chunk in the chain at a time), writes it here, forwards it to the next
 * member over a peer connection and answers with what the rest of the
 * chain answered; the tail only writes. A read piece of a chunk with a
 * write in flight here is -EAGAIN (the reader asks the tail).
 *
 * Resync (storage/resync.h): CHUNK_LIST pages through a target's chunks;
 * CHUNK_RESYNC starts a catch-up of a local target from another member
 * of its chain on a thread of its own and answers at once;
 * CHUNK_RESYNC_STATUS tells how it goes. While a target is syncing its
 * writes hold their chunk in the in-flight table at any position and its
 * reads answer -EAGAIN.
 */
#ifndef KVC_STORAGE_SERVICE_H
#define KVC_STORAGE_SERVICE_H

#include <stdint.h>

#include "client/storage_client.h"
#include "core/server.h"
#include "storage/chunk_store.h"
#include "storage/inflight.h"
#include "storage/place.h"
#include "storage/repair.h"
#include "storage/resync.h"

struct kvc_storage_service {
	uint32_t first_target;
	uint32_t target_count;
	struct kvc_chunk_store *stores[KVC_WIRE_MAX_TARGETS];
	/* Chains: the table requests are checked against, the other servers
	 * (forwarding to the next member: peers->chains is the table) and the
	 * writes in flight here. peers NULL: a single-copy server (tests). */
	struct kvc_storage_client *peers;
	struct kvc_inflight *inflight;
	int io_timeout_ms; /* how long a write waits for the one before */
	uint32_t min_write_replicas; /* fewer members: writes are -EROFS */
	struct kvc_repair_counts repairs; /* storage/repair.h */
	/* Per local target (index target - first_target): its resync
	 * (storage/resync.h). While `syncing`, a write it applies holds its
	 * chunk in the in-flight table even at the tail, its reads answer
	 * -EAGAIN, and so does a range operation (its chunks). */
	struct kvc_resync_state resync[KVC_WIRE_MAX_TARGETS];
	/* Same-host placement's regions (place.h); NULL: not served (the
	 * PLACE_* messages are -EOPNOTSUPP). */
	struct kvc_place_table *place;
	/* Read pieces served as part of a run with the one before (one chunk
	 * read for several pieces: kvc_service_merge_pieces). */
	_Atomic uint64_t pieces_merged;
};

int kvc_storage_service_handle(void *service, struct kvc_server_conn *conn,
                               const struct kvc_wire_header *header);
void kvc_storage_service_cleanup(void *service, struct kvc_server_conn *conn);
/* Whether the dispatch table has a row for type (kvc_server_serves). */
bool kvc_storage_service_serves(uint16_t type);

#endif
