/*
 * read_buffer: the memory a FUSE read lands in before its reply, and the
 * memory a FUSE write's bytes are staged in. Each thread serving FUSE
 * requests keeps one shared-memory region (client/transport.h
 * kvc_transport_region_create) of KVC_FUSE_READ_BUFFER bytes, so a
 * same-host storage server places the read's bytes straight into it, or
 * takes the write's bytes from it (no loopback TCP); a request larger
 * than the region, or a thread that cannot make one, uses plain memory
 * (a write: its own buffer).
 *
 * Owns: the thread's region (a thread-specific value, given back with its
 * registrations when the thread exits). Rule, as for ring keys' bounce
 * buffer: when the client's place_epoch moved during a read (any
 * placement of the client fell back, or a placed piece failed with
 * -EIO: storage_client.h) during a read or write, the region is dropped
 * (kvc_fuse_read_buffer_done), never reused: a server may still place
 * into it or take bytes from it, and must not reach a later request's.
 */
#ifndef KVC_FUSE_READ_BUFFER_H
#define KVC_FUSE_READ_BUFFER_H

#include <stddef.h>
#include <stdint.h>

#include "client/storage_client.h"

#define KVC_FUSE_READ_BUFFER (1u << 20) /* FUSE's largest read and write */

struct kvc_fuse_read_buffer {
	void *buf;
	const struct kvc_storage_region *region; /* NULL: plain memory (malloc'd) */
	uint64_t epoch;                          /* the client's place_epoch at _get */
};

/* Memory for a read of size bytes on this thread into out. Returns 0 or
 * -ENOMEM. */
int kvc_fuse_read_buffer_get(struct kvc_storage_client *client, size_t size,
                             struct kvc_fuse_read_buffer *out);
/* This thread's region for a write of size bytes into out: 0, or -ENOENT
 * (none: too big, or it cannot be made; nothing is taken). */
int kvc_fuse_read_buffer_region(struct kvc_storage_client *client, size_t size,
                                struct kvc_fuse_read_buffer *out);

/* After the request (a read: and its reply): plain memory is freed, the
 * region kept unless the client's place_epoch moved meanwhile. */
void kvc_fuse_read_buffer_done(struct kvc_storage_client *client,
                               struct kvc_fuse_read_buffer *b);

#endif
