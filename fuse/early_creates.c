/* early_creates: see early_creates.h. */
#include "fuse/early_creates.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/rpc.h"
#include "fuse/operations.h"

#define GRANT 1024          /* numbers asked for at a time */
#define LOW 256             /* ask for more below this many */
#define BATCH_DELAY_US 1000 /* a batch goes this long after its first file */
#define BATCH_FULL 64       /* or at once with this many */
#define MAX_WAITING 4096    /* beyond, creates go to kvc-meta themselves */
#define RETRY_MS 200        /* after an ADOPT or INO_GRANT kvc-meta did not take */
#define LOST_PAUSE_S 10     /* no early creates after one was lost */
#define STOP_TRYING_MS 5000 /* at unmount, for what still waits */

/* A file made here, or (remove) a name removed here: attr.ino is the
 * inode the name must still name for kvc-meta to remove it. */
struct entry {
	uint64_t seq;
	uint64_t parent;
	bool remove;
	struct kvc_attr attr;
	int64_t made_ns; /* monotonic */
	uint32_t ticket; /* dir_names' */
	bool open;       /* not closed here yet: ADOPT opens a session */
	bool sent;       /* in an ADOPT once (its answer may have been lost, and
	                  * kvc-meta may have it as it was then): no more folds */
	bool resent;     /* in an ADOPT again: the last one failed as a whole */
	uint32_t name_len;
	char name[KVC_WIRE_MAX_NAME];
};

struct kvc_early_creates {
	struct kvc_fuse *fs;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t work; /* something to send or to ask for, or stop */
	pthread_cond_t sent; /* an ADOPT came back */
	bool stopping;
	/* Numbers: [next, end) in use, then [spare_first, spare_end). */
	uint64_t next, end, spare_first, spare_end;
	uint64_t grant_gen; /* +1 when kvc-meta reclaimed our grants: a grant
	                     * asked for before is dropped when it comes */
	uint32_t chain_count;
	int64_t open_delay_ns; /* a file still open goes when this old */
	int64_t grant_after_ns, paused_until_ns;
	/* Files made, by seq; those up to entered_seq are in kvc-meta (or
	 * lost), the rest wait here or are in the ADOPT on its way. */
	struct entry *waiting;
	uint32_t count, cap;
	struct entry flying[KVC_WIRE_MAX_KEYS];
	uint32_t flying_count;
	bool sending;
	uint64_t next_seq, entered_seq;
	/* ADOPTs that failed as a whole and the last one's error: a caller
	 * waiting in settle returns it instead of trying again itself. */
	uint64_t fail_gen;
	int fail_rc;
	struct kvc_early_creates_stats stats;
};

static void wait_until(struct kvc_early_creates *c, pthread_cond_t *cond, int64_t at_ns)
{
	struct timespec t = {.tv_sec = at_ns / 1000000000, .tv_nsec = at_ns % 1000000000};
	pthread_cond_timedwait(cond, &c->lock, &t);
}

/* A waiting file made here a size or close may still fold into. */
static struct entry *find_foldable(struct kvc_early_creates *c, uint64_t ino)
{
	for (uint32_t i = c->count; i-- > 0;)
		if (c->waiting[i].attr.ino == ino && !c->waiting[i].remove)
			return c->waiting[i].sent ? NULL : &c->waiting[i];
	return NULL;
}

/* Room for one more waiting entry (lock held): false when full. */
static bool room(struct kvc_early_creates *c)
{
	if (c->count < c->cap)
		return true;
	uint32_t cap = c->cap ? 2 * c->cap : 256;
	struct entry *grown = cap <= MAX_WAITING ? realloc(c->waiting, cap * sizeof(*grown)) : NULL;
	if (grown)
		c->waiting = grown, c->cap = cap;
	return grown != NULL;
}

