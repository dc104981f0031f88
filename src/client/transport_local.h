/*
 * transport_local: same-host reads without a message. Where a storage
 * server on this host keeps a target that is its chain's only copy in a
 * table that never changes (the embedded cluster: replicas = 1, no
 * managers), the client asks it once, on the placement socket
 * (PLACE_LOCAL, authenticated and SO_PEERCRED-checked as placement is),
 * for the target's directory and its change counters, and then reads
 * that target's chunks itself: the record from the target's LMDB index
 * (opened read-only), the bytes from the chunk file with pread straight
 * into the caller's memory, each 16 KiB block checked against its crc32c
 * there. No request, no server thread, no wake-up: one kernel copy and
 * the check, where placement costs a message, a server thread's copy and
 * two wake-ups. Only what the page cache holds (RWF_NOWAIT): kvc-fuse
 * never waits on a disk, and data on disk only is the server's to read
 * (its io_uring, or O_DIRECT with `storage_direct_reads`), as before.
 *
 * Consistency: every change of a chunk (write, truncate, punch, remove,
 * resync or repair set) is made under the exclusive side of its chunk
 * lock, which moves the lock slot's change counter before and after
 * (odd while held: core/chunk_format.h, storage/chunk_store.h). A read
 * takes the slot's count first (odd: not here), reads the record and the
 * bytes, and takes it again: a different count means a change may have
 * been made meanwhile, and the piece goes the usual way (placement or
 * TCP), which rewrites its destination with the server's bytes. The
 * counters live only as long as the server process that made them; the
 * client watches that process (a pidfd of the socket's peer) and checks,
 * after each read, that it is still running: a server that died (and a
 * new one that took the target since) turns local reads of its targets
 * off until the client has asked the new one. Two assumptions: the
 * process listening on the placement socket (SO_PEERCRED's pid) is the
 * kvc-storage serving the target (no socket activation), and one
 * kvc-storage serves a target (as the cluster file says; two would race
 * on its chunks anyway).
 *
 * Failures are never an io's: a crc mismatch, a changed count, a record
 * or file that cannot be read, bytes not cached, memory that faulted, a hole where the
 * caller forbids holes: the piece goes the usual way, where the server
 * answers what it answers today (-EIO and a repair for a bad block,
 * -EFAULT for memory gone). Counted in PREFIX_transport_local_*.
 *
 * Thread-safe. Lock order: a target's `use` lock (read side across a
 * local read, write side to set it up or tear it down: tried, never
 * waited for, by a reader that finds the target not set up) is taken
 * with no other lock of the client held; setting up takes the server's
 * placement lock under it (transport_place.c), only to check placement
 * is on, and the PLACE_LOCAL exchange runs on a pooled connection with
 * no lock but `use` held.
 */
#ifndef KVC_CLIENT_TRANSPORT_LOCAL_H
#define KVC_CLIENT_TRANSPORT_LOCAL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/wire.h"

struct kvc_storage_client;
struct kvc_config;
struct kvc_metrics;

/* Set up local reads for client (off with `local_reads = off` or
 * `transport = tcp`). kvc-fuse calls it; the storage clients of other
 * programs (kvc-storage's peers, kvc-meta, the tools) never read a
 * target's files themselves. Returns 0 or -ENOMEM. */
int kvc_transport_local_init(struct kvc_storage_client *client, const struct kvc_config *config);
void kvc_transport_local_destroy(struct kvc_storage_client *client);

/* Whether pieces of target (on server, placement to it ready) are read
 * here: asks the server once (set-up), never waits for another thread's
 * set-up (false meanwhile). */
bool kvc_transport_local_ready(struct kvc_storage_client *client, uint32_t server,
                               uint32_t target);

/* Read piece (on a target of server, a server placement is ready for)
 * into dst (piece->length bytes, every one written: holes as zeros;
 * forbid_holes: a piece with a hole is left to the usual way). Returns
 * true when done, false when the piece must go the usual way (dst may
 * have been written: the usual way writes it again). */
bool kvc_transport_local_read(struct kvc_storage_client *client, uint32_t server,
                              const struct kvc_msg_piece *piece, uint8_t *dst, bool forbid_holes);

/* Register PREFIX_transport_local_reads_total, _local_bytes_total and
 * _local_misses_total (pieces tried here that went the usual way).
 * Returns 0 or -ENOMEM. */
int kvc_transport_local_metrics(struct kvc_storage_client *client, struct kvc_metrics *registry,
                                const char *prefix);

#endif
