/*
 * fsutil: small filesystem helpers shared by the daemons. Stateless.
 */
#ifndef KVC_FSUTIL_H
#define KVC_FSUTIL_H

/* mkdir -p: create path and its missing parents with mode. Returns 0
 * (also when it exists as a directory), -ENOTDIR, -ENAMETOOLONG, -errno. */
int kvc_fsutil_mkdirs(const char *path, unsigned mode);

/* One read of at most cap bytes from the start of the small file at path
 * (/proc and /etc identity files). Returns the count or -errno. */
long kvc_fsutil_read_small(const char *path, void *buf, unsigned long cap);

#endif