int kvc_early_creates_make(struct kvc_early_creates *c, uint64_t parent, const char *name,
                           uint32_t mode, uint32_t uid, uint32_t gid, uint32_t ticket,
                           struct kvc_attr *attr, struct kvc_attr *dir)
{
	size_t len = strlen(name);
	if (!c || (mode & 07000) || ((mode & S_IFMT) && !S_ISREG(mode)) || len == 0 ||
	    len > KVC_WIRE_MAX_NAME)
		return -EAGAIN;
	struct kvc_attr d;
	/* Only while our lease is fresh: a client kvc-meta declares gone
	 * loses the files it made and had not entered (their grants are
	 * reclaimed), so none is made when that may be near. */
	if (!kvc_fuse_lease_fresh(c->fs) ||
	    kvc_attr_cache_get(c->fs->attrs, c->fs->events, parent, &d) <= 0 || !S_ISDIR(d.mode) ||
	    d.layout.chunk_size == 0)
		return -EAGAIN;
	int64_t now = kvc_clock_monotonic_ns();
	int rc = 0;
	pthread_mutex_lock(&c->lock);
	if (c->next == c->end && c->spare_first < c->spare_end) {
		c->next = c->spare_first, c->end = c->spare_end;
		c->spare_first = c->spare_end = 0;
	}
	if (c->stopping || now < c->paused_until_ns || c->next == c->end || c->chain_count == 0)
		rc = -EAGAIN;
	if (rc == 0 && !room(c))
		rc = -EAGAIN;
	if (rc == 0) {
		/* Over the chains there are now, as kvc-meta's creates: the
		 * table in use here (it only grows; kvc-meta may learn of a
		 * new chain later, and takes the file all the same). */
		struct kvc_layout layout = d.layout;
		uint32_t chains = kvc_storage_client_chain_count(&c->fs->storage);
		layout.chain_count = chains > c->chain_count ? chains : c->chain_count;
		if (layout.stripe > layout.chain_count)
			layout.stripe = layout.chain_count;
		int64_t t = kvc_clock_wall_ns();
		uint64_t ino = c->next++;
		/* Spread over the chains by a hash of the inode, not a counter
		 * in step with it: readers pick a chunk's replica by (inode +
		 * chunk), and a first chain in step with the inode would send
		 * every read of a chain's first chunks to one of its members. */
		layout.first_chain = (uint32_t)(((ino * 0x9E3779B97F4A7C15ull) >> 32) %
		                                layout.chain_count);
		struct entry *e = &c->waiting[c->count++];
		*e = (struct entry){.seq = c->next_seq++, .parent = parent, .made_ns = now,
		                    .ticket = ticket, .open = true, .name_len = (uint32_t)len};
		e->attr = (struct kvc_attr){.ino = ino, .atime_ns = t, .mtime_ns = t,
		                            .ctime_ns = t, .mode = S_IFREG | (mode & 0777),
		                            .uid = uid, .gid = (d.mode & S_ISGID) ? d.gid : gid,
		                            .nlink = 1, .layout = layout};
		memcpy(e->name, name, len);
		*attr = e->attr;
		d.mtime_ns = d.ctime_ns = t;
		*dir = d;
		c->stats.made++;
	}
	/* The thread sends a first file after the delay and a full batch at
	 * once, and asks for numbers when they run low. */
	bool low = c->end - c->next < LOW && c->spare_first == c->spare_end;
	if (c->count == 1 || low || rc < 0)
		pthread_cond_signal(&c->work);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

bool kvc_early_creates_fold_size(struct kvc_early_creates *c, uint64_t ino, uint64_t size,
                                 struct kvc_attr *attr)
{
	if (!c)
		return false;
	pthread_mutex_lock(&c->lock);
	struct entry *e = find_foldable(c, ino);
	if (e) {
		/* kvc-meta's size becomes max(size, ours) (inode_table.h): an
		 * overwrite inside the file sends only its end. */
		if (size > e->attr.size)
			e->attr.size = size;
		e->attr.mtime_ns = e->attr.ctime_ns = kvc_clock_wall_ns();
		*attr = e->attr;
	}
	pthread_mutex_unlock(&c->lock);
	return e != NULL;
}

bool kvc_early_creates_fold_close(struct kvc_early_creates *c, uint64_t ino)
{
	if (!c)
		return false;
	pthread_mutex_lock(&c->lock);
	struct entry *e = find_foldable(c, ino);
	if (e)
		e->open = false;
	if (e && c->count >= BATCH_FULL)
		pthread_cond_signal(&c->work);
	pthread_mutex_unlock(&c->lock);
	return e != NULL;
}

int kvc_early_creates_remove(struct kvc_early_creates *c, uint64_t parent, const char *name,
                             uint64_t ino)
{
	size_t len = strlen(name);
	int rc = 0;
	if (!c || len == 0 || len > KVC_WIRE_MAX_NAME || ino == 0)
		return -EAGAIN;
	int64_t now = kvc_clock_monotonic_ns();
	pthread_mutex_lock(&c->lock);
	if (c->stopping || !room(c)) /* (a lost file pauses creates, not these) */
		rc = -EAGAIN;
	if (rc == 0) {
		struct entry *e = &c->waiting[c->count++];
		*e = (struct entry){.seq = c->next_seq++, .parent = parent, .remove = true,
		                    .made_ns = now, .name_len = (uint32_t)len};
		e->attr.ino = ino;
		memcpy(e->name, name, len);
		c->stats.removes++;
		if (c->count == 1)
			pthread_cond_signal(&c->work);
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* Whether e, refused -ESTALE by an ADOPT sent again, was entered by an
 * earlier one whose answer was lost: its number was granted to this
 * client alone, so a file of that number in kvc-meta is this one, wherever
 * another client renamed it since (meta_adopt.h: a number entered already
 * is refused, and kvc-meta cannot tell a resend from a second use). */
static bool entered_before(struct kvc_early_creates *c, const struct entry *e)
{
	struct kvc_attr now;
	int rc, tries = 0;
	do /* (the connection just failed: it may again) */
		rc = kvc_meta_client_getattr_unwaited(&c->fs->meta, e->attr.ino, &now);
	while (kvc_rpc_is_transport_error(rc) && ++tries < 2);
	bool ours = rc == 0 && now.ino == e->attr.ino && S_ISREG(now.mode);
	if (ours)
		kvc_log_info("early create of '%.*s' in directory %" PRIu64 " (inode %" PRIu64
		             "): entered by an ADOPT whose answer was lost, and renamed or "
		             "replaced since", (int)e->name_len, e->name, e->parent, e->attr.ino);
	return ours;
}

/* What kvc-meta answered for the files of one ADOPT (lock not held: the
 * flying entries are the sender's until sending drops). */
static void take_results(struct kvc_early_creates *c, const struct kvc_msg_key_result *out, int rc,
                         uint32_t *lost)
{
	*lost = 0;
	for (uint32_t i = 0; i < c->flying_count; i++) {
		const struct entry *e = &c->flying[i];
		int one = rc < 0 ? rc : out[i].rc;
		if (e->remove) { /* -ENOENT: the name changed first; nothing to undo */
			if (one < 0 && one != -ENOENT)
				kvc_log_warn("early removal of '%.*s' in directory %" PRIu64 ": %s",
				             (int)e->name_len, e->name, e->parent, strerror(-one));
			*lost += one < 0;
			continue;
		}
		if (one == -ESTALE && e->resent && entered_before(c, e))
			one = 0;
		if (one < 0) {
			kvc_log_warn("early create of '%.*s' in directory %" PRIu64
			             " (inode %" PRIu64 ") refused by kvc-meta: %s; the file is lost",
			             (int)e->name_len, e->name, e->parent, e->attr.ino, strerror(-one));
			kvc_inode_table_mark_stale(c->fs->inodes, e->attr.ino);
			++*lost;
		}
		kvc_dir_names_end(c->fs->dir_names, e->ticket);
	}
}

/* Send one batch's files (ADOPT) or removals (REMOVE_MANY). */
static int send_kind(struct kvc_early_creates *c, uint32_t n, struct kvc_msg_key_result *out)
{
	bool remove = c->flying[0].remove;
	struct kvc_meta_adoption *files = remove ? NULL : calloc(n, sizeof(*files));
	struct kvc_meta_removal *names = remove ? calloc(n, sizeof(*names)) : NULL;
	int rc = files || names ? 0 : -ENOMEM;
	for (uint32_t i = 0; rc == 0 && i < n; i++) {
		const struct entry *e = &c->flying[i];
		if (remove)
			names[i] = (struct kvc_meta_removal){.parent = e->parent, .ino = e->attr.ino,
			                                     .name_len = e->name_len, .name = e->name};
		else
			files[i] = (struct kvc_meta_adoption){.parent = e->parent, .attr = e->attr,
			                                      .flags = e->open ? KVC_ADOPT_OPEN : 0,
			                                      .name_len = e->name_len, .name = e->name};
	}
	if (rc == 0 && remove)
		rc = kvc_meta_client_remove_many(&c->fs->meta, names, n, out);
	else if (rc == 0)
		rc = kvc_meta_client_adopt(&c->fs->meta, c->fs->client_id, files, n, out);
	free(files);
	free(names);
	return rc;
}

/* Whether an ADOPT that failed as a whole may be sent again (kvc-meta not
 * reached, out of memory, ...); not a message kvc-meta cannot take. */
static bool worth_again(int rc)
{
	return rc < 0 && rc != -EINVAL && rc != -EOPNOTSUPP;
}

/* Send the oldest n waiting files as one ADOPT (lock held, released while
 * it is on its way; no other is). Returns 0 when kvc-meta answered (files
 * it refused are lost), or the error of an ADOPT worth sending again: the
 * files wait again, first in line. */
static int send_batch(struct kvc_early_creates *c, uint32_t n)
{
	uint32_t lost, same = 1;
	while (same < n && c->waiting[same].remove == c->waiting[0].remove)
		same++; /* one kind a message, in order */
	n = same < KVC_WIRE_MAX_KEYS ? same : KVC_WIRE_MAX_KEYS;
	for (uint32_t i = 0; i < n; i++) {
		c->waiting[i].resent = c->waiting[i].sent;
		c->waiting[i].sent = true;
	}
	memcpy(c->flying, c->waiting, n * sizeof(*c->flying));
	memmove(c->waiting, c->waiting + n, (c->count - n) * sizeof(*c->waiting));
	c->count -= n;
	c->flying_count = n;
	c->sending = true;
	pthread_mutex_unlock(&c->lock);
	struct kvc_msg_key_result *out = calloc(n, sizeof(*out));
	int rc = out ? send_kind(c, n, out) : -ENOMEM;
	if (!worth_again(rc))
		take_results(c, out, rc, &lost);
	free(out);
	pthread_mutex_lock(&c->lock);
	if (worth_again(rc)) { /* back in front, in order */
		if (c->count + n > c->cap) {
			struct entry *grown = realloc(c->waiting, (c->count + n) * sizeof(*grown));
			if (grown)
				c->waiting = grown, c->cap = c->count + n;
		}
		if (c->count + n <= c->cap) {
			memmove(c->waiting + n, c->waiting, c->count * sizeof(*c->waiting));
			memcpy(c->waiting, c->flying, n * sizeof(*c->waiting));
			c->count += n;
		} else {
			/* No memory to keep them: given up as refused ones are. */
			pthread_mutex_unlock(&c->lock);
			take_results(c, NULL, -ENOMEM, &lost);
			pthread_mutex_lock(&c->lock);
			rc = 0;
		}
	}
	if (worth_again(rc)) {
		c->fail_gen++;
		c->fail_rc = rc;
	} else {
		c->entered_seq = c->flying[n - 1].seq;
		if (c->flying[0].remove) {
			c->stats.removed += n - lost;
			c->stats.removes_missed += lost;
		} else {
			c->stats.entered += n - lost;
			c->stats.lost += lost;
			if (lost)
				c->paused_until_ns = kvc_clock_monotonic_ns() +
				                     LOST_PAUSE_S * 1000000000ll;
		}
		c->stats.batches++;
		rc = 0;
	}
	c->flying_count = 0;
	c->sending = false;
	pthread_cond_broadcast(&c->sent);
	return rc;
}

/* The last seq of a file that waits or flies (lock held) and is ino, or
 * is in directory ino (whose times and nlink its ADOPT changes: a GETATTR
 * or a utimensat of the directory comes after it), else 0. */
static uint64_t seq_of(struct kvc_early_creates *c, uint64_t ino)
{
	uint64_t seq = 0;
	for (uint32_t i = 0; i < c->count; i++)
		if (c->waiting[i].attr.ino == ino || c->waiting[i].parent == ino)
			seq = c->waiting[i].seq;
	for (uint32_t i = 0; i < c->flying_count; i++)
		if ((c->flying[i].attr.ino == ino || c->flying[i].parent == ino) &&
		    c->flying[i].seq > seq)
			seq = c->flying[i].seq;
	return seq;
}

bool kvc_early_creates_pending(struct kvc_early_creates *c, uint64_t ino)
{
	if (!c)
		return false;
	pthread_mutex_lock(&c->lock);
	bool pending = seq_of(c, ino) > c->entered_seq;
	pthread_mutex_unlock(&c->lock);
	return pending;
}

bool kvc_early_creates_unentered(struct kvc_early_creates *c, uint64_t ino)
{
	if (!c)
		return false;
	bool made = false;
	pthread_mutex_lock(&c->lock);
	for (uint32_t i = 0; i < c->count && !made; i++)
		made = c->waiting[i].attr.ino == ino && !c->waiting[i].remove;
	for (uint32_t i = 0; i < c->flying_count && !made; i++)
		made = c->flying[i].attr.ino == ino && !c->flying[i].remove;
	pthread_mutex_unlock(&c->lock);
	return made;
}

int kvc_early_creates_settle(void *arg, const void *inos, uint32_t count)
{
	struct kvc_early_creates *c = arg;
	const uint8_t *bytes = inos;
	int rc = 0;
	pthread_mutex_lock(&c->lock);
	uint64_t target = count ? 0 : c->next_seq - 1;
	for (uint32_t i = 0; i < count && (c->count || c->sending); i++) {
		uint64_t ino, seq;
		memcpy(&ino, bytes + 8 * (size_t)i, 8);
		if ((seq = seq_of(c, ino)) > target)
			target = seq;
	}
	/* Files go in order: the waiting ones up to target, in one ADOPT. An
	 * ADOPT that fails meanwhile (another caller's, or the thread's; a
	 * connection lost, kvc-meta restarting) is sent again RETRY_MS later
	 * (by whoever comes first), for up to io_timeout_ms from this call:
	 * then the last failure is this call's. While stopping, the first
	 * failure is (kvc_early_creates_stop keeps its own time). */
	int64_t give_up = kvc_clock_monotonic_ns() + (int64_t)c->fs->config.io_timeout_ms * 1000000;
	int64_t again_at = 0;
	uint64_t gen = c->fail_gen;
	while (rc == 0 && c->entered_seq < target) {
		uint32_t n = 0;
		while (n < c->count && c->waiting[n].seq <= target)
			n++;
		int64_t now = kvc_clock_monotonic_ns();
		if (c->fail_gen != gen) {
			gen = c->fail_gen;
			if (now >= give_up || c->stopping)
				rc = c->fail_rc;
			again_at = now + RETRY_MS * 1000000ll;
		} else if (!c->sending && n > 0 && now >= again_at) {
			rc = send_batch(c, n);
			if (rc < 0 && !c->stopping && kvc_clock_monotonic_ns() < give_up) {
				gen = c->fail_gen; /* (its own failure: noted) */
				again_at = kvc_clock_monotonic_ns() + RETRY_MS * 1000000ll;
				rc = 0;
			}
		} else if (!c->sending && n > 0) {
			if (again_at > give_up) /* no try fits before giving up */
				rc = c->fail_rc;
			else
				wait_until(c, &c->sent, again_at);
		} else {
			pthread_cond_wait(&c->sent, &c->lock);
		}
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* More numbers (lock held, released meanwhile). */
static void ask_for_numbers(struct kvc_early_creates *c)
{
	struct kvc_msg_ino_grant_reply g;
	uint64_t gen = c->grant_gen;
	c->grant_after_ns = INT64_MAX; /* one request at a time */
	pthread_mutex_unlock(&c->lock);
	int rc = kvc_meta_client_ino_grant(&c->fs->meta, c->fs->client_id, GRANT, &g);
	pthread_mutex_lock(&c->lock);
	if (rc == 0 && gen != c->grant_gen)
		rc = -ESTALE; /* granted, then reclaimed with the drop we heard of */
	c->grant_after_ns = rc < 0 ? kvc_clock_monotonic_ns() + RETRY_MS * 1000000ll : 0;
	if (rc < 0) {
		kvc_log_debug("asking kvc-meta for inode numbers: %s", strerror(-rc));
		return;
	}
	c->chain_count = g.chain_count;
	if (c->next == c->end)
		c->next = g.first, c->end = g.first + g.count;
	else
		c->spare_first = g.first, c->spare_end = g.first + g.count;
}

static void *early_main(void *arg)
{
	struct kvc_early_creates *c = arg;
	pthread_mutex_lock(&c->lock);
	for (;;) {
		int64_t now = kvc_clock_monotonic_ns();
		bool low = c->end - c->next < LOW && c->spare_first == c->spare_end;
		if (low && !c->stopping && now >= c->grant_after_ns) {
			ask_for_numbers(c);
			continue;
		}
		if (c->count == 0 && c->stopping)
			break;
		if (c->count == 0 || c->sending) {
			int64_t at = low && c->grant_after_ns != INT64_MAX ? c->grant_after_ns
			                                                  : now + 1000000000ll;
			wait_until(c, c->sending ? &c->sent : &c->work, at);
			continue;
		}
		/* The files that may go: in order, up to the first one still open
		 * and younger than the open delay (its size and close may yet fold
		 * in); they go when BATCH_FULL, or BATCH_DELAY_US after the first. */
		uint32_t ready = 0;
		while (ready < c->count && (!c->waiting[ready].open || c->stopping ||
		                            now - c->waiting[ready].made_ns >= c->open_delay_ns))
			ready++;
		/* A removal at the front goes at once: until kvc-meta has it,
		 * another client still finds the name (early_creates.h). */
		int64_t due = c->waiting[0].remove ? now
		            : c->waiting[0].made_ns + (ready ? BATCH_DELAY_US * 1000ll : c->open_delay_ns);
		if (ready < BATCH_FULL && now < due) {
			wait_until(c, &c->work, ready ? due : now + BATCH_DELAY_US * 1000ll);
			continue;
		}
		if (ready == 0)
			continue; /* (due passed: the first is ready now) */
		if (send_batch(c, ready) < 0)
			wait_until(c, &c->work, kvc_clock_monotonic_ns() + RETRY_MS * 1000000ll);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

int kvc_early_creates_start(struct kvc_fuse *fs, struct kvc_early_creates **out)
{
	struct kvc_early_creates *c = calloc(1, sizeof(*c));
	pthread_condattr_t ca;
	if (!c)
		return -ENOMEM;
	c->fs = fs;
	c->next_seq = 1;
	c->open_delay_ns = (int64_t)fs->config.early_open_delay_ms * 1000000;
	pthread_mutex_init(&c->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->work, &ca);
	pthread_cond_init(&c->sent, &ca);
	pthread_condattr_destroy(&ca);
	int rc = -pthread_create(&c->thread, NULL, early_main, c);
	if (rc < 0) {
		free(c);
		return rc;
	}
	*out = c;
	return 0;
}

/* Give the grants back (the thread has ended): the numbers never used go,
 * and any other one never entered (a file lost here) is reclaimed by
 * kvc-meta. Unreachable: kvc-meta reclaims them all once it declares this
 * client gone. */
static void give_back(struct kvc_early_creates *c)
{
	struct kvc_msg_ino_range unused[2] = {
		{.first = c->next, .count = (uint32_t)(c->end - c->next)},
		{.first = c->spare_first, .count = (uint32_t)(c->spare_end - c->spare_first)}};
	uint64_t reclaimed = 0;
	if (c->end == 0 && c->spare_end == 0)
		return; /* never granted any */
	int rc = kvc_meta_client_ino_return(&c->fs->meta, c->fs->client_id, unused, &reclaimed);
	if (rc < 0)
		kvc_log_warn("returning inode numbers to kvc-meta: %s (it reclaims them once it "
		             "declares this client gone)", strerror(-rc));
	else if (reclaimed > 0)
		kvc_log_warn("%" PRIu64 " file(s) made here were never entered: kvc-meta reclaims "
		             "their chunks", reclaimed);
}

void kvc_early_creates_stop(struct kvc_early_creates *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	c->stopping = true;
	pthread_cond_signal(&c->work);
	pthread_mutex_unlock(&c->lock);
	/* What is still waiting goes now; if kvc-meta cannot take it, it is
	 * tried again for STOP_TRYING_MS (each try may itself wait the I/O
	 * bound for a connection). */
	int64_t stop_at = kvc_clock_monotonic_ns() + STOP_TRYING_MS * 1000000ll;
	while (kvc_early_creates_settle(c, NULL, 0) < 0 && kvc_clock_monotonic_ns() < stop_at)
		kvc_clock_sleep_ms(RETRY_MS);
	pthread_mutex_lock(&c->lock);
	while (c->sending)
		pthread_cond_wait(&c->sent, &c->lock);
	uint32_t n = c->count;
	struct entry *dropped = c->waiting;
	if (n > 0) { /* given up: as refused ones, and no caller waits for them */
		uint32_t removes = 0;
		for (uint32_t i = 0; i < n; i++)
			removes += c->waiting[i].remove;
		kvc_log_error("kvc-meta unreachable: %" PRIu32 " early create(s) lost, %" PRIu32
		              " early removal(s) not made (those names stay)", n - removes, removes);
		c->stats.lost += n - removes;
		c->stats.removes_missed += removes;
		c->entered_seq = c->next_seq - 1;
		c->waiting = NULL;
		c->count = c->cap = 0;
		pthread_cond_broadcast(&c->sent);
	}
	pthread_cond_signal(&c->work);
	pthread_mutex_unlock(&c->lock);
	for (uint32_t i = 0; i < n; i++) {
		if (dropped[i].remove)
			continue;
		kvc_inode_table_mark_stale(c->fs->inodes, dropped[i].attr.ino);
		kvc_dir_names_end(c->fs->dir_names, dropped[i].ticket);
	}
	free(dropped);
	pthread_join(c->thread, NULL);
	give_back(c);
}

void kvc_early_creates_forget_grants(struct kvc_early_creates *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	c->next = c->end;
	c->spare_first = c->spare_end;
	c->grant_gen++;
	if (c->grant_after_ns != INT64_MAX) /* (one in flight: it is dropped) */
		c->grant_after_ns = 0;
	pthread_cond_signal(&c->work);
	pthread_mutex_unlock(&c->lock);
}

void kvc_early_creates_stats(struct kvc_early_creates *c, struct kvc_early_creates_stats *out)
{
	if (!c) {
		*out = (struct kvc_early_creates_stats){0};
		return;
	}
	pthread_mutex_lock(&c->lock);
	*out = c->stats;
	pthread_mutex_unlock(&c->lock);
}
