/*
 * server: the accept loop and connection threads shared by kvc-meta and
 * kvc-storage. One thread per connection (a connection is a long-lived
 * client such as kvc-fuse's pooled socket, so this is a handful of threads
 * per client); at most max_connections at once: past it a new connection
 * gets a HELLO reply of -EBUSY and is closed, with a log line (at most one
 * a second), and no thread is made for it. A service may also admit each
 * new connection itself (admit, at accept, before a thread is made: the
 * USRBIO control socket counts its peers' connections per uid): one it
 * refuses gets a HELLO reply of admit's -errno and is closed the same
 * way; one it admitted is given back (leave) when it closes.
 *
 * Timeouts, so a peer that stops stalls only its own connection: a
 * connection with no request for idle_timeout_ms is closed; a peer that
 * stops sending in the middle of a frame, or stops reading its reply, for
 * io_timeout_ms is closed (SO_RCVTIMEO/SO_SNDTIMEO: "stops" means no byte
 * moved for that long). A new connection must greet within io_timeout_ms.
 * 0 means no timeout (the USRBIO control socket: its clients are local and
 * hold their connection for their whole life). Handlers hold no lock while
 * they send or receive.
 *
 * Each connection must start with the handshake (HELLO, AUTH; see
 * core/auth.h): a wrong version is answered -EPROTO, anything else that
 * does not prove a secret the server takes is answered -EACCES, logged
 * with the peer's address, and the connection is closed; the server keeps
 * serving everyone else. After that, every frame goes to the service's
 * handler, which may look at conn->role. A handler replies itself (it
 * owns the data section) and returns 0, or returns -errno for a protocol
 * error, after which the server closes that connection and nothing else.
 *
 * Metrics (kvc_server_metrics_register, optional): every dispatched frame
 * is counted where it is dispatched, per message type: requests, error
 * replies (a reply status < 0, or a handler's protocol error), latency
 * from the frame's arrival to the handler's return (its reply sent), and
 * the bytes of the data sections received and sent. Handlers reply
 * through kvc_server_reply or kvc_server_send, which note the status and
 * data length. Each service names the types it serves; the rest are
 * counted as type "other". No lock is taken: per-type series are made at
 * registration and observed with atomics.
 */
#ifndef KVC_SERVER_H
#define KVC_SERVER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/auth.h"
#include "core/wire.h"

struct kvc_server_conn {
	int fd;
	void *body;        /* received body; capacity body_capacity */
	size_t body_capacity;
	void *service_state; /* per-connection state owned by the service */
	/* fds passed with the current frame (Unix sockets): a handler that
	 * keeps one sets its slot to -1; the server closes the rest. */
	int passed_fds[KVC_WIRE_MAX_FDS];
	int passed_fd_count;
	uint32_t role; /* enum kvc_auth_role the handshake proved; set before any handler */
	/* The reply to the current frame, as kvc_server_reply/_send sent it. */
	int32_t reply_status;
	uint64_t reply_data_len;
};

typedef int (*kvc_server_handler)(void *service, struct kvc_server_conn *conn,
                                  const struct kvc_wire_header *header);
typedef void (*kvc_server_conn_cleanup)(void *service, struct kvc_server_conn *conn);
/* A new connection's fd, before its thread: 0 admits it, -errno refuses.
 * Every admitted fd is given to leave once, just before it is closed. */
typedef int (*kvc_server_admit)(void *service, int fd);
typedef void (*kvc_server_leave)(void *service, int fd);

#define KVC_SERVER_DEFAULT_MAX_CONNECTIONS 4096
#define KVC_SERVER_DEFAULT_IDLE_TIMEOUT_MS 600000
#define KVC_SERVER_DEFAULT_IO_TIMEOUT_MS 30000

struct kvc_server {
	int listen_fd;
	/* The secrets each role must prove; NULL: no credentials at all (only
	 * kvc-fuse's local control socket, where the kernel says who calls). */
	const struct kvc_auth_keys *auth;
	int max_connections; /* 0: KVC_SERVER_DEFAULT_MAX_CONNECTIONS */
	int idle_timeout_ms; /* 0: never */
	int io_timeout_ms;   /* 0: never */
	kvc_server_handler handle;
	kvc_server_conn_cleanup cleanup; /* may be NULL */
	kvc_server_admit admit;          /* may be NULL (with leave) */
	kvc_server_leave leave;
	void *service;
	atomic_int connections;
	atomic_llong refused_at_ms; /* last "refusing" log line (monotonic) */
	atomic_int refused;         /* refusals since that line */
	const char *name; /* for logs */
	struct kvc_server_metrics *metrics; /* NULL: none (kvc_server_metrics_register) */
};

