/*
 * bench keys: kvc-bench keys [--mount DIR] [--local DIR] [--keys N]
 *                            [--size BYTES] [--threads N] [--json FILE]
 *
 * Every thread owns its share of N keys (files named k<thread>-<i> in a
 * fresh directory) and runs four phases one after another, each timed as
 * a whole: create + write + close (O_WRONLY|O_CREAT|O_TRUNC, as Python's
 * open(path, "wb") in a file-per-key connector; one write of --size
 * bytes), read (open, read it all, close), stat, unlink. Each phase runs
 * on a local directory first (the baseline) and then on the mount; the
 * table gives keys per second, the latency of one key's operation (p50,
 * p99) and the mount's rate against the local one.
 *
 * --floor: the phases run a third time, between the two, on a null FUSE
 * filesystem kvc-bench mounts itself (keys_floor.c): the rate any FUSE
 * filesystem could reach here with kvc-fuse's mount options, so the table
 * shows how much of the gap to the local directory is the kernel's FUSE
 * and how much is kvcfs.
 *
 * --ring [--batch N] [--depth N] [--segments N]: the keys through USRBIO ring key
 * operations instead (keys_ring.c; no local baseline).
 */
#include "keys.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cli.h"
#include "kvc/usrbio.h"

enum phase { CREATE, READ, STAT, UNLINK, PHASES };

static const char *const phase_names[PHASES] = {"create+write+close", "read", "stat",
                                                "unlink"};

struct worker {
	const char *dir;
	int id;
	uint64_t keys;
	size_t size;
	enum phase phase;
	double *lat; /* microseconds, one per key */
	int failed;  /* errno of the first failure, 0 when none */
};

/* One key's operation of each phase: 0 or the errno. */
static int key_create(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return errno;
	int rc = write(fd, buf, size) == (ssize_t)size ? 0 : (errno ? errno : EIO);
	if (close(fd) != 0 && rc == 0)
		rc = errno;
	return rc;
}

static int key_read(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return errno;
	ssize_t n = read(fd, buf, size);
	close(fd);
	return n == (ssize_t)size ? 0 : EIO;
}

static int key_stat(const char *path, char *buf, size_t size)
{
	struct stat st;
	(void)buf;
	if (stat(path, &st) != 0)
		return errno;
	return (size_t)st.st_size == size ? 0 : EIO;
}

static int key_unlink(const char *path, char *buf, size_t size)
{
	(void)buf, (void)size;
	return unlink(path) == 0 ? 0 : errno;
}

static int (*const phase_ops[PHASES])(const char *path, char *buf, size_t size) = {
	[CREATE] = key_create, [READ] = key_read, [STAT] = key_stat, [UNLINK] = key_unlink};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	char path[4096];
	char *buf = malloc(w->size ? w->size : 1);
	if (!buf) {
		w->failed = ENOMEM;
		return NULL;
	}
	memset(buf, 0x6b, w->size);
	for (uint64_t i = 0; i < w->keys && !w->failed; i++) {
		snprintf(path, sizeof(path), "%s/k%d-%" PRIu64, w->dir, w->id, i);
		double start = bench_now();
		w->failed = phase_ops[w->phase](path, buf, w->size);
		w->lat[i] = (bench_now() - start) * 1e6;
	}
	free(buf);
	return NULL;
}

/* Run one phase on dir with `threads` workers; fill r (keys/s, latency).
 * Returns 0 or the errno of the first failure. */
static int run_phase(const char *dir, enum phase phase, uint64_t keys, size_t size,
                     int threads, struct bench_result *r)
{
	struct worker w[64];
	pthread_t tids[64];
	uint64_t per = keys / (uint64_t)threads;
	uint64_t total = per * (uint64_t)threads;
	double *lat = calloc(total ? total : 1, sizeof(*lat));
	int failed = lat ? 0 : ENOMEM;
	double start = bench_now();
	for (int i = 0; i < threads && !failed; i++) {
		w[i] = (struct worker){dir, i, per, size, phase, lat + per * (uint64_t)i, 0};
		if (pthread_create(&tids[i], NULL, worker_main, &w[i]) != 0)
			bench_die("pthread_create");
	}
	for (int i = 0; i < threads && lat; i++) {
		pthread_join(tids[i], NULL);
		if (w[i].failed && !failed)
			failed = w[i].failed;
	}
	double seconds = bench_now() - start;
	if (!failed) {
		r->iops = (double)(per * (uint64_t)threads) / seconds;
		bench_percentiles(lat, per * (uint64_t)threads, r);
	}
	free(lat);
	return failed;
}

