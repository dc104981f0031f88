/* lmdb_checkpoint: see lmdb_checkpoint.h for the algorithm and formats. */
#include "core/lmdb_checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/crc32c.h"
#include "core/fsutil.h"
#include "core/lmdb_txn.h"
#include "core/log.h"

#define MAGIC 0x504b434bu /* "KCKP" */
#define VERSION 1
#define SLOT 512
#define IMAGE 256
#define BOOT_ID 40

/* LMDB 0.9's meta page (data version 1), as far as this module reads it. */
#define META_PGNO_AT 0
#define META_FLAGS_AT 10
#define META_P_META 0x08
#define META_MAGIC_AT 16
#define META_MAGIC 0xBEEFC0DEu
#define META_VERSION_AT 20
#define META_VERSION 1
#define META_TXNID_AT 144

/* One slot of the checkpoint file (layout in the header). */
struct record {
	uint32_t magic;
	uint32_t version;
	uint64_t sequence;
	uint64_t txnid;
	uint32_t page_size;
	uint32_t image_len;
	char boot_id[BOOT_ID];
	uint8_t image[IMAGE];
	uint32_t crc;
	uint8_t zero[SLOT - 332];
};
_Static_assert(offsetof(struct record, boot_id) == 32, "");
_Static_assert(offsetof(struct record, image) == 72, "");
_Static_assert(offsetof(struct record, crc) == 328, "");
_Static_assert(sizeof(struct record) == SLOT, "");

struct kvc_lmdb_checkpoint {
	MDB_env *env;
	int fd;      /* the checkpoint file (owned) */
	int data_fd; /* LMDB's data file (LMDB's) */
	uint32_t page_size;
	char boot_id[BOOT_ID];
	/* Used by the one running checkpoint only (see `running`). */
	uint64_t sequence; /* of the last record written */
	MDB_txn *pin;      /* keeps the last durable checkpoint's pages */
	atomic_bool fallback; /* unknown LMDB format: every commit syncs instead */
	/* A record that failed to be made durable may still reach the disk
	 * (its pwrite went through): its state's pin is kept here until a
	 * later record, written to the same slot, is durable. */
	MDB_txn *maybe;
	/* A flush that failed: the kernel may have dropped those pages as
	 * clean, so no later checkpoint can be trusted; every one fails with
	 * this, and the last good one stays pinned. */
	int broken;
	bool opened;       /* the first checkpoint was taken */
	bool after_reboot; /* the newest checkpoint at open was another boot's */
	char dir[PATH_MAX]; /* for the log */
	/* The data file's last page when the last checkpoint began (read
	 * without the lock by admit: a stale value only shifts when the next
	 * early checkpoint comes). */
	_Atomic size_t base_pgno;
	_Atomic uint64_t pinned_txnid; /* L of the pin held now (0: none) */
	/* Coalescing: requests asked, and the last request a finished
	 * checkpoint covers (one that started after it was asked). */
	pthread_mutex_t lock;
	pthread_cond_t done;
	uint64_t asked, finished;
	bool running;
	int rc; /* of the last finished checkpoint */
};

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static void put64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, sizeof(v));
}

/* This boot's id (or KVC_BOOT_ID's, for tests); "" when unknown. */
static void boot_id(char out[BOOT_ID])
{
	memset(out, 0, BOOT_ID);
	const char *fake = getenv("KVC_BOOT_ID");
	if (fake) {
		strncpy(out, fake, BOOT_ID - 1);
		return;
	}
	long n = kvc_fsutil_read_small("/proc/sys/kernel/random/boot_id", out, BOOT_ID - 1);
	out[n > 0 ? n : 0] = '\0';
	char *newline = strchr(out, '\n');
	if (newline)
		*newline = '\0';
}

static uint32_t record_crc(const struct record *r)
{
	return kvc_crc32c(0, r, offsetof(struct record, crc));
}

/* The transaction a meta page names: 0, or -EPROTO when the bytes are not
 * a meta page of the LMDB format this module knows. */
