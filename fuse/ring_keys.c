/* ring_keys: see ring_keys.h; protocol: docs/usrbio.md "Keys". */
#include "fuse/ring_keys.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "client/transport.h"
#include "core/layout.h"
#include "core/mem_guard.h"
#include "fuse/close_queue.h"
#include "fuse/ring_service.h"

#define MAX_KEYS 256 /* a ring batch's entries at most */
#define MAX_DIRS 8   /* distinct key directories per batch we group by */
/* A key of several host segments up to BOUNCE_KEY bytes moves as one
 * storage io through the worker's bounce buffer (gathered and scattered by
 * guarded copies, bounce_copy; a same-host server places into it
 * and takes from it, as from an iov): one chunk piece instead of one per
 * segment. A get whose segments a same-host server can place (host
 * memory of one region) is one io scattered into them (scatters): the
 * server reads a run of pieces of one chunk once and places each. Larger
 * keys and device segments go segment by segment. */
#define BOUNCE_KEY (1u << 20)
#define BOUNCE_BYTES (32u << 20)
_Static_assert(MAX_KEYS <= KVC_WIRE_MAX_KEYS, "one message per kind and directory");

/* One key entry of the batch, copied and checked. */
struct key {
	int64_t *result;
	uint32_t op, slot;
	uint64_t userdata;
	struct kvc_ring_key_desc d;
	struct kvc_ring_key_seg segs[KVC_RING_KEY_MAX_SEGS];
	/* Each segment's memory (kvc-fuse's address of it, its length): a
	 * scattered get's io takes the array as it is. */
	struct iovec place[KVC_RING_KEY_MAX_SEGS];
	int dev[KVC_RING_KEY_MAX_SEGS];
	/* Host segments' iov regions: same-host servers place into them. */
	const struct kvc_storage_region *region[KVC_RING_KEY_MAX_SEGS];
	uint64_t total;
	int dir;            /* index into the batch's dirs */
	int rc;             /* 0 while it goes on */
	struct kvc_attr attr;
	int first_io, ios;  /* its storage ios */
	char *bounce;       /* its bytes in the bounce buffer, or NULL */
	uint64_t temp;      /* a put's temp (its inode) while it has one */
	bool made;          /* its temp was asked for */
};

struct dir {
	uint64_t ino;
	struct kvc_attr attr;
	int rc;
};

struct kvc_ring_keys_scratch {
	struct key keys[MAX_KEYS];
	struct kvc_attr was[MAX_KEYS]; /* confirm_gets: what a get's lookup answered */
	struct dir dirs[MAX_DIRS];
	struct kvc_storage_io io[MAX_KEYS * KVC_RING_KEY_MAX_SEGS];
	int dev[MAX_KEYS * KVC_RING_KEY_MAX_SEGS];
	struct kvc_storage_io split[MAX_KEYS * KVC_RING_KEY_MAX_SEGS];
	int split_dev[KVC_DEVICE_MAX_IOS];
	int from[MAX_KEYS * KVC_RING_KEY_MAX_SEGS];
	struct kvc_meta_keyname mk[MAX_KEYS];
	struct kvc_msg_key_result res[MAX_KEYS];
	struct key *group[MAX_KEYS];
	char *bounce; /* BOUNCE_BYTES, made on first use */
	/* The bounce buffer as shared memory (client/transport.h): same-host
	 * servers place into it and take from it. base NULL: plain memory. */
	struct kvc_storage_region bounce_region;
	struct kvc_fuse *fs;
	struct kvc_ring_keys_scratch *next_kept;
};

/* Scratches kept between a ring's runs (a run takes one on its first key
 * batch and gives it back at its end), so the bounce buffer's pages and
 * its registrations with the servers outlive a run: at most SCRATCH_KEEP,
 * each up to BOUNCE_BYTES of memory touched. */
#define SCRATCH_KEEP 4
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kvc_ring_keys_scratch *kept;
static int kept_count;

