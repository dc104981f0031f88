/*
 * ring_service: runs the USRBIO rings of every client. One dispatcher
 * thread sleeps in epoll on every ring's doorbell eventfd (no polling when
 * idle) and queues rings that have work; a pool of worker threads takes a
 * batch of entries from a ring (io_depth rules), copies and checks each
 * entry, runs the whole batch through the storage client (pieces of all
 * entries grouped per server, bytes received straight into the client's
 * iov and sent straight from it), then posts the completions and wakes the
 * client's futex. Different rings run on different workers in parallel.
 *
 * A ring is reference counted: the owner's table, and the dispatcher or a
 * worker while it is queued or running. Deregistering marks it dead and
 * drops the table's reference; the last reference unmaps it.
 */
#ifndef KVC_FUSE_RING_SERVICE_H
#define KVC_FUSE_RING_SERVICE_H

#include <stdint.h>

#include "fuse/usrbio_service.h"
#include "wire.h"

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
