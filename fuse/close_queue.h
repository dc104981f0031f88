/*
 * close_queue: the CLOSEs of kvc-fuse's open sessions, sent off the
 * release path and many at a time (CLOSE_MANY: one kvc-meta transaction
 * for the closes a burst of short-lived files left, instead of one each).
 *
 * A file whose last handle here goes is queued (kvc_close_queue_add,
 * under its session lock, file_ops.c); one thread sends what is queued,
 * up to KVC_WIRE_MAX_CLOSES a time, 5 ms after the first of a batch was
 * queued or after the batch before it went (the rest of a burst joins
 * it; close_queue.c LINGER_MS). An open of a queued file takes it out
 * of the queue (its session is still held in kvc-meta) and an open of a
 * file whose CLOSE is on its way waits for it (kvc_close_queue_cancel,
 * under the session lock), so a CLOSE never lands after a newer OPEN of
 * the same file. A batch kvc-meta did not take goes back to the front of
 * the queue and is tried again a second later (an open meanwhile takes its
 * file out as above); at stop, or with the queue full, it goes to the
 * retried closes (operations.h: pending_closes). At stop, everything
 * queued is sent.
 *
 * Lock: the queue's mutex, taken inside a session lock (add, cancel) and
 * never across the RPC (the thread takes a batch, unlocks, sends).
 */
#ifndef KVC_FUSE_CLOSE_QUEUE_H
#define KVC_FUSE_CLOSE_QUEUE_H

#include <stdint.h>

struct kvc_fuse;
struct kvc_close_queue;

int kvc_close_queue_start(struct kvc_fuse *fs, struct kvc_close_queue **out);
/* Send what is queued and stop the thread. The queue stays (until the
 * process exits): what is added later is refused, so the caller sends it
 * itself, and threads still closing files never touch freed memory. */
void kvc_close_queue_stop(struct kvc_close_queue *q);
/* Queue ino's CLOSE: 0, or -ENOSPC when the queue is full (then the
 * caller sends it itself). */
int kvc_close_queue_add(struct kvc_close_queue *q, uint64_t ino);
/* ino is being opened: drop its queued CLOSE, or wait for the one on its
 * way. Returns 1 when a queued CLOSE was dropped (the session is held). */
int kvc_close_queue_cancel(struct kvc_close_queue *q, uint64_t ino);
/* CLOSEs kvc-meta did not take (rc: why): retried every second with the
 * others (operations.h: pending_closes; file_ops.c). */
void kvc_close_queue_retry_later(struct kvc_fuse *fs, const uint64_t *inos, uint32_t n, int rc);

#endif