struct kvc_config;
struct kvc_metrics;

/* Whether a service has a row for a message type (metrics: its own series). */
typedef bool (*kvc_server_serves)(uint16_t type);

/* Count server's requests in registry, in the families
 * <prefix>_requests_total, <prefix>_request_errors_total,
 * <prefix>_request_seconds (histogram), <prefix>_request_data_bytes_total
 * and <prefix>_reply_data_bytes_total, labelled type="<wire type name>"
 * for each type serves() takes and "other" for the rest. Call before
 * kvc_server_run. Returns 0, -EINVAL or -ENOMEM (then no metrics). */
int kvc_server_metrics_register(struct kvc_server *server, struct kvc_metrics *registry,
                                const char *prefix, kvc_server_serves serves);

/* Take max_connections and the two timeouts from the cluster file
 * (server_max_connections, server_idle_timeout_ms, server_io_timeout_ms). */
void kvc_server_configure(struct kvc_server *server, const struct kvc_config *config);

/* Accept connections forever (until listen_fd is shut down), each served
 * on its own detached thread. Returns -errno when accept fails for good. */
int kvc_server_run(struct kvc_server *server);

/* Reply with a status and a body, no data. Returns 0 or -errno. */
int kvc_server_reply(struct kvc_server_conn *conn,
                     const struct kvc_wire_header *request, int32_t status,
                     const void *body, uint32_t body_len);

/* kvc_server_reply with fds passed along (a Unix socket's SCM_RIGHTS;
 * they stay the caller's). Returns 0 or -errno. */
int kvc_server_reply_fds(struct kvc_server_conn *conn, const struct kvc_wire_header *request,
                         const void *body, uint32_t body_len, const int *fds, int fd_count);

/* Send a reply frame (header h, body, data iovecs) on conn, noting its
 * status and data length for the metrics. Returns kvc_wire_send's. */
int kvc_server_send(struct kvc_server_conn *conn, const struct kvc_wire_header *h,
                    const void *body, const struct iovec *data, int data_count);

/* Block SIGINT/SIGTERM/SIGHUP in the calling thread (call before creating
 * threads) and start a thread that calls on_stop(arg) then ends the
 * process with status 0 (kvc_server_exit) when one arrives. Returns 0 or
 * -errno. */
int kvc_server_handle_signals(void (*on_stop)(void *), void *arg);

/* The allocator's policy for a daemon (call first in main, before any
 * thread): allocations under heap_max bytes come from the heap, and each
 * malloc arena keeps up to keep_free bytes free at its top for reuse
 * instead of handing memory back at every free. glibc's defaults mmap
 * blocks from 128 KiB and trim at twice that: kvc-fuse's 72 KiB read
 * requests, freed at the top of a thread's arena, were given back with
 * madvise and faulted in again by the next request, each give-back
 * flushing the other CPUs' TLBs (same-host ring reads on the development
 * VM ran 20-43% faster without it, docs/benchmarks.md "Ring reads and a
 * daemon's allocator"); kvc-storage's chunk buffers (up to a chunk) were
 * a fresh mmap, page faults and page clearing each. What it keeps: up to
 * keep_free bytes a malloc arena (glibc makes at most 8 a core, one a
 * thread below that). Returns 0, or -EINVAL when the allocator refused a
 * value (logged; the daemon goes on with glibc's defaults for it). */
int kvc_server_tune_memory(size_t heap_max, size_t keep_free);

/* End a daemon whose other threads still run: stdio flushed, then _exit,
 * with no exit handlers. exit() would run the libraries' handlers and
 * destructors (libcurl's OpenSSL, libmicrohttpd, libfuse) under threads
 * still using what they free and unmap. What must reach the disk is
 * synced before (the on_stop hooks). */
_Noreturn void kvc_server_exit(int status);

#endif
