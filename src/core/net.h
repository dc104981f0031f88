/*
 * net: TCP sockets for kvcfs RPC. Every socket it makes has TCP_NODELAY,
 * large buffers and a send/receive timeout, so no RPC can block forever on
 * a peer that stopped answering. Addresses are "host:port" (IPv4 or a name
 * that resolves to one), or "@name": an abstract Unix socket (same host
 * and network namespace; TCP options do not apply and are not set).
 */
#ifndef KVC_NET_H
#define KVC_NET_H

#include <stdint.h>

#include <stdbool.h>

#define KVC_NET_ADDRESS_MAX 128

/* Whether "host:port" names this host: a loopback address, or one that
 * an interface of this network namespace has (it can be bound). */
bool kvc_net_address_is_local(const char *address);

/* Listen on "host:port" (port 0: any free port). Returns the fd or -errno. */
int kvc_net_listen(const char *address);

/* The port a listening socket is bound to, or -errno. */
int kvc_net_local_port(int fd);

/* Connect to "host:port" within timeout_ms, then apply io_timeout_ms to
 * every send and receive. Returns the fd, -ECONNREFUSED, -ETIMEDOUT,
 * -EINVAL (bad address) or another -errno. */
int kvc_net_connect(const char *address, int timeout_ms, int io_timeout_ms);

/* Apply socket options to an accepted connection (no timeout on idle
 * server connections: the server only waits for the next request). */
int kvc_net_setup_accepted(int fd);

/* Set the send/receive timeout of fd; 0 means none. */
int kvc_net_set_timeout(int fd, int timeout_ms);

#endif
