/* meta_store: see meta_store.h for the tables and their formats: the
 * environment, the record helpers every part shares
 * (meta_store_internal.h) and the read paths (sizes and attributes are
 * set in meta_sizes.c). */
#include "meta/meta_store_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <lmdb.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/clock.h"
#include "core/fsutil.h"
#include "core/layout.h"
#include "core/lmdb_txn.h"
#include "core/log.h"

#define MAP_SIZE (16ull << 30)

int64_t kvc_meta_now_ns(void)
{
	return kvc_clock_wall_ns();
}

void kvc_meta_be64(uint8_t *out, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		out[i] = (uint8_t)(v >> (56 - 8 * i));
}

uint64_t kvc_meta_from_be64(const uint8_t *in)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | in[i];
	return v;
}

int kvc_meta_begin(struct kvc_meta_store *s, bool write, MDB_txn **txn)
{
	int rc = write ? kvc_lmdb_checkpoint_admit(s->checkpoint) : 0;
	return rc < 0 ? rc : kvc_lmdb_errno(mdb_txn_begin(s->env, NULL, write ? 0 : MDB_RDONLY, txn));
}

int kvc_meta_inode_get(struct kvc_meta_store *s, MDB_txn *txn, uint64_t ino,
                       struct kvc_inode_record *rec)
{
	uint8_t key[8];
	kvc_meta_be64(key, ino);
	MDB_val k = {8, key}, v;
	int rc = kvc_lmdb_errno(mdb_get(txn, s->inodes, &k, &v));
	if (rc < 0)
		return rc;
	/* Records written before rdev existed are its first 88 bytes. */
	if (v.mv_size != sizeof(*rec) && v.mv_size != KVC_INODE_RECORD_V1_SIZE)
		return -EIO;
	memset(rec, 0, sizeof(*rec));
	memcpy(rec, v.mv_data, v.mv_size);
	return rec->magic == KVC_INODE_MAGIC ? 0 : -EIO;
}

int kvc_meta_inode_put(struct kvc_meta_store *s, MDB_txn *txn,
                       const struct kvc_inode_record *rec)
{
	uint8_t key[8];
	kvc_meta_be64(key, rec->attr.ino);
	MDB_val k = {8, key}, v = {sizeof(*rec), (void *)rec};
	return kvc_lmdb_errno(mdb_put(txn, s->inodes, &k, &v, 0));
}

size_t kvc_meta_dirent_key(uint8_t *key, uint64_t parent, const char *name, uint32_t len)
{
	kvc_meta_be64(key, parent);
	memcpy(key + 8, name, len);
	return 8 + len;
}

int kvc_meta_dirent_get(struct kvc_meta_store *s, MDB_txn *txn, uint64_t parent,
                        const char *name, uint32_t len, struct kvc_meta_dirent *out)
{
	uint8_t key[KVC_META_DIRENT_KEY_MAX];
	MDB_val k = {kvc_meta_dirent_key(key, parent, name, len), key}, v;
	int rc = kvc_lmdb_errno(mdb_get(txn, s->dirents, &k, &v));
	if (rc < 0)
		return rc;
	if (v.mv_size != sizeof(*out))
		return -EIO;
	memcpy(out, v.mv_data, sizeof(*out));
	return 0;
}

int kvc_meta_state_get(struct kvc_meta_store *s, MDB_txn *txn, const char *name, void *out,
                       size_t size)
{
	MDB_val k = {strlen(name), (void *)name}, v;
	int rc = kvc_lmdb_errno(mdb_get(txn, s->state, &k, &v));
	if (rc < 0)
		return rc;
	if (v.mv_size != size)
		return -EIO;
	memcpy(out, v.mv_data, size);
	return 0;
}

int kvc_meta_state_put(struct kvc_meta_store *s, MDB_txn *txn, const char *name,
                       const void *value, size_t size)
{
	MDB_val k = {strlen(name), (void *)name}, v = {size, (void *)value};
	return kvc_lmdb_errno(mdb_put(txn, s->state, &k, &v, 0));
}

/* The parent directory record, checked to be a directory. */
int kvc_meta_parent_get(struct kvc_meta_store *s, MDB_txn *txn, uint64_t parent,
                        struct kvc_inode_record *rec)
{
	int rc = kvc_meta_inode_get(s, txn, parent, rec);
	if (rc == 0 && !S_ISDIR(rec->attr.mode))
		rc = -ENOTDIR;
	return rc;
}

