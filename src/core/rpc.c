/* rpc: see rpc.h. */
#include "core/rpc.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"

int kvc_rpc_pool_init(struct kvc_rpc_pool *pool, const char *address,
                      const struct kvc_auth_cred *cred, int connect_timeout_ms,
                      int io_timeout_ms)
{
	memset(pool, 0, sizeof(*pool));
	if (strlen(address) >= sizeof(pool->address) || cred->role >= KVC_AUTH_ROLES ||
	    (cred->role != KVC_AUTH_NONE && cred->key.length == 0))
		return -EINVAL;
	strcpy(pool->address, address);
	pool->cred = *cred;
	pool->connect_timeout_ms = connect_timeout_ms;
	pool->io_timeout_ms = io_timeout_ms;
	atomic_init(&pool->next_request_id, 1);
	return -pthread_mutex_init(&pool->lock, NULL);
}

void kvc_rpc_pool_destroy(struct kvc_rpc_pool *pool)
{
	kvc_rpc_pool_drain(pool);
	pthread_mutex_destroy(&pool->lock);
}

void kvc_rpc_pool_drain(struct kvc_rpc_pool *pool)
{
	pthread_mutex_lock(&pool->lock);
	for (int i = 0; i < pool->idle_count; i++)
		close(pool->idle[i]);
	pool->idle_count = 0;
	pthread_mutex_unlock(&pool->lock);
}

uint64_t kvc_rpc_next_id(struct kvc_rpc_pool *pool)
{
	return atomic_fetch_add(&pool->next_request_id, 1);
}

/* A request's patience (rpc.h) and its one deadline, the I/O bound plus
 * wait_ms from when the request began: its handshake, when it needs a new
 * connection, and its answer share it. */
struct waiting {
	const struct kvc_rpc_patience *patience;
	int64_t end_ns;
};

/* Wait until fd has an answer to read (nothing to wait for without w): in
 * slices of the pool's I/O bound, asking patience->still after each. */
static int await_answer(const struct kvc_rpc_pool *pool, int fd, const struct waiting *w)
{
	int rc = w ? -ETIMEDOUT : 0;
	while (w) {
		int64_t left_ms = (w->end_ns - (int64_t)kvc_clock_monotonic_ns()) / 1000000;
		if (left_ms <= 0)
			break;
		int slice = (int)(pool->io_timeout_ms > 0 && left_ms > pool->io_timeout_ms
		                      ? pool->io_timeout_ms
		                      : left_ms);
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int n = poll(&p, 1, slice);
		if (n > 0) {
			rc = 0; /* an answer, or the end the receive reports */
			break;
		}
		if (n < 0 && errno != EINTR) {
			rc = -errno;
			break;
		}
		if (n == 0 && w->patience->still && !w->patience->still(w->patience->arg))
			break;
	}
	return rc;
}

/* One handshake frame out and its reply in (reply: exactly reply_len
 * bytes, or none on a refusal). Returns the server's status or -errno. */
static int handshake_step(struct kvc_rpc_pool *pool, int fd, uint16_t type, const void *body,
                          uint32_t body_len, void *reply, uint32_t reply_len,
                          const struct waiting *w)
{
	struct kvc_wire_header h;
	uint64_t id = kvc_rpc_next_id(pool);
	kvc_wire_header_init(&h, type, id, 0, body_len, 0);
	int rc = kvc_wire_send(fd, &h, body, NULL, 0);
	if (rc == 0)
		rc = await_answer(pool, fd, w);
	if (rc == 0)
		rc = kvc_wire_recv(fd, &h, reply, reply_len);
	if (rc == 0 && (h.type != type || h.request_id != id || h.data_len))
		rc = -EBADMSG;
	if (rc == 0 && h.status)
		rc = h.status < 0 ? h.status : -EBADMSG;
	if (rc == 0 && h.body_len != reply_len)
		rc = -EBADMSG;
	return rc;
}

/* The client side of the handshake (core/auth.h): HELLO with our nonce,
 * AUTH with our proof, then the server must prove the same secret. The
 * answers are awaited as the request's patience says: a server busy past
 * the I/O bound is so for its handshake too. */