/* Give the bounce buffer back. given_up: the client's place_epoch moved
 * while it was in use (a placement that may still land late: a server
 * that stalled past the timeout, a read it left in flight); the buffer,
 * shared by every client's keys, is given up (counted, transport.h) and
 * the next batch makes a fresh one, so no late write reaches another
 * key's bytes. */
static void bounce_drop(struct kvc_ring_keys_scratch *s, bool given_up)
{
	if (!s->bounce_region.base)
		return;
	if (given_up)
		kvc_transport_region_drop(&s->fs->storage, &s->bounce_region);
	else
		kvc_transport_region_destroy(&s->fs->storage, &s->bounce_region);
	s->bounce = NULL;
}

static void scratch_destroy(struct kvc_ring_keys_scratch *s)
{
	bounce_drop(s, false);
	free(s->bounce); /* plain memory, or NULL */
	free(s);
}

static struct kvc_ring_keys_scratch *scratch_take(struct kvc_fuse *fs)
{
	pthread_mutex_lock(&kept_lock);
	struct kvc_ring_keys_scratch *s = kept && kept->fs == fs ? kept : NULL;
	if (s) {
		kept = s->next_kept;
		kept_count--;
	}
	pthread_mutex_unlock(&kept_lock);
	if (!s && (s = malloc(sizeof(*s)))) {
		s->bounce = NULL;
		s->bounce_region = (struct kvc_storage_region){.fd = -1};
		s->fs = fs;
	}
	return s;
}

void kvc_ring_keys_scratch_free(struct kvc_ring_keys_scratch *scratch)
{
	if (!scratch)
		return;
	pthread_mutex_lock(&kept_lock);
	bool keep = kept_count < SCRATCH_KEEP;
	if (keep) {
		scratch->next_kept = kept;
		kept = scratch;
		kept_count++;
	}
	pthread_mutex_unlock(&kept_lock);
	if (!keep)
		scratch_destroy(scratch);
}

/* The bounce buffer: shared memory where it can be (a region), else
 * plain memory. NULL when out of memory. */
static char *bounce_make(struct kvc_ring_keys_scratch *s)
{
	if (kvc_transport_region_create(BOUNCE_BYTES, "kvc-bounce", false, &s->bounce_region) == 0)
		return s->bounce = (char *)s->bounce_region.base;
	return s->bounce = malloc(BOUNCE_BYTES);
}

int kvc_ring_keys_decode(const void *raw, size_t len, uint32_t op,
                         struct kvc_ring_key_desc *desc, struct kvc_ring_key_seg *segs)
{
	struct kvc_ring_key_desc d;
	if (len < sizeof(d))
		return -EINVAL;
	memcpy(&d, raw, sizeof(d));
	if (d.nsegs > KVC_RING_KEY_MAX_SEGS)
		return -E2BIG;
	if (len != sizeof(d) + (size_t)d.nsegs * sizeof(*segs))
		return -EINVAL;
	if (d.name_len > KVC_RING_KEY_MAX_NAME)
		return -ENAMETOOLONG;
	int rc = kvc_wire_name_check(d.name, d.name_len);
	if (rc < 0)
		return rc;
	bool data = op == KVC_RING_KEY_PUT || op == KVC_RING_KEY_GET;
	if ((d.flags & ~KVC_RING_KEY_REPLACE) || (d.flags && op != KVC_RING_KEY_PUT) ||
	    (d.nsegs && !data) || d.timeout_ms > KVC_RING_KEY_MAX_WAIT_MS || (d.mode & ~07777u))
		return -EINVAL;
	memcpy(segs, (const char *)raw + sizeof(d), (size_t)d.nsegs * sizeof(*segs));
	for (int i = 0; i < d.nsegs; i++)
		if (segs[i].length == 0 || segs[i].reserved)
			return -EINVAL;
	*desc = d;
	return 0;
}