static int create_root(struct kvc_meta_store *s, MDB_txn *txn)
{
	struct kvc_inode_record root = {.magic = KVC_INODE_MAGIC, .parent = KVC_META_ROOT};
	int64_t now = kvc_meta_now_ns();
	uint32_t format = KVC_META_FORMAT, next_target = 0;
	uint64_t next_ino = KVC_META_ROOT + 1;
	root.attr = (struct kvc_attr){.ino = KVC_META_ROOT, .mode = S_IFDIR | 0755,
	                              .nlink = 2, .atime_ns = now, .mtime_ns = now,
	                              .ctime_ns = now, .layout = s->default_layout};
	int rc = kvc_meta_inode_put(s, txn, &root);
	if (rc == 0)
		rc = kvc_meta_state_put(s, txn, "format", &format, sizeof(format));
	if (rc == 0)
		rc = kvc_meta_state_put(s, txn, "next_ino", &next_ino, sizeof(next_ino));
	if (rc == 0)
		rc = kvc_meta_state_put(s, txn, "next_target", &next_target, sizeof(next_target));
	return rc;
}

/* After a reboot: the numbering jumps past what was given out after the
 * last checkpoint (meta_store.h). */
static int skip_given_out(struct kvc_meta_store *s, MDB_txn *txn)
{
	uint64_t next_ino;
	int rc = kvc_meta_state_get(s, txn, "next_ino", &next_ino, sizeof(next_ino));
	if (rc == 0 && next_ino > UINT64_MAX - KVC_META_INO_REBOOT_GAP)
		rc = -EOVERFLOW;
	if (rc == 0) {
		kvc_log_warn("namespace opened after a reboot: inode numbers go on from %" PRIu64
		             " (not %" PRIu64 "), past any given out after the last checkpoint",
		             next_ino + KVC_META_INO_REBOOT_GAP, next_ino);
		next_ino += KVC_META_INO_REBOOT_GAP;
		rc = kvc_meta_state_put(s, txn, "next_ino", &next_ino, sizeof(next_ino));
	}
	return rc;
}

static int open_tables(struct kvc_meta_store *s)
{
	MDB_txn *txn;
	int rc = kvc_meta_begin(s, true, &txn);
	if (rc < 0)
		return rc;
	rc = kvc_lmdb_errno(mdb_dbi_open(txn, "inodes", MDB_CREATE, &s->inodes));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_dbi_open(txn, "dirents", MDB_CREATE, &s->dirents));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_dbi_open(txn, "gc", MDB_CREATE, &s->gc));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_dbi_open(txn, "state", MDB_CREATE, &s->state));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_dbi_open(txn, "opens", MDB_CREATE, &s->opens));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_dbi_open(txn, "orphans", MDB_CREATE, &s->orphans));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_dbi_open(txn, "clients", MDB_CREATE, &s->clients));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_dbi_open(txn, "symlinks", MDB_CREATE, &s->symlinks));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_dbi_open(txn, "xattrs", MDB_CREATE, &s->xattrs));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_dbi_open(txn, "dropped", MDB_CREATE, &s->dropped));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_dbi_open(txn, "truncates", MDB_CREATE, &s->truncates));
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_dbi_open(txn, "grants", MDB_CREATE, &s->grants));
	uint32_t format = 0;
	int has = rc == 0 ? kvc_meta_state_get(s, txn, "format", &format, sizeof(format)) : rc;
	if (has == -ENOENT)
		rc = create_root(s, txn);
	else if (has < 0)
		rc = has;
	else if (format != KVC_META_FORMAT)
		rc = -EINVAL;
	else if (kvc_lmdb_checkpoint_after_reboot(s->checkpoint))
		rc = skip_given_out(s, txn);
	return kvc_lmdb_finish(txn, rc);
}

void kvc_meta_store_set_chain_count(struct kvc_meta_store *s, uint32_t count)
{
	uint32_t now = __atomic_load_n(&s->default_layout.chain_count, __ATOMIC_RELAXED);
	if (count > now && count <= KVC_WIRE_MAX_TARGETS)
		__atomic_store_n(&s->default_layout.chain_count, count, __ATOMIC_RELAXED);
}

static int group_begin(void *owner, MDB_txn **txn)
{
	return kvc_meta_begin(owner, true, txn);
}

