/*
 * kvc-bench: benchmarks of a running kvcfs cluster, printed as a table and
 * written as JSON. Every figure is compared with a baseline measured in the
 * same run on the same machine.
 *
 *   kvc-bench fs [--mount DIR] [--size BYTES] [--random-seconds S] [--json FILE]
 *
 * fs: the raw loopback TCP ceiling (a forked server sending from memory to
 * one connection, the baseline), sequential 1 MiB writes and reads of a
 * --size file through the mount (buffered and O_DIRECT), and 4 KiB random
 * O_DIRECT reads at queue depth 1 (IOPS, p50, p99). Reads open the file
 * anew, which drops the client's page cache for it (kvc-fuse opens without
 * keep_cache); the storage servers' caches stay warm, as in service.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "net.h"

#define MIB ((uint64_t)1 << 20)

struct result {
	const char *name;
	double gbps;   /* GB/s (10^9 bytes), 0 when not a throughput test */
	double iops;
	double p50_us;
	double p99_us;
	double ratio;  /* against the TCP baseline, 0 when not applicable */
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
	fprintf(stderr, "kvc-bench: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* The baseline: one TCP connection over loopback, sender writes from
 * memory, receiver reads into a 1 MiB buffer and touches nothing else. */
static double tcp_ceiling(uint64_t bytes)
{
	int listen_fd = kvc_net_listen("127.0.0.1:0");
	if (listen_fd < 0)
		die("listen");
	int port = kvc_net_local_port(listen_fd);
	pid_t child = fork();
	if (child == 0) {
		int fd = accept(listen_fd, NULL, NULL);
		char *buf = malloc(MIB);
		memset(buf, 7, MIB);
		for (;;)
			if (send(fd, buf, MIB, MSG_NOSIGNAL) <= 0)
				_exit(0);
	}
	close(listen_fd);
	char address[64];
	snprintf(address, sizeof(address), "127.0.0.1:%d", port);
	int fd = kvc_net_connect(address, 2000, 10000);
	if (fd < 0)
		die("connect");
	char *buf = malloc(MIB);
	uint64_t got = 0;
	double start = now_s();
	while (got < bytes) {
		ssize_t n = recv(fd, buf, MIB, 0);
		if (n <= 0)
			die("recv");
		got += (uint64_t)n;
	}
	double seconds = now_s() - start;
	close(fd);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	free(buf);
	return (double)got / seconds / 1e9;
}

static double sequential(const char *path, uint64_t size, bool write_mode, bool direct)
{
	int flags = write_mode ? O_WRONLY | O_CREAT | O_TRUNC : O_RDONLY;
	if (direct)
		flags |= O_DIRECT;
	int fd = open(path, flags, 0644);
	if (fd < 0)
		die(path);
	void *buf;
	if (posix_memalign(&buf, 4096, MIB))
		die("memalign");
	memset(buf, 0x5a, MIB);
	double start = now_s();
	for (uint64_t done = 0; done < size; done += MIB) {
		ssize_t n = write_mode ? write(fd, buf, MIB) : read(fd, buf, MIB);
		if (n != (ssize_t)MIB)
			die(write_mode ? "write" : "read");
	}
	if (write_mode && fsync(fd) < 0)
		die("fsync");
	close(fd);
	double seconds = now_s() - start;
	free(buf);
	return (double)size / seconds / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static struct result random_reads(const char *path, uint64_t size, double seconds)
{
	int fd = open(path, O_RDONLY | O_DIRECT);
	if (fd < 0)
		die(path);
	void *buf;
	if (posix_memalign(&buf, 4096, 4096))
		die("memalign");
	size_t cap = 1 << 20, count = 0;
	double *lat = malloc(cap * sizeof(*lat));
	unsigned seed = 12345;
	double start = now_s(), t = start;
	while (t - start < seconds && count < cap) {
		uint64_t off = ((uint64_t)rand_r(&seed) * 4096) % (size - 4096);
		off &= ~4095ull;
		if (pread(fd, buf, 4096, (off_t)off) != 4096)
			die("pread");
		double after = now_s();
		lat[count++] = (after - t) * 1e6;
		t = after;
	}
	close(fd);
	qsort(lat, count, sizeof(*lat), cmp_double);
	struct result r = {.name = "fuse 4k random read qd1 (O_DIRECT)",
	                   .iops = count / (t - start), .p50_us = lat[count / 2],
	                   .p99_us = lat[count * 99 / 100]};
	free(lat);
	free(buf);
	return r;
}

static void report(struct result *r, int count, const char *json_path)
{
	printf("%-40s %10s %10s %10s %10s %12s\n", "benchmark", "GB/s", "IOPS", "p50 us",
	       "p99 us", "vs TCP");
	for (int i = 0; i < count; i++) {
		printf("%-40s ", r[i].name);
		r[i].gbps ? printf("%10.2f ", r[i].gbps) : printf("%10s ", "-");
		r[i].iops ? printf("%10.0f %10.1f %10.1f ", r[i].iops, r[i].p50_us, r[i].p99_us)
		          : printf("%10s %10s %10s ", "-", "-", "-");
		r[i].ratio ? printf("%11.0f%%\n", r[i].ratio * 100) : printf("%12s\n", "-");
	}
	if (!json_path)
		return;
	FILE *f = fopen(json_path, "w");
	if (!f)
		die(json_path);
	fprintf(f, "{\"results\":[");
	for (int i = 0; i < count; i++)
		fprintf(f, "%s{\"name\":\"%s\",\"gbps\":%.4f,\"iops\":%.1f,\"p50_us\":%.2f,"
		           "\"p99_us\":%.2f,\"ratio_to_tcp\":%.4f}",
		        i ? "," : "", r[i].name, r[i].gbps, r[i].iops, r[i].p50_us, r[i].p99_us,
		        r[i].ratio);
	fprintf(f, "]}\n");
	fclose(f);
	printf("JSON written to %s\n", json_path);
}

static uint64_t parse_size(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	switch (*end) {
	case 'G': case 'g': v *= 1 << 30; break;
	case 'M': case 'm': v *= 1 << 20; break;
	case 'K': case 'k': v *= 1 << 10; break;
	}
	return (uint64_t)v;
}

static int bench_fs(int argc, char **argv)
{
	static struct option options[] = {{"mount", required_argument, 0, 'm'},
	                                  {"size", required_argument, 0, 's'},
	                                  {"random-seconds", required_argument, 0, 'r'},
	                                  {"json", required_argument, 0, 'j'},
	                                  {0, 0, 0, 0}};
	const char *mount = "/mnt/kvc", *json = NULL;
	uint64_t size = 1ull << 30;
	double random_seconds = 5;
	int opt;
	while ((opt = getopt_long(argc, argv, "m:s:r:j:", options, NULL)) != -1) {
		switch (opt) {
		case 'm': mount = optarg; break;
		case 's': size = parse_size(optarg) & ~(MIB - 1); break;
		case 'r': random_seconds = atof(optarg); break;
		case 'j': json = optarg; break;
		default: return 2;
		}
	}
	if (size < MIB) {
		fprintf(stderr, "kvc-bench: --size must be at least 1M\n");
		return 2;
	}
	char path[4096];
	snprintf(path, sizeof(path), "%s/.kvc-bench-%d", mount, (int)getpid());
	struct result r[8];
	int n = 0;
	fprintf(stderr, "measuring the TCP baseline...\n");
	double tcp = tcp_ceiling(size * 2 > (4ull << 30) ? size * 2 : 4ull << 30);
	r[n++] = (struct result){.name = "raw loopback TCP (1 connection)", .gbps = tcp, .ratio = 1};
	fprintf(stderr, "sequential write of %" PRIu64 " MiB...\n", size / MIB);
	r[n++] = (struct result){.name = "fuse seq write 1M (buffered+fsync)",
	                         .gbps = sequential(path, size, true, false)};
	fprintf(stderr, "sequential reads...\n");
	r[n++] = (struct result){.name = "fuse seq read 1M (buffered)",
	                         .gbps = sequential(path, size, false, false)};
	r[n++] = (struct result){.name = "fuse seq read 1M (O_DIRECT)",
	                         .gbps = sequential(path, size, false, true)};
	r[n++] = (struct result){.name = "fuse seq write 1M (O_DIRECT)",
	                         .gbps = sequential(path, size, true, true)};
	fprintf(stderr, "4 KiB random reads for %.0f s...\n", random_seconds);
	r[n++] = random_reads(path, size, random_seconds);
	for (int i = 1; i < n; i++)
		if (r[i].gbps)
			r[i].ratio = r[i].gbps / tcp;
	unlink(path);
	report(r, n, json);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "fs") != 0) {
		fprintf(stderr, "usage: kvc-bench fs [--mount DIR] [--size BYTES] "
		                "[--random-seconds S] [--json FILE]\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	return bench_fs(argc - 1, argv + 1);
}
