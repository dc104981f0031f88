/* meta_adopt: see meta_adopt.h; messages: docs/protocol.md (INO_GRANT,
 * ADOPT, REMOVE_MANY). */
#include "meta/meta_adopt.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "core/layout.h"
#include "core/lmdb_txn.h"
#include "meta/meta_store_internal.h"

/* The chain count new files are placed over now (kvc_meta_new_inode's). */
static uint32_t chains_now(struct kvc_meta_store *s)
{
	return __atomic_load_n(&s->default_layout.chain_count, __ATOMIC_RELAXED);
}

/* ---- INO_GRANT ---- */

struct grant_call {
	const uint8_t *client;
	uint32_t count;
	struct kvc_msg_ino_grant_reply *out;
};

static int grant_in(struct kvc_meta_store *s, MDB_txn *txn, void *arg)
{
	const struct grant_call *c = arg;
	uint64_t next_ino;
	int rc = kvc_meta_state_get(s, txn, "next_ino", &next_ino, sizeof(next_ino));
	if (rc == 0 && next_ino > UINT64_MAX - c->count)
		rc = -ENOSPC; /* no numbers left */
	if (rc < 0)
		return rc;
	*c->out = (struct kvc_msg_ino_grant_reply){.first = next_ino, .count = c->count,
	                                           .chain_count = chains_now(s)};
	rc = kvc_meta_grant_put(s, txn, c->client, next_ino, c->count);
	next_ino += c->count;
	return rc < 0 ? rc : kvc_meta_state_put(s, txn, "next_ino", &next_ino, sizeof(next_ino));
}

int kvc_meta_adopt_grant(struct kvc_meta_store *s, const uint8_t client[KVC_WIRE_CLIENT_ID],
                         uint32_t count, struct kvc_msg_ino_grant_reply *out)
{
	struct grant_call call = {client, count, out};
	if (count < 1 || count > KVC_WIRE_MAX_GRANT)
		return -EINVAL;
	return kvc_meta_group_run(s, grant_in, &call);
}

/* ---- ADOPT: parsing ---- */

/* One record: its fixed part (copied to rec, rec_size bytes), then the
 * name_len name bytes its name_len field (inside rec) gives; *name points
 * at them in the body. false when the body ends early or the name is
 * longer than any. */
static bool take_named(const uint8_t *in, uint32_t len, uint32_t *off, void *rec,
                       uint32_t rec_size, const uint32_t *name_len, const char **name)
{
	const void *fixed = kvc_wire_body_take(in, len, off, rec_size);
	if (!fixed)
		return false;
	memcpy(rec, fixed, rec_size);
	if (*name_len > KVC_WIRE_MAX_NAME + 1)
		return false;
	*name = kvc_wire_body_take(in, len, off, *name_len);
	return *name != NULL;
}

int kvc_meta_adopt_parse(const struct kvc_msg_adopt *m, const uint8_t *in, uint32_t len,
                         struct kvc_meta_adopt_record *recs)
{
	uint32_t off = 0;
	if (m->count < 1 || m->count > KVC_WIRE_MAX_KEYS)
		return -EINVAL;
	for (uint32_t i = 0; i < m->count; i++) {
		struct kvc_meta_adopt_record *r = &recs[i];
		*r = (struct kvc_meta_adopt_record){0};
		if (!take_named(in, len, &off, &r->rec, sizeof(r->rec), &r->rec.name_len,
		                &r->name))
			return -EINVAL;
	}
	return off == len ? 0 : -EINVAL;
}

/* ---- ADOPT: the transaction ---- */

/* A failure that concerns one record only (nothing was changed for it). */
static bool per_record(int rc)
{
	return rc == -EINVAL || rc == -ENAMETOOLONG || rc == -ENOENT || rc == -ENOTDIR ||
	       rc == -EEXIST || rc == -ESTALE;
}

/* A number the sender may enter: granted to it and not entered yet
 * (-ESTALE), never the root, and neither in use nor still to reclaim
 * (-EINVAL; never, by meta_grants.c's invariant). */
static int ino_free(struct kvc_meta_store *s, MDB_txn *txn, const uint8_t *client, uint64_t ino)
{
	if (ino <= KVC_META_ROOT)
		return -EINVAL;
	int rc = kvc_meta_grant_check(s, txn, client, ino);
	if (rc == 0)
		rc = kvc_meta_ino_known(s, txn, ino);
	return rc > 0 ? -EINVAL : rc;
}


/* What one record needs before it may change anything: its parent (dir)
 * and the regular file its name has now (old; attr.ino 0 when none).
 * Returns 0, 1 when the name is this very file already (an ADOPT sent
 * again after its answer was lost: old is it, nothing to do), a
 * per-record failure, or the transaction's -errno. */