static const char usage[] =
	"usage: kvc-bench keys [--mount DIR] [--local DIR] [--keys N] [--size BYTES]\n"
	"                      [--threads N] [--floor] [--json FILE]\n"
	"       kvc-bench keys --ring [--mount DIR] [--keys N] [--size BYTES]\n"
	"                      [--batch N] [--depth N] [--segments N] [--rounds N]\n"
	"                      [--json FILE]\n"
	"One file per key: create+write+close, read, stat and unlink of --keys\n"
	"files of --size bytes with --threads threads, on a local directory (the\n"
	"baseline) and then through the mount.\n"
	"  -m, --mount DIR            the kvcfs mount (default /mnt/kvc)\n"
	"  -l, --local DIR            where the local baseline runs (default /tmp)\n"
	"  -k, --keys N               keys per phase (default 4000)\n"
	"  -s, --size BYTES           bytes per key (default 64K)\n"
	"  -t, --threads N            threads (default 8, at most 64)\n"
	"  -F, --floor                also time a null FUSE filesystem mounted for\n"
	"                             the run (in memory, answers at once): what\n"
	"                             the kernel's FUSE alone allows here\n"
	"  -j, --json FILE            write the table as JSON too\n"
	"  -r, --ring                 ring key operations from one process instead\n"
	"                             (put, get, exists, remove; 1 and --segments\n"
	"                             segments per key)\n"
	"  -b, --batch N              ring: entries per submission (default 64)\n"
	"  -d, --depth N              ring: submissions in flight at once (default\n"
	"                             1: the next is prepared when one completes)\n"
	"  -S, --segments N           ring: segments per key of the second run\n"
	"                             (default 16, at most 64)\n"
	"  -R, --rounds N             ring: run get and exists N times over the\n"
	"                             same keys and report the median (default 1,\n"
	"                             at most 20)\n"
	"  -h, --help                 this text\n";

