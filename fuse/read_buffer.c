/* read_buffer: see read_buffer.h. */
#include "fuse/read_buffer.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "client/transport.h"

struct thread_region {
	struct kvc_storage_client *client; /* to forget the registrations */
	struct kvc_storage_region region;
};

static pthread_key_t key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static bool key_ok;

static void thread_region_free(void *arg)
{
	struct thread_region *t = arg;
	kvc_transport_region_destroy(t->client, &t->region);
	free(t);
}

static void key_make(void)
{
	key_ok = pthread_key_create(&key, thread_region_free) == 0;
}

/* This thread's region, made on first use; NULL when it cannot be. */
static struct thread_region *thread_region(struct kvc_storage_client *client)
{
	pthread_once(&key_once, key_make);
	if (!key_ok)
		return NULL;
	struct thread_region *t = pthread_getspecific(key);
	if (!t) {
		t = calloc(1, sizeof(*t));
		if (!t)
			return NULL;
		t->client = client;
		t->region.fd = -1;
		if (pthread_setspecific(key, t) != 0) {
			free(t);
			return NULL;
		}
	}
	if (!t->region.base &&
	    kvc_transport_region_create(KVC_FUSE_READ_BUFFER, "kvc-fuse-read", false, &t->region) < 0)
		return NULL;
	return t;
}

int kvc_fuse_read_buffer_region(struct kvc_storage_client *client, size_t size,
                                struct kvc_fuse_read_buffer *out)
{
	struct thread_region *t = size <= KVC_FUSE_READ_BUFFER ? thread_region(client) : NULL;
	*out = (struct kvc_fuse_read_buffer){.epoch = kvc_transport_place_epoch(client)};
	if (t) {
		out->buf = t->region.base;
		out->region = &t->region;
	}
	return t ? 0 : -ENOENT;
}

int kvc_fuse_read_buffer_get(struct kvc_storage_client *client, size_t size,
                             struct kvc_fuse_read_buffer *out)
{
	if (kvc_fuse_read_buffer_region(client, size, out) == 0)
		return 0;
	out->buf = malloc(size ? size : 1);
	return out->buf ? 0 : -ENOMEM;
}

void kvc_fuse_read_buffer_done(struct kvc_storage_client *client,
                               struct kvc_fuse_read_buffer *b)
{
	if (!b->region)
		free(b->buf);
	else if (kvc_transport_place_moved(client, b->epoch)) {
		struct thread_region *t = pthread_getspecific(key); /* b->region is its */
		kvc_transport_region_drop(client, &t->region);
	}
	*b = (struct kvc_fuse_read_buffer){0};
}
