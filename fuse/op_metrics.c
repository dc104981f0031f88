/* op_metrics: see op_metrics.h. */
#include "fuse/op_metrics.h"

#include "core/clock.h"
#include "fuse/fuse_metrics.h"

/* The wrapped handlers, copied once before any request (read only after). */
static struct fuse_lowlevel_ops inner;

/* A wrapper: call the original handler `field` with args, then count it. */
#define TIMED(field, OP, params, args)                                                  \
	static void timed_##field params                                                \
	{                                                                               \
		int64_t start = kvc_clock_monotonic_ns();                               \
		inner.field args;                                                       \
		kvc_fuse_metrics_op(OP, start);                                         \
	}

typedef fuse_req_t R;
typedef fuse_ino_t I;
typedef struct fuse_file_info F;

TIMED(lookup, KVC_FUSE_OP_LOOKUP, (R q, I p, const char *n), (q, p, n))
TIMED(forget, KVC_FUSE_OP_FORGET, (R q, I i, uint64_t n), (q, i, n))
TIMED(getattr, KVC_FUSE_OP_GETATTR, (R q, I i, F *f), (q, i, f))
TIMED(setattr, KVC_FUSE_OP_SETATTR, (R q, I i, struct stat *a, int s, F *f), (q, i, a, s, f))
TIMED(readlink, KVC_FUSE_OP_READLINK, (R q, I i), (q, i))
TIMED(mknod, KVC_FUSE_OP_MKNOD, (R q, I p, const char *n, mode_t m, dev_t d), (q, p, n, m, d))
TIMED(mkdir, KVC_FUSE_OP_MKDIR, (R q, I p, const char *n, mode_t m), (q, p, n, m))
TIMED(unlink, KVC_FUSE_OP_UNLINK, (R q, I p, const char *n), (q, p, n))
TIMED(rmdir, KVC_FUSE_OP_RMDIR, (R q, I p, const char *n), (q, p, n))
TIMED(symlink, KVC_FUSE_OP_SYMLINK, (R q, const char *l, I p, const char *n), (q, l, p, n))
TIMED(rename, KVC_FUSE_OP_RENAME,
      (R q, I p, const char *n, I np, const char *nn, unsigned fl), (q, p, n, np, nn, fl))
TIMED(link, KVC_FUSE_OP_LINK, (R q, I i, I np, const char *nn), (q, i, np, nn))
TIMED(open, KVC_FUSE_OP_OPEN, (R q, I i, F *f), (q, i, f))
TIMED(read, KVC_FUSE_OP_READ, (R q, I i, size_t s, off_t o, F *f), (q, i, s, o, f))
TIMED(write, KVC_FUSE_OP_WRITE, (R q, I i, const char *b, size_t s, off_t o, F *f),
      (q, i, b, s, o, f))
TIMED(flush, KVC_FUSE_OP_FLUSH, (R q, I i, F *f), (q, i, f))
TIMED(release, KVC_FUSE_OP_RELEASE, (R q, I i, F *f), (q, i, f))
TIMED(fsync, KVC_FUSE_OP_FSYNC, (R q, I i, int d, F *f), (q, i, d, f))
TIMED(opendir, KVC_FUSE_OP_OPENDIR, (R q, I i, F *f), (q, i, f))
TIMED(readdirplus, KVC_FUSE_OP_READDIRPLUS, (R q, I i, size_t s, off_t o, F *f),
      (q, i, s, o, f))
TIMED(releasedir, KVC_FUSE_OP_RELEASEDIR, (R q, I i, F *f), (q, i, f))
TIMED(fsyncdir, KVC_FUSE_OP_FSYNCDIR, (R q, I i, int d, F *f), (q, i, d, f))
TIMED(statfs, KVC_FUSE_OP_STATFS, (R q, I i), (q, i))
TIMED(setxattr, KVC_FUSE_OP_SETXATTR,
      (R q, I i, const char *n, const char *v, size_t s, int fl), (q, i, n, v, s, fl))
TIMED(getxattr, KVC_FUSE_OP_GETXATTR, (R q, I i, const char *n, size_t s), (q, i, n, s))
TIMED(listxattr, KVC_FUSE_OP_LISTXATTR, (R q, I i, size_t s), (q, i, s))
TIMED(removexattr, KVC_FUSE_OP_REMOVEXATTR, (R q, I i, const char *n), (q, i, n))
TIMED(create, KVC_FUSE_OP_CREATE, (R q, I p, const char *n, mode_t m, F *f), (q, p, n, m, f))
TIMED(fallocate, KVC_FUSE_OP_FALLOCATE, (R q, I i, int m, off_t o, off_t l, F *f),
      (q, i, m, o, l, f))

/* Wrap field when the table has a handler for it. */
#define WRAP(field)                                                                     \
	do {                                                                            \
		if (ops->field)                                                         \
			ops->field = timed_##field;                                     \
	} while (0)

void kvc_fuse_op_metrics_wrap(struct fuse_lowlevel_ops *ops)
{
	inner = *ops;
	WRAP(lookup);
	WRAP(forget);
	WRAP(getattr);
	WRAP(setattr);
	WRAP(readlink);
	WRAP(mknod);
	WRAP(mkdir);
	WRAP(unlink);
	WRAP(rmdir);
	WRAP(symlink);
	WRAP(rename);
	WRAP(link);
	WRAP(open);
	WRAP(read);
	WRAP(write);
	WRAP(flush);
	WRAP(release);
	WRAP(fsync);
	WRAP(opendir);
	WRAP(readdirplus);
	WRAP(releasedir);
	WRAP(fsyncdir);
	WRAP(statfs);
	WRAP(setxattr);
	WRAP(getxattr);
	WRAP(listxattr);
	WRAP(removexattr);
	WRAP(create);
	WRAP(fallocate);
}
