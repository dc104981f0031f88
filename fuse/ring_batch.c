/* ring_batch: a worker's batch of ring entries checked (each against
 * the client's registrations, only its copy of the entry used) and run:
 * file reads and writes through the storage client (device iovs through
 * device_io), key operations through ring_keys. See ring_internal.h. */
#include "fuse/ring_internal.h"

#include <errno.h>
#include <fcntl.h>

#include "fuse/device_io.h"
#include "fuse/fuse_metrics.h"
#include "fuse/ops_internal.h"
#include "fuse/ring_keys.h"
#include "core/layout.h"

_Static_assert(MAX_BATCH <= KVC_DEVICE_MAX_IOS, "a batch must fit device_io");

/* Check one entry against the client's registrations; fill its io. */
static int prepare_entry(struct kvc_fuse *fs, struct kvc_ring_server_ring *ring,
                         const struct kvc_ring_sqe *e, struct kvc_storage_io *io,
                         uint64_t *ino, int *device)
{
	bool read = e->op == KVC_RING_READ;
	if ((e->op != KVC_RING_READ && e->op != KVC_RING_WRITE) || read != ring->for_read)
		return -EINVAL;
	if (e->length == 0)
		return -EINVAL; /* any other length the iov holds: see run_ios */
	if (e->file_offset > KVC_LAYOUT_MAX_FILE_SIZE ||
	    e->length > KVC_LAYOUT_MAX_FILE_SIZE - e->file_offset)
		return -EFBIG;
	struct kvc_usrbio_file file;
	void *memory;
	const struct kvc_storage_region *region = NULL;
	int rc = kvc_usrbio_resolve_iov_region(ring->client, e->iov_handle, e->iov_offset,
	                                       e->length, &memory, device, &region);
	if (rc == 0)
		rc = kvc_usrbio_resolve_file(ring->client, e->fd, &file);
	if (rc == 0 && file.dir)
		rc = -EISDIR; /* a key directory: for key ops only */
	if (rc < 0)
		return rc;
	if ((read && file.access == O_WRONLY) || (!read && file.access == O_RDONLY))
		return -EACCES;
	uint64_t size;
	*io = (struct kvc_storage_io){.inode = file.ino, .offset = e->file_offset,
	                              .length = e->length, .buf = memory, .region = region,
	                              .forbid_holes = (ring->flags & 2u) != 0};
	rc = read ? kvc_fuse_open_file(fs, file.ino, &io->layout, &size)
	          : kvc_inode_table_get(fs->inodes, file.ino, &io->layout, &size);
	if (rc < 0) /* -ESTALE: the file went away while we were cut off */
		return rc == -ESTALE ? rc : -EBADF;
	*ino = file.ino;
	if (read) /* a read stops at the end of the file, like pread */
		io->length = e->file_offset >= size ? 0
		           : (e->length < size - e->file_offset ? e->length : size - e->file_offset);
	return 0;
}

/* A host read's io landed whole (storage_client.h's done; any of the
 * storage batch's threads): its completion goes out now, and its room
 * in the completion queue stops being reserved. */
static void entry_landed(struct kvc_storage_io *io)
{
	const struct kvc_ring_landed *l = io->done_arg;
	struct kvc_ring_batch *b = l->b;
	kvc_ring_service_landed(b->ring, (b->head + l->entry) & b->ring->mask, &b->sqe[l->entry],
	                        (int64_t)io->length);
	b->posted[l->entry] = true;
}

static void run_storage(struct kvc_fuse *fs, bool read, struct kvc_storage_io *ios,
                        int count)
{
	if (count > 0 && read)
		kvc_storage_client_read_batch(&fs->storage, ios, count);
	else if (count > 0)
		kvc_storage_client_write_batch(&fs->storage, ios, count);
}

/* Run a batch's ios: those of device iovs through device_io (the storage
 * client cannot address GPU memory), the others straight. An entry may be
 * as long as its iov (3FS has no limit either): both cut each io into
 * chunk pieces and move them in requests of at most a few MiB per server
 * (device_io through its staging halves), so no frame nears the wire's
 * KVC_WIRE_MAX_DATA, and the entry completes once, with its total. */
