/* server: see server.h. */
#include "core/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/config.h"
#include "core/log.h"
#include "core/metrics.h"
#include "core/net.h"

#define INITIAL_BODY (64u << 10)

/* Per-type series: index type; types at or past TYPES and those the
 * service does not serve share the slot of "other" (index 0, which is no
 * message type a service serves: HELLO never reaches a handler). */
#define TYPES 128
struct type_series {
	struct kvc_metrics_counter *requests, *errors, *data_in, *data_out;
	struct kvc_metrics_histogram *seconds;
};
struct kvc_server_metrics {
	struct kvc_server *server;
	struct kvc_metrics_gauge *connections;
	uint8_t slot[TYPES]; /* type -> index in series */
	struct type_series series[TYPES];
};

struct conn_start {
	struct kvc_server *server;
	int fd;
};

int kvc_server_send(struct kvc_server_conn *conn, const struct kvc_wire_header *h,
                    const void *body, const struct iovec *data, int data_count)
{
	conn->reply_status = h->status;
	conn->reply_data_len = h->data_len;
	return kvc_wire_send(conn->fd, h, body, data, data_count);
}

int kvc_server_reply(struct kvc_server_conn *conn,
                     const struct kvc_wire_header *request, int32_t status,
                     const void *body, uint32_t body_len)
{
	struct kvc_wire_header h;
	kvc_wire_header_init(&h, request->type, request->request_id, status,
	                     status == 0 ? body_len : 0, 0);
	return kvc_server_send(conn, &h, body, NULL, 0);
}

int kvc_server_reply_fds(struct kvc_server_conn *conn, const struct kvc_wire_header *request,
                         const void *body, uint32_t body_len, const int *fds, int fd_count)
{
	struct kvc_wire_header h;
	kvc_wire_header_init(&h, request->type, request->request_id, 0, body_len, 0);
	conn->reply_status = 0;
	conn->reply_data_len = 0;
	return kvc_wire_send_fds(conn->fd, &h, body, fds, fd_count);
}

static int register_type(struct kvc_metrics *registry, const char *prefix,
                         struct type_series *t, const char *type)
{
	char name[4][128], seconds[128];
	const struct kvc_metrics_label label = {"type", type};
	static const char *const suffix[4] = {"requests_total", "request_errors_total",
	                                      "request_data_bytes_total",
	                                      "reply_data_bytes_total"};
	static const char *const help[4] = {
		"Requests dispatched, per message type.",
		"Requests answered with an error status (or dropped as a protocol error).",
		"Bytes of request data sections received (CHUNK_WRITE: bytes written).",
		"Bytes of reply data sections sent (CHUNK_READ: bytes read)."};
	struct kvc_metrics_counter **c[4] = {&t->requests, &t->errors, &t->data_in, &t->data_out};
	for (int i = 0; i < 4; i++) {
		snprintf(name[i], sizeof(name[i]), "%s_%s", prefix, suffix[i]);
		*c[i] = kvc_metrics_counter(registry, name[i], help[i], &label, 1);
	}
	snprintf(seconds, sizeof(seconds), "%s_request_seconds", prefix);
	t->seconds = kvc_metrics_histogram(registry, seconds,
	                                   "Time from a request's arrival to its reply sent.",
	                                   &label, 1);
	return t->requests && t->errors && t->data_in && t->data_out && t->seconds ? 0 : -ENOMEM;
}

static void collect_connections(void *arg)
{
	struct kvc_server_metrics *m = arg;
	kvc_metrics_set(m->connections, atomic_load(&m->server->connections));
}

int kvc_server_metrics_register(struct kvc_server *server, struct kvc_metrics *registry,
                                const char *prefix, kvc_server_serves serves)
{
	char name[128];
	if (!registry || !prefix || !serves || strlen(prefix) > 64)
		return -EINVAL;
	struct kvc_server_metrics *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->server = server;
	snprintf(name, sizeof(name), "%s_connections", prefix);
	m->connections = kvc_metrics_gauge(registry, name, "Connections open now.", NULL, 0);
	int rc = m->connections ? register_type(registry, prefix, &m->series[0], "other")
	                        : -ENOMEM;
	for (uint16_t type = 1; type < TYPES && rc == 0; type++) {
		if (!serves(type))
			continue;
		m->slot[type] = (uint8_t)type;
		rc = register_type(registry, prefix, &m->series[type], kvc_wire_type_name(type));
	}
	if (rc == 0)
		rc = kvc_metrics_collector(registry, collect_connections, m);
	if (rc < 0) {
		free(m); /* the series stay in the registry, unused */
		return rc;
	}
	server->metrics = m; /* lives as long as the server */
	return 0;
}

