/*
 * bench gpu: kvc-bench gpu [--mount DIR] [--pages N] [--page-size BYTES]
 *                          [--depth D] [--repeat R] [--json FILE]
 *
 * Loads N pages (default 256 of 8 MiB) of a kvcfs file into GPU memory,
 * by each path, R times (the table shows the median), D reads in flight:
 *   (a) a device iov (GPU memory wrapped, kvc/gpu.h): kvc-fuse fills it;
 *   (b) a pinned shared-memory iov, then cudaMemcpyAsync by the client;
 *   (c) today's connectors: a plain shared-memory iov, memcpy into a
 *       separate pinned buffer, then cudaMemcpyAsync;
 *   (d) read() through the FUSE mount (O_DIRECT, one thread) into pinned
 *       memory, then cudaMemcpyAsync (two buffers, so copy and read overlap);
 * and the machine's pinned host-to-device bandwidth (the same copies from
 * a cudaHostAlloc buffer, no I/O) as the baseline. Every path's result is
 * checked: three pages are copied back and compared with the file.
 */
#include "gpu.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "core/cli.h"
#include "core/cuda_api.h"
#include "kvc/gpu.h"
#include "kvc/usrbio.h"

#define MAX_DEPTH 128

/* What the command line asks for. */
struct gpu_options {
	const char *mount, *json;
	uint64_t page;
	int pages, depth, repeat;
};

#if defined(KVC_HAVE_CUDA)

enum path { DEVICE_IOV, PINNED_IOV, CONNECTOR, FUSE_READ, HOST_TO_DEVICE, PATHS };

static const char *path_names[PATHS] = {
	"(a) device iov filled by kvc-fuse",
	"(b) pinned iov + cudaMemcpyAsync",
	"(c) connector: iov, memcpy to pinned, copy",
	"(d) FUSE read() to pinned, copy",
	"pinned host-to-device copy (baseline)",
};

struct gpu_bench {
	const char *mount;
	char path[4096];
	int fd;
	uint64_t page;
	int pages, depth;
	const struct kvc_cuda *cuda;
	uint8_t *device;            /* pages * page of GPU memory */
	struct kvc_iov *device_iov; /* wraps device */
	struct kvc_iov *window;     /* depth pages of shared memory */
	uint8_t *staging;           /* depth pages of pinned memory ((c), (d), baseline) */
	struct kvc_ring *ring;
	cudaStream_t stream;
	cudaEvent_t events[MAX_DEPTH];
	bool copying[MAX_DEPTH];    /* a copy out of this slot may still run */
};

static void check(int rc, const char *what)
{
	if (rc < 0) {
		fprintf(stderr, "kvc-bench gpu: %s: %s (%s)\n", what, strerror(-rc),
		        kvc_gpu_last_error());
		exit(1);
	}
}

static void cuda_check(const struct gpu_bench *b, cudaError_t err, const char *what)
{
	if (err != cudaSuccess) {
		fprintf(stderr, "kvc-bench gpu: %s: %s\n", what, b->cuda->get_error_string(err));
		exit(1);
	}
}

/* The file's bytes: page p, 8-byte word w. */
static void pattern(uint64_t *out, uint64_t page, uint64_t p)
{
	for (uint64_t w = 0; w < page / 8; w++)
		out[w] = (p + 1) * 0x9e3779b97f4a7c15ull ^ (w * 0xff51afd7ed558ccdull);
}

static void slot_ready(struct gpu_bench *b, int slot)
{
	if (b->copying[slot])
		cuda_check(b, b->cuda->event_synchronize(b->events[slot]), "cudaEventSynchronize");
	b->copying[slot] = false;
}

/* Queue the copy of page `page` from host memory `from` (slot's). */
static void to_device(struct gpu_bench *b, int slot, const uint8_t *from, int page)
{
	cuda_check(b, b->cuda->memcpy_async(b->device + (uint64_t)page * b->page, from, b->page,
	                                    cudaMemcpyHostToDevice, b->stream), "cudaMemcpyAsync");
	cuda_check(b, b->cuda->event_record(b->events[slot], b->stream), "cudaEventRecord");
	b->copying[slot] = true;
}

/* A page landed in window slot `slot`: move it on as path p does. */
static void page_arrived(struct gpu_bench *b, enum path p, int slot, int page)
{
	uint8_t *from = (uint8_t *)kvc_iov_base(b->window) + (uint64_t)slot * b->page;
	if (p == DEVICE_IOV)
		return; /* already there */
	if (p == CONNECTOR) {
		memcpy(b->staging + (uint64_t)slot * b->page, from, b->page);
		from = b->staging + (uint64_t)slot * b->page;
	}
	to_device(b, slot, from, page);
}

