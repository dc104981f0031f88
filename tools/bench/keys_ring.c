/*
 * bench keys --ring: the same keys through USRBIO ring key operations
 * (include/kvc/usrbio.h kvc_ring_prep_key) from one process: put, get,
 * exists and remove of --keys keys of --size bytes in batches of --batch
 * entries, first with every key one segment, then with each key gathered
 * from (put) or scattered into (get) --segments segments laid out
 * layer-major, as KV pages of one block spread across layers. A key's
 * latency is its batch's (prepare to last completion). --depth keeps that
 * many submissions in flight: one is prepared as soon as one completes.
 * Both runs' keys are put first (one-segment keys, then the others); then
 * they are read, then removed. --rounds runs get and exists that many
 * times over the same keys, the two runs taking turns, and reports each
 * run's median round (the first gets may share the host with the puts'
 * writeback). The ratio column is the rate against the one-segment run of
 * the same operation.
 */
#include "keys.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvc/usrbio.h"

enum op { PUT, GET, EXISTS, REMOVE, OPS };
static const int op_codes[OPS] = {KVC_KEY_PUT, KVC_KEY_GET, KVC_KEY_EXISTS, KVC_KEY_REMOVE};
static const char *const op_names[OPS] = {"put", "get", "exists", "remove"};

struct run {
	struct kvc_ring *ring;
	struct kvc_iov *iov;
	int dir_fd;
	uint64_t keys;
	size_t size;
	int batch, depth, segs, rounds; /* segs: the second run's */
	int run; /* 0: one segment a key, 1: segs (their keys' names differ) */
	struct kvc_completion *done;
};

/* Segment s of the key in slot j of in-flight submission `slot`:
 * layer-major (all keys' segment 0, then all keys' segment 1, ...); each
 * submission has a put area and a get area of its own. */
static int run_segs(const struct run *r)
{
	return r->run ? r->segs : 1;
}

static void segments(const struct run *r, int slot, int j, bool get, struct kvc_key_seg *out)
{
	int segs = run_segs(r);
	size_t seg = r->size / (size_t)segs, area = (size_t)r->batch * r->size;
	size_t base = (size_t)slot * 2 * area + (get ? area : 0);
	for (int s = 0; s < segs; s++) {
		size_t len = s == segs - 1 ? r->size - seg * (size_t)(segs - 1) : seg;
		out[s] = (struct kvc_key_seg){r->iov, base + (size_t)s * (size_t)r->batch * seg +
		                                          (size_t)j * seg, len};
	}
}

/* One submission in flight: its keys and when it was prepared. */
struct flight {
	uint64_t first;
	int n, left;
	double t0;
};

/* Prepare and submit keys [first, first + n) as submission `slot`. */
static int submit(struct run *r, enum op op, int slot, struct flight *f, uint64_t first)
{
	struct kvc_key_seg segs[KVC_KEY_MAX_SEGS];
	char name[64];
	bool data = op == PUT || op == GET;
	int n = (int)(r->keys - first < (uint64_t)r->batch ? r->keys - first : (uint64_t)r->batch);
	*f = (struct flight){.first = first, .n = n, .left = n, .t0 = bench_now()};
	int rc = 0;
	for (int j = 0; j < n && rc >= 0; j++) {
		if (data)
			segments(r, slot, j, op == GET, segs);
		snprintf(name, sizeof(name), "k%d-%" PRIu64, r->run, first + (uint64_t)j);
		rc = kvc_ring_prep_key(r->ring, op_codes[op], r->dir_fd, name, segs,
		                       data ? run_segs(r) : 0, 0, 0, (void *)(uintptr_t)slot);
	}
	if (rc >= 0)
		rc = kvc_ring_submit(r->ring);
	return rc < 0 ? -rc : 0;
}

/* One operation over every key, with r->depth submissions in flight;
 * fills row. Returns 0 or the errno of the first failure. */
static int run_op(struct run *r, enum op op, struct bench_result *row)
{
	struct flight flights[16];
	double *lat = calloc(r->keys, sizeof(*lat));
	int failed = lat ? 0 : ENOMEM, busy = 0;
	uint64_t next = 0;
	double start = bench_now();
	for (int slot = 0; slot < r->depth && next < r->keys && !failed; slot++, busy++) {
		failed = submit(r, op, slot, &flights[slot], next);
		next += (uint64_t)flights[slot].n;
	}
	while (!failed && busy > 0) {
		int c = kvc_ring_wait(r->ring, r->done, r->batch * r->depth, 1, NULL);
		if (c < 0)
			failed = -c;
		for (int i = 0; i < c && !failed; i++) {
			/* Every operation answers the key's size. */
			if (r->done[i].result != (int64_t)r->size) {
				failed = r->done[i].result < 0 ? (int)-r->done[i].result : EIO;
				break;
			}
			int slot = (int)(uintptr_t)r->done[i].userdata;
			struct flight *f = &flights[slot];
			if (--f->left > 0)
				continue;
			double t = (bench_now() - f->t0) * 1e6; /* a key's latency is its batch's */
			for (int j = 0; j < f->n; j++)
				lat[f->first + (uint64_t)j] = t;
			busy--;
			if (next < r->keys) {
				failed = submit(r, op, slot, f, next);
				next += (uint64_t)f->n;
				busy++;
			}
		}
	}
	double seconds = bench_now() - start;
	if (!failed) {
		row->iops = (double)r->keys / seconds;
		if (op == PUT || op == GET)
			row->gbps = row->iops * (double)r->size / 1e9;
		bench_percentiles(lat, r->keys, row);
	}
	free(lat);
	return failed;
}