static int check(struct kvc_meta_store *s, MDB_txn *txn, const struct kvc_msg_adopt *m,
                 const struct kvc_meta_adopt_record *r, struct kvc_inode_record *dir,
                 struct kvc_inode_record *old)
{
	const struct kvc_attr *a = &r->rec.attr;
	struct kvc_meta_dirent d;
	*old = (struct kvc_inode_record){0};
	if ((r->rec.flags & ~KVC_ADOPT_OPEN) || (a->mode & ~0777u) != S_IFREG ||
	    a->size > KVC_LAYOUT_MAX_FILE_SIZE)
		return -EINVAL;
	int rc = kvc_wire_name_check(r->name, r->rec.name_len);
	if (rc == 0)
		rc = kvc_meta_parent_get(s, txn, r->rec.parent, dir);
	if (rc < 0)
		return rc;
	rc = kvc_meta_dirent_get(s, txn, r->rec.parent, r->name, r->rec.name_len, &d);
	bool named = rc == 0;
	if (named && d.ino == a->ino && kvc_meta_inode_get(s, txn, d.ino, old) == 0)
		return 1;
	if (rc == -ENOENT)
		rc = 0;
	/* Any valid layout: the parent's chunk size may have changed since
	 * the file was made, and the sender's chain table may be newer than
	 * this one's (it only grows); the chunks are written by this layout. */
	if (rc == 0)
		rc = kvc_layout_check(&a->layout);
	if (rc == 0)
		rc = ino_free(s, txn, m->client, a->ino);
	if (rc < 0 || !named)
		return rc;
	rc = kvc_meta_inode_get(s, txn, d.ino, old);
	if (rc == -ENOENT)
		rc = -EIO; /* a name without its inode */
	if (rc == 0 && !S_ISREG(old->attr.mode))
		rc = -EEXIST;
	return rc;
}

/* Enter one checked record: the older file's name goes (as an unlink
 * takes it), the inode and its name come, the parent is touched, and the
 * client's session opened. Any failure here is the transaction's. */
static int enter(struct kvc_meta_store *s, MDB_txn *txn, const struct kvc_msg_adopt *m,
                 const struct kvc_meta_adopt_record *r, struct kvc_inode_record *dir,
                 const struct kvc_inode_record *old, int64_t now, struct kvc_attr *attr)
{
	const char *name = r->name;
	uint32_t len = r->rec.name_len;
	struct kvc_inode_record rec = {.magic = KVC_INODE_MAGIC, .parent = dir->attr.ino,
	                               .attr = r->rec.attr};
	rec.attr.nlink = 1;
	rec.attr.rdev = 0;
	int rc = 0;
	if (old->attr.ino) {
		rc = kvc_meta_dirent_del(s, txn, dir->attr.ino, name, len);
		if (rc == 0)
			rc = kvc_meta_inode_unlinked(s, txn, old);
	}
	if (rc == 0)
		rc = kvc_meta_grant_use(s, txn, m->client, rec.attr.ino);
	if (rc == 0)
		rc = kvc_meta_inode_put(s, txn, &rec);
	if (rc == 0)
		rc = kvc_meta_dirent_put(s, txn, dir->attr.ino, name, len, rec.attr.ino,
		                         rec.attr.mode);
	if (rc == 0) {
		dir->attr.mtime_ns = dir->attr.ctime_ns = now;
		rc = kvc_meta_inode_put(s, txn, dir);
	}
	if (rc == 0 && (r->rec.flags & KVC_ADOPT_OPEN))
		rc = kvc_meta_session_put(s, txn, rec.attr.ino, m->client);
	if (rc == 0)
		*attr = rec.attr;
	return rc;
}

/* One ADOPT as a call of the group commit: its outputs are set afresh on
 * every run (the group may run it again). */
struct adopt_call {
	const struct kvc_msg_adopt *m;
	const struct kvc_meta_adopt_record *recs;
	struct kvc_msg_key_result *out;
	uint64_t *replaced;
};

static int adopt_in(struct kvc_meta_store *s, MDB_txn *txn, void *arg)
{
	const struct adopt_call *c = arg;
	uint32_t count = c->m->count;
	int64_t now = kvc_meta_now_ns();
	int rc = 0;
	for (uint32_t i = 0; i < count; i++) {
		c->out[i] = (struct kvc_msg_key_result){0};
		if (c->replaced)
			c->replaced[i] = 0;
	}
	for (uint32_t i = 0; rc == 0 && i < count; i++) {
		struct kvc_inode_record dir, old;
		int one = check(s, txn, c->m, &c->recs[i], &dir, &old);
		if (one == 1) {
			c->out[i].attr = old.attr;
			one = 0;
		} else if (one == 0) {
			rc = enter(s, txn, c->m, &c->recs[i], &dir, &old, now, &c->out[i].attr);
			if (c->replaced)
				c->replaced[i] = old.attr.ino;
		} else if (!per_record(one)) {
			rc = one;
		} else if (one != -ESTALE) {
			/* Refused: the sender gives the file up (lost), so its
			 * chunks go now, by its own layout (meta_grants.c). */
			rc = kvc_meta_grant_refused(s, txn, c->m->client, &c->recs[i].rec.attr);
		}
		c->out[i].rc = one;
	}
	return rc;
}