/* Segments: inside their iovs, not overlapping each other, sizes summed. */
static int resolve_segs(struct kvc_usrbio_client *c, struct key *k)
{
	uint64_t total = 0;
	int rc = kvc_usrbio_resolve_segs(c, k->segs, k->d.nsegs, k->place, k->dev, k->region);
	if (rc < 0)
		return rc;
	for (int i = 0; i < k->d.nsegs; i++) {
		const struct kvc_ring_key_seg *s = &k->segs[i];
		for (int j = 0; j < i; j++) {
			const struct kvc_ring_key_seg *t = &k->segs[j];
			if (t->iov_handle == s->iov_handle && s->offset < t->offset + t->length &&
			    t->offset < s->offset + s->length)
				return -EINVAL;
		}
		total += s->length; /* each is inside an iov: no overflow */
	}
	if (total > KVC_LAYOUT_MAX_FILE_SIZE)
		return -EFBIG;
	k->total = total;
	return 0;
}

static int dir_of(struct kvc_ring_keys_scratch *s, int *dirs, struct kvc_fuse *fs, uint64_t ino)
{
	for (int i = 0; i < *dirs; i++)
		if (s->dirs[i].ino == ino)
			return i;
	if (*dirs == MAX_DIRS)
		return -EMFILE; /* too many key directories in one batch: resubmit */
	struct dir *d = &s->dirs[*dirs];
	d->ino = ino;
	d->rc = kvc_meta_client_getattr(&fs->meta, ino, &d->attr);
	if (d->rc == 0 && !S_ISDIR(d->attr.mode))
		d->rc = -ENOTDIR;
	return (*dirs)++;
}

/* Copy and check one entry; k->rc says how it went. */
static void prepare(const struct kvc_ring_keys_batch *b, struct kvc_ring_keys_scratch *s,
                    int *dirs, const struct kvc_ring_sqe *e, struct key *k)
{
	void *raw;
	int dev = -1;
	uint8_t copy[KVC_RING_KEY_DESC_MAX];
	struct kvc_usrbio_file file;
	/* Longer than any descriptor: copy what decode needs to say why
	 * (too many segments), it refuses the length itself. */
	size_t take = e->length < sizeof(copy) ? e->length : sizeof(copy);
	int rc = e->length < sizeof(k->d) || e->file_offset ? -EINVAL
	       : kvc_usrbio_resolve_iov(b->client, e->iov_handle, e->iov_offset, e->length, &raw,
	                                &dev);
	if (rc == 0 && dev >= 0)
		rc = -EINVAL; /* a descriptor lives in host memory */
	if (rc == 0)
		rc = kvc_mem_guard_copy(copy, raw, take); /* memory the client shrank: -EFAULT */
	if (rc == 0)
		rc = kvc_ring_keys_decode(copy, e->length, e->op, &k->d, k->segs);
	if (rc == 0)
		rc = kvc_usrbio_resolve_file(b->client, e->fd, &file);
	if (rc == 0 && !file.dir)
		rc = -ENOTDIR;
	if (rc == 0)
		rc = resolve_segs(b->client, k);
	if (rc == 0)
		rc = k->dir = dir_of(s, dirs, b->fs, file.ino);
	if (rc >= 0)
		rc = s->dirs[k->dir].rc;
	bool writes = e->op == KVC_RING_KEY_PUT || e->op == KVC_RING_KEY_REMOVE;
	if (rc == 0)
		rc = kvc_usrbio_client_may(b->client, &s->dirs[k->dir].attr,
		                           X_OK | (writes ? W_OK : 0));
	k->rc = rc < 0 ? rc : 0;
}

