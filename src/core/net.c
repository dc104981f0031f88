/* net: see net.h. */
#include "core/net.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define SOCKET_BUFFER (4 << 20)

static int parse_address(const char *address, struct sockaddr_in *sin)
{
	char host[KVC_NET_ADDRESS_MAX];
	const char *colon = strrchr(address, ':');
	if (!colon || colon == address || (size_t)(colon - address) >= sizeof(host))
		return -EINVAL;
	memcpy(host, address, (size_t)(colon - address));
	host[colon - address] = '\0';
	char *end;
	long port = strtol(colon + 1, &end, 10);
	if (*end != '\0' || end == colon + 1 || port < 0 || port > 65535)
		return -EINVAL;

	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
	struct addrinfo *found = NULL;
	if (getaddrinfo(host, NULL, &hints, &found) != 0 || !found)
		return -EINVAL;
	memcpy(sin, found->ai_addr, sizeof(*sin));
	sin->sin_port = htons((uint16_t)port);
	freeaddrinfo(found);
	return 0;
}

/* "@name": an abstract Unix socket (same host and network namespace). */
static int parse_any(const char *address, struct sockaddr_storage *ss, socklen_t *len)
{
	if (address[0] != '@') {
		*len = sizeof(struct sockaddr_in);
		return parse_address(address, (struct sockaddr_in *)ss);
	}
	struct sockaddr_un *sun = (struct sockaddr_un *)ss;
	size_t n = strlen(address + 1);
	if (n == 0 || n >= sizeof(sun->sun_path) - 1)
		return -EINVAL;
	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	memcpy(sun->sun_path + 1, address + 1, n); /* leading NUL, no terminator */
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
	return 0;
}

bool kvc_net_address_is_local(const char *address)
{
	struct sockaddr_in sin;
	if (address[0] == '@' || parse_address(address, &sin) < 0)
		return false;
	if ((ntohl(sin.sin_addr.s_addr) >> 24) == 127)
		return true;
	/* An address of one of this host's interfaces (in this network
	 * namespace) can be bound to. */
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	sin.sin_port = 0;
	bool local = bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0;
	close(fd);
	return local;
}

static void set_common_options(int fd)
{
	int one = 1, size = SOCKET_BUFFER;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
}

int kvc_net_set_timeout(int fd, int timeout_ms)
{
	struct timeval tv = {.tv_sec = timeout_ms / 1000,
	                     .tv_usec = (timeout_ms % 1000) * 1000};
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
		return -errno;
	return 0;
}

int kvc_net_listen(const char *address)
{
	struct sockaddr_storage sin;
	socklen_t sin_len;
	int rc = parse_any(address, &sin, &sin_len);
	if (rc < 0)
		return rc;
	int fd = socket(sin.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sin, sin_len) < 0 || listen(fd, 512) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

int kvc_net_local_port(int fd)
{
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);
	if (getsockname(fd, (struct sockaddr *)&sin, &len) < 0)
		return -errno;
	return ntohs(sin.sin_port);
}

static int wait_connected(int fd, int timeout_ms)
{
	struct pollfd pfd = {.fd = fd, .events = POLLOUT};
	int rc;
	do
		rc = poll(&pfd, 1, timeout_ms);
	while (rc < 0 && errno == EINTR);
	if (rc == 0)
		return -ETIMEDOUT;
	if (rc < 0)
		return -errno;
	int err = 0;
	socklen_t len = sizeof(err);
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
	return err ? -err : 0;
}

int kvc_net_connect(const char *address, int timeout_ms, int io_timeout_ms)
{
	struct sockaddr_storage sin;
	socklen_t sin_len;
	int rc = parse_any(address, &sin, &sin_len);
	if (rc < 0)
		return rc;
	int fd = socket(sin.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	set_common_options(fd);
	if (connect(fd, (struct sockaddr *)&sin, sin_len) < 0) {
		rc = errno == EINPROGRESS ? wait_connected(fd, timeout_ms) : -errno;
		if (rc < 0)
			goto fail;
	}
	/* Back to blocking mode: timeouts come from SO_RCVTIMEO/SO_SNDTIMEO. */
	if (fcntl(fd, F_SETFL, 0) < 0) {
		rc = -errno;
		goto fail;
	}
	rc = kvc_net_set_timeout(fd, io_timeout_ms);
	if (rc < 0)
		goto fail;
	return fd;
fail:
	close(fd);
	return rc;
}

int kvc_net_setup_accepted(int fd)
{
	set_common_options(fd);
	return 0;
}
