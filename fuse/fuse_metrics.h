/*
 * fuse_metrics: kvc-fuse's Prometheus metrics (docs/operations.md
 * "Metrics"): FUSE operations (count, errors are not seen here, latency
 * per kind: op_metrics.c wraps the operation table), bytes read and
 * written through FUSE, USRBIO rings (entries taken and completed, bytes
 * moved, entries waiting in the rings now, rings registered), and
 * kvc-meta's change-event stream (up or not, events received).
 *
 * One registry per process, made by kvc_fuse_metrics_start before the
 * mount (and before any thread that observes); every observe function is
 * a no-op before that, or when metrics are off, so the ring service's
 * tests and fuzzers need none. Observations are atomic adds on series
 * made at start: no lock, no allocation.
 */
#ifndef KVC_FUSE_METRICS_H
#define KVC_FUSE_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/metrics.h"

struct kvc_fuse;
struct kvc_ring_service;

/* The FUSE operations counted (op="<name>"). */
enum kvc_fuse_op {
	KVC_FUSE_OP_LOOKUP, KVC_FUSE_OP_FORGET, KVC_FUSE_OP_GETATTR, KVC_FUSE_OP_SETATTR,
	KVC_FUSE_OP_READLINK, KVC_FUSE_OP_MKNOD, KVC_FUSE_OP_MKDIR, KVC_FUSE_OP_UNLINK,
	KVC_FUSE_OP_RMDIR, KVC_FUSE_OP_SYMLINK, KVC_FUSE_OP_RENAME, KVC_FUSE_OP_LINK,
	KVC_FUSE_OP_OPEN, KVC_FUSE_OP_READ, KVC_FUSE_OP_WRITE, KVC_FUSE_OP_FLUSH,
	KVC_FUSE_OP_RELEASE, KVC_FUSE_OP_FSYNC, KVC_FUSE_OP_OPENDIR, KVC_FUSE_OP_READDIRPLUS,
	KVC_FUSE_OP_RELEASEDIR, KVC_FUSE_OP_FSYNCDIR, KVC_FUSE_OP_STATFS, KVC_FUSE_OP_SETXATTR,
	KVC_FUSE_OP_GETXATTR, KVC_FUSE_OP_LISTXATTR, KVC_FUSE_OP_REMOVEXATTR, KVC_FUSE_OP_CREATE,
	KVC_FUSE_OP_FALLOCATE,
	KVC_FUSE_OPS
};

/* Make the registry and every series of fs. Returns 0 or -ENOMEM. */
int kvc_fuse_metrics_start(struct kvc_fuse *fs);

/* The registry (to serve); NULL before start. */
struct kvc_metrics *kvc_fuse_metrics_registry(void);

/* A FUSE operation of kind op that started at start_ns (monotonic) is done. */
void kvc_fuse_metrics_op(enum kvc_fuse_op op, int64_t start_ns);
/* Bytes answered to FUSE reads, taken from FUSE writes. */
void kvc_fuse_metrics_bytes(bool read, uint64_t bytes);

/* The ring service whose rings' depth a scrape reads (set once). */
void kvc_fuse_metrics_rings(struct kvc_ring_service *rings);
/* Ring entries taken from rings (submitted), completions posted, and
 * bytes moved by ring entries (read: into the client's memory). */
void kvc_fuse_metrics_ring_taken(bool read, uint32_t entries);
void kvc_fuse_metrics_ring_completed(uint32_t entries);
/* A ring's batch started while another batch of that ring ran. */
void kvc_fuse_metrics_ring_overlapped(void);
void kvc_fuse_metrics_ring_bytes(bool read, uint64_t bytes);

#endif
