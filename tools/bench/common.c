/* bench common: see common.h. */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/crc32c.h"
#include "core/net.h"

double bench_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

void bench_die(const char *what)
{
	fprintf(stderr, "kvc-bench: %s: %s\n", what, strerror(errno));
	exit(1);
}

struct bench_result *bench_add(struct bench_table *t, const char *fmt, ...)
{
	if (t->count == BENCH_MAX_RESULTS) {
		fprintf(stderr, "kvc-bench: too many results\n");
		exit(1);
	}
	struct bench_result *r = &t->rows[t->count++];
	memset(r, 0, sizeof(*r));
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->name, sizeof(r->name), fmt, ap);
	va_end(ap);
	return r;
}

void bench_report(const struct bench_table *t, const char *json_path)
{
	printf("%-44s %9s %10s %9s %9s %10s\n", "benchmark", "GB/s", "IOPS", "p50 us", "p99 us",
	       t->ratio_label ? t->ratio_label : "ratio");
	for (int i = 0; i < t->count; i++) {
		const struct bench_result *r = &t->rows[i];
		printf("%-44s ", r->name);
		r->gbps ? printf("%9.2f ", r->gbps) : printf("%9s ", "-");
		r->iops ? printf("%10.0f %9.1f %9.1f ", r->iops, r->p50_us, r->p99_us)
		        : printf("%10s %9s %9s ", "-", "-", "-");
		r->ratio ? printf("%9.2fx\n", r->ratio) : printf("%10s\n", "-");
	}
	if (!json_path)
		return;
	FILE *f = fopen(json_path, "w");
	if (!f)
		bench_die(json_path);
	fprintf(f, "{\"ratio\":\"%s\",\"results\":[", t->ratio_label ? t->ratio_label : "");
	for (int i = 0; i < t->count; i++) {
		const struct bench_result *r = &t->rows[i];
		fprintf(f, "%s{\"name\":\"%s\",\"gbps\":%.4f,\"iops\":%.1f,\"p50_us\":%.2f,"
		           "\"p99_us\":%.2f,\"ratio\":%.4f}",
		        i ? "," : "", r->name, r->gbps, r->iops, r->p50_us, r->p99_us, r->ratio);
	}
	fprintf(f, "]}\n");
	fclose(f);
	printf("JSON written to %s\n", json_path);
}

#define COLD_SEND (512 * MIB)
#define COLD_RECEIVE (256 * MIB)

struct receiver {
	int fd;
	double until;
	uint64_t bytes;
	char *buf;      /* receive area */
	uint64_t area;  /* its size: 1 MiB (hot) or COLD_RECEIVE */
};

static void *receive_main(void *arg)
{
	struct receiver *r = arg;
	uint64_t pos = 0;
	while (bench_now() < r->until) {
		ssize_t n = recv(r->fd, r->buf + pos, MIB, 0);
		if (n <= 0)
			break;
		r->bytes += (uint64_t)n;
		pos = (pos + MIB) % r->area;
	}
	return NULL;
}

static char *touched(uint64_t size, int value)
{
	char *buf = malloc(size);
	if (!buf)
		bench_die("malloc");
	memset(buf, value, size);
	return buf;
}

