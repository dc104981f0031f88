/*
 * bench gpu: kvc-bench gpu [--mount DIR] [--pages N] [--page-size BYTES]
 *                          [--depth D] [--repeat R] [--json FILE]
 *                          [--tcp-mount DIR] [--local-dir DIR] [--threads N]
 *                          [--seconds S]
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
 *
 * Transports (client/transport.h), in the same run: the mount's paths go
 * by same-host placement where kvc-fuse and the storage servers share the
 * host; with --tcp-mount (another kvc-fuse of the cluster whose cluster
 * file says `transport = tcp`), (a) and (b) run on it too, reading the
 * same file (written once through the mount), as their own rows "... by
 * TCP". The page-cache baseline (bench_page_cache: threads pread 16 MiB
 * blocks of a warm local file into a large buffer) is measured once in
 * the same run; (a) is set against it, against the pinned host-to-device
 * copy, and against (a) by TCP.
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
	const char *mount, *json, *tcp_mount, *local_dir;
	uint64_t page;
	int pages, depth, repeat, threads;
	double seconds;
};

#if defined(KVC_HAVE_CUDA)

/* What a path does (its `how`). */
enum how { DEVICE_IOV, PINNED_IOV, CONNECTOR, FUSE_READ, HOST_TO_DEVICE };

enum path { A, B, C, D, H2D, A_TCP, B_TCP, PATHS };

/* The rows, in the table's order: what each does, and on which mount. */
static const struct path_info {
	const char *name;
	enum how how;
	bool tcp; /* on the --tcp-mount (skipped without one) */
} paths[PATHS] = {
	[A] = {"(a) device iov filled by kvc-fuse", DEVICE_IOV, false},
	[B] = {"(b) pinned iov + cudaMemcpyAsync", PINNED_IOV, false},
	[C] = {"(c) connector: iov, memcpy to pinned, copy", CONNECTOR, false},
	[D] = {"(d) FUSE read() to pinned, copy", FUSE_READ, false},
	[H2D] = {"pinned host-to-device copy (baseline)", HOST_TO_DEVICE, false},
	[A_TCP] = {"(a) device iov filled by kvc-fuse, by TCP", DEVICE_IOV, true},
	[B_TCP] = {"(b) pinned iov + cudaMemcpyAsync, by TCP", PINNED_IOV, true},
};

/* One kvc-fuse's side of the test file: the file opened through it, its
 * iovs and its read ring. Owned by struct gpu_bench. */
struct gpu_mount {
	const char *mount;
	char path[4096];
	int fd;
	struct kvc_iov *device_iov; /* wraps the bench's device memory */
	struct kvc_iov *window;     /* depth pages of shared memory */
	struct kvc_ring *ring;
};

