/*
 * bench fs: kvc-bench fs [--mount DIR] [--size BYTES] [--random-seconds S]
 *                        [--json FILE]
 *
 * The raw loopback TCP ceiling (one connection: the baseline), sequential
 * 1 MiB writes and reads of a --size file through the mount (buffered and
 * O_DIRECT), and 4 KiB random O_DIRECT reads at depth 1.
 */
#include "fs.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cli.h"

struct seq_job {
	int fd;
	uint64_t start, end, io_size;
	bool write;
};

static void *seq_main(void *arg)
{
	struct seq_job *j = arg;
	void *buf;
	if (posix_memalign(&buf, 4096, j->io_size))
		bench_die("memalign");
	memset(buf, 0x5a, j->io_size);
	for (uint64_t off = j->start; off < j->end; off += j->io_size) {
		ssize_t n = j->write ? pwrite(j->fd, buf, j->io_size, (off_t)off)
		                     : pread(j->fd, buf, j->io_size, (off_t)off);
		if (n != (ssize_t)j->io_size)
			bench_die(j->write ? "write" : "read");
	}
	free(buf);
	return NULL;
}

double bench_fuse_sequential(const char *path, uint64_t bytes, uint64_t io_size, bool write,
                             bool direct, int threads)
{
	int flags = write ? O_WRONLY | O_CREAT : O_RDONLY;
	if (direct)
		flags |= O_DIRECT;
	int fd = open(path, flags, 0644);
	if (fd < 0)
		bench_die(path);
	struct seq_job jobs[128];
	pthread_t tids[128];
	if (threads > 128)
		threads = 128;
	uint64_t per = bytes / (uint64_t)threads / io_size * io_size;
	double start = bench_now();
	for (int i = 0; i < threads; i++) {
		jobs[i] = (struct seq_job){fd, per * (uint64_t)i, per * (uint64_t)(i + 1), io_size, write};
		pthread_create(&tids[i], NULL, seq_main, &jobs[i]);
	}
	for (int i = 0; i < threads; i++)
		pthread_join(tids[i], NULL);
	if (write && !direct && fsync(fd) < 0)
		bench_die("fsync");
	close(fd);
	return (double)(per * (uint64_t)threads) / (bench_now() - start) / 1e9;
}

void bench_fuse_random(const char *path, uint64_t size, double seconds, struct bench_result *r)
{
	int fd = open(path, O_RDONLY | O_DIRECT);
	if (fd < 0)
		bench_die(path);
	void *buf;
	if (posix_memalign(&buf, 4096, 4096))
		bench_die("memalign");
	size_t cap = 1 << 21, count = 0;
	double *lat = malloc(cap * sizeof(*lat));
	unsigned seed = 12345;
	double start = bench_now(), t = start;
	while (t - start < seconds && count < cap) {
		uint64_t off = ((uint64_t)rand_r(&seed) * 4096) % (size - 4096) & ~4095ull;
		if (pread(fd, buf, 4096, (off_t)off) != 4096)
			bench_die("pread");
		double after = bench_now();
		lat[count++] = (after - t) * 1e6;
		t = after;
	}
	close(fd);
	r->iops = count / (t - start);
	bench_percentiles(lat, count, r);
	free(lat);
	free(buf);
}

static const char usage[] =
	"usage: kvc-bench fs [--mount DIR] [--size BYTES] [--random-seconds S] [--json FILE]\n"
	"The FUSE path against the raw loopback TCP ceiling: sequential 1 MiB\n"
	"writes and reads (buffered and O_DIRECT), 4 KiB random O_DIRECT reads.\n"
	"  -m, --mount DIR            the kvcfs mount (default /mnt/kvc)\n"
	"  -s, --size BYTES           the test file's size, at least 1M (default 1G)\n"
	"  -r, --random-seconds S     how long the random reads run (default 5)\n"
	"  -j, --json FILE            write the table as JSON too\n"
	"  -h, --help                 this text\n";

int bench_fs_main(int argc, char **argv)
{
	static const struct option options[] = {{"mount", required_argument, 0, 'm'},
	                                        {"size", required_argument, 0, 's'},
	                                        {"random-seconds", required_argument, 0, 'r'},
	                                        {"json", required_argument, 0, 'j'},
	                                        {0, 0, 0, 0}};
	static const struct kvc_cli cli = {"kvc-bench fs", usage, "m:s:r:j:", options, 0};
	const char *mount = "/mnt/kvc", *json = NULL;
	uint64_t size = 1ull << 30;
	double random_seconds = 5;
	int opt;
	while ((opt = kvc_cli_next(&cli, argc, argv)) > 0) {
		switch (opt) {
		case 'm': mount = optarg; break;
		case 's': size = bench_parse_size(optarg) & ~(MIB - 1); break;
		case 'r': random_seconds = atof(optarg); break;
		case 'j': json = optarg; break;
		}
	}
	if (opt != KVC_CLI_END)
		return kvc_cli_status(opt);
	if (optind < argc)
		return kvc_cli_fail(&cli, "unexpected argument '%s'", argv[optind]);
	if (size < MIB)
		return kvc_cli_fail(&cli, "--size must be at least 1M");
	char path[4096];
	snprintf(path, sizeof(path), "%s/.kvc-bench-%d", mount, (int)getpid());
	static struct bench_table t = {.ratio_label = "vs TCP"};
	fprintf(stderr, "measuring the TCP baseline...\n");
	double tcp = bench_tcp_ceiling(1, 2.0, false);
	bench_add(&t, "raw loopback TCP (1 connection)")->gbps = tcp;
	fprintf(stderr, "sequential writes and reads of %" PRIu64 " MiB...\n", size / MIB);
	bench_add(&t, "fuse seq write 1M (buffered+fsync)")->gbps =
		bench_fuse_sequential(path, size, MIB, true, false, 1);
	bench_add(&t, "fuse seq read 1M (buffered)")->gbps =
		bench_fuse_sequential(path, size, MIB, false, false, 1);
	bench_add(&t, "fuse seq read 1M (O_DIRECT)")->gbps =
		bench_fuse_sequential(path, size, MIB, false, true, 1);
	bench_add(&t, "fuse seq write 1M (O_DIRECT)")->gbps =
		bench_fuse_sequential(path, size, MIB, true, true, 1);
	fprintf(stderr, "4 KiB random reads for %.0f s...\n", random_seconds);
	bench_fuse_random(path, size, random_seconds,
	                  bench_add(&t, "fuse 4k random read qd1 (O_DIRECT)"));
	for (int i = 1; i < t.count; i++)
		if (t.rows[i].gbps)
			t.rows[i].ratio = t.rows[i].gbps / tcp;
	unlink(path);
	bench_report(&t, json);
	return 0;
}
