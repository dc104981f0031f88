/*
 * bench multihost: kvc-bench multihost [--rate RATE] [--hosts LIST]
 *                  [--size SIZE] [--jobs N] [--bin DIR] [--json FILE]
 *                  [--keep-going]
 *
 * Finds the script, first found wins:
 *   $KVC_BENCH_MULTIHOST (a path),
 *   DIR/kvc-bench-multihost.py where DIR holds this binary (a build
 *     directory: meson copies tools/bench/multihost.py there),
 *   DIR/../share/kvcfs/kvc-bench-multihost.py (an installed tree),
 *   KVC_BENCH_DATADIR/kvc-bench-multihost.py (the configured datadir),
 * and execs /usr/bin/python3 on it; --help and option checks are the
 * script's (it needs no root for them).
 */
#include "multihost.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef KVC_BENCH_DATADIR
#define KVC_BENCH_DATADIR "/usr/local/share/kvcfs"
#endif

#define PYTHON "/usr/bin/python3"
#define SCRIPT "kvc-bench-multihost.py"

/* The directory of this binary into dir: 0 or -errno. */
static int binary_dir(char *dir, size_t size)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return -errno;
	exe[n] = '\0';
	char *slash = strrchr(exe, '/');
	if (!slash)
		return -ENOENT;
	*slash = '\0';
	if ((size_t)snprintf(dir, size, "%s", exe) >= size)
		return -ENAMETOOLONG;
	return 0;
}

/* The first candidate that exists into path: 0 or -ENOENT. */
static int find_script(const char *bin_dir, char *path, size_t size)
{
	const char *env = getenv("KVC_BENCH_MULTIHOST");
	if (env && *env) {
		snprintf(path, size, "%s", env);
		return access(path, R_OK) == 0 ? 0 : -ENOENT;
	}
	const char *const formats[] = {"%s/" SCRIPT, "%s/../share/kvcfs/" SCRIPT};
	for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++) {
		if ((size_t)snprintf(path, size, formats[i], bin_dir) < size &&
		    access(path, R_OK) == 0)
			return 0;
	}
	snprintf(path, size, "%s/%s", KVC_BENCH_DATADIR, SCRIPT);
	return access(path, R_OK) == 0 ? 0 : -ENOENT;
}

int bench_multihost_main(int argc, char **argv)
{
	char bin_dir[PATH_MAX], script[PATH_MAX + 64];
	int rc = binary_dir(bin_dir, sizeof(bin_dir));
	if (rc < 0) {
		fprintf(stderr, "kvc-bench multihost: cannot find kvc-bench's directory: %s\n",
		        strerror(-rc));
		return 1;
	}
	if (find_script(bin_dir, script, sizeof(script)) < 0) {
		fprintf(stderr, "kvc-bench multihost: no %s next to kvc-bench, in "
		        "../share/kvcfs or %s (set KVC_BENCH_MULTIHOST to its path)\n",
		        SCRIPT, KVC_BENCH_DATADIR);
		return 1;
	}
	char **args = calloc((size_t)argc + 2, sizeof(*args));
	if (!args) {
		fprintf(stderr, "kvc-bench multihost: out of memory\n");
		return 1;
	}
	args[0] = PYTHON;
	args[1] = script;
	for (int i = 1; i < argc; i++)
		args[i + 1] = argv[i];
	setenv("KVC_BENCH_BIN_DIR", bin_dir, 0);
	execv(PYTHON, args);
	fprintf(stderr, "kvc-bench multihost: cannot run %s: %s\n", PYTHON, strerror(errno));
	free(args);
	return 1;
}
