/*
 * usrbio_limits: what the USRBIO clients of one uid may hold in kvc-fuse
 * at once, over all their processes and connections ([fuse] usrbio_uid_*
 * in the cluster file, docs/operations.md): bytes of iov memory mapped,
 * rings, registrations (iovs and fds), and control connections (taken at
 * accept, before a connection has a thread or sent a byte). The uid is the control socket
 * peer's (SO_PEERCRED), so a process cannot claim another's.
 *
 * Owns a table of the uids that hold something now (an entry goes when
 * its uid holds nothing). Thread-safe: one mutex, a leaf lock (nothing
 * else is taken, and no system call is made, while it is held).
 */
#ifndef KVC_FUSE_USRBIO_LIMITS_H
#define KVC_FUSE_USRBIO_LIMITS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* An amount of each resource (a charge, a limit, or a uid's usage). */
struct kvc_usrbio_usage {
	uint64_t iov_bytes;
	uint64_t rings;
	uint64_t registrations; /* iovs + registered fds */
	uint64_t connections;   /* control socket connections open */
};

struct kvc_usrbio_limits {
	struct kvc_usrbio_usage max; /* per uid */
	pthread_mutex_t lock;
	struct kvc_usrbio_uid_usage *uids; /* capacity entries, count used */
	size_t count, capacity;
};

/* Set up with the per-uid maxima. Returns 0 or -errno. */
int kvc_usrbio_limits_init(struct kvc_usrbio_limits *limits, const struct kvc_usrbio_usage *max);
void kvc_usrbio_limits_destroy(struct kvc_usrbio_limits *limits);

/* Charge uid with `add`, all of it or nothing: -EDQUOT when any resource
 * would pass its maximum, -ENOMEM. Returns 0 when charged. */
int kvc_usrbio_limits_charge(struct kvc_usrbio_limits *limits, uid_t uid,
                             const struct kvc_usrbio_usage *add);

/* Give back what a charge took (never more than uid holds). */
void kvc_usrbio_limits_release(struct kvc_usrbio_limits *limits, uid_t uid,
                               const struct kvc_usrbio_usage *sub);

/* What uid holds now (zeros when nothing). */
void kvc_usrbio_limits_usage(struct kvc_usrbio_limits *limits, uid_t uid,
                             struct kvc_usrbio_usage *out);

#endif
