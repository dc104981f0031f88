/*
 * control_socket: the address of kvc-fuse's USRBIO control socket for a
 * mount. An abstract Unix socket named "kvc-usrbio:" + the mount point's
 * real path (or a hash of it when too long), so a client finds it from the
 * mount point alone and nothing is left in the filesystem after a crash.
 * The socket reports each peer's uid and pid (SO_PEERCRED). Stateless.
 */
#ifndef KVC_CONTROL_SOCKET_H
#define KVC_CONTROL_SOCKET_H

#include <sys/socket.h>
#include <sys/un.h>

/* Fill addr/len for the mount point (an absolute, resolved path). */
void kvc_control_socket_address(const char *mount, struct sockaddr_un *addr,
                                socklen_t *len);

#endif
