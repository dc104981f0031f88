/* fuse_metrics: see fuse_metrics.h. */
#include "fuse/fuse_metrics.h"

#include <errno.h>

#include "fuse/meta_events.h"
#include "fuse/operations.h"
#include "fuse/ring_service.h"

static const char *const op_names[KVC_FUSE_OPS] = {
	[KVC_FUSE_OP_LOOKUP] = "lookup", [KVC_FUSE_OP_FORGET] = "forget",
	[KVC_FUSE_OP_GETATTR] = "getattr", [KVC_FUSE_OP_SETATTR] = "setattr",
	[KVC_FUSE_OP_READLINK] = "readlink", [KVC_FUSE_OP_MKNOD] = "mknod",
	[KVC_FUSE_OP_MKDIR] = "mkdir", [KVC_FUSE_OP_UNLINK] = "unlink",
	[KVC_FUSE_OP_RMDIR] = "rmdir", [KVC_FUSE_OP_SYMLINK] = "symlink",
	[KVC_FUSE_OP_RENAME] = "rename", [KVC_FUSE_OP_LINK] = "link",
	[KVC_FUSE_OP_OPEN] = "open", [KVC_FUSE_OP_READ] = "read",
	[KVC_FUSE_OP_WRITE] = "write", [KVC_FUSE_OP_FLUSH] = "flush",
	[KVC_FUSE_OP_RELEASE] = "release", [KVC_FUSE_OP_FSYNC] = "fsync",
	[KVC_FUSE_OP_OPENDIR] = "opendir", [KVC_FUSE_OP_READDIRPLUS] = "readdirplus",
	[KVC_FUSE_OP_RELEASEDIR] = "releasedir", [KVC_FUSE_OP_FSYNCDIR] = "fsyncdir",
	[KVC_FUSE_OP_STATFS] = "statfs", [KVC_FUSE_OP_SETXATTR] = "setxattr",
	[KVC_FUSE_OP_GETXATTR] = "getxattr", [KVC_FUSE_OP_LISTXATTR] = "listxattr",
	[KVC_FUSE_OP_REMOVEXATTR] = "removexattr", [KVC_FUSE_OP_CREATE] = "create",
	[KVC_FUSE_OP_FALLOCATE] = "fallocate",
};

/* Process-wide; written by start before any observer runs, read after. */
static struct {
	struct kvc_metrics *registry;
	struct kvc_fuse *fs;
	struct kvc_metrics_counter *ops[KVC_FUSE_OPS];
	struct kvc_metrics_histogram *op_seconds[KVC_FUSE_OPS];
	struct kvc_metrics_counter *bytes[2]; /* [read] */
	struct kvc_metrics_counter *ring_taken[2], *ring_batches[2], *ring_bytes[2], *ring_completed,
		*ring_overlapped;
	struct kvc_metrics_gauge *ring_depth, *rings, *usrbio_clients, *events_up, *names_dirs;
	struct kvc_metrics_counter *events, *name_drops, *names_answered, *names_fills,
		*dir_watch_lookups;
	struct kvc_metrics_counter *early[3];   /* made, entered, lost */
	struct kvc_metrics_counter *removes[3]; /* made, entered, missed */
	_Atomic(struct kvc_ring_service *) ring_service;
} m;

struct kvc_metrics *kvc_fuse_metrics_registry(void)
{
	return m.registry;
}

void kvc_fuse_metrics_op(enum kvc_fuse_op op, int64_t start_ns)
{
	if (!m.registry || (unsigned)op >= KVC_FUSE_OPS)
		return;
	kvc_metrics_inc(m.ops[op]);
	kvc_metrics_observe_since(m.op_seconds[op], start_ns);
}

void kvc_fuse_metrics_bytes(bool read, uint64_t bytes)
{
	if (m.registry)
		kvc_metrics_add(m.bytes[read], bytes);
}

void kvc_fuse_metrics_rings(struct kvc_ring_service *rings)
{
	atomic_store(&m.ring_service, rings);
}

void kvc_fuse_metrics_ring_taken(bool read, uint32_t entries)
{
	if (m.registry) {
		kvc_metrics_add(m.ring_taken[read], entries);
		kvc_metrics_add(m.ring_batches[read], 1);
	}
}

