/* usrbio_control: see usrbio_control.h. Also where libkvc finds mounts
 * (kvc_extract_mount_point and the mount's owner, from mountinfo). */
#include "client/usrbio_control.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/control_socket.h"
#include "core/wire.h"
#include "kvc/usrbio.h"

static pthread_mutex_t controls_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kvc_usrbio_control *controls; /* guarded by controls_lock */

/* realpath of path, or of its nearest existing ancestor plus the rest:
 * a file about to be created still names its mount. */
static int resolve(const char *path, char *real)
{
	char copy[PATH_MAX];
	if (strlen(path) >= sizeof(copy))
		return -ENAMETOOLONG;
	strcpy(copy, path);
	for (;;) {
		if (realpath(copy, real)) {
			size_t done = strlen(copy);
			if (strlen(real) + strlen(path + done) >= PATH_MAX)
				return -ENAMETOOLONG;
			strcat(real, path + done);
			return 0;
		}
		char *slash = strrchr(copy, '/');
		if (errno != ENOENT || !slash || slash == copy)
			return -errno;
		*slash = '\0';
	}
}

/* One fuse.kvc line of mountinfo: its mount point and its owner (the
 * user_id of its super options; -1 when absent). 0, or -1 for another
 * line. */
static int kvc_mount_line(const char *line, char *point, uid_t *owner)
{
	char type[64], options[1024];
	/* fields: id parent dev root point options [optional...] - type source super */
	const char *dash = strstr(line, " - ");
	if (!dash || sscanf(line, "%*s %*s %*s %*s %4095s", point) != 1 ||
	    sscanf(dash + 3, "%63s %*s %1023s", type, options) != 2 || strcmp(type, "fuse.kvc") != 0)
		return -1;
	*owner = (uid_t)-1;
	for (char *save, *o = strtok_r(options, ",", &save); o; o = strtok_r(NULL, ",", &save)) {
		unsigned long uid;
		char end;
		if (sscanf(o, "user_id=%lu%c", &uid, &end) == 1)
			*owner = (uid_t)uid;
	}
	return 0;
}

int kvc_extract_mount_point(char *out, size_t size, const char *path)
{
	char real[PATH_MAX], line[8192], best[PATH_MAX] = "";
	int rc = resolve(path, real);
	if (rc < 0)
		return rc;
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		char point[PATH_MAX];
		uid_t owner;
		if (kvc_mount_line(line, point, &owner) < 0)
			continue;
		size_t n = strlen(point);
		bool inside = strncmp(real, point, n) == 0 &&
		              (real[n] == '\0' || real[n] == '/' || strcmp(point, "/") == 0);
		if (inside && n >= strlen(best))
			strcpy(best, point);
	}
	fclose(f);
	if (best[0] == '\0')
		return -ENOENT;
	if (strlen(best) + 1 > size)
		return -ENAMETOOLONG;
	strcpy(out, best);
	return (int)strlen(best);
}

/* The owner of the kvcfs mount at mount (the newest one there), or -1. */
static uid_t mount_owner(const char *mount)
{
	char line[8192], point[PATH_MAX];
	uid_t owner = (uid_t)-1, found;
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return owner;
	while (fgets(line, sizeof(line), f))
		if (kvc_mount_line(line, point, &found) == 0 && strcmp(point, mount) == 0)
			owner = found; /* the last match is the newest mount */
	fclose(f);
	return owner;
}

/* Connect to the mount's control socket, check who serves it, say HELLO.
 * Returns the fd or -errno. */
static int control_connect(const char *mount)
{
	struct sockaddr_un addr;
	struct ucred peer;
	socklen_t len, peer_len = sizeof(peer);
	kvc_control_socket_address(mount, &addr, &len);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int rc = 0;
	if (connect(fd, (struct sockaddr *)&addr, len) < 0)
		rc = errno == ENOENT ? -ECONNREFUSED : -errno;
	else if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) < 0)
		rc = -errno;
	else if (peer.uid != 0 && peer.uid != mount_owner(mount))
		rc = -EACCES; /* not kvc-fuse: someone took its name */
	struct kvc_msg_hello hello = {KVC_WIRE_VERSION, 0};
	struct kvc_wire_header h;
	kvc_wire_header_init(&h, KVC_MSG_HELLO, 0, 0, sizeof(hello), 0);
	if (rc == 0)
		rc = kvc_wire_send(fd, &h, &hello, NULL, 0);
	if (rc == 0)
		rc = kvc_wire_recv(fd, &h, NULL, 0);
	if (rc == 0)
		rc = h.status;
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}