/* Paths (a), (b), (c): depth ring reads in flight. Returns seconds. */
static double load_by_ring(struct gpu_bench *b, enum path p)
{
	struct kvc_completion done[MAX_DEPTH];
	bool busy[MAX_DEPTH] = {false};
	int next = 0, completed = 0, inflight = 0;
	double start = bench_now();
	while (completed < b->pages) {
		for (; inflight < b->depth && next < b->pages; next++, inflight++) {
			int slot = 0;
			while (busy[slot])
				slot++;
			slot_ready(b, slot);
			busy[slot] = true;
			struct kvc_iov *iov = p == DEVICE_IOV ? b->device_iov : b->window;
			uint8_t *ptr = p == DEVICE_IOV ? b->device + (uint64_t)next * b->page
			             : (uint8_t *)kvc_iov_base(b->window) + (uint64_t)slot * b->page;
			check(kvc_ring_prep(b->ring, iov, true, ptr, b->fd, (uint64_t)next * b->page,
			                    b->page, (void *)(uintptr_t)(slot | (uint64_t)next << 16)),
			      "prep");
		}
		kvc_ring_submit(b->ring);
		int got = kvc_ring_wait(b->ring, done, MAX_DEPTH, 1, NULL);
		check(got, "wait");
		for (int i = 0; i < got; i++) {
			uintptr_t tag = (uintptr_t)done[i].userdata;
			if (done[i].result != (int64_t)b->page)
				check(done[i].result < 0 ? (int)done[i].result : -EIO, "ring read");
			page_arrived(b, p, (int)(tag & 0xffff), (int)(tag >> 16));
			busy[tag & 0xffff] = false;
			completed++;
			inflight--;
		}
	}
	cuda_check(b, b->cuda->stream_synchronize(b->stream), "cudaStreamSynchronize");
	memset(b->copying, 0, sizeof(b->copying));
	return bench_now() - start;
}

/* Path (d): read() through the mount into two pinned buffers in turn. */
static double load_by_fuse(struct gpu_bench *b)
{
	int fd = open(b->path, O_RDONLY | O_DIRECT);
	if (fd < 0)
		bench_die(b->path);
	double start = bench_now();
	for (int p = 0; p < b->pages; p++) {
		int slot = p & 1;
		slot_ready(b, slot);
		uint8_t *buf = b->staging + (uint64_t)slot * b->page;
		for (uint64_t got = 0; got < b->page;) {
			ssize_t n = pread(fd, buf + got, b->page - got, (off_t)((uint64_t)p * b->page + got));
			if (n <= 0)
				bench_die("read through the mount");
			got += (uint64_t)n;
		}
		to_device(b, slot, buf, p);
	}
	cuda_check(b, b->cuda->stream_synchronize(b->stream), "cudaStreamSynchronize");
	memset(b->copying, 0, sizeof(b->copying));
	close(fd);
	return bench_now() - start;
}

/* The baseline: the same copies from pinned memory, with no I/O. */
static double host_to_device(struct gpu_bench *b)
{
	double start = bench_now();
	for (int p = 0; p < b->pages; p++)
		cuda_check(b, b->cuda->memcpy_async(b->device + (uint64_t)p * b->page,
		                                    b->staging + (uint64_t)(p % b->depth) * b->page,
		                                    b->page, cudaMemcpyHostToDevice, b->stream),
		           "cudaMemcpyAsync");
	cuda_check(b, b->cuda->stream_synchronize(b->stream), "cudaStreamSynchronize");
	return bench_now() - start;
}

/* Pages 0, N/2 and N-1 on the GPU hold the file's bytes. */
static void verify(struct gpu_bench *b, enum path p)
{
	uint64_t *want = malloc(b->page), *got = malloc(b->page);
	int pages[3] = {0, b->pages / 2, b->pages - 1};
	for (int i = 0; i < 3; i++) {
		pattern(want, b->page, (uint64_t)pages[i]);
		cuda_check(b, b->cuda->memcpy(got, b->device + (uint64_t)pages[i] * b->page, b->page,
		                              cudaMemcpyDeviceToHost), "cudaMemcpy");
		if (memcmp(want, got, b->page) != 0) {
			fprintf(stderr, "kvc-bench gpu: %s: page %d on the GPU differs from the file\n",
			        path_names[p], pages[i]);
			exit(1);
		}
	}
	free(want);
	free(got);
}

