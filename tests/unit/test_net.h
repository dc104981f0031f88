/*
 * test_net: the unit tests' listening socket, one helper for all.
 * kvc_test_listen_free listens on a free loopback port and writes its
 * address ("127.0.0.1:PORT") into out; it fails the running test when it
 * cannot (a test without its server proves nothing).
 *
 * A header of static functions: each unit test is a program of its own.
 */
#ifndef KVC_TEST_NET_H
#define KVC_TEST_NET_H

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>

#include "core/net.h"

static inline int kvc_test_listen_free(char *out, size_t len)
{
	struct sockaddr_in addr;
	socklen_t alen = sizeof(addr);
	int fd = kvc_net_listen("127.0.0.1:0");
	cr_assert_geq(fd, 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&addr, &alen), 0);
	snprintf(out, len, "127.0.0.1:%d", ntohs(addr.sin_port));
	return fd;
}

#endif
