/*
 * xattr_ops: extended attributes in kvc-fuse. user.* attributes live in
 * kvc-meta (kvc_meta_store_setxattr's rules). kvcfs's own read-only
 * attributes are answered here: user.kvc.layout and user.kvc.inode on
 * every file, user.kvc.usrbio on the root. They are read by name and not
 * listed, so copying tools (cp -a, rsync -X, tar --xattrs) do not try to
 * copy them; setting or removing them is EPERM. Other namespaces
 * (security, trusted, system) are not stored: get says ENODATA, set
 * EOPNOTSUPP. Get answers ENODATA for them here, without asking kvc-meta
 * (whose answer it would be): the kernel asks for security.capability
 * before every write(2) of a file (to clear file capabilities), which was
 * a kvc-meta round trip per write.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

#include "core/layout.h"
#include "fuse/ops_internal.h"

#define XATTR_LAYOUT "user.kvc.layout"
#define XATTR_INODE "user.kvc.inode"
#define XATTR_USRBIO "user.kvc.usrbio"
#define XATTR_STORED_PREFIX "user."

static int format_xattr(struct kvc_fuse *fs, const struct kvc_attr *attr, const char *name,
                        char *out, size_t cap)
{
	if (strcmp(name, XATTR_INODE) == 0)
		return snprintf(out, cap, "%" PRIu64, attr->ino);
	if (strcmp(name, XATTR_USRBIO) == 0 && attr->ino == FUSE_ROOT_ID)
		return snprintf(out, cap, "clients=%d iovs=%d rings=%d files=%d",
		                atomic_load(&fs->usrbio_clients), atomic_load(&fs->usrbio_iovs),
		                atomic_load(&fs->usrbio_rings), atomic_load(&fs->usrbio_files));
	if (strcmp(name, XATTR_LAYOUT) != 0)
		return -ENODATA;
	/* The targets holding the file (every member of its chains, each
	 * once, in chain order), then the chains. */
	uint32_t chains[KVC_WIRE_MAX_TARGETS], targets[KVC_WIRE_MAX_TARGETS];
	int count = kvc_layout_chains(&attr->layout, chains, KVC_WIRE_MAX_TARGETS), held = 0;
	for (int i = 0; i < count; i++) {
		struct kvc_chain chain, *c = &chain;
		if (!kvc_storage_client_chain(&fs->storage, chains[i], &chain))
			continue;
		for (uint32_t m = 0; m < c->count; m++) {
			int k = 0;
			while (k < held && targets[k] != c->targets[m])
				k++;
			if (k == held && held < KVC_WIRE_MAX_TARGETS)
				targets[held++] = c->targets[m];
		}
	}
	int n = snprintf(out, cap, "chunk_size=%u stripe=%u targets=", attr->layout.chunk_size,
	                 attr->layout.stripe);
	for (int i = 0; i < held && n > 0 && (size_t)n < cap; i++)
		n += snprintf(out + n, cap - (size_t)n, "%s%u", i ? "," : "", targets[i]);
	for (int i = 0; i < count && n > 0 && (size_t)n < cap; i++)
		n += snprintf(out + n, cap - (size_t)n, "%s%u", i ? "," : " chains=", chains[i]);
	return n;
}

static bool is_ours(const char *name)
{
	return strcmp(name, XATTR_LAYOUT) == 0 || strcmp(name, XATTR_INODE) == 0 ||
	       strcmp(name, XATTR_USRBIO) == 0;
}

/* A value or a list: its size when the caller asked for it (size 0), the
 * bytes when they fit, else ERANGE. */
static void reply_sized(fuse_req_t req, int rc, const void *value, size_t size)
{
	if (rc < 0)
		kvc_fuse_reply_error(req, rc);
	else if (size == 0)
		fuse_reply_xattr(req, (size_t)rc);
	else if ((size_t)rc > size)
		kvc_fuse_reply_error(req, -ERANGE);
	else
		fuse_reply_buf(req, value, (size_t)rc);
}

void kvc_fuse_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct kvc_fuse *fs = kvc_fuse_of(req);
	struct kvc_attr attr;
	if (strncmp(name, XATTR_STORED_PREFIX, sizeof(XATTR_STORED_PREFIX) - 1) != 0) {
		kvc_fuse_reply_error(req, -ENODATA); /* nothing stored there (meta_xattrs.c) */
		return;
	}
	char *value = malloc(KVC_WIRE_MAX_XATTR_VALUE);
	int rc = value ? 0 : -ENOMEM;
	if (rc == 0 && is_ours(name)) {
		rc = kvc_meta_client_getattr(&fs->meta, ino, &attr);
		if (rc == 0)
			rc = format_xattr(fs, &attr, name, value, 1024);
	} else if (rc == 0) {
		rc = kvc_meta_client_getxattr(&fs->meta, ino, name, value, KVC_WIRE_MAX_XATTR_VALUE);
	}
	reply_sized(req, rc, value, size);
	free(value);
}

void kvc_fuse_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	char *names = malloc(KVC_WIRE_MAX_XATTR_VALUE);
	int rc = names ? kvc_meta_client_listxattr(&kvc_fuse_of(req)->meta, ino, names,
	                                           KVC_WIRE_MAX_XATTR_VALUE) : -ENOMEM;
	reply_sized(req, rc, names, size);
	free(names);
}

void kvc_fuse_op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                          size_t size, int flags)
{
	uint32_t kvc_flags = (flags & XATTR_CREATE ? KVC_XATTR_CREATE : 0) |
	                     (flags & XATTR_REPLACE ? KVC_XATTR_REPLACE : 0);
	int rc = is_ours(name) ? -EPERM
	       : flags & ~(XATTR_CREATE | XATTR_REPLACE) ? -EINVAL
	       : size > KVC_WIRE_MAX_XATTR_VALUE ? -E2BIG
	       : kvc_meta_client_setxattr(&kvc_fuse_of(req)->meta, ino, name, value,
	                                  (uint32_t)size, kvc_flags);
	kvc_meta_events_changed_here(kvc_fuse_of(req)->events, ino); /* ctime */
	kvc_fuse_reply_error(req, rc);
}

void kvc_fuse_op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	int rc = is_ours(name) ? -EPERM
	       : kvc_meta_client_removexattr(&kvc_fuse_of(req)->meta, ino, name);
	kvc_meta_events_changed_here(kvc_fuse_of(req)->events, ino); /* ctime */
	kvc_fuse_reply_error(req, rc);
}
