/*
 * usrbio_control: libkvc's control connections to kvc-fuse, one per mount
 * per process, opened on first use and again after kvc-fuse restarted
 * (src/client/usrbio.c's header gives the rest of libkvc's USRBIO state).
 *
 * Whom it talks to: the control socket's name is predictable (an abstract
 * Unix socket, src/core/control_socket.h), so another user could bind it
 * first. Before sending anything, a connection's peer (SO_PEERCRED) must
 * be root or the mount's owner (the user_id of the FUSE mount); else the
 * connection fails with -EACCES and not a byte, let alone a descriptor,
 * was sent.
 *
 * Thread-safe: the list of connections has its own mutex; each
 * connection's lock makes its exchanges one at a time.
 */
#ifndef KVC_USRBIO_CONTROL_H
#define KVC_USRBIO_CONTROL_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct kvc_usrbio_control {
	struct kvc_usrbio_control *next;
	char mount[PATH_MAX];
	pthread_mutex_t lock; /* the fields below; one exchange at a time */
	int fd;
	uint64_t next_id;
	uint64_t generation; /* +1 each time kvc-fuse restarted and we reconnected */
};

/* The control connection of the mount containing path (connected now if
 * it was not, or if kvc-fuse restarted). Returns 0, -ENOENT (no kvcfs
 * mount there), -ECONNREFUSED (kvc-fuse not serving), -EACCES (the socket
 * is served by a process neither root nor the mount's owner), -ENOMEM. */
int kvc_usrbio_control_get(const char *path, struct kvc_usrbio_control **out);

/* One request (with pass_count fds) and its reply. *got_fd (may be NULL)
 * receives the one fd a reply may carry, or -1. Returns the reply's
 * status, or -ECONNREFUSED (kvc-fuse went away), -EBADMSG, -errno. */
int kvc_usrbio_control_call(struct kvc_usrbio_control *c, uint16_t type, const void *body,
                            uint32_t body_len, const int *pass, int pass_count, void *reply,
                            uint32_t reply_cap, int *got_fd);

/* Whether registrations made at `generation` are still kvc-fuse's (it did
 * not restart since). */
bool kvc_usrbio_control_current(struct kvc_usrbio_control *c, uint64_t generation);

/* Deregister a handle, unless the kvc-fuse it was registered with is gone
 * (the number may name a newer registration now). */
void kvc_usrbio_control_deregister(struct kvc_usrbio_control *c, uint16_t type,
                                   uint64_t generation, uint32_t handle);

/* Whether kvc-fuse is gone: its end of the connection closed. */
bool kvc_usrbio_control_lost(const struct kvc_usrbio_control *c);

#endif