_Static_assert(KVC_LAYOUT_MAX_CHUNK <= KVC_WIRE_MAX_DATA, "a chunk piece fits one frame");
static void run_ios(struct kvc_fuse *fs, struct kvc_ring_server_ring *ring,
                    struct kvc_ring_batch *b, int count)
{
	int host = 0, gpu = 0;
	for (int k = 0; k < count; k++)
		gpu += b->device[k] >= 0;
	if (gpu == 0) {
		run_storage(fs, ring->for_read, b->io, count);
		return;
	}
	gpu = 0;
	for (int k = 0; k < count; k++) {
		if (b->device[k] < 0) {
			b->host_io[host] = b->io[k];
			b->host_from[host++] = k;
		} else {
			b->device_io[gpu] = b->io[k];
			b->device_of[gpu] = b->device[k];
			b->device_from[gpu++] = k;
		}
	}
	kvc_device_io_run(&b->stager, (size_t)fs->config.gpu_staging_mb << 20,
	                  &fs->storage, b->device_io, b->device_of, gpu, ring->for_read);
	run_storage(fs, ring->for_read, b->host_io, host);
	for (int j = 0; j < gpu; j++)
		b->io[b->device_from[j]].result = b->device_io[j].result;
	for (int j = 0; j < host; j++)
		b->io[b->host_from[j]].result = b->host_io[j].result;
}

/* Run the checked entries of a batch and record each one's result. */
void kvc_ring_batch_execute(struct kvc_fuse *fs, struct kvc_ring_server_ring *ring,
                    struct kvc_ring_batch *b, uint32_t head, uint32_t n)
{
	int count = 0, keys = 0;
	int lease = 0; /* sessions held (no holes to read): 1, -EIO; 0 not asked yet */
	b->ring = ring;
	b->head = head;
	for (uint32_t i = 0; i < n; i++) {
		b->posted[i] = false;
		if (kvc_ring_keys_is_key_op(b->sqe[i].op)) { /* ring_keys runs those */
			b->runnable[i] = -1;
			b->key_index[keys++] = i;
			continue;
		}
		if (lease == 0) /* asked only by batches with I/O: it may wait */
			lease = kvc_fuse_check_lease(fs) < 0 ? -EIO : 1;
		int rc = lease < 0 ? lease
		       : prepare_entry(fs, ring, &b->sqe[i], &b->io[count], &b->ino[count],
		                       &b->device[count]);
		b->result[i] = rc;
		if (rc == 0 && ring->for_read && !ring->ordered && b->device[count] < 0) {
			/* a layout-1 client gets its completions in order */
			b->landed[i] = (struct kvc_ring_landed){b, i};
			b->io[count].done = entry_landed;
			b->io[count].done_arg = &b->landed[i];
		}
		b->runnable[i] = rc == 0 && b->io[count].length > 0 ? count++ : -1;
	}
	if (count > 0)
		run_ios(fs, ring, b, count);
	if (keys > 0)
		kvc_ring_keys_execute(&(struct kvc_ring_keys_batch){
			.fs = fs, .ring = ring, .client = ring->client, .scratch = &b->keys,
			.stager = &b->stager, .sqes = b->sqe, .head = head, .mask = ring->mask,
			.index = b->key_index, .count = keys, .results = b->result, .lease = lease});
	uint64_t moved = 0;
	for (uint32_t i = 0; i < n; i++) {
		int k = b->runnable[i];
		if (k < 0) /* refused (negative) or a read at/after the end (0) */
			continue;
		struct kvc_storage_io *io = &b->io[k];
		b->result[i] = io->result < 0 ? io->result : (int64_t)io->length;
		moved += io->result < 0 ? 0 : io->length;
		if (!ring->for_read && io->result == 0) {
			kvc_inode_table_wrote(fs->inodes, b->ino[k], io->offset + io->length);
			/* The kernel's cached pages and size of this file are stale
			 * now: FUSE reads and stat must see what the ring wrote. */
			fuse_lowlevel_notify_inval_inode(fs->session, b->ino[k],
			                                 (off_t)io->offset, (off_t)io->length);
		}
	}
	kvc_fuse_metrics_ring_bytes(ring->for_read, moved);
}
