/*
 * place: the server side of same-host placement (src/client/transport.h).
 * Owns the regions of client memory registered with this kvc-storage: a
 * shared-memory fd a local kvc-fuse passed over the Unix socket, mapped
 * MAP_SHARED here and kept open.
 *
 * Invariants:
 * - A region belongs to the connection that registered it (`owner`) and
 *   is known by (pid, id): only connections of the same peer process
 *   (SO_PEERCRED pid) may name it. When the owner's connection closes,
 *   its regions go (a client that dies loses its registrations).
 * - A region in use (kvc_place_get) stays mapped until kvc_place_put; an
 *   unregistered one is unmapped by the last put.
 * - Bytes go INTO client memory only by a kernel copy (a chunk file's
 *   blocks read straight there: -EFAULT where the memory is gone) or
 *   through kvc_place_copy_out, a memcpy under a thread-local SIGBUS guard;
 *   the server reads client memory only to check the crcs of blocks placed
 *   there, under the same guard (kvc_place_check_blocks). A client that
 *   shrank its memory makes its piece -EFAULT, never a signal for the
 *   server. A crc that fails in client memory is read again into the
 *   server's buffer (service_place.c): a bad copy is -EIO and repaired as for
 *   CHUNK_READ, a client that changed its memory meanwhile gets its bytes
 *   placed again. Bytes come
 *   OUT of client memory only through kvc_place_copy_in, a pread from the
 *   region's fd into the server's own buffer (a kernel copy: a short read
 *   is -EFAULT), so what is checked and stored is what was copied, even
 *   while the client changes its memory.
 * Lock order: the table lock is a leaf (no I/O, no copy under it).
 */
#ifndef KVC_STORAGE_PLACE_H
#define KVC_STORAGE_PLACE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/wire.h"

struct kvc_place_region;

struct kvc_place_table {
	struct kvc_place_region *head; /* under lock */
	int count;                     /* under lock */
	/* Counters (metrics): */
	_Atomic uint64_t read_ops, read_bytes, write_ops, write_bytes, faults;
	_Atomic uint64_t read_pieces, read_spans; /* of the PLACE_READs served */
};

/* Most regions one server keeps (all clients together). */
#define KVC_PLACE_MAX_REGIONS 4096

/* Set up the table and the SIGBUS guard (a process-wide handler that
 * passes signals outside a guarded copy on to the default action).
 * Returns 0 or -errno. */
int kvc_place_init(struct kvc_place_table *table);

/* Register fd (taken: kept or closed) for (pid, m->region), owned by
 * owner. Returns 0, -EINVAL (not tmpfs/hugetlbfs memory, too small, a
 * bad size), -EEXIST (the id is taken), -EMFILE (too many), -errno of
 * mmap. */
int kvc_place_register(struct kvc_place_table *table, const void *owner, pid_t pid, int fd,
                       const struct kvc_msg_place_register *m);

/* Drop (pid, id) registered by owner. Returns 0 or -ENOENT. */
int kvc_place_unregister(struct kvc_place_table *table, const void *owner, pid_t pid,
                         uint64_t id);

/* Drop every region owner registered (its connection closed). */
void kvc_place_drop_owner(struct kvc_place_table *table, const void *owner);

/* The region (pid, id), held until kvc_place_put; NULL when unknown. */
struct kvc_place_region *kvc_place_get(struct kvc_place_table *table, pid_t pid, uint64_t id);
void kvc_place_put(struct kvc_place_table *table, struct kvc_place_region *region);
/* Keep a held region mapped for the process's life (a read left in the
 * kernel may still write into it: chunk_store.h's abandoned_places); it
 * leaves the table as usual, its mapping never goes. */
void kvc_place_keep(struct kvc_place_table *table, struct kvc_place_region *region);

/* The region's byte at offset (inside it: kvc_place_fits). */
uint8_t *kvc_place_at(struct kvc_place_region *region, uint64_t offset);

/* Whether [offset, offset + length) lies inside the region. */
bool kvc_place_fits(const struct kvc_place_region *region, uint64_t offset, uint64_t length);

/* Copy length bytes from src to the region at offset (guarded). Returns
 * 0 or -EFAULT (the client's memory is gone there). */
int kvc_place_copy_out(struct kvc_place_region *region, uint64_t offset, const void *src,
                       size_t length);

/* Check the crc32c of each `block` bytes of p[0, length) (client memory
 * a read placed there) against crcs[], under the guard. Returns 0, -EIO
 * (a mismatch) or -EFAULT (the memory is gone). */
int kvc_place_check_blocks(const uint8_t *p, uint32_t length, uint32_t block,
                           const uint32_t *crcs);

/* Read length bytes of the region at offset into dst (a kernel copy
 * from its fd). Returns 0 or -EFAULT (the memory is shorter now). */
int kvc_place_copy_in(struct kvc_place_region *region, uint64_t offset, void *dst,
                      size_t length);

#endif