int bench_keys_main(int argc, char **argv)
{
	static const struct option options[] = {{"mount", required_argument, 0, 'm'},
	                                        {"local", required_argument, 0, 'l'},
	                                        {"keys", required_argument, 0, 'k'},
	                                        {"size", required_argument, 0, 's'},
	                                        {"threads", required_argument, 0, 't'},
	                                        {"json", required_argument, 0, 'j'},
	                                        {"ring", no_argument, 0, 'r'},
	                                        {"batch", required_argument, 0, 'b'},
	                                        {"segments", required_argument, 0, 'S'},
	                                        {"depth", required_argument, 0, 'd'},
	                                        {"rounds", required_argument, 0, 'R'},
	                                        {"floor", no_argument, 0, 'F'},
	                                        {0, 0, 0, 0}};
	static const struct kvc_cli cli = {"kvc-bench keys", usage, "m:l:k:s:t:j:rb:S:d:R:F", options,
	                                   0};
	bool ring = false, with_floor = false;
	long batch = 64, segments = 16, depth = 1, rounds = 1;
	const char *mount = "/mnt/kvc", *local = "/tmp", *json = NULL;
	long keys = 4000, threads = 8;
	uint64_t size = 64 << 10;
	int opt;
	while ((opt = kvc_cli_next(&cli, argc, argv)) > 0) {
		switch (opt) {
		case 'm': mount = optarg; break;
		case 'l': local = optarg; break;
		case 'k': keys = strtol(optarg, NULL, 10); break;
		case 's': size = bench_parse_size(optarg); break;
		case 't': threads = strtol(optarg, NULL, 10); break;
		case 'j': json = optarg; break;
		case 'r': ring = true; break;
		case 'b': batch = strtol(optarg, NULL, 10); break;
		case 'S': segments = strtol(optarg, NULL, 10); break;
		case 'd': depth = strtol(optarg, NULL, 10); break;
		case 'R': rounds = strtol(optarg, NULL, 10); break;
		case 'F': with_floor = true; break;
		}
	}
	if (opt != KVC_CLI_END)
		return kvc_cli_status(opt);
	if (optind < argc)
		return kvc_cli_fail(&cli, "unexpected argument '%s'", argv[optind]);
	if (threads < 1 || threads > 64)
		return kvc_cli_fail(&cli, "--threads must be 1 to 64");
	if (keys < threads || keys > 10000000)
		return kvc_cli_fail(&cli, "--keys must be at least --threads and at most 10000000");
	if (size > (64u << 20))
		return kvc_cli_fail(&cli, "--size must be at most 64M");
	if (ring && (batch < 1 || batch > 4096 || segments < 1 || segments > 64 ||
	             size < (uint64_t)segments))
		return kvc_cli_fail(&cli, "--batch must be 1 to 4096, --segments 1 to 64 and "
		                          "at most --size");
	if (ring && (depth < 1 || depth > 16 || batch * depth > 4096))
		return kvc_cli_fail(&cli, "--depth must be 1 to 16, with --batch times --depth at "
		                          "most 4096");
	if (rounds < 1 || rounds > BENCH_KEYS_MAX_ROUNDS)
		return kvc_cli_fail(&cli, "--rounds must be 1 to %d", BENCH_KEYS_MAX_ROUNDS);
	/* A mount point with nothing mounted would run the "kvcfs" rows on
	 * the local disk under it. */
	char point[4096];
	if (kvc_extract_mount_point(point, sizeof(point), mount) < 0)
		return kvc_cli_fail(&cli, "%s is not in a kvcfs mount (is kvc-fuse running?)", mount);
	if (ring)
		return bench_keys_ring(mount, (uint64_t)keys, (size_t)size, (int)batch,
		                       (int)depth, (int)segments, (int)rounds, json);
	char floor_point[4096] = "";
	pid_t floor_child = 0;
	const char *roots[3] = {local, floor_point, mount};
	const char *labels[3] = {"local", "floor", "kvcfs"};
	char dirs[3][4096];
	static struct bench_table t = {.ratio_label = "vs local"};
	struct bench_result *rows[3][PHASES] = {{0}};
	int failed = 0;
	for (int d = 0; d < 3 && !failed; d++) {
		if (d == 1 && !with_floor)
			continue;
		if (d == 1) {
			int rc = bench_keys_floor_mount(floor_point, sizeof(floor_point), &floor_child);
			if (rc < 0) {
				fprintf(stderr, "kvc-bench keys: cannot mount the null FUSE filesystem: %s\n",
				        strerror(-rc));
				failed = 1;
				break;
			}
		}
		snprintf(dirs[d], sizeof(dirs[d]), "%s/.kvc-bench-keys-%d", roots[d], (int)getpid());
		if (mkdir(dirs[d], 0755) != 0) {
			fprintf(stderr, "kvc-bench keys: %s: %s\n", dirs[d], strerror(errno));
			failed = 1;
		}
		if (!failed)
			fprintf(stderr, "%s: %ld keys of %" PRIu64 " bytes, %ld threads...\n", labels[d],
			        keys, size, threads);
		for (int p = 0; p < PHASES && !failed; p++) {
			rows[d][p] = bench_add(&t, "%s %s", labels[d], phase_names[p]);
			int rc = run_phase(dirs[d], (enum phase)p, (uint64_t)keys, (size_t)size,
			                   (int)threads, rows[d][p]);
			if (rc) {
				fprintf(stderr, "kvc-bench keys: %s %s: %s\n", labels[d], phase_names[p],
				        strerror(rc));
				failed = 1;
			}
		}
		/* Whatever a failure left behind. */
		char cmd[8300];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dirs[d]);
		if (system(cmd) != 0)
			fprintf(stderr, "kvc-bench keys: could not remove %s\n", dirs[d]);
		int unmount_rc = d == 1 ? bench_keys_floor_unmount(floor_point, floor_child) : 0;
		if (unmount_rc < 0) {
			fprintf(stderr, "kvc-bench keys: the null FUSE filesystem at %s: %s\n",
			        floor_point, strerror(-unmount_rc));
			failed = 1;
		}
	}
	for (int d = 1; d < 3; d++)
		for (int p = 0; p < PHASES; p++)
			if (rows[0][p] && rows[d][p] && rows[0][p]->iops > 0)
				rows[d][p]->ratio = rows[d][p]->iops / rows[0][p]->iops;
	bench_report(&t, json);
	return failed;
}