/* One KEYS_* message for the keys of dir d in group[0..n). */
static int meta_call(struct kvc_fuse *fs, struct kvc_ring_keys_scratch *s, uint16_t type,
                     const struct dir *d, const struct kvc_usrbio_client *c, uint32_t flags,
                     int n)
{
	for (int i = 0; i < n; i++) {
		struct key *k = s->group[i];
		s->mk[i] = (struct kvc_meta_keyname){.name = k->d.name, .name_len = k->d.name_len,
		                                     .temp = k->temp, .size = k->total};
	}
	/* What is published may exist from now on (dir_names.h): one ticket
	 * covers the message. (Temps have no names.) */
	bool makes = n > 0 && type == KVC_MSG_KEYS_PUBLISH;
	uint32_t names = makes ? kvc_dir_names_begin(fs->dir_names, d->ino, s->mk[0].name,
	                                             s->mk[0].name_len) : 0;
	for (int i = 1; makes && i < n; i++)
		kvc_dir_names_heard(fs->dir_names, d->ino, s->mk[i].name, s->mk[i].name_len);
	uint32_t mode = n ? s->group[0]->d.mode : 0;
	struct kvc_msg_keys m = {.parent = d->ino, .count = (uint32_t)n, .flags = flags,
	                         .mode = mode ? mode : 0644, .uid = c->uid,
	                         .gid = d->attr.mode & S_ISGID ? d->attr.gid : c->gid};
	memcpy(m.client, fs->client_id, sizeof(m.client));
	int rc = n ? kvc_meta_client_keys(&fs->meta, type, &m, s->mk, s->res) : 0;
	if (makes)
		kvc_dir_names_end(fs->dir_names, names);
	for (int i = 0; type == KVC_MSG_KEYS_REMOVE && i < n; i++) /* (dir_names.h) */
		kvc_dir_names_named(fs->dir_names, d->ino, s->mk[i].name, s->mk[i].name_len, 0);
	if (n && type != KVC_MSG_KEYS_LOOKUP && type != KVC_MSG_KEYS_CREATE)
		/* the directory changed (attr_cache.h) */
		kvc_meta_events_changed_here(fs->events, d->ino);
	return rc;
}

/* Gather the keys of dir `di` that pass `want` into group. */
static int gather(struct kvc_ring_keys_scratch *s, int count, int di,
                  bool (*want)(const struct key *k, const void *arg), const void *arg)
{
	int n = 0;
	for (int i = 0; i < count; i++)
		if (s->keys[i].rc == 0 && s->keys[i].dir == di && want(&s->keys[i], arg))
			s->group[n++] = &s->keys[i];
	return n;
}

static bool op_is(const struct key *k, const void *arg)
{
	return k->op == *(const uint32_t *)arg;
}

static bool looks_up(const struct key *k, const void *arg)
{
	(void)arg;
	return k->op == KVC_RING_KEY_GET || k->op == KVC_RING_KEY_EXISTS ||
	       k->op == KVC_RING_KEY_WAIT;
}

static bool put_with(const struct key *k, const void *arg)
{
	return k->op == KVC_RING_KEY_PUT && k->temp &&
	       (k->d.flags & KVC_RING_KEY_REPLACE) == *(const uint32_t *)arg;
}

/* Results of a call for its group: the whole message's failure, or each
 * key's own. */
static void take_results(struct kvc_ring_keys_scratch *s, int n, int rc)
{
	for (int i = 0; i < n; i++) {
		s->group[i]->rc = rc < 0 ? rc : s->res[i].rc;
		if (rc == 0 && s->res[i].rc == 0)
			s->group[i]->attr = s->res[i].attr;
	}
}

/* Move a bounced key between the bounce buffer and its segments, under
 * the memory guard: memory the client shrank is -EFAULT, never a SIGBUS
 * (core/mem_guard.h; a guarded memcpy costs a sixth of the kernel's
 * process_vm_readv/writev, which pin every page). */
static int bounce_copy(const struct key *k, bool in)
{
	char *at = k->bounce;
	int rc = 0;
	for (int i = 0; i < k->d.nsegs && rc == 0; i++) {
		size_t n = k->place[i].iov_len;
		void *mem = k->place[i].iov_base;
		rc = in ? kvc_mem_guard_copy(at, mem, n) : kvc_mem_guard_copy(mem, at, n);
		at += n;
	}
	return rc;
}

/* Whether key k (several host segments, small) goes through the bounce
 * buffer at *used; advances *used. */