struct gpu_bench {
	struct gpu_mount main;      /* --mount: placement where it can */
	struct gpu_mount tcp;       /* --tcp-mount; tcp.mount NULL without */
	uint64_t page;
	int pages, depth;
	const struct kvc_cuda *cuda;
	uint8_t *device;            /* pages * page of GPU memory */
	uint8_t *staging;           /* depth pages of pinned memory ((c), (d), baseline) */
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

/* A page landed in m's window slot `slot`: move it on as `how` does. */
static void page_arrived(struct gpu_bench *b, struct gpu_mount *m, enum how how, int slot,
                         int page)
{
	uint8_t *from = (uint8_t *)kvc_iov_base(m->window) + (uint64_t)slot * b->page;
	if (how == DEVICE_IOV)
		return; /* already there */
	if (how == CONNECTOR) {
		memcpy(b->staging + (uint64_t)slot * b->page, from, b->page);
		from = b->staging + (uint64_t)slot * b->page;
	}
	to_device(b, slot, from, page);
}

/* Paths (a), (b), (c): depth ring reads in flight through m. Returns
 * seconds. */
static double load_by_ring(struct gpu_bench *b, struct gpu_mount *m, enum how how)
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
			struct kvc_iov *iov = how == DEVICE_IOV ? m->device_iov : m->window;
			uint8_t *ptr = how == DEVICE_IOV ? b->device + (uint64_t)next * b->page
			             : (uint8_t *)kvc_iov_base(m->window) + (uint64_t)slot * b->page;
			check(kvc_ring_prep(m->ring, iov, true, ptr, m->fd, (uint64_t)next * b->page,
			                    b->page, (void *)(uintptr_t)(slot | (uint64_t)next << 16)),
			      "prep");
		}
		kvc_ring_submit(m->ring);
		int got = kvc_ring_wait(m->ring, done, MAX_DEPTH, 1, NULL);
		check(got, "wait");
		for (int i = 0; i < got; i++) {
			uintptr_t tag = (uintptr_t)done[i].userdata;
			if (done[i].result != (int64_t)b->page)
				check(done[i].result < 0 ? (int)done[i].result : -EIO, "ring read");
			page_arrived(b, m, how, (int)(tag & 0xffff), (int)(tag >> 16));
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
	int fd = open(b->main.path, O_RDONLY | O_DIRECT);
	if (fd < 0)
		bench_die(b->main.path);
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
			        paths[p].name, pages[i]);
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
	struct gpu_mount *m = &b->main;
	check(kvc_ring_create(&ring, m->mount, MAX_DEPTH, false, 0, 0, 0, -1, 0), "write ring");
	uint8_t *window = kvc_iov_base(m->window);
	for (int first = 0; first < b->pages; first += b->depth) {
		int n = b->pages - first < b->depth ? b->pages - first : b->depth;
		for (int i = 0; i < n; i++) {
			pattern((uint64_t *)(window + (uint64_t)i * b->page), b->page,
			        (uint64_t)(first + i));
			check(kvc_ring_prep(ring, m->window, false, window + (uint64_t)i * b->page, m->fd,
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
	check(kvc_fd_sync(m->fd), "fsync");
	kvc_ring_destroy(ring);
}

/* Open the test file through m's kvc-fuse (creating it when `create`),
 * and make m's read ring, window and device iov (over b->device). */
static void mount_open(struct gpu_bench *b, struct gpu_mount *m, const char *name, bool create)
{
	uint64_t bytes = (uint64_t)b->pages * b->page, window = (uint64_t)b->depth * b->page;
	snprintf(m->path, sizeof(m->path), "%s/%s", m->mount, name);
	m->fd = create ? open(m->path, O_RDWR | O_CREAT | O_TRUNC, 0644) : open(m->path, O_RDONLY);
	if (m->fd < 0)
		bench_die(m->path);
	check(kvc_fd_register(m->fd, 0), "register fd");
	check(kvc_iov_create(&m->window, m->mount, window, 0, -1, NULL), "shared-memory iov");
	check(kvc_iov_unlink(m->window), "shared-memory iov"); /* nothing left if killed */
	check(kvc_ring_create(&m->ring, m->mount, MAX_DEPTH, true, 0, 0, 0, -1, 0), "read ring");
	check(kvc_iov_wrap_device(&m->device_iov, b->device, NULL, m->mount, bytes, 0),
	      "device iov");
}

static void mount_close(struct gpu_mount *m)
{
	kvc_iov_destroy(m->device_iov);
	kvc_iov_destroy(m->window);
	kvc_ring_destroy(m->ring);
	kvc_fd_deregister(m->fd);
	close(m->fd);
}

static void setup(struct gpu_bench *b)
{
	const struct kvc_cuda *cuda = b->cuda;
	uint64_t bytes = (uint64_t)b->pages * b->page, window = (uint64_t)b->depth * b->page;
	char name[64];
	snprintf(name, sizeof(name), ".kvc-bench-gpu-%d", (int)getpid());
	cuda_check(b, cuda->set_device(0), "cudaSetDevice");
	cuda_check(b, cuda->malloc((void **)&b->device, bytes), "cudaMalloc");
	mount_open(b, &b->main, name, true);
	cuda_check(b, cuda->host_alloc((void **)&b->staging, window, cudaHostAllocDefault),
	           "cudaHostAlloc");
	memset(b->staging, 0x3c, window);
	cuda_check(b, cuda->stream_create(&b->stream, cudaStreamNonBlocking), "stream");
	for (int i = 0; i < b->depth; i++)
		cuda_check(b, cuda->event_create(&b->events[i], cudaEventDisableTiming), "event");
	fprintf(stderr, "writing %d pages of %" PRIu64 " MiB through a ring...\n", b->pages,
	        b->page / MIB);
	write_file(b);
	/* The same file, read through the other kvc-fuse. */
	if (b->tcp.mount)
		mount_open(b, &b->tcp, name, false);
}

typedef double (*loader)(struct gpu_bench *b, struct gpu_mount *m, enum how how);

static double load_by_fuse_path(struct gpu_bench *b, struct gpu_mount *m, enum how how)
{
	(void)m, (void)how;
	return load_by_fuse(b);
}

static double host_to_device_path(struct gpu_bench *b, struct gpu_mount *m, enum how how)
{
	(void)m, (void)how;
	return host_to_device(b);
}

static const loader loaders[] = {
	[DEVICE_IOV] = load_by_ring,
	[PINNED_IOV] = load_by_ring,
	[CONNECTOR] = load_by_ring,
	[FUSE_READ] = load_by_fuse_path,
	[HOST_TO_DEVICE] = host_to_device_path,
};

/* One run of path p: GB/s, its result checked on the GPU. */
static double run_path(struct gpu_bench *b, enum path p)
{
	const struct path_info *info = &paths[p];
	struct gpu_mount *m = info->tcp ? &b->tcp : &b->main;
	cuda_check(b, b->cuda->memset(b->device, 0, (uint64_t)b->pages * b->page), "cudaMemset");
	cuda_check(b, b->cuda->device_synchronize(), "cudaDeviceSynchronize");
	if (info->how == PINNED_IOV)
		check(kvc_iov_pin(m->window), "pin the iov");
	double seconds = loaders[info->how](b, m, info->how);
	if (info->how == PINNED_IOV)
		check(kvc_iov_unpin(m->window), "unpin the iov");
	if (info->how != HOST_TO_DEVICE)
		verify(b, p);
	return (double)b->pages * (double)b->page / seconds / 1e9;
}

static int compare(const void *x, const void *y)
{
	double a = *(const double *)x, c = *(const double *)y;
	return a < c ? -1 : a > c;
}

/* The page-cache baseline's file: about the test file's size (whole
 * 16 MiB blocks, at least 256 MiB). */
static uint64_t page_cache_file_size(const struct gpu_bench *b)
{
	uint64_t size = (uint64_t)b->pages * b->page / (16 * MIB) * (16 * MIB);
	return size < 256 * MIB ? 256 * MIB : size;
}

/* The table: every path measured, the page-cache baseline, the ratios. */
static void add_rows(struct bench_table *t, const struct gpu_bench *b, const double *median,
                     double page_cache, int threads)
{
	bool tcp = b->tcp.mount != NULL;
	for (int p = 0; p < PATHS; p++) {
		if (paths[p].tcp && !tcp)
			continue;
		struct bench_result *row = bench_add(t, "%s", paths[p].name);
		row->gbps = median[p];
		row->ratio = median[p] / median[C];
	}
	bench_add(t, "page cache: %d threads pread 16M blocks of a warm file", threads)->gbps =
		page_cache;
	double best = median[A] > median[B] ? median[A] : median[B];
	bench_add(t, "TARGET best of (a),(b) / (c) (>=1.3)")->ratio = best / median[C];
	bench_add(t, "TARGET (a) / pinned host-to-device (>=0.5)")->ratio = median[A] / median[H2D];
	bench_add(t, "  (b) / pinned host-to-device")->ratio = median[B] / median[H2D];
	bench_add(t, "  (a) / page cache")->ratio = median[A] / page_cache;
	if (!tcp)
		return;
	bench_add(t, "  (a) by TCP / pinned host-to-device")->ratio = median[A_TCP] / median[H2D];
	bench_add(t, "  (b) by TCP / pinned host-to-device")->ratio = median[B_TCP] / median[H2D];
	bench_add(t, "  (a) by TCP / page cache")->ratio = median[A_TCP] / page_cache;
	bench_add(t, "  (a) placement / TCP")->ratio = median[A] / median[A_TCP];
	bench_add(t, "  (b) placement / TCP")->ratio = median[B] / median[B_TCP];
}

static int run(const struct gpu_options *o)
{
	static struct gpu_bench b;
	b = (struct gpu_bench){.main.mount = o->mount, .tcp.mount = o->tcp_mount, .page = o->page,
	                       .pages = o->pages, .depth = o->depth};
	int repeat = o->repeat;
	b.cuda = kvc_cuda_get();
	if (!b.cuda) {
		fprintf(stderr, "kvc-bench gpu: no GPU here: %s\n", kvc_cuda_unavailable_reason());
		return 77;
	}
	setup(&b);
	static struct bench_table t = {.ratio_label = "vs (c)"};
	static double runs[PATHS][100];
	double median[PATHS] = {0};
	fprintf(stderr, "page-cache baseline (%d threads, %s)...\n", o->threads, o->local_dir);
	double page_cache = bench_page_cache(o->local_dir, page_cache_file_size(&b), o->threads,
	                                     o->seconds);
	for (int r = 0; r < repeat; r++)
		for (int p = 0; p < PATHS; p++) {
			if (paths[p].tcp && !b.tcp.mount)
				continue;
			fprintf(stderr, "%s, run %d...\n", paths[p].name, r + 1);
			runs[p][r] = run_path(&b, (enum path)p);
		}
	for (int p = 0; p < PATHS; p++) {
		qsort(runs[p], (size_t)repeat, sizeof(double), compare);
		median[p] = runs[p][repeat / 2];
	}
	add_rows(&t, &b, median, page_cache, o->threads);
	printf("%d pages of %" PRIu64 " MiB, depth %d, median of %d runs; mount %s%s%s\n",
	       b.pages, b.page / MIB, b.depth, repeat, b.main.mount,
	       b.tcp.mount ? ", by TCP " : "", b.tcp.mount ? b.tcp.mount : "");
	if (b.tcp.mount)
		mount_close(&b.tcp);
	mount_close(&b.main);
	unlink(b.main.path);
	b.cuda->free(b.device);
	b.cuda->free_host(b.staging);
	bench_report(&t, o->json);
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
	"                     [--repeat R] [--json FILE] [--tcp-mount DIR]\n"
	"                     [--local-dir DIR] [--threads N] [--seconds S]\n"
	"KV pages of a kvcfs file into GPU memory by each path (device iov,\n"
	"pinned iov, today's connectors, FUSE read) against the pinned\n"
	"host-to-device copy and a page-cache read baseline measured in the same\n"
	"run; with --tcp-mount, (a) and (b) by TCP too; exits 77 where there is\n"
	"no GPU.\n"
	"  -m, --mount DIR            the kvcfs mount (default /mnt/kvc)\n"
	"  -n, --pages N              pages, 3..65535 (default 256)\n"
	"  -p, --page-size BYTES      a multiple of 4 KiB (default 8M)\n"
	"  -d, --depth D              reads in flight, 2..128 (default 32)\n"
	"  -r, --repeat R             runs of each path, 1..100; the median counts (default 3)\n"
	"  -j, --json FILE            write the table as JSON too\n"
	"  -t, --tcp-mount DIR        another kvc-fuse of the cluster with transport = tcp:\n"
	"                             (a) and (b) through it too (rows \"... by TCP\")\n"
	"  -l, --local-dir DIR        where the page-cache baseline's file goes (default /var/tmp)\n"
	"  -T, --threads N            the baseline's threads, 1..64 (default 8)\n"
	"  -s, --seconds S            how long the baseline runs, 0.1..600 (default 3)\n"
	"  -h, --help                 this text\n";

int bench_gpu_main(int argc, char **argv)
{
	static const struct option options[] = {{"mount", required_argument, 0, 'm'},
	                                        {"pages", required_argument, 0, 'n'},
	                                        {"page-size", required_argument, 0, 'p'},
	                                        {"depth", required_argument, 0, 'd'},
	                                        {"repeat", required_argument, 0, 'r'},
	                                        {"json", required_argument, 0, 'j'},
	                                        {"tcp-mount", required_argument, 0, 't'},
	                                        {"local-dir", required_argument, 0, 'l'},
	                                        {"threads", required_argument, 0, 'T'},
	                                        {"seconds", required_argument, 0, 's'},
	                                        {0, 0, 0, 0}};
	static const struct kvc_cli cli = {"kvc-bench gpu", usage, "m:n:p:d:r:j:t:l:T:s:", options,
	                                   0};
	struct gpu_options o = {.mount = "/mnt/kvc", .page = 8 * MIB, .pages = 256, .depth = 32,
	                        .repeat = 3, .local_dir = "/var/tmp", .threads = 8,
	                        .seconds = 3};
	int opt;
	while ((opt = kvc_cli_next(&cli, argc, argv)) > 0) {
		switch (opt) {
		case 'm': o.mount = optarg; break;
		case 'n': o.pages = atoi(optarg); break;
		case 'p': o.page = bench_parse_size(optarg); break;
		case 'd': o.depth = atoi(optarg); break;
		case 'r': o.repeat = atoi(optarg); break;
		case 'j': o.json = optarg; break;
		case 't': o.tcp_mount = optarg; break;
		case 'l': o.local_dir = optarg; break;
		case 'T': o.threads = atoi(optarg); break;
		case 's': o.seconds = atof(optarg); break;
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
	if (o.threads < 1 || o.threads > 64 || !(o.seconds >= 0.1 && o.seconds <= 600))
		return kvc_cli_fail(&cli, "--threads 1..64, --seconds 0.1..600");
	return run(&o);
}