double bench_tcp_ceiling(int connections, double seconds, bool cold)
{
	int listen_fd = kvc_net_listen("127.0.0.1:0");
	if (listen_fd < 0)
		bench_die("listen");
	char address[64];
	snprintf(address, sizeof(address), "127.0.0.1:%d", kvc_net_local_port(listen_fd));
	/* Hot: one 1 MiB buffer each way, always in cache. Cold: senders walk
	 * a 512 MiB buffer and receivers a 256 MiB one, like page-cache data
	 * and an iov much larger than the caches. */
	uint64_t send_area = cold ? COLD_SEND : MIB;
	char *send_buf = touched(send_area, 7);
	pid_t child = fork();
	if (child == 0) {
		/* The sender: one forked process per connection. */
		for (int i = 0; i < connections; i++) {
			int fd = accept(listen_fd, NULL, NULL);
			if (fork() == 0) {
				for (uint64_t pos = (uint64_t)i * 64 * MIB % send_area;;
				     pos = (pos + MIB) % send_area)
					if (send(fd, send_buf + pos, MIB, MSG_NOSIGNAL) <= 0)
						_exit(0);
			}
			close(fd);
		}
		for (int i = 0; i < connections; i++)
			wait(NULL);
		_exit(0);
	}
	close(listen_fd);
	free(send_buf);
	struct receiver r[64];
	pthread_t threads[64];
	if (connections > 64)
		connections = 64;
	uint64_t receive_area = cold ? COLD_RECEIVE : MIB;
	char *receive_buf = touched(receive_area * (cold ? 1 : (uint64_t)connections), 0);
	for (int i = 0; i < connections; i++) {
		r[i].fd = kvc_net_connect(address, 2000, 10000);
		if (r[i].fd < 0)
			bench_die("connect");
	}
	double start = bench_now();
	uint64_t total = 0;
	for (int i = 0; i < connections; i++) {
		r[i].until = start + seconds;
		r[i].bytes = 0;
		r[i].area = receive_area;
		r[i].buf = receive_buf + (cold ? 0 : (uint64_t)i * MIB);
		pthread_create(&threads[i], NULL, receive_main, &r[i]);
	}
	for (int i = 0; i < connections; i++) {
		pthread_join(threads[i], NULL);
		total += r[i].bytes;
	}
	double elapsed = bench_now() - start;
	for (int i = 0; i < connections; i++)
		close(r[i].fd);
	waitpid(child, NULL, 0);
	free(receive_buf);
	return (double)total / elapsed / 1e9;
}

