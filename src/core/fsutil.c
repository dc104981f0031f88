/* fsutil: see fsutil.h. */
#include "core/fsutil.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int kvc_fsutil_mkdirs(const char *path, unsigned mode)
{
	char buf[PATH_MAX];
	struct stat st;
	if (strlen(path) >= sizeof(buf))
		return -ENAMETOOLONG;
	strcpy(buf, path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, mode) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, mode) < 0 && errno != EEXIST)
		return -errno;
	if (stat(buf, &st) < 0)
		return -errno;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

long kvc_fsutil_read_small(const char *path, void *buf, unsigned long cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, cap);
	long rc = n < 0 ? -errno : (long)n;
	close(fd);
	return rc;
}

/* cachestat(2), Linux 6.5 (the headers of older systems lack it). */
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif
struct cachestat_range {
	uint64_t off, len;
};
struct cachestat_out {
	uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

int kvc_fsutil_cached(int fd, uint64_t offset, uint64_t length)
{
	struct cachestat_range range = {offset, length};
	struct cachestat_out out;
	if (syscall(__NR_cachestat, fd, &range, &out, 0) < 0)
		return -errno;
	uint64_t pages = (offset + length + 4095) / 4096 - offset / 4096;
	return out.nr_cache >= pages;
}
