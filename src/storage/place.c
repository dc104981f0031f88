/* place: see place.h. */
#include "storage/place.h"

#include "core/log.h"
#include "core/mem_guard.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#define MAX_REGION_SIZE (1ull << 40)

struct kvc_place_region {
	struct kvc_place_region *next;
	const void *owner;
	pid_t pid;
	uint64_t id;
	int fd;
	uint64_t file_offset;
	uint64_t size;
	void *map;       /* mmap's address (page-aligned) */
	size_t map_size;
	uint8_t *base;   /* the region's first byte in the mapping */
	int refs;        /* table's lock */
	bool dropped;    /* table's lock: unmapped by the last put */
	struct kvc_place_region *kept_next; /* table's lock: on `kept` (kvc_place_keep) */
	bool kept;
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
/* Regions kept mapped for the process's life (kvc_place_keep): listed,
 * so they stay reachable (a leak checker sees them held, not lost). */
static struct kvc_place_region *kept;

int kvc_place_init(struct kvc_place_table *table)
{
	memset(table, 0, sizeof(*table));
	return kvc_mem_guard_init();
}

/* Shared memory (tmpfs or hugetlbfs), a regular file of at least need
 * bytes: never a disk or FUSE file whose pages the server would wait on. */
static int check_memory(int fd, uint64_t need)
{
	struct stat st;
	struct statfs fs;
	if (fstat(fd, &st) < 0 || fstatfs(fd, &fs) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size < need)
		return -EINVAL;
	return fs.f_type == TMPFS_MAGIC || fs.f_type == HUGETLBFS_MAGIC ? 0 : -EINVAL;
}

static void unmap(struct kvc_place_region *r)
{
	munmap(r->map, r->map_size);
	close(r->fd);
	free(r);
}

int kvc_place_register(struct kvc_place_table *table, const void *owner, pid_t pid, int fd,
                       const struct kvc_msg_place_register *m)
{
	struct kvc_place_region *r = NULL;
	int rc = 0;
	if (fd < 0 || m->size == 0 || m->size > MAX_REGION_SIZE || m->file_offset > MAX_REGION_SIZE)
		rc = -EINVAL;
	if (rc == 0)
		rc = check_memory(fd, m->file_offset + m->size);
	if (rc == 0 && !(r = calloc(1, sizeof(*r))))
		rc = -ENOMEM;
	if (rc == 0) {
		uint64_t skew = m->file_offset & 4095u;
		r->map_size = m->size + skew;
		r->map = mmap(NULL, r->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		              (off_t)(m->file_offset - skew));
		if (r->map == MAP_FAILED)
			rc = -errno;
		else
			r->base = (uint8_t *)r->map + skew;
	}
	if (rc == 0) {
		*r = (struct kvc_place_region){.owner = owner, .pid = pid, .id = m->region, .fd = fd,
		                               .file_offset = m->file_offset, .size = m->size,
		                               .map = r->map, .map_size = r->map_size,
		                               .base = r->base};
		pthread_mutex_lock(&table_lock);
		for (struct kvc_place_region *o = table->head; o && rc == 0; o = o->next)
			if (o->pid == pid && o->id == m->region)
				rc = -EEXIST;
		if (rc == 0 && table->count >= KVC_PLACE_MAX_REGIONS)
			rc = -EMFILE;
		if (rc == 0) {
			r->next = table->head;
			table->head = r;
			table->count++;
		}
		pthread_mutex_unlock(&table_lock);
		if (rc < 0) {
			unmap(r); /* closes fd */
			return rc;
		}
		return 0;
	}
	if (r && r->map && r->map != MAP_FAILED)
		munmap(r->map, r->map_size);
	free(r);
	if (fd >= 0)
		close(fd);
	return rc;
}

/* Take r off the list (lock held); returns it when nobody uses it. */
static struct kvc_place_region *unlink_region(struct kvc_place_table *table,
                                              struct kvc_place_region **link)
{
	struct kvc_place_region *r = *link;
	*link = r->next;
	table->count--;
	r->dropped = true;
	return r->refs == 0 ? r : NULL;
}

int kvc_place_unregister(struct kvc_place_table *table, const void *owner, pid_t pid,
                         uint64_t id)
{
	struct kvc_place_region *gone = NULL;
	int rc = -ENOENT;
	pthread_mutex_lock(&table_lock);
	for (struct kvc_place_region **link = &table->head; *link; link = &(*link)->next) {
		struct kvc_place_region *r = *link;
		if (r->owner == owner && r->pid == pid && r->id == id) {
			gone = unlink_region(table, link);
			rc = 0;
			break;
		}
	}
	pthread_mutex_unlock(&table_lock);
	if (gone)
		unmap(gone);
	return rc;
}

void kvc_place_drop_owner(struct kvc_place_table *table, const void *owner)
{
	struct kvc_place_region *gone = NULL;
	pthread_mutex_lock(&table_lock);
	struct kvc_place_region **link = &table->head;
	while (*link) {
		if ((*link)->owner != owner) {
			link = &(*link)->next;
			continue;
		}
		struct kvc_place_region *r = unlink_region(table, link);
		if (r) {
			r->next = gone;
			gone = r;
		}
	}
	pthread_mutex_unlock(&table_lock);
	while (gone) {
		struct kvc_place_region *next = gone->next;
		unmap(gone);
		gone = next;
	}
}

struct kvc_place_region *kvc_place_get(struct kvc_place_table *table, pid_t pid, uint64_t id)
{
	struct kvc_place_region *found = NULL;
	pthread_mutex_lock(&table_lock);
	for (struct kvc_place_region *r = table->head; r; r = r->next)
		if (r->pid == pid && r->id == id) {
			r->refs++;
			found = r;
			break;
		}
	pthread_mutex_unlock(&table_lock);
	return found;
}

void kvc_place_put(struct kvc_place_table *table, struct kvc_place_region *region)
{
	(void)table;
	if (!region)
		return;
	pthread_mutex_lock(&table_lock);
	bool last = --region->refs == 0 && region->dropped;
	pthread_mutex_unlock(&table_lock);
	if (last)
		unmap(region);
}

void kvc_place_keep(struct kvc_place_table *table, struct kvc_place_region *region)
{
	(void)table;
	pthread_mutex_lock(&table_lock);
	bool first = !region->kept;
	if (first) {
		region->refs++; /* never put */
		region->kept = true;
		region->kept_next = kept;
		kept = region;
	}
	pthread_mutex_unlock(&table_lock);
	if (first)
		kvc_log_error("a read left in the kernel may still write into region %" PRIu64
		              " of pid %d: its %" PRIu64 " bytes stay mapped here until exit",
		              region->id, (int)region->pid, region->size);
}

uint8_t *kvc_place_at(struct kvc_place_region *region, uint64_t offset)
{
	return region->base + offset;
}

bool kvc_place_fits(const struct kvc_place_region *region, uint64_t offset, uint64_t length)
{
	return offset <= region->size && length <= region->size - offset;
}

int kvc_place_check_blocks(const uint8_t *p, uint32_t length, uint32_t block,
                           const uint32_t *crcs)
{
	for (uint32_t at = 0; at < length; at += block) {
		uint32_t n = length - at < block ? length - at : block;
		uint32_t crc = 0;
		int rc = kvc_mem_guard_crc32c(p + at, n, &crc);
		if (rc < 0)
			return rc;
		if (crc != crcs[at / block])
			return -EIO;
	}
	return 0;
}

int kvc_place_copy_out(struct kvc_place_region *region, uint64_t offset, const void *src,
                       size_t length)
{
	if (!kvc_place_fits(region, offset, length))
		return -EFAULT;
	return length ? kvc_mem_guard_copy(region->base + offset, src, length) : 0;
}

int kvc_place_copy_in(struct kvc_place_region *region, uint64_t offset, void *dst,
                      size_t length)
{
	if (!kvc_place_fits(region, offset, length))
		return -EFAULT;
	uint8_t *out = dst;
	uint64_t at = region->file_offset + offset;
	while (length > 0) {
		ssize_t n = pread(region->fd, out, length, (off_t)at);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EFAULT; /* the memory is shorter than registered now */
		out += n;
		at += (uint64_t)n;
		length -= (size_t)n;
	}
	return 0;
}