/* Dispatch one frame to the service, counted (server.h). */
static int dispatch(struct kvc_server *server, struct kvc_server_conn *conn,
                    const struct kvc_wire_header *h, int64_t arrived_ns)
{
	struct kvc_server_metrics *m = server->metrics;
	conn->reply_status = 0;
	conn->reply_data_len = 0;
	int rc = server->handle(server->service, conn, h);
	if (!m)
		return rc;
	struct type_series *t = &m->series[h->type < TYPES ? m->slot[h->type] : 0];
	kvc_metrics_inc(t->requests);
	if (rc < 0 || conn->reply_status < 0)
		kvc_metrics_inc(t->errors);
	kvc_metrics_add(t->data_in, h->data_len);
	kvc_metrics_add(t->data_out, conn->reply_data_len);
	kvc_metrics_observe_since(t->seconds, arrived_ns);
	return rc;
}

/* Grow the body buffer to hold the announced body (bounded by the wire
 * limit, already checked by kvc_wire_header_check). */
static int ensure_body(struct kvc_server_conn *conn, uint32_t need)
{
	if (need <= conn->body_capacity)
		return 0;
	void *grown = realloc(conn->body, need);
	if (!grown)
		return -ENOMEM;
	conn->body = grown;
	conn->body_capacity = need;
	return 0;
}

static void close_passed_fds(struct kvc_server_conn *conn)
{
	for (int i = 0; i < conn->passed_fd_count; i++)
		if (conn->passed_fds[i] >= 0)
			close(conn->passed_fds[i]);
	conn->passed_fd_count = 0;
}

static int recv_frame(struct kvc_server_conn *conn, struct kvc_wire_header *h)
{
	close_passed_fds(conn);
	int rc = kvc_wire_recv_header_fds(conn->fd, h, conn->passed_fds, &conn->passed_fd_count);
	if (rc < 0)
		return rc;
	rc = ensure_body(conn, h->body_len);
	if (rc == 0 && h->body_len)
		rc = kvc_wire_recv_exact(conn->fd, conn->body, h->body_len);
	return rc;
}

/* Wait until the next frame starts arriving: 0, or -ETIMEDOUT after
 * timeout_ms (0: wait for ever). */
static int wait_readable(int fd, int timeout_ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	int rc;
	do
		rc = poll(&p, 1, timeout_ms > 0 ? timeout_ms : -1);
	while (rc < 0 && errno == EINTR);
	return rc < 0 ? -errno : rc == 0 ? -ETIMEDOUT : 0;
}

/* The peer's address for logs: "host:port", or "local" (Unix socket). */
static void peer_name(int fd, char *out, size_t cap)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char host[INET6_ADDRSTRLEN] = "?";
	snprintf(out, cap, "local");
	if (getpeername(fd, (struct sockaddr *)&ss, &len) < 0)
		return;
	if (ss.ss_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)&ss;
		inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
		snprintf(out, cap, "%s:%u", host, ntohs(sin->sin_port));
	} else if (ss.ss_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)&ss;
		inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
		snprintf(out, cap, "[%s]:%u", host, ntohs(sin6->sin6_port));
	}
}

/* Answer a refused handshake frame with status, say why in the log, and
 * return status: the caller closes the connection. */
__attribute__((format(printf, 5, 6)))
static int refuse(struct kvc_server *server, struct kvc_server_conn *conn,
                  const struct kvc_wire_header *h, int status, const char *why, ...)
{
	char peer[INET6_ADDRSTRLEN + 16], reason[160];
	va_list ap;
	va_start(ap, why);
	vsnprintf(reason, sizeof(reason), why, ap);
	va_end(ap);
	peer_name(conn->fd, peer, sizeof(peer));
	kvc_log_warn("%s: connection from %s refused: %s", server->name, peer, reason);
	kvc_server_reply(conn, h, status, NULL, 0);
	return status;
}

/* The rest of the handshake after an accepted HELLO of role with the
 * client's nonce: our nonce, the client's proof, our proof. */
static int prove(struct kvc_server *server, struct kvc_server_conn *conn,
                 const struct kvc_wire_header *hello, uint32_t role,
                 const uint8_t client_nonce[KVC_AUTH_NONCE])
{
	const struct kvc_auth_key *key = &server->auth->keys[role];
	struct kvc_msg_auth_nonce ours;
	struct kvc_msg_auth_proof proof;
	struct kvc_wire_header h;
	int rc = kvc_auth_nonce(ours.nonce);
	if (rc < 0)
		return refuse(server, conn, hello, rc, "no random nonce");
	rc = kvc_server_reply(conn, hello, 0, &ours, sizeof(ours));
	if (rc == 0)
		rc = recv_frame(conn, &h);
	if (rc < 0)
		return rc;
	if (h.type != KVC_MSG_AUTH || h.body_len != sizeof(proof) || h.data_len)
		return refuse(server, conn, &h, -EACCES, "%s after HELLO, not an AUTH proof",
		              kvc_wire_type_name(h.type));
	if (!kvc_auth_proof_check(key, false, role, client_nonce, ours.nonce, conn->body))
		return refuse(server, conn, &h, -EACCES, "wrong proof of the %s secret",
		              kvc_auth_role_name(role));
	kvc_auth_proof(key, true, role, client_nonce, ours.nonce, proof.mac);
	return kvc_server_reply(conn, &h, 0, &proof, sizeof(proof));
}