static bool bounce(struct kvc_ring_keys_scratch *s, struct key *k, size_t *used, bool read)
{
	k->bounce = NULL;
	if (k->d.nsegs < 2 || k->total > BOUNCE_KEY || BOUNCE_BYTES - *used < k->total)
		return false;
	bool placed = !s->fs->config.transport_tcp_only;
	for (int i = 0; i < k->d.nsegs; i++) {
		if (k->dev[i] >= 0)
			return false;
		placed &= k->region[i] != NULL;
	}
	/* A get of placeable segments is not bounced: it goes as one io
	 * scattered into them (scatters: one piece a chunk, a span a segment)
	 * or segment by segment; the storage server reads the chunk once for
	 * the run of spans or pieces they make and places each one
	 * (kvc_service_merge_pieces), with no copy here. A put still gathers:
	 * a piece per segment would rewrite the chunk. */
	if (read && placed)
		return false;
	if (!s->bounce && !bounce_make(s))
		return false;
	k->bounce = s->bounce + *used;
	*used += k->total;
	return true;
}

/* Whether a get of key k (not bounced) goes as one scattered io: several
 * host segments, all in one region (a same-host server places each
 * piece; the io is planned once, not once a segment). */
static bool scatters(const struct key *k)
{
	if (k->d.nsegs < 2 || !k->region[0])
		return false;
	for (int i = 0; i < k->d.nsegs; i++)
		if (k->dev[i] >= 0 || k->region[i] != k->region[0])
			return false;
	return true;
}

/* The storage ios of a key: its segments in order, back to back (or its
 * bounce buffer, gathered first for a put; or, for a get, one io
 * scattered into the segments). */
static int add_ios(struct kvc_ring_keys_scratch *s, int count, struct key *k, size_t *used,
                   bool read)
{
	uint64_t offset = 0;
	k->first_io = count;
	if (bounce(s, k, used, read)) {
		k->rc = read ? 0 : bounce_copy(k, true);
		s->io[count] = (struct kvc_storage_io){
			.inode = k->attr.ino, .layout = k->attr.layout, .length = k->total,
			.buf = k->bounce, .region = s->bounce_region.base ? &s->bounce_region : NULL};
		s->dev[count++] = -1;
		k->ios = k->rc ? 0 : 1;
		return k->rc ? count - 1 : count;
	}
	if (read && scatters(k)) {
		s->io[count] = (struct kvc_storage_io){
			.inode = k->attr.ino, .layout = k->attr.layout, .length = k->total,
			.buf = k->place[0].iov_base, .region = k->region[0], .scatter = k->place,
			.scatter_count = (uint32_t)k->d.nsegs};
		s->dev[count++] = -1;
		k->ios = 1;
		return count;
	}
	for (int i = 0; i < k->d.nsegs; i++) {
		s->io[count] = (struct kvc_storage_io){.inode = k->attr.ino, .layout = k->attr.layout,
		                                       .offset = offset, .length = k->segs[i].length,
		                                       .buf = k->place[i].iov_base,
		                                       .region = k->region[i]};
		s->dev[count++] = k->dev[i];
		offset += k->segs[i].length;
	}
	k->ios = k->d.nsegs;
	return count;
}

/* Run ios: device ones through device_io (in runs it takes), host ones
 * straight, in one batch each. Returns whether the client's place_epoch
 * moved meanwhile (a placement fell back to TCP, or a placed piece failed
 * with -EIO: storage_client.h); the caller gives the bounce buffer up
 * once it is done with it: a late placement by a server must not land in
 * another client's key. */
