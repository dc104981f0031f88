/*
 * rpc: client connections to one kvcfs server (kvc-meta or a kvc-storage).
 * A pool keeps idle, already authenticated connections (the handshake of
 * core/auth.h, with the pool's credential) to one address; a caller
 * takes one for a request and gives it back when the exchange completed
 * cleanly, or drops it after any transport error, so a connection is never
 * reused in an unknown state. Thread-safe; many requests to one server run
 * in parallel on separate connections.
 *
 * Every connect and every send/receive is bounded by the pool's timeouts,
 * so a dead or stopped server turns into -ECONNREFUSED / -ETIMEDOUT, never
 * a hang.
 */
#ifndef KVC_RPC_H
#define KVC_RPC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/auth.h"
#include "core/net.h"
#include "core/wire.h"

#define KVC_RPC_MAX_IDLE 64

struct kvc_rpc_pool {
	char address[KVC_NET_ADDRESS_MAX];
	struct kvc_auth_cred cred; /* what this pool proves to the server */
	int connect_timeout_ms;
	int io_timeout_ms;
	pthread_mutex_t lock; /* protects idle and idle_count */
	int idle[KVC_RPC_MAX_IDLE];
	int idle_count;
	atomic_uint_fast64_t next_request_id;
	/* Sent on every new connection after the handshake when set (kvc-fuse's
	 * connections to kvc-meta act for its client id: CLIENT_HELLO). */
	bool has_hello;
	struct kvc_msg_client_hello hello;
	/* How long a call goes on trying to connect when no connection can
	 * be made (0: one try). kvc_rpc_pool_set_reconnect. */
	int reconnect_ms;
};

/* cred (copied) is what every connection proves; role none only for a
 * server that takes no credentials. Returns 0 or -EINVAL (address too
 * long, a role without its key). */
int kvc_rpc_pool_init(struct kvc_rpc_pool *pool, const char *address,
                      const struct kvc_auth_cred *cred, int connect_timeout_ms,
                      int io_timeout_ms);
void kvc_rpc_pool_destroy(struct kvc_rpc_pool *pool);

/* An authenticated connection: an idle one, or a new one (connect and
 * handshake). *reused says which. Returns the fd, or -ECONNREFUSED,
 * -ETIMEDOUT, -EACCES (the server refused our proof, or did not prove
 * that it holds the secret: then it is no server of this cluster, and
 * nothing was sent to it), -EPROTO (version refused), -EBADMSG, -errno. */
int kvc_rpc_pool_get(struct kvc_rpc_pool *pool, bool *reused);

/* Give a connection back (healthy) or close it (after any error). */
void kvc_rpc_pool_put(struct kvc_rpc_pool *pool, int fd, bool healthy);

/* Send hello (CLIENT_HELLO) on every connection made from now on; call
 * before the pool is used. */
void kvc_rpc_pool_set_hello(struct kvc_rpc_pool *pool, const struct kvc_msg_client_hello *hello);

/* Calls that find no connection (the server restarting: refused; a link
 * just back whose neighbour is still unresolved: unreachable; a handshake
 * cut or timed out) try again, 20 ms later and doubling up to 500 ms,
 * while the next try starts before ms after the call began (a try itself
 * may take up to the connect and I/O bounds): nothing was sent, so any
 * request may be. An answer in the handshake (a refused version, a full
 * server, a wrong secret) is not tried again. 0 (the default): one try. */
void kvc_rpc_pool_set_reconnect(struct kvc_rpc_pool *pool, int ms);

/* Close every idle connection (after the server was seen restarting). */
void kvc_rpc_pool_drain(struct kvc_rpc_pool *pool);

/* A request id for a new frame. */
uint64_t kvc_rpc_next_id(struct kvc_rpc_pool *pool);

/* One exchange without data sections: send (type, body), receive the reply
 * body into reply (capacity reply_cap), *reply_len its length. A stale
 * idle connection (the server restarted) is retried once on a new one.
 * Returns the server's status (0 or -errno) or a transport -errno. */
int kvc_rpc_call(struct kvc_rpc_pool *pool, uint16_t type, const void *body,
                 uint32_t body_len, void *reply, uint32_t reply_cap,
                 uint32_t *reply_len);
/* How long kvc_rpc_call_waiting waits for an answer: up to wait_ms past
 * the pool's I/O bound, in slices of that bound; after each slice,
 * still(arg), when given, says whether the answer is still worth waiting
 * for (its server still in the routing table, say), and a no ends the
 * wait with -ETIMEDOUT. */
struct kvc_rpc_patience {
	int wait_ms;
	bool (*still)(void *arg);
	void *arg;
};

/* kvc_rpc_call for a request whose answer may take longer than the pool's
 * I/O bound (a SYNC that writes back gigabytes, a wait for page-pool
 * keys): the answer, and the handshake of a new connection, are awaited
 * as patience says (NULL: as kvc_rpc_call), within one deadline; the rest
 * of the exchange runs under the usual bound. */
int kvc_rpc_call_waiting(struct kvc_rpc_pool *pool, uint16_t type, const void *body,
                         uint32_t body_len, void *reply, uint32_t reply_cap,
                         uint32_t *reply_len, const struct kvc_rpc_patience *patience);

/* True for errors that mean "the server could not be reached or the
 * connection broke", as opposed to an answer from the server. */
bool kvc_rpc_is_transport_error(int rc);

#endif
