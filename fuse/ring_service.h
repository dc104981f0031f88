/*
 * ring_service: runs the USRBIO rings of every client. A pool of worker
 * threads sleeps in epoll on every ring's doorbell (no polling when
 * idle); a doorbell wakes one worker, which takes a batch of entries
 * from the ring (io_depth rules), copies and checks each entry, runs the
 * whole batch through the storage client (pieces of all entries grouped
 * per server, bytes received straight into the client's iov and sent
 * straight from it; fuse/ring_batch.c), then posts the completions and
 * wakes the client's futex. A host read completes as soon as its own
 * bytes landed, before the rest of its batch (ring_internal.h).
 * Different rings run on different workers in parallel. A timer thread,
 * asleep unless a ring waits on an io_depth timeout, rings the doorbell
 * of rings whose timeout passed.
 *
 * Doorbells are kvc-fuse's: a Unix socket pair per ring, made at
 * registration. kvc-fuse keeps one end (in epoll, read only here, with
 * MSG_DONTWAIT) and hands the other to the client, which writes to it
 * (libkvc: 8 bytes) to ring. kvc-fuse keeps a copy of the client's end for
 * its timer, which writes with MSG_DONTWAIT: nothing the client does to
 * its end (blocking mode, full buffer, close) can make kvc-fuse wait; a
 * client that shuts it down stops its own ring.
 *
 * A ring is reference counted: the service's ring table, a worker while
 * it runs it, the timer while it rings it. Removing clears its table slot
 * (late events for it are then ignored) and drops the table's reference;
 * the last reference unmaps it and drops the ring's hold on its client.
 * table_lock guards the table only: no system call on a ring's memory or
 * doorbell is made while holding it.
 */
#ifndef KVC_FUSE_RING_SERVICE_H
#define KVC_FUSE_RING_SERVICE_H

#include <stdbool.h>
#include <stdint.h>

#include "fuse/usrbio_service.h"
#include "core/wire.h"

/* Start `workers` worker threads and the timer (none of either for 0). */
int kvc_ring_service_start(struct kvc_fuse *fs, int workers, struct kvc_ring_service **out);

/* Register a ring of client in its shared memory (memory_fd, checked by
 * the caller: see usrbio_service.h; kept by the caller). Returns 0, the
 * ring (holding a reference on client) and the client's end of its
 * doorbell (the ring's: pass it on, do not close it); -EINVAL (bad
 * parameters or ring header), -EMFILE, -ENOMEM, -errno. */
int kvc_ring_service_add(struct kvc_ring_service *service, struct kvc_usrbio_client *client,
                         const struct kvc_msg_ring_register *params, int memory_fd,
                         struct kvc_ring_server_ring **out, int *doorbell);

/* Stop a ring: no new batches start; the memory goes with the last user. */
void kvc_ring_service_remove(struct kvc_ring_service *service,
                             struct kvc_ring_server_ring *ring);

/* Run the ring's ready batches now, as a worker woken by its doorbell
 * does (no lingering), for tests and fuzzing without workers. Returns the
 * entries taken, or -ENOMEM. */
int kvc_ring_service_run(struct kvc_ring_service *service, struct kvc_ring_server_ring *ring);

/* For ring keys' parked waits (ring_keys_wait.c): a reference on a ring
 * (hold/release), whether it stopped, the count of its parked waits
 * (park: delta +1 is -EAGAIN when `entries` are parked already, -1 gives
 * one back), and posting a completion outside a batch: 0, -EAGAIN (the
 * completion queue is full: the client went past its entries; try
 * later), -ESHUTDOWN (the ring stopped: drop it). */
void kvc_ring_service_hold(struct kvc_ring_server_ring *ring);
void kvc_ring_service_release(struct kvc_ring_server_ring *ring);
bool kvc_ring_service_dead(struct kvc_ring_server_ring *ring);
int kvc_ring_service_park(struct kvc_ring_server_ring *ring, int delta);
int kvc_ring_service_complete(struct kvc_ring_server_ring *ring, uint32_t slot,
                              uint64_t userdata, int64_t result);

/* Entries submitted to all rings and not yet taken, now (metrics; each
 * ring's count clamped to its size). Takes table_lock. */
uint64_t kvc_ring_service_depth(struct kvc_ring_service *service);

#endif