int kvc_meta_adopt_run(struct kvc_meta_store *s, const struct kvc_msg_adopt *m,
                       const struct kvc_meta_adopt_record *recs, struct kvc_msg_key_result *out,
                       uint64_t *replaced)
{
	struct adopt_call call = {m, recs, out, replaced};
	if (m->count < 1 || m->count > KVC_WIRE_MAX_KEYS)
		return -EINVAL;
	return kvc_meta_group_run(s, adopt_in, &call);
}

/* ---- REMOVE_MANY ---- */

int kvc_meta_remove_many_parse(const struct kvc_msg_remove_many *m, const uint8_t *in,
                               uint32_t len, struct kvc_meta_remove_record *recs)
{
	uint32_t off = 0;
	if (m->count < 1 || m->count > KVC_WIRE_MAX_KEYS || m->reserved)
		return -EINVAL;
	for (uint32_t i = 0; i < m->count; i++) {
		struct kvc_meta_remove_record *r = &recs[i];
		*r = (struct kvc_meta_remove_record){0};
		if (!take_named(in, len, &off, &r->rec, sizeof(r->rec), &r->rec.name_len,
		                &r->name))
			return -EINVAL;
	}
	return off == len ? 0 : -EINVAL;
}

/* What one record needs before it may change anything: its parent (dir)
 * and the inode (rec) its name still names, no directory. Returns 0, a
 * per-record failure, or the transaction's -errno. */
static int check_removal(struct kvc_meta_store *s, MDB_txn *txn,
                         const struct kvc_meta_remove_record *r, struct kvc_inode_record *dir,
                         struct kvc_inode_record *rec)
{
	struct kvc_meta_dirent d;
	int rc = r->rec.reserved ? -EINVAL : kvc_wire_name_check(r->name, r->rec.name_len);
	if (rc == 0)
		rc = kvc_meta_parent_get(s, txn, r->rec.parent, dir);
	if (rc == 0)
		rc = kvc_meta_dirent_get(s, txn, r->rec.parent, r->name, r->rec.name_len, &d);
	if (rc == 0 && d.ino != r->rec.ino)
		rc = -ENOENT; /* another inode's name now */
	if (rc == 0)
		rc = kvc_meta_inode_get(s, txn, d.ino, rec); /* -ENOENT, as UNLINK's */
	if (rc == 0 && S_ISDIR(rec->attr.mode))
		rc = -EISDIR;
	return rc;
}

/* Remove one checked record's name as UNLINK does; attr gets the inode
 * after (nlink 0 when it went). Any failure here is the transaction's. */
static int remove_one(struct kvc_meta_store *s, MDB_txn *txn,
                      const struct kvc_meta_remove_record *r, struct kvc_inode_record *dir,
                      const struct kvc_inode_record *rec, struct kvc_attr *attr)
{
	struct kvc_inode_record after;
	int rc = kvc_meta_name_remove(s, txn, dir, r->name, r->rec.name_len, rec);
	if (rc < 0)
		return per_record(rc) ? -EIO : rc;
	rc = kvc_meta_inode_get(s, txn, rec->attr.ino, &after); /* other names, or open */
	if (rc == -ENOENT) {
		after = *rec; /* gone to the gc queue */
		after.attr.nlink = 0;
		after.attr.ctime_ns = dir->attr.ctime_ns;
		rc = 0;
	}
	if (rc == 0)
		*attr = after.attr;
	return rc < 0 && per_record(rc) ? -EIO : rc;
}

/* One REMOVE_MANY as a call of the group commit: out is set afresh on
 * every run (the group may run it again). */
struct remove_many_call {
	const struct kvc_msg_remove_many *m;
	const struct kvc_meta_remove_record *recs;
	struct kvc_msg_key_result *out;
};

static int remove_many_in(struct kvc_meta_store *s, MDB_txn *txn, void *arg)
{
	const struct remove_many_call *c = arg;
	uint32_t count = c->m->count;
	int rc = 0;
	for (uint32_t i = 0; i < count; i++)
		c->out[i] = (struct kvc_msg_key_result){0};
	for (uint32_t i = 0; rc == 0 && i < count; i++) {
		struct kvc_inode_record dir, rec;
		int one = check_removal(s, txn, &c->recs[i], &dir, &rec);
		if (one == 0)
			rc = remove_one(s, txn, &c->recs[i], &dir, &rec, &c->out[i].attr);
		else if (one != -EISDIR && !per_record(one))
			rc = one;
		c->out[i].rc = one == 0 ? rc : one;
	}
	return rc;
}

int kvc_meta_remove_many_run(struct kvc_meta_store *s, const struct kvc_msg_remove_many *m,
                             const struct kvc_meta_remove_record *recs,
                             struct kvc_msg_key_result *out)
{
	struct remove_many_call call = {m, recs, out};
	if (m->count < 1 || m->count > KVC_WIRE_MAX_KEYS)
		return -EINVAL;
	return kvc_meta_group_run(s, remove_many_in, &call);
}
