/* device_imports: see device_imports.h. */
#include "fuse/device_imports.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct import {
	struct import *next;
	struct kvc_device_owner owner;
	int device;
	uint8_t handle[KVC_WIRE_IPC_HANDLE_SIZE];
	void *allocation;
	size_t size;
	int refs;
};

struct kvc_device_imports {
	struct kvc_device_import_ops ops;
	pthread_mutex_t lock; /* list, and every import's refs */
	struct import *list;
	int count;
};

struct kvc_device_imports *kvc_device_imports_create(const struct kvc_device_import_ops *ops)
{
	struct kvc_device_imports *imports = calloc(1, sizeof(*imports));
	if (!imports)
		return NULL;
	imports->ops = *ops;
	pthread_mutex_init(&imports->lock, NULL);
	return imports;
}

void kvc_device_imports_destroy(struct kvc_device_imports *imports)
{
	if (!imports)
		return;
	while (imports->list) {
		struct import *i = imports->list;
		imports->list = i->next;
		imports->ops.close(imports->ops.ctx, i->device, i->allocation);
		free(i);
	}
	pthread_mutex_destroy(&imports->lock);
	free(imports);
}

static bool same_owner(const struct kvc_device_owner *a, const struct kvc_device_owner *b)
{
	return a->uid == b->uid && a->client == b->client;
}

int kvc_device_imports_acquire(struct kvc_device_imports *imports,
                               const struct kvc_device_owner *owner, int device,
                               const uint8_t handle[KVC_WIRE_IPC_HANDLE_SIZE],
                               void **allocation, size_t *size)
{
	int rc = 0;
	pthread_mutex_lock(&imports->lock);
	struct import *i = imports->list;
	while (i && (i->device != device || memcmp(i->handle, handle, sizeof(i->handle)) != 0))
		i = i->next;
	if (i && !same_owner(&i->owner, owner)) {
		rc = -EACCES; /* imported for another process: never shared */
	} else if (i) {
		i->refs++;
	} else {
		void *base = NULL;
		size_t bytes = 0;
		i = calloc(1, sizeof(*i));
		rc = i ? imports->ops.open(imports->ops.ctx, device, handle, &base, &bytes) : -ENOMEM;
		if (rc == 0) {
			*i = (struct import){.next = imports->list, .owner = *owner, .device = device,
			                     .allocation = base, .size = bytes, .refs = 1};
			memcpy(i->handle, handle, sizeof(i->handle));
			imports->list = i;
			imports->count++;
		} else {
			free(i);
			i = NULL;
		}
	}
	if (rc == 0) {
		*allocation = i->allocation;
		*size = i->size;
	}
	pthread_mutex_unlock(&imports->lock);
	return rc;
}

int kvc_device_imports_release(struct kvc_device_imports *imports,
                               const struct kvc_device_owner *owner, void *allocation)
{
	int rc = -ENOENT;
	pthread_mutex_lock(&imports->lock);
	struct import **link = &imports->list;
	while (*link && ((*link)->allocation != allocation || !same_owner(&(*link)->owner, owner)))
		link = &(*link)->next;
	struct import *i = *link;
	if (i) {
		rc = 0;
		if (--i->refs == 0) {
			*link = i->next;
			imports->count--;
			imports->ops.close(imports->ops.ctx, i->device, i->allocation);
			free(i);
		}
	}
	pthread_mutex_unlock(&imports->lock);
	return rc;
}

int kvc_device_imports_count(struct kvc_device_imports *imports)
{
	pthread_mutex_lock(&imports->lock);
	int n = imports->count;
	pthread_mutex_unlock(&imports->lock);
	return n;
}
