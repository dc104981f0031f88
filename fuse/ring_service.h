/*
 * ring_service: runs the USRBIO rings of every client. A pool of worker
 * threads sleeps in epoll on every ring's doorbell eventfd (no polling
 * when idle); a doorbell wakes one worker, which takes a batch of entries
 * from the ring (io_depth rules), copies and checks each entry, runs the
 * whole batch through the storage client (pieces of all entries grouped
 * per server, bytes received straight into the client's iov and sent
 * straight from it), then posts the completions and wakes the client's
 * futex. Different rings run on different workers in parallel. A timer
 * thread, asleep unless a ring waits on an io_depth timeout, rings the
 * doorbell of rings whose timeout passed.
 *
 * A ring is reference counted: the service's ring table, and a worker
 * while it runs it. Removing clears its table slot (late events for it
 * are then ignored) and drops the table's reference; the last reference
 * unmaps it.
 */
#ifndef KVC_FUSE_RING_SERVICE_H
#define KVC_FUSE_RING_SERVICE_H

#include <stdint.h>

#include "fuse/usrbio_service.h"
#include "core/wire.h"

/* Start the dispatcher and `workers` worker threads. */
int kvc_ring_service_start(struct kvc_fuse *fs, int workers, struct kvc_ring_service **out);

/* Register a ring of client from its shared memory fd and doorbell fd
 * (both taken over on success). Returns 0 and the ring, -EINVAL (bad
 * parameters or memory), -ENOMEM, -errno. */
int kvc_ring_service_add(struct kvc_ring_service *service, struct kvc_usrbio_client *client,
                         const struct kvc_msg_ring_register *params, int memory_fd,
                         int doorbell_fd, struct kvc_ring_server_ring **out);

/* Stop a ring: no new batches start; the memory goes with the last user. */
void kvc_ring_service_remove(struct kvc_ring_service *service,
                             struct kvc_ring_server_ring *ring);

#endif
