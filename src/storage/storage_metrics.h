/*
 * storage_metrics: kvc-storage's Prometheus metrics (docs/operations.md
 * "Metrics"): per message type through the server's dispatch
 * (core/server.h, prefix kvc_storage), and per target the chunk store's
 * space, looked at when scraped (kvc_chunk_store_space): chunks, total,
 * free, used, reserve and available bytes, whether it refuses new data,
 * and the writes it refused. Served on the [storage NAME] metrics address
 * (core/metrics_http.h). Chain and resync metrics add their families to
 * the same registry (kvc_storage_metrics_registry).
 */
#ifndef KVC_STORAGE_METRICS_H
#define KVC_STORAGE_METRICS_H

#include "core/metrics.h"
#include "core/server.h"
#include "storage/service.h"

/* Register the metrics of svc, server and place (the placement socket's
 * server, or NULL; its requests as kvc_storage_placement_*), before
 * either runs, and serve them on address ("": register only, serve
 * nothing). Returns 0, -ENOMEM, or kvc_metrics_http_start's error. */
int kvc_storage_metrics_start(struct kvc_storage_service *svc, struct kvc_server *server,
                              struct kvc_server *place, const char *address);

/* The registry, for other modules' metrics; NULL before start. */
struct kvc_metrics *kvc_storage_metrics_registry(void);

#endif