static int meta_txnid(const uint8_t *page, uint64_t *txnid)
{
	uint16_t flags;
	memcpy(&flags, page + META_FLAGS_AT, sizeof(flags));
	if (!(flags & META_P_META) || get32(page + META_MAGIC_AT) != META_MAGIC ||
	    get32(page + META_VERSION_AT) != META_VERSION)
		return -EPROTO;
	*txnid = get64(page + META_TXNID_AT);
	return 0;
}

static bool record_valid(const struct record *r)
{
	uint64_t txnid;
	return r->magic == MAGIC && r->version == VERSION && r->image_len == IMAGE &&
	       r->page_size >= 512 && r->page_size <= 65536 &&
	       (r->page_size & (r->page_size - 1)) == 0 && r->crc == record_crc(r) &&
	       meta_txnid(r->image, &txnid) == 0 && txnid == r->txnid;
}

/* The newest valid slot of the checkpoint file: 0, -ENOENT (none). */
static int record_read(int fd, struct record *best)
{
	struct record slots[2];
	int found = -ENOENT;
	ssize_t n = pread(fd, slots, sizeof(slots), 0);
	for (int i = 0; i < 2 && n >= (ssize_t)((size_t)(i + 1) * SLOT); i++) {
		if (record_valid(&slots[i]) && (found < 0 || slots[i].sequence > best->sequence)) {
			*best = slots[i];
			found = 0;
		}
	}
	return n < 0 ? -errno : found;
}