/* The handshake (server.h): 0 when the connection proved a role the
 * server takes (conn->role says which), else -errno and the caller
 * closes it. */
static int handshake(struct kvc_server *server, struct kvc_server_conn *conn)
{
	struct kvc_wire_header h;
	uint8_t client_nonce[KVC_AUTH_NONCE];
	int rc = wait_readable(conn->fd, server->io_timeout_ms);
	if (rc == 0)
		rc = recv_frame(conn, &h);
	if (rc < 0)
		return rc;
	uint32_t off = 0;
	const struct kvc_msg_hello *hello =
		kvc_wire_body_take(conn->body, h.body_len, &off, sizeof(*hello));
	if (h.type != KVC_MSG_HELLO || !hello || h.data_len)
		return refuse(server, conn, &h, -EACCES, "first frame is %s, not HELLO",
		              kvc_wire_type_name(h.type));
	if (hello->version != KVC_WIRE_VERSION)
		return refuse(server, conn, &h, -EPROTO, "wire version %u, not %u", hello->version,
		              KVC_WIRE_VERSION);
	uint32_t role = hello->role;
	if (!server->auth) {
		if (role != KVC_AUTH_NONE || off != h.body_len)
			return refuse(server, conn, &h, -EACCES, "credentials where none are taken");
		conn->role = KVC_AUTH_NONE;
		return kvc_server_reply(conn, &h, 0, NULL, 0);
	}
	if (role == KVC_AUTH_NONE)
		return refuse(server, conn, &h, -EACCES, "no credentials");
	if (role >= KVC_AUTH_ROLES || server->auth->keys[role].length == 0)
		return refuse(server, conn, &h, -EACCES, "role %s is not served here",
		              kvc_auth_role_name(role));
	const struct kvc_msg_auth_nonce *nonce =
		kvc_wire_body_take(conn->body, h.body_len, &off, sizeof(*nonce));
	if (!nonce || off != h.body_len)
		return refuse(server, conn, &h, -EACCES, "malformed HELLO");
	memcpy(client_nonce, nonce->nonce, sizeof(client_nonce)); /* the body is reused */
	rc = prove(server, conn, &h, role, client_nonce);
	if (rc == 0)
		conn->role = role;
	return rc;
}

static void *conn_main(void *arg)
{
	struct conn_start start = *(struct conn_start *)arg;
	struct kvc_server *server = start.server;
	struct kvc_server_conn conn = {.fd = start.fd};
	bool idle = false;
	free(arg);

	kvc_net_setup_accepted(conn.fd);
	int rc = server->io_timeout_ms > 0 ? kvc_net_set_timeout(conn.fd, server->io_timeout_ms) : 0;
	if (rc == 0)
		rc = handshake(server, &conn);
	while (rc == 0) {
		struct kvc_wire_header h;
		rc = wait_readable(conn.fd, server->idle_timeout_ms);
		if (rc == -ETIMEDOUT) {
			idle = true;
			break;
		}
		int64_t arrived_ns = server->metrics ? kvc_clock_monotonic_ns() : 0;
		if (rc == 0)
			rc = recv_frame(&conn, &h);
		if (rc < 0)
			break;
		rc = dispatch(server, &conn, &h, arrived_ns);
	}
	if (idle)
		kvc_log_debug("%s: closing a connection idle for %d ms", server->name,
		              server->idle_timeout_ms);
	else if (rc == -ETIMEDOUT)
		kvc_log_info("%s: closing a connection whose peer stalled for %d ms "
		             "(server_io_timeout_ms)", server->name, server->io_timeout_ms);
	else if (rc != -ECONNRESET && rc != 0)
		kvc_log_info("%s: closing connection: %s", server->name, strerror(-rc));
	close_passed_fds(&conn);
	if (server->cleanup)
		server->cleanup(server->service, &conn);
	free(conn.body);
	if (server->leave)
		server->leave(server->service, conn.fd);
	close(conn.fd);
	atomic_fetch_sub(&server->connections, 1);
	return NULL;
}

static long long now_ms(void)
{
	return kvc_clock_monotonic_ns() / 1000000;
}

/* Past max_connections (status -EBUSY), or not admitted by the service
 * (admit's -errno): say so to the peer (a HELLO reply of status, which a
 * client reports as such) and close; log at most once a second. */