static int compare(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The page-cache baseline (see common.h). */
struct baseline_job {
	int fd;
	uint64_t file_size;
	uint64_t block;    /* bytes a pread */
	uint32_t good_crc; /* checked: every 16 KiB block's crc32c (the file is one byte) */
	bool check;
	uint8_t *buf;
	double until;
	uint64_t bytes;
	uint64_t bad; /* checked: blocks whose crc did not match */
	unsigned seed;
};

static void *baseline_thread(void *arg)
{
	struct baseline_job *j = arg;
	uint64_t blocks = j->file_size / j->block, slots = 64 * MIB / j->block;
	while (bench_now() < j->until) {
		uint64_t b = rand_r(&j->seed) % blocks;
		uint8_t *dst = j->buf + (b % slots) * j->block;
		ssize_t n = pread(j->fd, dst, j->block, (off_t)(b * j->block));
		if (n <= 0)
			break;
		for (ssize_t at = 0; j->check && at < n; at += BENCH_CRC_BLOCK)
			j->bad += kvc_crc32c(0, dst + at, BENCH_CRC_BLOCK) != j->good_crc;
		j->bytes += (uint64_t)n;
	}
	return NULL;
}

/* The baselines' run: threads pread `block` bytes at random, checked or not. */
static double page_cache_run(const char *dir, uint64_t file_size, int threads, double seconds,
                             uint64_t block, bool check)
{
	if (file_size < 16 * MIB || file_size % (16 * MIB) || threads < 1 || threads > 64) {
		fprintf(stderr, "kvc-bench: page-cache baseline: %" PRIu64 " bytes, %d threads\n",
		        file_size, threads);
		exit(1);
	}
	char path[4096];
	snprintf(path, sizeof(path), "%s/.kvc-bench-pagecache-%d", dir, (int)getpid());
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	uint8_t *pattern = malloc(16 * MIB);
	uint8_t *buf = malloc((size_t)threads * 64 * MIB);
	if (fd < 0 || !pattern || !buf)
		bench_die(path);
	memset(pattern, 0x5a, 16 * MIB);
	uint32_t good_crc = kvc_crc32c(0, pattern, BENCH_CRC_BLOCK);
	for (uint64_t at = 0; at < file_size; at += 16 * MIB)
		if (pwrite(fd, pattern, 16 * MIB, (off_t)at) != (ssize_t)(16 * MIB))
			bench_die(path);
	/* Written back now, not under the measurements that follow (on a
	 * small machine, a gigabyte of writeback takes CPUs for seconds). */
	if (fsync(fd) < 0)
		bench_die(path);
	for (uint64_t at = 0; at < file_size; at += 16 * MIB) /* warm */
		if (pread(fd, pattern, 16 * MIB, (off_t)at) != (ssize_t)(16 * MIB))
			bench_die(path);
	memset(buf, 0, (size_t)threads * 64 * MIB); /* fault the buffer in */
	struct baseline_job jobs[64];
	pthread_t tids[64];
	double start = bench_now();
	for (int i = 0; i < threads; i++) {
		jobs[i] = (struct baseline_job){.fd = fd, .file_size = file_size, .block = block,
		                                .good_crc = good_crc, .check = check,
		                                .buf = buf + (size_t)i * 64 * MIB,
		                                .until = start + seconds, .seed = 7u + (unsigned)i};
		pthread_create(&tids[i], NULL, baseline_thread, &jobs[i]);
	}
	uint64_t bytes = 0, bad = 0;
	for (int i = 0; i < threads; i++) {
		pthread_join(tids[i], NULL);
		bytes += jobs[i].bytes;
		bad += jobs[i].bad;
	}
	double gbps = (double)bytes / (bench_now() - start) / 1e9;
	close(fd);
	unlink(path);
	free(pattern);
	free(buf);
	if (bad) {
		fprintf(stderr, "kvc-bench: page-cache baseline: %" PRIu64 " blocks read back wrong\n",
		        bad);
		exit(1);
	}
	return gbps;
}

double bench_page_cache(const char *dir, uint64_t file_size, int threads, double seconds)
{
	return page_cache_run(dir, file_size, threads, seconds, 16 * MIB, false);
}

double bench_page_cache_checked(const char *dir, uint64_t file_size, int threads,
                                double seconds)
{
	return page_cache_run(dir, file_size, threads, seconds, MIB, true);
}

bool bench_drop_caches(void)
{
	sync();
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
	bool done = fd >= 0 && write(fd, "3\n", 2) == 2;
	if (fd >= 0)
		close(fd);
	return done;
}

struct cold_job {
	int fd;
	uint64_t from, to;
	uint8_t *buf;
};

static void *cold_thread(void *arg)
{
	struct cold_job *j = arg;
	for (uint64_t at = j->from; at < j->to; at += 16 * MIB)
		if (pread(j->fd, j->buf, 16 * MIB, (off_t)at) != (ssize_t)(16 * MIB))
			bench_die("cold baseline read");
	return NULL;
}

double bench_cold_file(const char *dir, uint64_t file_size, int threads)
{
	uint64_t blocks = file_size / (16 * MIB);
	if (file_size % (16 * MIB) || threads < 1 || threads > 64 || blocks < (uint64_t)threads) {
		fprintf(stderr, "kvc-bench: cold baseline: %" PRIu64 " bytes, %d threads\n",
		        file_size, threads);
		exit(1);
	}
	char path[4096];
	snprintf(path, sizeof(path), "%s/.kvc-bench-cold-%d", dir, (int)getpid());
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	uint8_t *buf = malloc((size_t)threads * 16 * MIB);
	if (fd < 0 || !buf)
		bench_die(path);
	memset(buf, 0x5a, (size_t)threads * 16 * MIB); /* fault the buffers in */
	for (uint64_t at = 0; at < file_size; at += 16 * MIB)
		if (pwrite(fd, buf, 16 * MIB, (off_t)at) != (ssize_t)(16 * MIB))
			bench_die(path);
	if (!bench_drop_caches()) {
		fprintf(stderr, "kvc-bench: cold reads need root (/proc/sys/vm/drop_caches)\n");
		exit(1);
	}
	struct cold_job jobs[64];
	pthread_t tids[64];
	double start = bench_now();
	for (int i = 0; i < threads; i++) {
		jobs[i] = (struct cold_job){fd, blocks * (uint64_t)i / (uint64_t)threads * 16 * MIB,
		                            blocks * (uint64_t)(i + 1) / (uint64_t)threads * 16 * MIB,
		                            buf + (size_t)i * 16 * MIB};
		pthread_create(&tids[i], NULL, cold_thread, &jobs[i]);
	}
	for (int i = 0; i < threads; i++)
		pthread_join(tids[i], NULL);
	double gbps = (double)file_size / (bench_now() - start) / 1e9;
	close(fd);
	unlink(path);
	free(buf);
	return gbps;
}

void bench_percentiles(double *lat, size_t count, struct bench_result *r)
{
	if (count == 0)
		return;
	qsort(lat, count, sizeof(*lat), compare);
	r->p50_us = lat[count / 2];
	r->p99_us = lat[count * 99 / 100];
}

uint64_t bench_parse_size(const char *s)
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