static int path_in(char *out, size_t cap, const char *dir, const char *name)
{
	int n = snprintf(out, cap, "%s/%s", dir, name);
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* Write both meta pages back to the checkpoint's transaction. */
static int roll_back(int data, const struct record *r)
{
	uint8_t other[IMAGE];
	uint64_t slot = r->txnid & 1;
	memcpy(other, r->image, IMAGE);
	put64(other + META_PGNO_AT, slot ^ 1);
	put64(other + META_TXNID_AT, r->txnid ? r->txnid - 1 : 0);
	ssize_t a = pwrite(data, r->image, IMAGE, (off_t)(slot * r->page_size));
	ssize_t b = a == IMAGE ? pwrite(data, other, IMAGE, (off_t)((slot ^ 1) * r->page_size)) : 0;
	if (a < 0 || b < 0)
		return -errno;
	if (a != IMAGE || b != IMAGE)
		return -EIO;
	return fdatasync(data) < 0 ? -errno : 0;
}

int kvc_lmdb_checkpoint_recover(const char *dir)
{
	char path[PATH_MAX], now[BOOT_ID];
	struct record r;
	int rc = path_in(path, sizeof(path), dir, "checkpoint");
	int fd = rc < 0 ? -1 : open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return rc < 0 ? rc : errno == ENOENT ? 0 : -errno;
	rc = record_read(fd, &r);
	close(fd);
	if (rc == -ENOENT)
		kvc_log_warn("%s: no valid checkpoint; opening the database as it is", dir);
	boot_id(now);
	if (rc < 0 || now[0] == '\0' || strncmp(now, r.boot_id, BOOT_ID) == 0)
		return rc == -ENOENT ? 0 : rc; /* same boot: the page cache kept every commit */
	rc = path_in(path, sizeof(path), dir, "data.mdb");
	int data = rc < 0 ? -1 : open(path, O_RDWR | O_CLOEXEC);
	if (data < 0)
		return rc < 0 ? rc : errno == ENOENT ? 0 : -errno;
	/* Nothing to do when the newest meta page names the checkpoint. */
	uint8_t metas[2][IMAGE];
	uint64_t txnids[2] = {0, 0};
	bool readable = true;
	for (int i = 0; i < 2; i++)
		readable = readable &&
		           pread(data, metas[i], IMAGE, (off_t)((uint64_t)i * r.page_size)) == IMAGE &&
		           meta_txnid(metas[i], &txnids[i]) == 0;
	bool later = !readable || txnids[0] > r.txnid || txnids[1] > r.txnid;
	rc = later ? roll_back(data, &r) : 0;
	close(data);
	if (rc == 0 && later)
		kvc_log_warn("%s: the machine went down after transaction %" PRIu64 " was made "
		             "durable; back to it (later transactions, up to one sync interval, "
		             "are lost)", dir, r.txnid);
	return rc < 0 ? rc : later;
}

/* Read meta page of txnid (no writer can commit now) into image. */
static int read_meta(struct kvc_lmdb_checkpoint *cp, uint64_t txnid, uint8_t *image)
{
	uint64_t named;
	ssize_t n = pread(cp->data_fd, image, IMAGE, (off_t)((txnid & 1) * cp->page_size));
	if (n != IMAGE)
		return n < 0 ? -errno : -EIO;
	int rc = meta_txnid(image, &named);
	return rc < 0 ? rc : named == txnid ? 0 : -EPROTO;
}

static int record_write(struct kvc_lmdb_checkpoint *cp, uint64_t txnid, const uint8_t *image,
                        bool *written)
{
	struct record r = {.magic = MAGIC, .version = VERSION, .sequence = cp->sequence + 1,
	                   .txnid = txnid, .page_size = cp->page_size, .image_len = IMAGE};
	memcpy(r.boot_id, cp->boot_id, BOOT_ID);
	memcpy(r.image, image, IMAGE);
	r.crc = record_crc(&r);
	ssize_t n = pwrite(cp->fd, &r, SLOT, (off_t)((r.sequence & 1) * SLOT));
	*written = n > 0;
	if (n != SLOT)
		return n < 0 ? -errno : -EIO;
	if (fdatasync(cp->fd) < 0)
		return -errno;
	cp->sequence = r.sequence;
	return 0;
}

/* One checkpoint (steps 1-4 of the header). The running one only. */
static int take(struct kvc_lmdb_checkpoint *cp)
{
	MDB_txn *pin = NULL, *writer = NULL;
	uint8_t image[IMAGE];
	uint64_t txnid = 0;
	MDB_envinfo info;
	if (cp->broken)
		return cp->broken;
	if (mdb_env_info(cp->env, &info) == 0)
		atomic_store(&cp->base_pgno, info.me_last_pgno);
	int rc = 0;
	if (!cp->fallback)
		rc = kvc_lmdb_errno(mdb_txn_begin(cp->env, NULL, 0, &writer));
	if (rc == 0 && writer) {
		/* Steps 1-2: writers held only to name L and read its meta page. */
		txnid = mdb_txn_id(writer) - 1;
		rc = kvc_lmdb_errno(mdb_txn_begin(cp->env, NULL, MDB_RDONLY, &pin));
		if (rc == 0 && mdb_txn_id(pin) != txnid)
			rc = -EPROTO;
		if (rc == 0)
			rc = read_meta(cp, txnid, image);
		mdb_txn_abort(writer);
	}
	/* Step 3: with writers going on, L's pages (all written before) reach
	 * the disk; the pin keeps any of them from being reused meanwhile. */
	if (rc == 0) {
		rc = kvc_lmdb_errno(mdb_env_sync(cp->env, 1));
		if (rc < 0 && rc != -EPROTO) {
			kvc_log_error("%s: flushing the database failed (%s): no checkpoint can be "
			              "trusted from now on; fsync fails until a restart",
			              cp->dir, strerror(-rc));
			cp->broken = rc;
		}
	}
	if (rc == -EPROTO) {
		kvc_log_error("LMDB wrote a meta page this kvcfs does not know: no more "
		              "checkpoints; every commit now flushes the disk instead");
		atomic_store(&cp->fallback, true);
		rc = kvc_lmdb_errno(mdb_env_set_flags(cp->env, MDB_NOMETASYNC, 1));
		if (rc == 0)
			rc = kvc_lmdb_errno(mdb_env_set_flags(cp->env, MDB_NOSYNC, 0));
		if (rc == 0)
			rc = kvc_lmdb_errno(mdb_env_sync(cp->env, 1));
		if (cp->pin) /* nothing to keep any more */
			mdb_txn_abort(cp->pin);
		cp->pin = NULL;
	} else if (rc == 0 && pin) {
		bool written = false;
		rc = record_write(cp, txnid, image, &written);
		if (rc < 0 && written) { /* it may reach the disk yet: keep L whole */
			if (cp->maybe)
				mdb_txn_abort(cp->maybe); /* its record was in this slot */
			cp->maybe = pin;
			pin = NULL;
		}
	}
	if (rc == 0 && pin && !cp->fallback) { /* the new one is durable: pin it instead */
		MDB_txn *old = cp->pin;
		cp->pin = pin;
		atomic_store(&cp->pinned_txnid, txnid);
		pin = old;
		if (cp->maybe) /* its record's slot holds this one now */
			mdb_txn_abort(cp->maybe);
		cp->maybe = NULL;
	}
	if (pin)
		mdb_txn_abort(pin);
	return rc;
}

int kvc_lmdb_checkpoint_sync(struct kvc_lmdb_checkpoint *cp)
{
	pthread_mutex_lock(&cp->lock);
	uint64_t mine = ++cp->asked;
	while (cp->finished < mine) {
		if (cp->running) {
			pthread_cond_wait(&cp->done, &cp->lock);
			continue;
		}
		cp->running = true;
		uint64_t covers = cp->asked; /* all asked before it starts */
		pthread_mutex_unlock(&cp->lock);
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		int rc = take(cp);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		int64_t ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
		if (ms >= 1000)
			kvc_log_warn("%s: a checkpoint took %" PRId64 " ms (a slow disk, or a heavy "
			             "write load)", cp->dir, ms);
		pthread_mutex_lock(&cp->lock);
		cp->running = false;
		cp->finished = covers;
		cp->rc = rc;
		pthread_cond_broadcast(&cp->done);
	}
	int rc = cp->rc;
	pthread_mutex_unlock(&cp->lock);
	if (rc < 0)
		kvc_log_error("checkpoint failed: %s", strerror(-rc));
	return rc;
}

/* Bytes the data file grew by since the last checkpoint. */
static size_t growth(struct kvc_lmdb_checkpoint *cp)
{
	MDB_envinfo info;
	if (!cp || atomic_load(&cp->fallback) || mdb_env_info(cp->env, &info) != 0)
		return 0;
	return (info.me_last_pgno - atomic_load(&cp->base_pgno)) * cp->page_size;
}

size_t kvc_lmdb_checkpoint_held(struct kvc_lmdb_checkpoint *cp)
{
	/* LMDB's free list (its database 0, read as its mdb_stat -f reads it):
	 * one record per freeing transaction, keyed by its id, each a page list
	 * whose first word is its length. The pin keeps those after L. */
	uint64_t since = cp && !atomic_load(&cp->fallback) ? atomic_load(&cp->pinned_txnid) : 0;
	MDB_txn *txn = NULL;
	MDB_cursor *cursor = NULL;
	size_t pages = 0, from = (size_t)since + 1;
	if (since == 0 || mdb_txn_begin(cp->env, NULL, MDB_RDONLY, &txn) != 0)
		return 0;
	if (mdb_cursor_open(txn, 0, &cursor) == 0) {
		MDB_val k = {sizeof(from), &from}, v;
		int rc = mdb_cursor_get(cursor, &k, &v, MDB_SET_RANGE);
		while (rc == 0) {
			size_t n = 0;
			if (v.mv_size >= sizeof(n))
				memcpy(&n, v.mv_data, sizeof(n));
			pages += n;
			rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT);
		}
		mdb_cursor_close(cursor);
	}
	mdb_txn_abort(txn);
	return pages * cp->page_size;
}