/* Write the test file through the ring, page by page from the window. */
static void write_file(struct gpu_bench *b)
{
	struct kvc_ring *ring;
	struct kvc_completion done[MAX_DEPTH];
	check(kvc_ring_create(&ring, b->mount, MAX_DEPTH, false, 0, 0, 0, -1, 0), "write ring");
	uint8_t *window = kvc_iov_base(b->window);
	for (int first = 0; first < b->pages; first += b->depth) {
		int n = b->pages - first < b->depth ? b->pages - first : b->depth;
		for (int i = 0; i < n; i++) {
			pattern((uint64_t *)(window + (uint64_t)i * b->page), b->page,
			        (uint64_t)(first + i));
			check(kvc_ring_prep(ring, b->window, false, window + (uint64_t)i * b->page, b->fd,
			                    (uint64_t)(first + i) * b->page, b->page, NULL), "prep write");
		}
		kvc_ring_submit(ring);
		for (int got = 0; got < n;) {
			int k = kvc_ring_wait(ring, done, MAX_DEPTH, n - got, NULL);
			check(k, "wait");
			for (int i = 0; i < k; i++)
				check(done[i].result < 0 ? (int)done[i].result : 0, "ring write");
			got += k;
		}
	}
	check(kvc_fd_sync(b->fd), "fsync");
	kvc_ring_destroy(ring);
}

