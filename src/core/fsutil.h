/*
 * fsutil: small filesystem helpers shared by the daemons. Stateless.
 */
#ifndef KVC_FSUTIL_H
#define KVC_FSUTIL_H

#include <stdint.h>

/* mkdir -p: create path and its missing parents with mode. Returns 0
 * (also when it exists as a directory), -ENOTDIR, -ENAMETOOLONG, -errno. */
int kvc_fsutil_mkdirs(const char *path, unsigned mode);

/* One read of at most cap bytes from the start of the small file at path
 * (/proc and /etc identity files). Returns the count or -errno. */
long kvc_fsutil_read_small(const char *path, void *buf, unsigned long cap);

/* Whether the page cache holds every page of [offset, offset + length)
 * of fd (cachestat(2), Linux 6.5): 1 yes, 0 no, -ENOSYS (a kernel
 * without it), -errno. Asked before a RWF_NOWAIT read that must not read
 * the disk: such a read of data not cached starts the kernel's readahead
 * before it gives up. */
int kvc_fsutil_cached(int fd, uint64_t offset, uint64_t length);

#endif
