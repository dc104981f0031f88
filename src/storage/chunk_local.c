/* chunk_local: what a same-host reader of a target is handed
 * (chunk_store.h "Same-host readers"): the change counters, one per chunk
 * lock slot, in shared memory kvc-storage alone may write. */
#include "storage/chunk_store.h"
#include "storage/chunk_store_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/log.h"

#define CHANGES_BYTES (KVC_CHUNK_LOCK_SLOTS * sizeof(uint64_t))

/* The counters in sealed shared memory. Returns 0 or -errno. */
static int shared_changes(struct kvc_chunk_store *store)
{
	int fd = memfd_create("kvc-chunk-changes", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	void *map = MAP_FAILED;
	int rc = fd < 0 || ftruncate(fd, CHANGES_BYTES) < 0 ? -errno : 0;
	if (rc == 0) {
		map = mmap(NULL, CHANGES_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		rc = map == MAP_FAILED ? -errno : 0;
	}
	/* Readers can map it only read-only, and never resize it: this
	 * server's own mapping is the one that writes. */
	if (rc == 0 && fcntl(fd, F_ADD_SEALS,
	                     F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) < 0)
		rc = -errno;
	if (rc < 0) {
		if (map != MAP_FAILED)
			munmap(map, CHANGES_BYTES);
		if (fd >= 0)
			close(fd);
		return rc;
	}
	store->changes_fd = fd;
	store->changes = map;
	return 0;
}

int kvc_chunk_changes_init(struct kvc_chunk_store *store)
{
	int rc = shared_changes(store);
	if (rc < 0) {
		/* A kernel without sealed memfds (before 5.1), or a sandbox that
		 * refuses them: no same-host readers, the counters private. */
		kvc_log_warn("%s: no shared change counters (%s): its chunks are read "
		             "through this server only", store->path, strerror(-rc));
		store->changes = calloc(KVC_CHUNK_LOCK_SLOTS, sizeof(uint64_t));
		store->changes_private = true;
	}
	return store->changes ? 0 : -ENOMEM;
}

void kvc_chunk_changes_destroy(struct kvc_chunk_store *store)
{
	if (store->changes && store->changes_private)
		free((void *)store->changes);
	else if (store->changes)
		munmap((void *)store->changes, CHANGES_BYTES);
	if (store->changes_fd >= 0)
		close(store->changes_fd);
	store->changes = NULL;
	store->changes_fd = -1;
}

int kvc_chunk_store_local(const struct kvc_chunk_store *store, int *dir_fd, int *changes_fd)
{
	*dir_fd = store->dir_fd;
	*changes_fd = store->changes_fd;
	return store->changes_fd >= 0 ? 0 : -EOPNOTSUPP;
}