int kvc_lmdb_checkpoint_admit(struct kvc_lmdb_checkpoint *cp)
{
	return growth(cp) > KVC_LMDB_CHECKPOINT_GROWTH
	               ? kvc_lmdb_checkpoint_sync(cp)
	               : 0;
}

/* Make the checkpoint file's name durable (once, when created). */
static int sync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = fd < 0 || fsync(fd) < 0 ? -errno : 0;
	if (fd >= 0)
		close(fd);
	return rc;
}

int kvc_lmdb_checkpoint_open(MDB_env *env, const char *dir, struct kvc_lmdb_checkpoint **out)
{
	char path[PATH_MAX];
	MDB_stat st;
	struct record last;
	struct kvc_lmdb_checkpoint *cp = calloc(1, sizeof(*cp));
	if (!cp)
		return -ENOMEM;
	cp->env = env;
	cp->fd = -1;
	snprintf(cp->dir, sizeof(cp->dir), "%s", dir);
	pthread_mutex_init(&cp->lock, NULL);
	pthread_cond_init(&cp->done, NULL);
	boot_id(cp->boot_id);
	int rc = kvc_lmdb_errno(mdb_env_get_fd(env, &cp->data_fd));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_env_stat(env, &st));
	cp->page_size = rc == 0 ? st.ms_psize : 0;
	if (rc == 0)
		rc = path_in(path, sizeof(path), dir, "checkpoint");
	if (rc == 0) {
		cp->fd = open(path, O_RDWR | O_CLOEXEC, 0600);
		if (cp->fd < 0 && errno == ENOENT) {
			cp->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
			rc = cp->fd < 0 ? -errno : sync_dir(dir);
		} else if (cp->fd < 0) {
			rc = -errno;
		}
	}
	/* Go on numbering from the file's newest record. */
	if (rc == 0 && record_read(cp->fd, &last) == 0) {
		cp->sequence = last.sequence;
		cp->after_reboot = cp->boot_id[0] != '\0' &&
		                   strncmp(cp->boot_id, last.boot_id, BOOT_ID) != 0;
	}
	if (rc == 0)
		rc = kvc_lmdb_checkpoint_sync(cp);
	if (rc < 0) {
		kvc_lmdb_checkpoint_close(cp);
		return rc;
	}
	cp->opened = true;
	*out = cp;
	return 0;
}