static void setup(struct gpu_bench *b)
{
	const struct kvc_cuda *cuda = b->cuda;
	uint64_t bytes = (uint64_t)b->pages * b->page, window = (uint64_t)b->depth * b->page;
	snprintf(b->path, sizeof(b->path), "%s/.kvc-bench-gpu-%d", b->mount, (int)getpid());
	b->fd = open(b->path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (b->fd < 0)
		bench_die(b->path);
	check(kvc_fd_register(b->fd, 0), "register fd");
	check(kvc_iov_create(&b->window, b->mount, window, 0, -1, NULL), "shared-memory iov");
	check(kvc_ring_create(&b->ring, b->mount, MAX_DEPTH, true, 0, 0, 0, -1, 0), "read ring");
	cuda_check(b, cuda->set_device(0), "cudaSetDevice");
	cuda_check(b, cuda->malloc((void **)&b->device, bytes), "cudaMalloc");
	check(kvc_iov_wrap_device(&b->device_iov, b->device, NULL, b->mount, bytes, 0),
	      "device iov");
	cuda_check(b, cuda->host_alloc((void **)&b->staging, window, cudaHostAllocDefault),
	           "cudaHostAlloc");
	memset(b->staging, 0x3c, window);
	cuda_check(b, cuda->stream_create(&b->stream, cudaStreamNonBlocking), "stream");
	for (int i = 0; i < b->depth; i++)
		cuda_check(b, cuda->event_create(&b->events[i], cudaEventDisableTiming), "event");
	fprintf(stderr, "writing %d pages of %" PRIu64 " MiB through a ring...\n", b->pages,
	        b->page / MIB);
	write_file(b);
}

static double run_path(struct gpu_bench *b, enum path p)
{
	double seconds;
	cuda_check(b, b->cuda->memset(b->device, 0, (uint64_t)b->pages * b->page), "cudaMemset");
	cuda_check(b, b->cuda->device_synchronize(), "cudaDeviceSynchronize");
	if (p == PINNED_IOV)
		check(kvc_iov_pin(b->window), "pin the iov");
	switch (p) {
	case FUSE_READ: seconds = load_by_fuse(b); break;
	case HOST_TO_DEVICE: seconds = host_to_device(b); break;
	default: seconds = load_by_ring(b, p); break;
	}
	if (p == PINNED_IOV)
		check(kvc_iov_unpin(b->window), "unpin the iov");
	if (p != HOST_TO_DEVICE)
		verify(b, p);
	return (double)b->pages * (double)b->page / seconds / 1e9;
}

static int compare(const void *x, const void *y)
{
	double a = *(const double *)x, c = *(const double *)y;
	return a < c ? -1 : a > c;
}

static int run(const struct gpu_options *o)
{
	static struct gpu_bench b;
	b = (struct gpu_bench){.mount = o->mount, .page = o->page, .pages = o->pages,
	                       .depth = o->depth};
	const char *json = o->json;
	int repeat = o->repeat;
	b.cuda = kvc_cuda_get();
	if (!b.cuda) {
		fprintf(stderr, "kvc-bench gpu: no GPU here: %s\n", kvc_cuda_unavailable_reason());
		return 77;
	}
	setup(&b);
	static struct bench_table t = {.ratio_label = "vs (c)"};
	double runs[PATHS][100], median[PATHS];
	for (int r = 0; r < repeat; r++)
		for (int p = 0; p < PATHS; p++) {
			fprintf(stderr, "%s, run %d...\n", path_names[p], r + 1);
			runs[p][r] = run_path(&b, (enum path)p);
		}
	for (int p = 0; p < PATHS; p++) {
		qsort(runs[p], (size_t)repeat, sizeof(double), compare);
		median[p] = runs[p][repeat / 2];
	}
	for (int p = 0; p < PATHS; p++) {
		struct bench_result *row = bench_add(&t, "%s", path_names[p]);
		row->gbps = median[p];
		row->ratio = median[p] / median[CONNECTOR];
	}
	double best = median[DEVICE_IOV] > median[PINNED_IOV] ? median[DEVICE_IOV]
	                                                       : median[PINNED_IOV];
	bench_add(&t, "TARGET best of (a),(b) / (c) (>=1.3)")->ratio = best / median[CONNECTOR];
	bench_add(&t, "  (a) / pinned host-to-device")->ratio = median[DEVICE_IOV] /
	                                                         median[HOST_TO_DEVICE];
	printf("%d pages of %" PRIu64 " MiB, depth %d, median of %d runs\n", b.pages,
	       b.page / MIB, b.depth, repeat);
	kvc_iov_destroy(b.device_iov);
	kvc_iov_destroy(b.window);
	kvc_ring_destroy(b.ring);
	b.cuda->free(b.device);
	b.cuda->free_host(b.staging);
	kvc_fd_deregister(b.fd);
	close(b.fd);
	unlink(b.path);
	bench_report(&t, json);
	return 0;
}

#else

static int run(const struct gpu_options *o)
{
	(void)o;
	fprintf(stderr, "kvc-bench gpu: %s\n", kvc_cuda_unavailable_reason());
	return 77;
}

#endif

static const char usage[] =
	"usage: kvc-bench gpu [--mount DIR] [--pages N] [--page-size BYTES] [--depth D]\n"
	"                     [--repeat R] [--json FILE]\n"
	"KV pages of a kvcfs file into GPU memory by each path (device iov,\n"
	"pinned iov, today's connectors, FUSE read) against the pinned\n"
	"host-to-device copy; exits 77 where there is no GPU.\n"
	"  -m, --mount DIR            the kvcfs mount (default /mnt/kvc)\n"
	"  -n, --pages N              pages, 3..65535 (default 256)\n"
	"  -p, --page-size BYTES      a multiple of 4 KiB (default 8M)\n"
	"  -d, --depth D              reads in flight, 2..128 (default 32)\n"
	"  -r, --repeat R             runs of each path, 1..100; the median counts (default 3)\n"
	"  -j, --json FILE            write the table as JSON too\n"
	"  -h, --help                 this text\n";

int bench_gpu_main(int argc, char **argv)
{
	static const struct option options[] = {{"mount", required_argument, 0, 'm'},
	                                        {"pages", required_argument, 0, 'n'},
	                                        {"page-size", required_argument, 0, 'p'},
	                                        {"depth", required_argument, 0, 'd'},
	                                        {"repeat", required_argument, 0, 'r'},
	                                        {"json", required_argument, 0, 'j'},
	                                        {0, 0, 0, 0}};
	static const struct kvc_cli cli = {"kvc-bench gpu", usage, "m:n:p:d:r:j:", options, 0};
	struct gpu_options o = {.mount = "/mnt/kvc", .page = 8 * MIB, .pages = 256, .depth = 32,
	                        .repeat = 3};
	int opt;
	while ((opt = kvc_cli_next(&cli, argc, argv)) > 0) {
		switch (opt) {
		case 'm': o.mount = optarg; break;
		case 'n': o.pages = atoi(optarg); break;
		case 'p': o.page = bench_parse_size(optarg); break;
		case 'd': o.depth = atoi(optarg); break;
		case 'r': o.repeat = atoi(optarg); break;
		case 'j': o.json = optarg; break;
		}
	}
	if (opt != KVC_CLI_END)
		return kvc_cli_status(opt);
	if (optind < argc)
		return kvc_cli_fail(&cli, "unexpected argument '%s'", argv[optind]);
	if (o.pages < 3 || o.pages > 65535 || o.depth < 2 || o.depth > MAX_DEPTH ||
	    o.page < 4096 || o.page % 4096 || o.repeat < 1 || o.repeat > 100)
		return kvc_cli_fail(&cli, "--pages 3..65535, --depth 2..%d, --page-size a multiple "
		                    "of 4 KiB, --repeat 1..100", MAX_DEPTH);
	return run(&o);
}