/* A call of the group commit: the store's typed fn and its arg. */
struct group_call {
	kvc_meta_group_fn fn;
	void *arg;
};

static int group_call_run(void *owner, MDB_txn *txn, void *arg)
{
	const struct group_call *c = arg;
	return c->fn(owner, txn, c->arg);
}

int kvc_meta_group_run(struct kvc_meta_store *s, kvc_meta_group_fn fn, void *arg)
{
	struct group_call c = {fn, arg};
	return kvc_lmdb_group_run(&s->group, group_call_run, &c);
}

int kvc_meta_store_open(const char *dir, const struct kvc_layout *default_layout,
                        struct kvc_meta_store **out)
{
	struct kvc_meta_store *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	if (kvc_lmdb_group_init(&s->group, group_begin, s) < 0) {
		free(s);
		return -ENOMEM;
	}
	s->default_layout = *default_layout;
	int rc = kvc_layout_check(default_layout);
	if (rc == 0)
		rc = kvc_meta_open_table_create(&s->mem_opens);
	if (rc == 0)
		rc = kvc_lmdb_checkpoint_env_open(dir, MAP_SIZE, 16, &s->env, &s->checkpoint);
	if (rc == 0)
		rc = open_tables(s);
	if (rc == 0 && kvc_lmdb_checkpoint_after_reboot(s->checkpoint))
		rc = kvc_meta_store_sync(s); /* the jump is durable before any number goes */
	if (rc < 0) {
		kvc_meta_store_close(s);
		return rc;
	}
	*out = s;
	return 0;
}

void kvc_meta_store_close(struct kvc_meta_store *s)
{
	if (!s)
		return;
	kvc_lmdb_checkpoint_close(s->checkpoint);
	kvc_lmdb_close(s->env);
	kvc_lmdb_group_destroy(&s->group);
	kvc_meta_open_table_destroy(s->mem_opens);
	free(s);
}

int kvc_meta_store_sync(struct kvc_meta_store *s)
{
	return kvc_lmdb_checkpoint_sync(s->checkpoint);
}

int kvc_meta_store_lookup(struct kvc_meta_store *s, uint64_t parent, const char *name,
                          uint32_t name_len, struct kvc_attr *attr)
{
	MDB_txn *txn;
	struct kvc_inode_record rec;
	struct kvc_meta_dirent d;
	int rc = kvc_wire_name_check(name, name_len);
	if (rc < 0)
		return rc;
	rc = kvc_meta_begin(s, false, &txn);
	if (rc < 0)
		return rc;
	rc = kvc_meta_parent_get(s, txn, parent, &rec);
	if (rc == 0)
		rc = kvc_meta_dirent_get(s, txn, parent, name, name_len, &d);
	if (rc == 0)
		rc = kvc_meta_inode_get(s, txn, d.ino, &rec);
	if (rc == 0)
		*attr = rec.attr;
	mdb_txn_abort(txn);
	return rc;
}

int kvc_meta_store_getattr(struct kvc_meta_store *s, uint64_t ino, struct kvc_attr *attr)
{
	MDB_txn *txn;
	struct kvc_inode_record rec;
	int rc = kvc_meta_begin(s, false, &txn);
	if (rc < 0)
		return rc;
	rc = kvc_meta_inode_get(s, txn, ino, &rec);
	if (rc == 0)
		*attr = rec.attr;
	mdb_txn_abort(txn);
	return rc;
}

