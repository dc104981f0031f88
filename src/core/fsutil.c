/* fsutil: see fsutil.h. */
#include "core/fsutil.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
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
