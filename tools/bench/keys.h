/*
 * bench keys: one file per cache key, as file-per-key connectors use a
 * directory: create + write + close, read, stat and unlink of many small
 * files through the mount, against the same loop on a local directory
 * measured in the same run.
 */
#ifndef KVC_BENCH_KEYS_H
#define KVC_BENCH_KEYS_H

#include <sys/types.h>

#include "common.h"

int bench_keys_main(int argc, char **argv);

/* --ring (keys_ring.c): the keys through USRBIO ring key operations from
 * one process, batch entries a submission and depth submissions in
 * flight, with 1 and with segs segments per key; get and exists `rounds`
 * times each (the median round is reported). Returns the exit status. */
#define BENCH_KEYS_MAX_ROUNDS 20
int bench_keys_ring(const char *mount, uint64_t keys, size_t size, int batch, int depth,
                    int segs, int rounds, const char *json);

/* --floor (keys_floor.c): a null FUSE filesystem, mounted by a child
 * process at a fresh directory under $TMPDIR or /tmp (written to point)
 * with kvc-fuse's mount options, that answers every request at once from
 * memory: the same phases there measure what the kernel's FUSE round trips
 * alone cost on this machine. Mount returns 0 or -errno; unmount stops the
 * child, removes point and returns 0 or -errno. */
int bench_keys_floor_mount(char *point, size_t len, pid_t *child);
int bench_keys_floor_unmount(const char *point, pid_t child);

#endif
