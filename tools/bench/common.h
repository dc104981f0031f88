/*
 * bench common: what every kvc-bench benchmark shares: the result table
 * and its JSON, clocks, latency percentiles, and the baselines (the raw
 * loopback TCP ceiling: forked senders writing from memory; the page-cache
 * read: threads pread-ing a warm local file). Results are
 * owned by the caller's array.
 */
#ifndef KVC_BENCH_COMMON_H
#define KVC_BENCH_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MIB ((uint64_t)1 << 20)
#define BENCH_MAX_RESULTS 128

struct bench_result {
	char name[64];
	double gbps;   /* GB/s (10^9 bytes), 0 when not a throughput figure */
	double iops;
	double p50_us;
	double p99_us;
	double ratio;  /* to the baseline named in the table, 0 when none */
};

struct bench_table {
	struct bench_result rows[BENCH_MAX_RESULTS];
	int count;
	const char *ratio_label;
};

double bench_now(void);
void bench_die(const char *what);
struct bench_result *bench_add(struct bench_table *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Print the table, and write it as JSON when json_path is set. */
void bench_report(const struct bench_table *t, const char *json_path);

/* GB/s of `connections` loopback TCP streams together, each from a
 * forked sender writing from memory: a 1 MiB buffer that stays in cache
 * (hot), or walking 512 MiB into a 256 MiB receive area (cold: the way
 * page-cache data reaches a large iov). */
double bench_tcp_ceiling(int connections, double seconds, bool cold);

/* The page-cache baseline: GB/s of `threads` (1..64) threads pread-ing
 * 16 MiB blocks at random of a warm file of file_size bytes (a multiple
 * of 16 MiB, written, read once, then removed, in dir) into their own
 * 64 MiB part of one large buffer, for `seconds`: what a same-host
 * transport aims at. */
double bench_page_cache(const char *dir, uint64_t file_size, int threads, double seconds);
/* The same with the work every crc-checked read does and a bare copy
 * does not: 1 MiB preads (the reads the rings are measured with), each
 * 16 KiB block checked against its crc32c right after (in the CPU's
 * cache), as kvc-storage checks chunk blocks. No messages and no other
 * process: the most a transport that keeps the crc checks can reach on
 * this machine. */
#define BENCH_CRC_BLOCK (16u << 10)
double bench_page_cache_checked(const char *dir, uint64_t file_size, int threads,
                                double seconds);
/* Write back and drop the whole page cache (sync, then
 * /proc/sys/vm/drop_caches: root only); false when not allowed. */
bool bench_drop_caches(void);
/* The cold baseline: a file of file_size bytes under dir (a multiple of
 * 16 MiB), written, dropped from the page cache, then read once by
 * `threads` threads, each its share in 16 MiB preads through the page
 * cache (as a local directory of KV files is read). Returns GB/s. */
double bench_cold_file(const char *dir, uint64_t file_size, int threads);

/* Sort latencies (microseconds) and fill p50/p99 of r. */
void bench_percentiles(double *lat, size_t count, struct bench_result *r);

uint64_t bench_parse_size(const char *s);

#endif