static int readdir_txn(struct kvc_meta_store *s, MDB_txn *txn, MDB_cursor *cur,
                       uint64_t ino, const char *after, uint32_t after_len, uint32_t max,
                       kvc_meta_dirent_fn fn, void *arg, bool *more)
{
	uint8_t key[KVC_META_DIRENT_KEY_MAX];
	struct kvc_inode_record rec;
	int count = 0;
	MDB_val k = {kvc_meta_dirent_key(key, ino, after, after_len), key}, v;
	int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	/* Resume strictly after `after`. */
	if (rc == 0 && after_len && k.mv_size == 8 + after_len &&
	    memcmp((uint8_t *)k.mv_data + 8, after, after_len) == 0)
		rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	*more = false;
	while (rc == 0 && k.mv_size > 8 && kvc_meta_from_be64(k.mv_data) == ino) {
		if ((uint32_t)count == max) {
			*more = true;
			break;
		}
		struct kvc_meta_dirent d;
		if (v.mv_size != sizeof(d))
			return -EIO;
		memcpy(&d, v.mv_data, sizeof(d));
		int got = kvc_meta_inode_get(s, txn, d.ino, &rec);
		if (got < 0)
			return got;
		count++;
		if (fn(arg, (const char *)k.mv_data + 8, (uint32_t)(k.mv_size - 8), &rec.attr))
			break;
		rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	if (rc != 0 && rc != MDB_NOTFOUND)
		return kvc_lmdb_errno(rc);
	return count;
}

int kvc_meta_store_readdir(struct kvc_meta_store *s, uint64_t ino, const char *after,
                           uint32_t after_len, uint32_t max, kvc_meta_dirent_fn fn,
                           void *arg, bool *more)
{
	MDB_txn *txn;
	MDB_cursor *cur;
	struct kvc_inode_record rec;
	if (after_len > KVC_WIRE_MAX_NAME)
		return -ENAMETOOLONG;
	int rc = kvc_meta_begin(s, false, &txn);
	if (rc < 0)
		return rc;
	rc = kvc_meta_parent_get(s, txn, ino, &rec);
	if (rc == 0)
		rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->dirents, &cur));
	if (rc == 0) {
		rc = readdir_txn(s, txn, cur, ino, after, after_len, max, fn, arg, more);
		mdb_cursor_close(cur);
	}
	mdb_txn_abort(txn);
	return rc;
}

int kvc_meta_store_count_inodes(struct kvc_meta_store *s, uint64_t *inodes)
{
	struct kvc_meta_counts counts;
	int rc = kvc_meta_store_counts(s, &counts);
	if (rc == 0)
		*inodes = counts.inodes;
	return rc;
}

int kvc_meta_store_counts(struct kvc_meta_store *s, struct kvc_meta_counts *out)
{
	MDB_txn *txn;
	MDB_dbi tables[5] = {s->inodes, s->opens, s->orphans, s->gc, s->grants};
	uint64_t *fields[5] = {&out->inodes, &out->open_sessions, &out->orphans, &out->gc_pending,
	                       &out->grants};
	int rc = kvc_meta_begin(s, false, &txn);
	if (rc < 0)
		return rc;
	for (int i = 0; i < 5 && rc == 0; i++) {
		MDB_stat st;
		rc = kvc_lmdb_errno(mdb_stat(txn, tables[i], &st));
		*fields[i] = rc == 0 ? st.ms_entries : 0;
	}
	mdb_txn_abort(txn);
	out->open_sessions += kvc_meta_open_table_count(s->mem_opens);
	return rc;
}

int kvc_meta_store_gc_list(struct kvc_meta_store *s, uint64_t *inos,
                           struct kvc_layout *layouts, int max)
{
	return kvc_meta_store_gc_list_after(s, 0, inos, layouts, max);
}

int kvc_meta_store_gc_list_after(struct kvc_meta_store *s, uint64_t after, uint64_t *inos,
                                 struct kvc_layout *layouts, int max)
{
	MDB_txn *txn;
	MDB_cursor *cur;
	int count = 0;
	int rc = after == UINT64_MAX ? -EINVAL : kvc_meta_begin(s, false, &txn);
	if (rc < 0)
		return rc;
	rc = kvc_lmdb_errno(mdb_cursor_open(txn, s->gc, &cur));
	if (rc == 0) {
		uint8_t start[8];
		kvc_meta_be64(start, after + 1);
		MDB_val k = {sizeof(start), start}, v;
		int got = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
		while (got == 0 && count < max) {
			if (k.mv_size == 8 && v.mv_size == sizeof(layouts[0])) {
				inos[count] = kvc_meta_from_be64(k.mv_data);
				memcpy(&layouts[count], v.mv_data, sizeof(layouts[0]));
				count++;
			}
			got = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
		}
		mdb_cursor_close(cur);
	}
	mdb_txn_abort(txn);
	return rc < 0 ? rc : count;
}

int kvc_meta_store_gc_done(struct kvc_meta_store *s, uint64_t ino)
{
	MDB_txn *txn;
	uint8_t key[8];
	kvc_meta_be64(key, ino);
	int rc = kvc_meta_begin(s, true, &txn);
	if (rc < 0)
		return rc;
	MDB_val k = {8, key};
	rc = kvc_lmdb_errno(mdb_del(txn, s->gc, &k, NULL));
	if (rc == -ENOENT)
		rc = 0;
	return kvc_lmdb_finish(txn, rc);
}