bool kvc_usrbio_control_lost(const struct kvc_usrbio_control *c)
{
	struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};
	return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR));
}

/* After kvc-fuse restarted, the next registration connects again (what
 * was registered with the old one died with it). */
static int control_revive(struct kvc_usrbio_control *c)
{
	int rc = 0;
	pthread_mutex_lock(&c->lock);
	if (kvc_usrbio_control_lost(c)) {
		int fd = control_connect(c->mount);
		if (fd < 0) {
			rc = fd;
		} else {
			close(c->fd);
			c->fd = fd;
			c->generation++;
		}
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int kvc_usrbio_control_get(const char *path, struct kvc_usrbio_control **out)
{
	char mount[PATH_MAX];
	int rc = kvc_extract_mount_point(mount, sizeof(mount), path);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&controls_lock);
	struct kvc_usrbio_control *c = controls;
	while (c && strcmp(c->mount, mount) != 0)
		c = c->next;
	if (c) {
		rc = control_revive(c);
	} else {
		int fd = control_connect(mount);
		c = fd >= 0 ? calloc(1, sizeof(*c)) : NULL;
		rc = fd < 0 ? fd : c ? 0 : -ENOMEM;
		if (!c && fd >= 0)
			close(fd);
		if (c) {
			strcpy(c->mount, mount);
			c->fd = fd;
			pthread_mutex_init(&c->lock, NULL);
			c->next = controls;
			controls = c;
		}
	}
	if (rc == 0)
		*out = c;
	pthread_mutex_unlock(&controls_lock);
	return rc;
}

/* Receive a reply: its body into reply (up to cap) and its fd, if any. */
static int receive_reply(int fd, struct kvc_wire_header *h, void *reply, uint32_t cap,
                         int *got_fd)
{
	int fds[KVC_WIRE_MAX_FDS], count = 0;
	int rc = kvc_wire_recv_header_fds(fd, h, fds, &count);
	if (rc == 0 && h->body_len > cap)
		rc = -EMSGSIZE;
	if (rc == 0 && h->body_len)
		rc = kvc_wire_recv_exact(fd, reply, h->body_len);
	for (int i = 0; i < count; i++) {
		if (i == 0 && got_fd && rc == 0)
			*got_fd = fds[0];
		else
			close(fds[i]);
	}
	return rc;
}

int kvc_usrbio_control_call(struct kvc_usrbio_control *c, uint16_t type, const void *body,
                            uint32_t body_len, const int *pass, int pass_count, void *reply,
                            uint32_t reply_cap, int *got_fd)
{
	struct kvc_wire_header h;
	if (got_fd)
		*got_fd = -1;
	pthread_mutex_lock(&c->lock);
	uint64_t id = ++c->next_id;
	kvc_wire_header_init(&h, type, id, 0, body_len, 0);
	int rc = kvc_wire_send_fds(c->fd, &h, body, pass, pass_count);
	if (rc == 0)
		rc = receive_reply(c->fd, &h, reply, reply_cap, got_fd);
	if (rc == 0 && (h.request_id != id || h.type != type))
		rc = -EBADMSG;
	pthread_mutex_unlock(&c->lock);
	if (rc < 0 && got_fd && *got_fd >= 0) {
		close(*got_fd);
		*got_fd = -1;
	}
	if (rc < 0)
		return rc == -ECONNRESET || rc == -EPIPE ? -ECONNREFUSED : rc;
	return h.status;
}

bool kvc_usrbio_control_current(struct kvc_usrbio_control *c, uint64_t generation)
{
	pthread_mutex_lock(&c->lock);
	bool current = c->generation == generation;
	pthread_mutex_unlock(&c->lock);
	return current;
}

void kvc_usrbio_control_deregister(struct kvc_usrbio_control *c, uint16_t type,
                                   uint64_t generation, uint32_t handle)
{
	struct kvc_msg_handle m = {handle, 0};
	if (kvc_usrbio_control_current(c, generation))
		kvc_usrbio_control_call(c, type, &m, sizeof(m), NULL, 0, NULL, 0, NULL);
}