static int greet(struct kvc_rpc_pool *pool, int fd, const struct waiting *w)
{
	const struct kvc_auth_cred *cred = &pool->cred;
	struct {
		struct kvc_msg_hello hello;
		struct kvc_msg_auth_nonce nonce;
	} hello = {.hello = {KVC_WIRE_VERSION, cred->role}};
	struct kvc_msg_auth_nonce theirs;
	struct kvc_msg_auth_proof proof;
	if (cred->role == KVC_AUTH_NONE)
		return handshake_step(pool, fd, KVC_MSG_HELLO, &hello, sizeof(hello.hello), NULL, 0, w);
	int rc = kvc_auth_nonce(hello.nonce.nonce);
	if (rc == 0)
		rc = handshake_step(pool, fd, KVC_MSG_HELLO, &hello, sizeof(hello), &theirs,
		                    sizeof(theirs), w);
	if (rc < 0)
		return rc;
	kvc_auth_proof(&cred->key, false, cred->role, hello.nonce.nonce, theirs.nonce, proof.mac);
	rc = handshake_step(pool, fd, KVC_MSG_AUTH, &proof, sizeof(proof), &proof, sizeof(proof), w);
	/* A server that cannot prove the secret is no server of this cluster:
	 * nothing is sent to it. */
	if (rc == 0 && !kvc_auth_proof_check(&cred->key, true, cred->role, hello.nonce.nonce,
	                                     theirs.nonce, proof.mac))
		rc = -EACCES;
	if (rc == 0 && pool->has_hello)
		rc = handshake_step(pool, fd, KVC_MSG_CLIENT_HELLO, &pool->hello,
		                    sizeof(pool->hello), NULL, 0, w);
	return rc;
}

void kvc_rpc_pool_set_reconnect(struct kvc_rpc_pool *pool, int ms)
{
	pool->reconnect_ms = ms > 0 ? ms : 0;
}

void kvc_rpc_pool_set_hello(struct kvc_rpc_pool *pool, const struct kvc_msg_client_hello *hello)
{
	pool->hello = *hello;
	pool->has_hello = true;
}

/* An idle connection has nothing to read: anything there (EOF, a reset)
 * means the server went away, e.g. it restarted. */
static bool idle_is_dead(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
	return poll(&p, 1, 0) != 0;
}

static int pool_get(struct kvc_rpc_pool *pool, bool *reused, const struct waiting *w)
{
	int fd = -1;
	pthread_mutex_lock(&pool->lock);
	while (fd < 0 && pool->idle_count > 0) {
		fd = pool->idle[--pool->idle_count];
		if (idle_is_dead(fd)) {
			close(fd);
			fd = -1;
		}
	}
	pthread_mutex_unlock(&pool->lock);
	*reused = fd >= 0;
	if (fd >= 0)
		return fd;

	fd = kvc_net_connect(pool->address, pool->connect_timeout_ms, pool->io_timeout_ms);
	if (fd < 0)
		return fd;
	int rc = greet(pool, fd, w);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}

int kvc_rpc_pool_get(struct kvc_rpc_pool *pool, bool *reused)
{
	return pool_get(pool, reused, NULL);
}

void kvc_rpc_pool_put(struct kvc_rpc_pool *pool, int fd, bool healthy)
{
	if (healthy) {
		pthread_mutex_lock(&pool->lock);
		if (pool->idle_count < KVC_RPC_MAX_IDLE) {
			pool->idle[pool->idle_count++] = fd;
			fd = -1;
		}
		pthread_mutex_unlock(&pool->lock);
	}
	if (fd >= 0)
		close(fd);
}

bool kvc_rpc_is_transport_error(int rc)
{
	switch (rc) {
	case -ECONNREFUSED: case -ECONNRESET: case -ECONNABORTED: case -EPIPE:
	case -ETIMEDOUT: case -EHOSTUNREACH: case -ENETUNREACH: case -EPROTO:
	case -EMSGSIZE: case -ENOTCONN: case -EBADMSG:
		return true;
	default:
		return false;
	}
}

