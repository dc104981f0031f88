/*
 * kvc-bench: benchmarks of a running kvcfs cluster. Each prints a table,
 * writes JSON with --json FILE, and measures its baseline in the same run.
 *
 *   kvc-bench fs   [options]   the FUSE path against the TCP ceiling
 *   kvc-bench ring [options]   USRBIO rings against FUSE and TCP
 *   kvc-bench meta [options]   page pools over HTTP and the binary protocol
 *   kvc-bench gpu  [options]   KV pages into GPU memory by each path
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "bench/fs.h"
#include "bench/gpu.h"
#include "bench/meta.h"
#include "bench/ring.h"

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	if (argc >= 2 && strcmp(argv[1], "fs") == 0)
		return bench_fs_main(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "ring") == 0)
		return bench_ring_main(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "meta") == 0)
		return bench_meta_main(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "gpu") == 0)
		return bench_gpu_main(argc - 1, argv + 1);
	fprintf(stderr,
	        "usage: kvc-bench fs   [--mount DIR] [--size BYTES] [--random-seconds S] [--json FILE]\n"
	        "       kvc-bench ring [--mount DIR] [--file-size BYTES] [--seconds S] [--json FILE]\n"
	        "       kvc-bench meta [--config FILE] [--http HOST:PORT] [--seconds S] [--json FILE]\n"
	        "       kvc-bench gpu  [--mount DIR] [--pages N] [--page-size BYTES] [--depth D]\n"
	        "                      [--repeat R] [--json FILE]\n");
	return 2;
}