static bool run_storage(const struct kvc_ring_keys_batch *b, struct kvc_ring_keys_scratch *s,
                        int count, bool read)
{
	struct kvc_fuse *fs = b->fs;
	uint64_t epoch = kvc_transport_place_epoch(&fs->storage);
	int host = 0;
	for (int i = 0; i < count; i++)
		if (s->dev[i] < 0) {
			s->split[host] = s->io[i];
			s->from[host++] = i;
		}
	if (host > 0 && read)
		kvc_storage_client_read_batch(&fs->storage, s->split, host);
	else if (host > 0)
		kvc_storage_client_write_batch(&fs->storage, s->split, host);
	for (int j = 0; j < host; j++)
		s->io[s->from[j]].result = s->split[j].result;
	bool moved = kvc_transport_place_moved(&fs->storage, epoch);
	for (int i = 0; i < count;) {
		int n = 0;
		for (; i < count && n < KVC_DEVICE_MAX_IOS; i++)
			if (s->dev[i] >= 0) {
				s->split[n] = s->io[i];
				s->split_dev[n] = s->dev[i];
				s->from[n++] = i;
			}
		if (n > 0)
			kvc_device_io_run(b->stager, (size_t)fs->config.gpu_staging_mb << 20, &fs->storage,
			                  s->split, s->split_dev, n, read);
		for (int j = 0; j < n; j++)
			s->io[s->from[j]].result = s->split[j].result;
	}
	return moved;
}

static int io_result(const struct kvc_ring_keys_scratch *s, const struct key *k)
{
	for (int i = 0; i < k->ios; i++)
		if (s->io[k->first_io + i].result < 0)
			return s->io[k->first_io + i].result;
	return 0;
}

/* The kernel may cache (parent, name) as absent, or as another inode:
 * drop its dentry so the mount sees what the ring did. */
static void inval_entry(struct kvc_fuse *fs, uint64_t parent, const struct key *k)
{
	if (fs->session)
		fuse_lowlevel_notify_inval_entry(fs->session, parent, k->d.name, k->d.name_len);
}

/* Lookups (get, exists, wait; removes under a sticky directory), creates
 * of the puts' temps, removes: the namespace work before the I/O. */
static void namespace_first(const struct kvc_ring_keys_batch *b, struct kvc_ring_keys_scratch *s,
                            int count, int di)
{
	struct dir *d = &s->dirs[di];
	static const uint32_t put = KVC_RING_KEY_PUT, rm = KVC_RING_KEY_REMOVE;
	int n = gather(s, count, di, looks_up, NULL);
	take_results(s, n, meta_call(b->fs, s, KVC_MSG_KEYS_LOOKUP, d, b->client, 0, n));
	/* Sticky directory: only the key's or the directory's owner removes. */
	if ((d->attr.mode & S_ISVTX) && b->client->uid != 0 && b->client->uid != d->attr.uid) {
		n = gather(s, count, di, op_is, &rm);
		take_results(s, n, meta_call(b->fs, s, KVC_MSG_KEYS_LOOKUP, d, b->client, 0, n));
		for (int i = 0; i < n; i++)
			if (s->group[i]->rc == 0 && s->group[i]->attr.uid != b->client->uid)
				s->group[i]->rc = -EPERM;
	}
	n = gather(s, count, di, op_is, &rm);
	take_results(s, n, meta_call(b->fs, s, KVC_MSG_KEYS_REMOVE, d, b->client, 0, n));
	for (int i = 0; i < n; i++)
		inval_entry(b->fs, d->ino, s->group[i]);
	/* Puts: temps by mode (the message carries one). */
	for (int i = 0; i < count; i++) {
		struct key *k = &s->keys[i];
		if (k->rc || k->op != KVC_RING_KEY_PUT || k->dir != di || k->temp || k->made)
			continue;
		n = 0;
		for (int j = i; j < count; j++) {
			struct key *o = &s->keys[j];
			if (o->rc == 0 && o->op == put && o->dir == di && !o->made &&
			    o->d.mode == k->d.mode) {
				o->made = true; /* asked for, whatever the answer */
				s->group[n++] = o;
			}
		}
		take_results(s, n, meta_call(b->fs, s, KVC_MSG_KEYS_CREATE, d, b->client, 0, n));
		for (int j = 0; j < n; j++)
			if (s->group[j]->rc == 0)
				s->group[j]->temp = s->group[j]->attr.ino;
	}
}

static bool get_that_read(const struct key *k, const void *arg)
{
	(void)arg;
	return k->op == KVC_RING_KEY_GET && k->ios > 0;
}