static int exchange(struct kvc_rpc_pool *pool, int fd, uint16_t type,
                    const void *body, uint32_t body_len, void *reply,
                    uint32_t reply_cap, uint32_t *reply_len, const struct waiting *w,
                    int *status, bool *sent)
{
	struct kvc_wire_header h;
	uint64_t id = kvc_rpc_next_id(pool);
	kvc_wire_header_init(&h, type, id, 0, body_len, 0);
	int rc = kvc_wire_send(fd, &h, body, NULL, 0);
	*sent = rc == 0;
	if (rc == 0)
		rc = await_answer(pool, fd, w);
	if (rc == 0)
		rc = kvc_wire_recv(fd, &h, reply, reply_cap);
	if (rc == 0 && (h.request_id != id || h.type != type || h.data_len != 0))
		rc = -EBADMSG;
	if (rc == 0) {
		*status = h.status;
		if (reply_len)
			*reply_len = h.body_len;
	}
	return rc;
}

/* A connection that could not be made, or broke in its handshake: worth
 * trying again. Not an answer (a refused version, a server over its
 * connection limit, a wrong secret): those stay. */
static bool could_not_connect(int rc)
{
	return rc == -ECONNREFUSED || rc == -EHOSTUNREACH || rc == -ENETUNREACH ||
	       rc == -ETIMEDOUT || rc == -ECONNRESET || rc == -ECONNABORTED || rc == -EPIPE;
}

int kvc_rpc_call_waiting(struct kvc_rpc_pool *pool, uint16_t type, const void *body,
                         uint32_t body_len, void *reply, uint32_t reply_cap,
                         uint32_t *reply_len, const struct kvc_rpc_patience *patience)
{
	struct waiting waiting = {
		.patience = patience,
		.end_ns = (int64_t)kvc_clock_monotonic_ns() +
		          ((int64_t)(pool->io_timeout_ms > 0 ? pool->io_timeout_ms : 0) +
		           (patience ? patience->wait_ms : 0)) * 1000000};
	const struct waiting *w = patience && patience->wait_ms > 0 ? &waiting : NULL;
	int64_t reconnect_end = (int64_t)kvc_clock_monotonic_ns() +
	                        (int64_t)pool->reconnect_ms * 1000000;
	struct kvc_clock_backoff pause;
	kvc_clock_backoff_init(&pause, 20, 500);
	for (int attempt = 0;;) {
		bool reused, sent = false;
		int status = 0;
		int fd = pool_get(pool, &reused, w);
		if (fd < 0) {
			kvc_log_debug("%s to %s: no connection: %s", kvc_wire_type_name(type),
			              pool->address, strerror(-fd));
			int64_t pause_ms = kvc_clock_backoff_next_ms(&pause);
			if (!could_not_connect(fd) ||
			    (int64_t)kvc_clock_monotonic_ns() + pause_ms * 1000000 >= reconnect_end)
				return fd;
			kvc_clock_sleep_ms(pause_ms);
			continue;
		}
		int rc = exchange(pool, fd, type, body, body_len, reply, reply_cap, reply_len, w,
		                  &status, &sent);
		kvc_rpc_pool_put(pool, fd, rc == 0);
		if (rc == 0)
			return status;
		/* A reused connection that died under the request (its server
		 * restarted after our liveness check): retry once, but only when
		 * the request never left, so nothing is done twice (a create
		 * retried after it happened would say EEXIST). */
		kvc_log_debug("%s to %s: %s (%s connection, request %s)", kvc_wire_type_name(type),
		              pool->address, strerror(-rc), reused ? "a reused" : "a new",
		              sent ? "sent" : "not sent");
		if (!(reused && attempt++ == 0 && !sent && (rc == -ECONNRESET || rc == -EPIPE)))
			return rc;
		kvc_rpc_pool_drain(pool);
	}
}

int kvc_rpc_call(struct kvc_rpc_pool *pool, uint16_t type, const void *body,
                 uint32_t body_len, void *reply, uint32_t reply_cap,
                 uint32_t *reply_len)
{
	return kvc_rpc_call_waiting(pool, type, body, body_len, reply, reply_cap, reply_len, NULL);
}
