/*
 * pool_service: kvc-meta's handlers of the page pool messages of the
 * binary protocol (wire types 32-47; src/core/wire.h). Decodes and checks
 * each request (namespace, counts, key lengths against the limits) and
 * runs it on the pool store in one transaction. POOL_WAIT blocks its
 * connection's thread (thread per connection) until its keys are
 * complete or its timeout, holding no lock; the peer hanging up ends it.
 * The HTTP front (http.c) serves the same store for the vLLM and SGLang
 * connectors.
 */
#ifndef KVC_META_POOL_SERVICE_H
#define KVC_META_POOL_SERVICE_H

#include "meta/meta_store.h"
#include "meta/pool_store.h"
#include "core/server.h"

/* Handle one pool message; replies itself. namespace resolves the paths
 * of POOL_BIND. Returns 0 or -errno for a protocol error (the server then
 * closes the connection). */
int kvc_pool_service_handle(struct kvc_pool_store *pools, struct kvc_meta_store *namespace,
                            struct kvc_server_conn *conn, const struct kvc_wire_header *header);

/* Whether a pool message type has a row (for kvc_meta_service_serves). */
bool kvc_pool_service_serves(uint16_t type);

#endif