/* A get reads the chunks of the inode its lookup named, and kvc-meta's
 * collector removes a file's chunks once its last name is gone: a read
 * that came after that would read holes, zeros, as if they were the
 * key's bytes. So the gets that read are looked up again after their
 * reads: the same inode, still named, had its chunks throughout (a named
 * file's chunks are never collected; inode numbers are never reused);
 * the same size and mtime say its data was not changed in place either
 * (cuts, punches and size commits stamp mtime) by then. Anything else
 * fails the get: -ENOENT (removed meanwhile), -EAGAIN (replaced or
 * changed meanwhile: read it again), or the lookup's own error. A change
 * in place still under way when the confirm runs is not seen: a get
 * racing a write through the mount is a read racing a write. */
static void confirm_gets(const struct kvc_ring_keys_batch *b, struct kvc_ring_keys_scratch *s,
                         int count, int di)
{
	int n = gather(s, count, di, get_that_read, NULL);
	for (int i = 0; i < n; i++)
		s->was[i] = s->group[i]->attr;
	if (n)
		take_results(s, n, meta_call(b->fs, s, KVC_MSG_KEYS_LOOKUP, &s->dirs[di], b->client,
		                             0, n));
	for (int i = 0; i < n; i++) {
		struct key *k = s->group[i];
		if (k->rc == 0 && (k->attr.ino != s->was[i].ino || k->attr.size != s->was[i].size ||
		                   k->attr.mtime_ns != s->was[i].mtime_ns))
			k->rc = -EAGAIN;
	}
}

/* After the I/O: publish the puts that wrote (by flag), close the temps
 * of those that did not (kvc-meta then reclaims them: nameless files
 * nobody has open). */
static void publish(const struct kvc_ring_keys_batch *b, struct kvc_ring_keys_scratch *s,
                    int count, int di)
{
	struct dir *d = &s->dirs[di];
	for (uint32_t flags = 0; flags <= KVC_RING_KEY_REPLACE; flags++) {
		int n = gather(s, count, di, put_with, &flags);
		take_results(s, n, meta_call(b->fs, s, KVC_MSG_KEYS_PUBLISH, d, b->client, flags, n));
		for (int i = 0; i < n; i++) {
			if (s->group[i]->rc == 0)
				s->group[i]->temp = 0; /* published (its session ended) */
			if (s->group[i]->rc == 0) {
				inval_entry(b->fs, d->ino, s->group[i]);
				kvc_ring_keys_notify(b->fs, d->ino, s->group[i]->d.name,
				                     s->group[i]->d.name_len);
			}
		}
	}
	_Static_assert(MAX_KEYS <= KVC_WIRE_MAX_CLOSES, "one CLOSE_MANY for a batch's temps");
	uint64_t temps[MAX_KEYS];
	uint32_t n = 0;
	/* failed writes and publishes (-EEXIST, or the whole message): their
	 * temps go (a temp the publish closed already is no error) */
	for (int i = 0; i < count; i++) {
		struct key *k = &s->keys[i];
		if (k->op == KVC_RING_KEY_PUT && k->dir == di && k->temp && k->rc < 0) {
			temps[n++] = k->temp;
			k->temp = 0;
		}
	}
	int rc = n ? kvc_meta_client_close_many(&b->fs->meta, temps, n, b->fs->client_id) : 0;
	if (rc < 0)
		kvc_close_queue_retry_later(b->fs, temps, n, rc);
}

/* A put's temp lives as long as this client's sessions in kvc-meta:
 * once kvc-meta may have dropped them (the lease is not fresh and a renew
 * failed), the temps may be reclaimed, and writing one would leave chunks
 * nobody collects. So puts fail (-EIO) unless the lease holds; a renew
 * that finds the client dropped rejoins first (file_ops.c). lease: what
 * is known already (-EIO), else 0. */
static void fail_puts_off_lease(struct kvc_fuse *fs, struct kvc_ring_keys_scratch *s, int count,
                                int lease)
{
	for (int i = 0; i < count && lease == 0; i++)
		if (s->keys[i].rc == 0 && s->keys[i].op == KVC_RING_KEY_PUT)
			lease = kvc_fuse_check_lease(fs) < 0 ? -EIO : 1;
	for (int i = 0; i < count && lease < 0; i++)
		if (s->keys[i].rc == 0 && s->keys[i].op == KVC_RING_KEY_PUT)
			s->keys[i].rc = lease;
}