static int by_rate(const void *a, const void *b)
{
	double x = ((const struct bench_result *)a)->iops, y = ((const struct bench_result *)b)->iops;
	return (x > y) - (x < y);
}

/* run_op for both runs (r->run 0: one segment a key, 1: r->segs): once
 * for put and remove, r->rounds times for a read (get, exists), the two
 * runs' rounds taking turns so that both meet the same background work
 * (the puts' writeback, a collector's removals); each row gets its
 * median round. */
static int run_both(struct run *r, enum op op, struct bench_result *rows[2])
{
	struct bench_result got[2][BENCH_KEYS_MAX_ROUNDS];
	int n = op == GET || op == EXISTS ? r->rounds : 1, err = 0;
	for (int i = 0; i < n && !err; i++)
		for (int k = 0; k < 2 && !err; k++) {
			r->run = k;
			got[k][i] = *rows[k];
			err = run_op(r, op, &got[k][i]);
		}
	for (int k = 0; k < 2 && !err; k++) {
		qsort(got[k], (size_t)n, sizeof(got[k][0]), by_rate);
		*rows[k] = got[k][n / 2];
	}
	return err;
}

int bench_keys_ring(const char *mount, uint64_t keys, size_t size, int batch, int depth,
                    int segs, int rounds, const char *json)
{
	static struct bench_table t = {.ratio_label = "vs 1 seg"};
	struct run r = {.keys = keys, .size = size, .batch = batch, .depth = depth,
	                .segs = segs, .rounds = rounds, .dir_fd = -1};
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s/.kvc-bench-ring-keys-%d", mount, (int)getpid());
	int rc = mkdir(dir, 0755) == 0 ? 0 : -errno;
	if (rc == 0)
		r.dir_fd = open(dir, O_PATH | O_DIRECTORY);
	if (rc == 0 && r.dir_fd < 0)
		rc = -errno;
	if (rc == 0)
		rc = kvc_fd_register(r.dir_fd, 0);
	if (rc == 0)
		rc = kvc_iov_create(&r.iov, mount, 2 * (size_t)depth * (size_t)batch * size, 0, -1, NULL);
	if (rc == 0)
		rc = kvc_iov_unlink(r.iov);
	if (rc == 0)
		rc = kvc_ring_create(&r.ring, mount, batch * depth, false, 0, 0, 0, -1, 0);
	r.done = calloc((size_t)batch * (size_t)depth, sizeof(*r.done));
	if (rc == 0 && !r.done)
		rc = -ENOMEM;
	if (rc < 0) {
		fprintf(stderr, "kvc-bench keys --ring: setup: %s\n", strerror(-rc));
		return 1;
	}
	for (int slot = 0; slot < depth; slot++) /* the put areas */
		memset((char *)kvc_iov_base(r.iov) + (size_t)slot * 2 * (size_t)batch * size, 0x6b,
		       (size_t)batch * size);
	struct bench_result *rows[OPS][2];
	int failed = 0;
	fprintf(stderr, "ring: %" PRIu64 " keys of %zu bytes a run, batch %d, depth %d, "
	        "runs of 1 and %d segments...\n", keys, size, batch, depth, segs);
	for (int k = 0; k < 2; k++)
		for (int op = 0; op < OPS; op++)
			rows[op][k] = bench_add(&t, "ring %s %d seg%s%s", op_names[op], k ? segs : 1,
			                        k && segs > 1 ? "s" : "",
			                        k && segs == 1 ? " (again)" : "");
	for (int op = 0; op < OPS && !failed; op++) {
		fprintf(stderr, "ring: %s...\n", op_names[op]);
		int err = run_both(&r, (enum op)op, rows[op]);
		if (err) {
			fprintf(stderr, "kvc-bench keys --ring: %s: %s\n", op_names[op], strerror(err));
			failed = 1;
		}
	}
	for (int op = 0; op < OPS; op++)
		if (rows[op][0]->iops > 0)
			rows[op][1]->ratio = rows[op][1]->iops / rows[op][0]->iops;
	kvc_ring_destroy(r.ring);
	kvc_iov_destroy(r.iov);
	kvc_fd_deregister(r.dir_fd);
	close(r.dir_fd);
	free(r.done);
	char cmd[8300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "kvc-bench keys: could not remove %s\n", dir);
	bench_report(&t, json);
	return failed;
}
