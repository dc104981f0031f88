/*
 * bench fs: the FUSE path measured with plain syscalls on the mount.
 */
#ifndef KVC_BENCH_FS_H
#define KVC_BENCH_FS_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"

/* GB/s moving `bytes` of path in io_size requests, with `threads`
 * threads each on its own share of the file (1 = the usual dd). Writes
 * create the file; buffered writes end with fsync. Reads open the file
 * anew, which drops kvc-fuse's page cache for it. */
double bench_fuse_sequential(const char *path, uint64_t bytes, uint64_t io_size, bool write,
                             bool direct, int threads);

/* 4 KiB O_DIRECT random reads of path (size bytes) at depth 1 for
 * `seconds`: IOPS and latency percentiles into r. */
void bench_fuse_random(const char *path, uint64_t size, double seconds, struct bench_result *r);

int bench_fs_main(int argc, char **argv);

#endif
