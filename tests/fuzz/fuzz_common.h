/*
 * fuzz_common: what the libFuzzer harnesses share: a private directory
 * for the stores a harness opens (removed at exit), and a reply socket
 * whose other end a thread drains, so handlers send their replies as
 * they would to a client.
 */
#ifndef KVC_FUZZ_COMMON_H
#define KVC_FUZZ_COMMON_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char fuzz_dir[64];

static inline void fuzz_remove_dir(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", fuzz_dir);
	if (fuzz_dir[0] && system(cmd) != 0)
		fprintf(stderr, "fuzz: could not remove %s\n", fuzz_dir);
}

/* A fresh directory under /tmp, removed when the harness exits. */
static inline const char *fuzz_temp_dir(void)
{
	strcpy(fuzz_dir, "/tmp/kvc-fuzz-XXXXXX");
	if (!mkdtemp(fuzz_dir))
		abort();
	atexit(fuzz_remove_dir);
	return fuzz_dir;
}

static inline void *fuzz_drain(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char buf[65536];
	while (read(fd, buf, sizeof(buf)) > 0)
		;
	return NULL;
}

/* The fd a handler replies on; everything sent to it is read and dropped. */
static inline int fuzz_reply_fd(void)
{
	int sv[2];
	pthread_t t;
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
		abort();
	if (pthread_create(&t, NULL, fuzz_drain, (void *)(intptr_t)sv[1]) != 0)
		abort();
	pthread_detach(t);
	return sv[0];
}

#endif
