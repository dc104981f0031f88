/*
 * op_metrics: times every FUSE operation at one place. Wraps each handler
 * of an operation table in a function of the same signature that calls
 * the original and then counts it (fuse/fuse_metrics.h: kvc_fuse_ops_total
 * and kvc_fuse_op_seconds by op). The handlers of kvc-fuse reply before
 * they return, so the time is the whole operation as kvc-fuse serves it.
 */
#ifndef KVC_FUSE_OP_METRICS_H
#define KVC_FUSE_OP_METRICS_H

#include "fuse/operations.h"

/* Replace each handler of *ops (a copy of kvc_fuse_operations) with its
 * timed wrapper; the originals are kept to be called. Call once, before
 * the session is made. */
void kvc_fuse_op_metrics_wrap(struct fuse_lowlevel_ops *ops);

#endif