void kvc_fuse_metrics_ring_completed(uint32_t entries)
{
	if (m.registry)
		kvc_metrics_add(m.ring_completed, entries);
}

void kvc_fuse_metrics_ring_overlapped(void)
{
	if (m.registry)
		kvc_metrics_add(m.ring_overlapped, 1);
}

void kvc_fuse_metrics_ring_bytes(bool read, uint64_t bytes)
{
	if (m.registry)
		kvc_metrics_add(m.ring_bytes[read], bytes);
}

/* At scrape time: what is not counted on the way (depths, states). */
static void collect(void *arg)
{
	struct kvc_fuse *fs = arg;
	struct kvc_ring_service *rings = atomic_load(&m.ring_service);
	kvc_metrics_set(m.ring_depth, rings ? (int64_t)kvc_ring_service_depth(rings) : 0);
	kvc_metrics_set(m.rings, atomic_load(&fs->usrbio_rings));
	kvc_metrics_set(m.usrbio_clients, atomic_load(&fs->usrbio_clients));
	kvc_metrics_set(m.events_up, kvc_meta_events_up(fs->events));
	kvc_metrics_counter_set(m.events, kvc_meta_events_received(fs->events));
	kvc_metrics_counter_set(m.name_drops, kvc_meta_events_name_drops(fs->events));
	struct kvc_dir_names_stats names;
	kvc_dir_names_stats(fs->dir_names, &names);
	kvc_metrics_counter_set(m.names_answered, names.answered);
	kvc_metrics_counter_set(m.names_fills, names.fills);
	kvc_metrics_set(m.names_dirs, names.dirs_complete);
	kvc_metrics_counter_set(m.dir_watch_lookups, atomic_load(&fs->dir_watch_lookups));
	struct kvc_early_creates_stats early;
	kvc_early_creates_stats(fs->creates, &early);
	kvc_metrics_counter_set(m.early[0], early.made);
	kvc_metrics_counter_set(m.early[1], early.entered);
	kvc_metrics_counter_set(m.early[2], early.lost);
	kvc_metrics_counter_set(m.removes[0], early.removes);
	kvc_metrics_counter_set(m.removes[1], early.removed);
	kvc_metrics_counter_set(m.removes[2], early.removes_missed);
}

