/* reserve: see reserve.h. */
#include "core/reserve.h"

#include <errno.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>

#include "core/clock.h"

#define MIB (1ull << 20)
#define DATA_MIN (8 * MIB)
#define DATA_MAX (1024 * MIB)
#define REFRESH_MAX (64 * MIB)
/* Near the reserve, a look this recent with nothing charged since is
 * taken as it is: a flood of refused writes costs a statvfs a ms. */
#define NEAR_LOOK_NS (1000ull * 1000)

uint64_t kvc_reserve_auto_bytes(enum kvc_reserve_kind kind, uint64_t total_bytes)
{
	uint64_t bytes = total_bytes / 50; /* 2% */
	if (bytes < DATA_MIN)
		bytes = DATA_MIN;
	if (bytes > DATA_MAX)
		bytes = DATA_MAX;
	if (bytes > total_bytes / 4) /* a tiny volume: keep most of it usable */
		bytes = total_bytes / 4;
	return kind == KVC_RESERVE_META ? bytes / 2 : bytes;
}

static int real_stat(int fd, uint64_t *total_bytes, uint64_t *free_bytes)
{
	struct statvfs vfs;
	if (fstatvfs(fd, &vfs) < 0)
		return -errno;
	*total_bytes = (uint64_t)vfs.f_blocks * vfs.f_frsize;
	*free_bytes = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	return 0;
}

static uint64_t now_ns(const struct kvc_reserve *r)
{
	if (r->ops && r->ops->now_ns)
		return r->ops->now_ns(r->ops->arg);
	return (uint64_t)kvc_clock_monotonic_ns();
}

/* Look at the volume; the lock is held (or r is not shared yet). A failed
 * look keeps the previous figure. Returns 0 or -errno. */
static int look(struct kvc_reserve *r)
{
	uint64_t total, free_bytes;
	int rc = r->ops && r->ops->stat ? r->ops->stat(r->ops->arg, &total, &free_bytes)
	                                : real_stat(r->fd, &total, &free_bytes);
	if (rc < 0)
		return rc;
	r->total_bytes = total;
	r->free_bytes = free_bytes;
	r->charged = 0;
	r->looked_ns = now_ns(r);
	return 0;
}

/* free - charged - in_flight, or 0; the lock is held. */
static uint64_t usable(const struct kvc_reserve *r)
{
	uint64_t used = r->charged + r->in_flight;
	return r->free_bytes > used ? r->free_bytes - used : 0;
}

static bool fits(const struct kvc_reserve *r, uint64_t bytes)
{
	uint64_t u = usable(r);
	return u >= r->reserve_bytes && u - r->reserve_bytes >= bytes;
}

int kvc_reserve_init(struct kvc_reserve *r, int fd, int64_t setting,
                     enum kvc_reserve_kind kind, const struct kvc_reserve_ops *ops)
{
	memset(r, 0, sizeof(*r));
	r->fd = fd;
	r->ops = ops;
	int rc = look(r);
	if (rc < 0)
		return rc;
	r->reserve_bytes = setting < 0 ? kvc_reserve_auto_bytes(kind, r->total_bytes)
	                               : (uint64_t)setting;
	/* Other writers of the volume are seen at the next look: look at least
	 * every quarter of the reserve admitted here. */
	r->refresh_bytes = r->reserve_bytes / 4;
	if (r->refresh_bytes < MIB)
		r->refresh_bytes = MIB;
	if (r->refresh_bytes > REFRESH_MAX)
		r->refresh_bytes = REFRESH_MAX;
	rc = -pthread_mutex_init(&r->lock, NULL);
	r->ready = rc == 0;
	return rc;
}

void kvc_reserve_destroy(struct kvc_reserve *r)
{
	if (r->ready)
		pthread_mutex_destroy(&r->lock);
	r->ready = false;
}

int kvc_reserve_admit(struct kvc_reserve *r, uint64_t bytes)
{
	if (!r->ready || r->reserve_bytes == 0)
		return 0;
	int rc = 0;
	pthread_mutex_lock(&r->lock);
	uint64_t age = now_ns(r) - r->looked_ns;
	if (age >= KVC_RESERVE_REFRESH_NS || r->charged >= r->refresh_bytes) {
		look(r);
	} else if (usable(r) < r->reserve_bytes + r->refresh_bytes + bytes &&
	           (r->charged > 0 || age >= NEAR_LOOK_NS)) {
		/* Near the reserve the figure must be exact: what this store
		 * charged errs low (overwrites), what others wrote since the look
		 * makes it high. */
		look(r);
	}
	if (fits(r, bytes)) {
		r->in_flight += bytes;
		if (bytes >= r->last_refused)
			r->last_refused = 0;
	} else {
		r->refused++;
		r->last_refused = bytes > 0 ? bytes : 1;
		rc = -ENOSPC;
	}
	pthread_mutex_unlock(&r->lock);
	return rc;
}

void kvc_reserve_done(struct kvc_reserve *r, uint64_t bytes)
{
	if (!r->ready || r->reserve_bytes == 0)
		return;
	pthread_mutex_lock(&r->lock);
	r->in_flight -= bytes < r->in_flight ? bytes : r->in_flight;
	r->charged += bytes;
	pthread_mutex_unlock(&r->lock);
}

int kvc_reserve_state(struct kvc_reserve *r, struct kvc_reserve_state *out)
{
	if (!r->ready)
		return -ENODEV;
	pthread_mutex_lock(&r->lock);
	int rc = look(r);
	if (rc == 0) {
		uint64_t u = usable(r);
		*out = (struct kvc_reserve_state){
			.total_bytes = r->total_bytes,
			.free_bytes = r->free_bytes,
			.reserve_bytes = r->reserve_bytes,
			.available_bytes = u > r->reserve_bytes ? u - r->reserve_bytes : 0,
			.refused = r->refused,
			.refusing = r->reserve_bytes > 0 &&
			            !fits(r, r->last_refused > 0 ? r->last_refused : 1),
		};
	}
	pthread_mutex_unlock(&r->lock);
	return rc;
}
