/* metrics_http: see metrics_http.h. */
#include "core/metrics_http.h"

#include <errno.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/net.h"

struct kvc_metrics_http {
	struct MHD_Daemon *daemon;
	struct kvc_metrics *registry;
	int listen_fd; /* owned by the daemon once it started */
};

static enum MHD_Result answer(struct MHD_Connection *connection, unsigned status,
                              const char *text, size_t len, bool free_text,
                              const char *content_type)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(
		len, (void *)text, free_text ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	if (!r) {
		if (free_text)
			free((void *)text);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
	enum MHD_Result rc = MHD_queue_response(connection, status, r);
	MHD_destroy_response(r);
	return rc;
}

static enum MHD_Result fail(struct MHD_Connection *connection, unsigned status,
                            const char *text)
{
	return answer(connection, status, text, strlen(text), false, "text/plain");
}

/* One request, answered at its headers (MHD's first call): a body is
 * never read, and the connection is closed after an error. */
static enum MHD_Result handle(void *arg, struct MHD_Connection *connection, const char *url,
                              const char *method, const char *version,
                              const char *upload_data, size_t *upload_size, void **state)
{
	struct kvc_metrics_http *s = arg;
	(void)version, (void)upload_data, (void)upload_size, (void)state;
	if (strcmp(url, "/metrics") != 0)
		return fail(connection, MHD_HTTP_NOT_FOUND, "not found: GET /metrics\n");
	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
		return fail(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET /metrics\n");
	const char *length = MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
	                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
	if ((length && strcmp(length, "0") != 0) ||
	    MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
	                                MHD_HTTP_HEADER_TRANSFER_ENCODING))
		return fail(connection, MHD_HTTP_CONTENT_TOO_LARGE, "no body is taken here\n");
	size_t len = 0;
	char *text = kvc_metrics_text(s->registry, &len);
	if (!text)
		return fail(connection, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
	return answer(connection, MHD_HTTP_OK, text, len, true,
	              "text/plain; version=0.0.4; charset=utf-8");
}

int kvc_metrics_http_start(const char *address, struct kvc_metrics *registry,
                           struct kvc_metrics_http **out)
{
	if (!registry || !address || !*address)
		return -EINVAL;
	struct kvc_metrics_http *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->registry = registry;
	s->listen_fd = kvc_net_listen(address);
	if (s->listen_fd < 0) {
		int rc = s->listen_fd;
		free(s);
		return rc;
	}
	s->daemon = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG, 0, NULL, NULL,
		handle, s, MHD_OPTION_LISTEN_SOCKET, s->listen_fd,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned)KVC_METRICS_HTTP_CONNECTIONS,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)KVC_METRICS_HTTP_TIMEOUT_S,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)KVC_METRICS_HTTP_MEMORY, MHD_OPTION_END);
	if (!s->daemon) {
		close(s->listen_fd);
		free(s);
		return -EADDRINUSE;
	}
	*out = s;
	return 0;
}

void kvc_metrics_http_stop(struct kvc_metrics_http *s)
{
	if (!s)
		return;
	MHD_stop_daemon(s->daemon); /* closes listen_fd too */
	free(s);
}