static int register_all(struct kvc_metrics *r, struct kvc_fuse *fs)
{
	static const struct kvc_metrics_label dir[2] = {{"dir", "write"}, {"dir", "read"}};
	for (int op = 0; op < KVC_FUSE_OPS; op++) {
		const struct kvc_metrics_label l = {"op", op_names[op]};
		m.ops[op] = kvc_metrics_counter(r, "kvc_fuse_ops_total", "FUSE operations served.",
		                                &l, 1);
		m.op_seconds[op] = kvc_metrics_histogram(
			r, "kvc_fuse_op_seconds", "Time a FUSE operation's handler took (its reply sent).",
			&l, 1);
		if (!m.ops[op] || !m.op_seconds[op])
			return -ENOMEM;
	}
	for (int d = 0; d < 2; d++) {
		m.bytes[d] = kvc_metrics_counter(r, "kvc_fuse_bytes_total",
		                                 "Bytes read and written through FUSE.", &dir[d], 1);
		m.ring_taken[d] = kvc_metrics_counter(
			r, "kvc_fuse_ring_entries_submitted_total",
			"USRBIO ring entries taken from rings, by the ring's direction.", &dir[d], 1);
		m.ring_batches[d] = kvc_metrics_counter(
			r, "kvc_fuse_ring_batches_total",
			"USRBIO ring batches taken (entries taken at once), by the ring's direction.",
			&dir[d], 1);
		m.ring_bytes[d] = kvc_metrics_counter(r, "kvc_fuse_ring_bytes_total",
		                                      "Bytes moved by USRBIO ring entries.", &dir[d], 1);
		if (!m.bytes[d] || !m.ring_taken[d] || !m.ring_batches[d] || !m.ring_bytes[d])
			return -ENOMEM;
	}
	m.ring_completed = kvc_metrics_counter(r, "kvc_fuse_ring_entries_completed_total",
	                                       "USRBIO completions posted.", NULL, 0);
	m.ring_overlapped = kvc_metrics_counter(
		r, "kvc_fuse_ring_batches_overlapped_total",
		"USRBIO ring batches that started while another batch of the same ring ran.", NULL, 0);
	m.ring_depth = kvc_metrics_gauge(r, "kvc_fuse_ring_queue_depth",
	                                 "Entries submitted to the rings and not yet taken.", NULL, 0);
	m.rings = kvc_metrics_gauge(r, "kvc_fuse_rings", "USRBIO rings registered.", NULL, 0);
	m.usrbio_clients = kvc_metrics_gauge(r, "kvc_fuse_usrbio_clients",
	                                     "USRBIO clients connected.", NULL, 0);
	m.events_up = kvc_metrics_gauge(r, "kvc_fuse_meta_events_connected",
	                                "1 while kvc-meta's change-event stream is up, else 0.",
	                                NULL, 0);
	m.events = kvc_metrics_counter(r, "kvc_fuse_meta_events_total",
	                               "Change events received from kvc-meta and applied.", NULL, 0);
	m.name_drops = kvc_metrics_counter(
		r, "kvc_fuse_name_cache_drops_total",
		"Times every name the kernel caches was dropped at once (change events lost, or "
		"kvc-meta's stream back after a gap).", NULL, 0);
	m.names_answered = kvc_metrics_counter(
		r, "kvc_fuse_lookups_answered_here_total",
		"Lookups of absent names answered from a directory's names (dir_names.h).", NULL, 0);
	m.names_fills = kvc_metrics_counter(r, "kvc_fuse_dir_names_fills_total",
	                                    "Directories whose names were listed to be kept.",
	                                    NULL, 0);
	m.names_dirs = kvc_metrics_gauge(r, "kvc_fuse_dir_names_directories",
	                                 "Directories whose names are kept now.", NULL, 0);
	m.dir_watch_lookups = kvc_metrics_counter(
		r, "kvc_fuse_dir_watch_lookups_total",
		"Lookups sent to kvc-meta to keep its watch of the directory names the kernel "
		"holds (one per name every half ttl).", NULL, 0);
	static const struct kvc_metrics_label state[3] = {
		{"state", "made"}, {"state", "entered"}, {"state", "lost"}};
	for (int i = 0; i < 3; i++)
		if (!(m.early[i] = kvc_metrics_counter(
		              r, "kvc_fuse_early_creates_total",
		              "Files made here ahead of kvc-meta (early_creates.h): made, entered in "
		              "kvc-meta, lost (refused when entered).",
		              &state[i], 1)))
			return -ENOMEM;
	static const struct kvc_metrics_label rstate[3] = {
		{"state", "made"}, {"state", "entered"}, {"state", "missed"}};
	for (int i = 0; i < 3; i++)
		if (!(m.removes[i] = kvc_metrics_counter(
		              r, "kvc_fuse_early_removals_total",
		              "Unlinks answered here ahead of kvc-meta (early_creates.h): made, entered "
		              "in kvc-meta, missed (the name named another inode or none by then).",
		              &rstate[i], 1)))
			return -ENOMEM;
	if (!m.ring_completed || !m.ring_overlapped || !m.ring_depth || !m.rings ||
	    !m.usrbio_clients || !m.events_up || !m.events || !m.name_drops || !m.names_answered ||
	    !m.names_fills || !m.names_dirs || !m.dir_watch_lookups)
		return -ENOMEM;
	int rc = kvc_storage_client_metrics(&fs->storage, r, "kvc_fuse");
	if (rc == 0)
		rc = kvc_transport_metrics(&fs->storage, r, "kvc_fuse");
	return rc < 0 ? rc : kvc_metrics_collector(r, collect, fs);
}

int kvc_fuse_metrics_start(struct kvc_fuse *fs)
{
	struct kvc_metrics *r = kvc_metrics_create();
	if (!r)
		return -ENOMEM;
	int rc = register_all(r, fs);
	if (rc < 0) {
		kvc_metrics_destroy(r);
		return rc;
	}
	m.fs = fs;
	m.registry = r; /* last: the observers look at it first */
	return 0;
}