static void refuse_busy(struct kvc_server *server, int fd, int limit, int status)
{
	struct kvc_wire_header h;
	kvc_wire_header_init(&h, KVC_MSG_HELLO, 0, status, 0, 0);
	(void)send(fd, &h, sizeof(h), MSG_DONTWAIT | MSG_NOSIGNAL); /* best effort */
	close(fd);
	int refused = atomic_fetch_add(&server->refused, 1) + 1;
	long long now = now_ms(), last = atomic_load(&server->refused_at_ms);
	if (now - last >= 1000 && atomic_compare_exchange_strong(&server->refused_at_ms, &last, now)) {
		atomic_fetch_sub(&server->refused, refused);
		if (status == -EBUSY)
			kvc_log_warn("%s: %d connections open, the most server_max_connections "
			             "allows: refused %d new one(s)", server->name, limit, refused);
		else
			kvc_log_warn("%s: refused %d new connection(s): %s", server->name, refused,
			             strerror(-status));
	}
}

int kvc_server_run(struct kvc_server *server)
{
	int limit = server->max_connections > 0 ? server->max_connections
	                                        : KVC_SERVER_DEFAULT_MAX_CONNECTIONS;
	atomic_store(&server->refused_at_ms, now_ms() - 1000);
	for (;;) {
		int fd = accept4(server->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE ||
			    errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				if (errno != EINTR && errno != ECONNABORTED)
					usleep(10000); /* out of resources: back off */
				continue;
			}
			return -errno;
		}
		if (atomic_fetch_add(&server->connections, 1) >= limit) {
			atomic_fetch_sub(&server->connections, 1);
			refuse_busy(server, fd, limit, -EBUSY);
			continue;
		}
		int admitted = server->admit ? server->admit(server->service, fd) : 0;
		if (admitted < 0) {
			atomic_fetch_sub(&server->connections, 1);
			refuse_busy(server, fd, limit, admitted);
			continue;
		}
		struct conn_start *start = malloc(sizeof(*start));
		pthread_t thread;
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&attr, 256 << 10);
		int rc = start ? 0 : ENOMEM;
		if (start) {
			*start = (struct conn_start){server, fd};
			rc = pthread_create(&thread, &attr, conn_main, start);
		}
		if (rc != 0) {
			kvc_log_warn("%s: no thread for a new connection: %s", server->name, strerror(rc));
			free(start);
			if (server->leave)
				server->leave(server->service, fd);
			close(fd);
			atomic_fetch_sub(&server->connections, 1);
		}
		pthread_attr_destroy(&attr);
	}
}

void kvc_server_configure(struct kvc_server *server, const struct kvc_config *config)
{
	server->max_connections = config->server_max_connections;
	server->idle_timeout_ms = config->server_idle_timeout_ms;
	server->io_timeout_ms = config->server_io_timeout_ms;
}

struct signal_waiter {
	sigset_t set;
	void (*on_stop)(void *);
	void *arg;
};

static void *signal_main(void *arg)
{
	struct signal_waiter *w = arg;
	int sig = 0;
	sigwait(&w->set, &sig);
	kvc_log_info("signal %d: stopping", sig);
	if (w->on_stop)
		w->on_stop(w->arg);
	kvc_server_exit(0);
}

int kvc_server_tune_memory(size_t heap_max, size_t keep_free)
{
	int rc = 0;
	/* Setting either turns off glibc's own adjustment of both. */
	if (heap_max > INT_MAX || keep_free > INT_MAX || mallopt(M_MMAP_THRESHOLD, (int)heap_max) != 1 ||
	    mallopt(M_TRIM_THRESHOLD, (int)keep_free) != 1) {
		kvc_log_warn("the allocator refused a heap of %zu bytes a block, %zu kept free: "
		             "its defaults stay", heap_max, keep_free);
		rc = -EINVAL;
	}
	return rc;
}

_Noreturn void kvc_server_exit(int status)
{
	fflush(NULL);
	_exit(status);
}

int kvc_server_handle_signals(void (*on_stop)(void *), void *arg)
{
	/* Owned by the process for its whole life: the waiter thread reads it. */
	static struct signal_waiter waiter;
	pthread_t thread;
	sigemptyset(&waiter.set);
	sigaddset(&waiter.set, SIGINT);
	sigaddset(&waiter.set, SIGTERM);
	sigaddset(&waiter.set, SIGHUP);
	waiter.on_stop = on_stop;
	waiter.arg = arg;
	int rc = pthread_sigmask(SIG_BLOCK, &waiter.set, NULL);
	if (rc == 0)
		rc = pthread_create(&thread, NULL, signal_main, &waiter);
	if (rc == 0)
		pthread_detach(thread);
	signal(SIGPIPE, SIG_IGN);
	return -rc;
}