bool kvc_lmdb_checkpoint_after_reboot(const struct kvc_lmdb_checkpoint *cp)
{
	return cp->after_reboot;
}

void kvc_lmdb_checkpoint_close(struct kvc_lmdb_checkpoint *cp)
{
	if (!cp)
		return;
	if (cp->opened) /* a clean close goes back nowhere after a reboot */
		kvc_lmdb_checkpoint_sync(cp);
	if (cp->pin)
		mdb_txn_abort(cp->pin);
	if (cp->maybe)
		mdb_txn_abort(cp->maybe);
	if (cp->fd >= 0)
		close(cp->fd);
	pthread_mutex_destroy(&cp->lock);
	pthread_cond_destroy(&cp->done);
	free(cp);
}

int kvc_lmdb_checkpoint_env_open(const char *dir, size_t map_size, unsigned max_dbs,
                                 MDB_env **env, struct kvc_lmdb_checkpoint **cp)
{
	MDB_env *e = NULL;
	struct kvc_lmdb_checkpoint *c = NULL;
	int rc = kvc_fsutil_mkdirs(dir, 0700);
	if (rc == 0) /* after a machine crash: back to the last checkpoint */
		rc = kvc_lmdb_checkpoint_recover(dir) < 0 ? -EIO : 0; /* files unreadable */
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_env_create(&e));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_env_set_mapsize(e, map_size));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_env_set_maxdbs(e, max_dbs));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_env_set_maxreaders(e, 4096));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_env_open(e, dir, MDB_NOSYNC | MDB_NOTLS, 0600));
	if (rc == 0)
		rc = kvc_lmdb_checkpoint_open(e, dir, &c);
	if (rc < 0) {
		kvc_lmdb_close(e);
		return rc;
	}
	*env = e;
	*cp = c;
	return 0;
}