void kvc_ring_keys_execute(const struct kvc_ring_keys_batch *b)
{
	struct kvc_ring_keys_scratch *s = *b->scratch;
	if (!s)
		s = *b->scratch = scratch_take(b->fs);
	if (!s) {
		for (int i = 0; i < b->count; i++)
			b->results[b->index[i]] = -ENOMEM;
		return;
	}
	int count = b->count < MAX_KEYS ? b->count : MAX_KEYS, dirs = 0, ios = 0;
	size_t used = 0;
	for (int i = 0; i < count; i++) {
		const struct kvc_ring_sqe *e = &b->sqes[b->index[i]];
		struct key *k = &s->keys[i];
		k->result = &b->results[b->index[i]];
		k->op = e->op;
		k->slot = kvc_ring_cqe_index(&b->sqes[b->index[i]], (b->head + b->index[i]) & b->mask);
		k->userdata = e->userdata;
		k->temp = 0;
		k->made = false;
		k->ios = 0;
		k->bounce = NULL;
		k->attr = (struct kvc_attr){0};
		prepare(b, s, &dirs, e, k);
	}
	/* before their temps are made (a lease the batch found lost is not
	 * waited for again) */
	fail_puts_off_lease(b->fs, s, count, b->lease < 0 ? b->lease : 0);
	for (int di = 0; di < dirs; di++)
		namespace_first(b, s, count, di);
	/* Reads of the gets, writes of the puts: one batch each. */
	for (int pass = 0; pass < 2; pass++) {
		bool read = pass == 0;
		ios = 0;
		used = 0;
		if (!read)
			fail_puts_off_lease(b->fs, s, count, 0); /* before their temps are written */
		for (int i = 0; i < count; i++) {
			struct key *k = &s->keys[i];
			if (k->rc || k->op != (read ? KVC_RING_KEY_GET : KVC_RING_KEY_PUT))
				continue;
			if (read && kvc_usrbio_client_may(b->client, &k->attr, R_OK) < 0)
				k->rc = -EACCES;
			else if (read && k->attr.size != k->total)
				k->rc = -EMSGSIZE; /* segments must match the key, never a partial copy */
			else
				ios = add_ios(s, ios, k, &used, read);
		}
		bool moved = ios > 0 && run_storage(b, s, ios, read);
		for (int i = 0; i < count; i++) {
			struct key *k = &s->keys[i];
			/* this pass's keys only: the other pass's ios are gone */
			if (k->rc == 0 && k->ios && k->op == (read ? KVC_RING_KEY_GET : KVC_RING_KEY_PUT))
				k->rc = io_result(s, k);
			if (k->rc == 0 && k->ios && read && k->bounce)
				k->rc = bounce_copy(k, false); /* scatter what was read */
		}
		if (moved)
			bounce_drop(s, true);
	}
	for (int di = 0; di < dirs; di++)
		confirm_gets(b, s, count, di);
	for (int di = 0; di < dirs; di++)
		publish(b, s, count, di);
	for (int i = 0; i < count; i++) {
		struct key *k = &s->keys[i];
		int64_t result = k->rc < 0 ? k->rc : (int64_t)k->attr.size;
		if (k->op == KVC_RING_KEY_WAIT && k->rc == -ENOENT) {
			int rc = kvc_ring_keys_park(b->fs, b->ring, b->client->uid, k->slot, k->userdata,
			                            s->dirs[k->dir].ino, k->d.name, k->d.name_len,
			                            k->d.timeout_ms);
			result = rc < 0 ? rc : KVC_RING_KEYS_PARKED;
		}
		*k->result = result;
	}
	for (int i = count; i < b->count; i++)
		b->results[b->index[i]] = -EAGAIN; /* cannot happen: a batch is <= MAX_KEYS */
}
