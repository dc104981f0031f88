/* device_io: see device_io.h; the data path is drawn in docs/gpu.md. */
#include "fuse/device_io.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/cuda_api.h"
#include "core/log.h"

#if defined(KVC_HAVE_CUDA)

#define MAX_DEVICES 16

/* CUDA's import of an allocation, for device_imports. */
static int cuda_open(void *ctx, int device, const uint8_t handle[KVC_WIRE_IPC_HANDLE_SIZE],
                     void **allocation, size_t *size)
{
	const struct kvc_cuda *cuda = kvc_cuda_get(); /* kvc_device_import checked it */
	cudaIpcMemHandle_t h;
	(void)ctx;
	void *opened, *base;
	memcpy(&h, handle, sizeof(h));
	cudaError_t err = cuda->set_device(device);
	if (err == cudaSuccess)
		err = cuda->ipc_open_mem_handle(&opened, h, cudaIpcMemLazyEnablePeerAccess);
	if (err != cudaSuccess) {
		cuda->get_last_error();
		kvc_log_warn("usrbio: a device iov's CUDA IPC handle was refused: %s",
		             cuda->get_error_string(err));
		return -EINVAL;
	}
	/* The allocation's real size, not the client's word for it. */
	if (kvc_cuda_allocation(cuda, opened, &base, size) < 0) {
		cuda->ipc_close_mem_handle(opened);
		return -ENOMEM;
	}
	*allocation = opened;
	return 0;
}

static void cuda_close(void *ctx, int device, void *allocation)
{
	const struct kvc_cuda *cuda = kvc_cuda_get();
	(void)ctx;
	if (cuda && cuda->set_device(device) == cudaSuccess)
		cuda->ipc_close_mem_handle(allocation);
}

struct kvc_device_imports *kvc_device_io_imports_create(void)
{
	/* CUDA itself is loaded at the first import, not at start. */
	struct kvc_device_import_ops ops = {cuda_open, cuda_close, NULL};
	return kvc_device_imports_create(&ops);
}

int kvc_device_import(struct kvc_device_imports *imports, const struct kvc_device_owner *owner,
                      const struct kvc_msg_iov_register_device *m, struct kvc_device_memory *out)
{
	const struct kvc_cuda *cuda = kvc_cuda_get();
	int device;
	if (!cuda)
		return -ENOTSUP;
	if (!memchr(m->pci_bus_id, '\0', sizeof(m->pci_bus_id)) || m->size == 0)
		return -EINVAL;
	if (cuda->device_get_by_pci_bus_id(&device, m->pci_bus_id) != cudaSuccess) {
		cuda->get_last_error();
		return -ENODEV;
	}
	if (device < 0 || device >= MAX_DEVICES)
		return -ENODEV;
	void *allocation;
	size_t size;
	int rc = kvc_device_imports_acquire(imports, owner, device, m->ipc_handle, &allocation,
	                                    &size);
	if (rc < 0)
		return rc;
	if (m->offset > size || m->size > size - m->offset) {
		kvc_device_imports_release(imports, owner, allocation);
		return -EFAULT;
	}
	*out = (struct kvc_device_memory){.address = (char *)allocation + m->offset,
	                                  .size = m->size, .device = device,
	                                  .allocation = allocation, .owner = *owner};
	return 0;
}

void kvc_device_release(struct kvc_device_imports *imports, struct kvc_device_memory *memory)
{
	kvc_device_imports_release(imports, &memory->owner, memory->allocation);
	memory->address = memory->allocation = NULL;
}

/* One half of the staging memory and the pieces staged in it. */
struct half {
	uint8_t *memory;
	int count;
	struct kvc_storage_io pieces[KVC_DEVICE_MAX_IOS];
	int origin[KVC_DEVICE_MAX_IOS]; /* index of the io each piece is part of */
	char *target[KVC_DEVICE_MAX_IOS]; /* the piece's device address */
	bool pending[MAX_DEVICES];      /* copies queued on that GPU's stream */
	/* What goes to the storage servers: pieces that continue each other
	 * in one file and in the staging memory travel as one io (a ring key
	 * gathered from per-layer device segments is one read, not one per
	 * layer); each piece keeps its own copy. */
	int merged_count;
	struct kvc_storage_io merged[KVC_DEVICE_MAX_IOS];
	int merged_of[KVC_DEVICE_MAX_IOS]; /* each piece's merged io */
};

struct kvc_device_stager {
	const struct kvc_cuda *cuda;
	size_t half_bytes;
	uint8_t *staging;
	/* The staging memory as a region (client/transport.h): same-host
	 * storage servers place reads into it and take writes from it. NULL
	 * where it could not be shared memory (cudaHostAlloc instead). */
	struct kvc_storage_region region;
	const struct kvc_storage_region *placed;
	cudaStream_t streams[MAX_DEVICES];
	cudaEvent_t events[MAX_DEVICES][2];
	struct half halves[2];
};

/* The io's first failure wins. */
static void fail(struct kvc_storage_io *ios, int origin, int error)
{
	if (ios[origin].result == 0)
		ios[origin].result = error;
}

/* The stager's staging memory, 2 * half_bytes: shared memory pinned for
 * the GPU's copies, so a storage server on this host can place reads
 * straight into it (one placement plus one host-to-device copy per
 * piece), else cudaHostAlloc'd memory (TCP only). 0 or -ENOMEM (staging
 * NULL). */
static int staging_make(struct kvc_device_stager *s)
{
	const struct kvc_cuda *cuda = s->cuda;
	size_t bytes = 2 * s->half_bytes;
	s->staging = NULL;
	s->placed = NULL;
	if (kvc_transport_region_create(bytes, "kvc-staging", true, &s->region) == 0 &&
	    cuda->host_register(s->region.base, bytes, cudaHostRegisterPortable) == cudaSuccess) {
		s->staging = s->region.base;
		s->placed = &s->region;
	} else {
		cuda->get_last_error();
		kvc_transport_region_destroy(NULL, &s->region); /* never registered with a server */
		cudaError_t err = cuda->host_alloc((void **)&s->staging, bytes, cudaHostAllocPortable);
		if (err != cudaSuccess) {
			kvc_log_error("usrbio: pinned staging of %zu bytes: %s", bytes,
			              cuda->get_error_string(err));
			s->staging = NULL;
		}
	}
	s->halves[0].memory = s->staging;
	s->halves[1].memory = s->staging ? s->staging + s->half_bytes : NULL;
	return s->staging ? 0 : -ENOMEM;
}

static int stager_create(size_t bytes, struct kvc_device_stager **out)
{
	const struct kvc_cuda *cuda = kvc_cuda_get();
	if (!cuda)
		return -ENOTSUP;
	struct kvc_device_stager *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->cuda = cuda;
	s->half_bytes = bytes / 2;
	int rc = staging_make(s);
	if (rc < 0)
		free(s);
	else
		*out = s;
	return rc;
}

/* Shared staging memory a server may still place into (the storage
 * client's place_epoch moved while it was in use: storage_client.h) is
 * given up, never reused, as the ring keys' bounce buffer is: the GPU's
 * copies out of it are waited for, it is unregistered from the GPU and
 * the servers and unmapped (a late placement lands in memory no one reads
 * any more), and new staging memory takes its place. */
static void staging_renew(struct kvc_device_stager *s, struct kvc_storage_client *storage)
{
	const struct kvc_cuda *cuda = s->cuda;
	for (int d = 0; d < MAX_DEVICES; d++)
		if (s->streams[d])
			cuda->stream_synchronize(s->streams[d]);
	cuda->host_unregister(s->region.base);
	kvc_transport_region_drop(storage, &s->region);
	(void)staging_make(s); /* staging NULL: the stager fails its ios from now on */
}

/* The stream of device (created on first use), made current. */
static cudaStream_t stream_of(struct kvc_device_stager *s, int device)
{
	const struct kvc_cuda *cuda = s->cuda;
	if (cuda->set_device(device) != cudaSuccess)
		return NULL;
	if (!s->streams[device]) {
		cudaStream_t stream;
		if (cuda->stream_create(&stream, cudaStreamNonBlocking) != cudaSuccess)
			return NULL;
		for (int h = 0; h < 2; h++)
			if (cuda->event_create(&s->events[device][h], cudaEventDisableTiming) != cudaSuccess)
				return NULL;
		s->streams[device] = stream;
	}
	return s->streams[device];
}

#define PLACE_MIN_PIECE (512u << 10)

struct cursor {
	int io;
	uint64_t done; /* bytes of ios[io] already staged */
};

/* Stage the next pieces of the ios into half h, up to its size. */
static void fill(struct kvc_device_stager *s, struct half *h, struct kvc_storage_io *ios,
                 int count, struct cursor *at)
{
	size_t used = 0;
	h->count = 0;
	while (at->io < count && used < s->half_bytes) {
		struct kvc_storage_io *io = &ios[at->io];
		uint64_t take = io->length - at->done;
		if (take > s->half_bytes - used)
			take = s->half_bytes - used;
		struct kvc_storage_io *piece = &h->pieces[h->count];
		*piece = *io;
		piece->offset += at->done;
		piece->length = take;
		piece->buf = h->memory + used;
		piece->scatter = NULL; /* staged whole (device ios are never scattered) */
		piece->scatter_count = 0;
		piece->region = NULL; /* merge chooses, by the storage io's size */
		piece->result = 0;
		h->origin[h->count] = at->io;
		h->target[h->count++] = (char *)io->buf + at->done;
		used += take;
		at->done += take;
		if (at->done == io->length)
			at->io++, at->done = 0;
	}
}

static bool continues(const struct kvc_storage_io *a, const struct kvc_storage_io *b)
{
	return a->inode == b->inode && memcmp(&a->layout, &b->layout, sizeof(a->layout)) == 0 &&
	       a->forbid_holes == b->forbid_holes && a->offset + a->length == b->offset &&
	       (char *)a->buf + a->length == (char *)b->buf;
}

/* Build half h's storage ios from its pieces. A storage io of
 * PLACE_MIN_PIECE or more is placed (a same-host server moves it straight
 * between its file and the staging memory); smaller ones go by TCP: small
 * pieces placed one by one ran at a third of TCP's rate on the GPU host
 * (2026-11-23). The size that counts is the merged io's: a ring key of
 * 32 per-layer 64 KiB segments is one 2 MiB io, placed (by TCP it ran
 * at a third of contiguous keys, 2026-11-24). */
static void merge(const struct kvc_device_stager *s, struct half *h)
{
	int m = 0;
	for (int k = 0; k < h->count; k++) {
		if (m > 0 && continues(&h->merged[m - 1], &h->pieces[k])) {
			h->merged[m - 1].length += h->pieces[k].length;
		} else {
			h->merged[m] = h->pieces[k];
			h->merged[m++].result = 0;
		}
		h->merged_of[k] = m - 1;
	}
	h->merged_count = m;
	for (int i = 0; i < m; i++)
		h->merged[i].region = h->merged[i].length >= PLACE_MIN_PIECE ? s->placed : NULL;
}

/* Each piece gets its storage io's result. */
static void unmerge(struct half *h)
{
	for (int k = 0; k < h->count; k++)
		if (h->merged[h->merged_of[k]].result < 0)
			h->pieces[k].result = h->merged[h->merged_of[k]].result;
}

/* How many pieces from k on (at least 1) one strided copy can move:
 * same GPU, all good, the same length, back to back in staging and evenly
 * spaced on the device (a ring key's per-layer pages). */
static int run_of(const struct half *h, int k, const int *devices, ptrdiff_t *stride)
{
	const struct kvc_storage_io *p = &h->pieces[k];
	int n = 1;
	*stride = 0;
	while (k + n < h->count) {
		const struct kvc_storage_io *q = &h->pieces[k + n];
		ptrdiff_t step = h->target[k + n] - h->target[k + n - 1];
		if (q->result != 0 || p->result != 0 || q->length != p->length ||
		    devices[h->origin[k + n]] != devices[h->origin[k]] ||
		    (char *)q->buf != (char *)h->pieces[k + n - 1].buf + p->length ||
		    step < (ptrdiff_t)p->length || (n > 1 && step != *stride))
			break;
		*stride = step;
		n++;
	}
	return n;
}

/* Queue the copies of half h's good pieces (to or from the devices) and
 * an event per GPU after them: a run of evenly spaced pieces in one
 * cudaMemcpy2DAsync, any other piece in a cudaMemcpyAsync of its own. */
static void copy(struct kvc_device_stager *s, struct half *h, int index,
                 struct kvc_storage_io *ios, const int *devices, bool to_device)
{
	const struct kvc_cuda *cuda = s->cuda;
	for (int k = 0, n; k < h->count; k += n) {
		struct kvc_storage_io *piece = &h->pieces[k];
		int device = devices[h->origin[k]];
		ptrdiff_t stride;
		n = run_of(h, k, devices, &stride);
		cudaStream_t stream = piece->result == 0 ? stream_of(s, device) : NULL;
		size_t len = piece->length;
		cudaError_t err = !stream ? cudaErrorInvalidValue
			: n > 1 && to_device
			? cuda->memcpy_2d_async(h->target[k], (size_t)stride, piece->buf, len, len,
			                        (size_t)n, cudaMemcpyHostToDevice, stream)
			: n > 1 ? cuda->memcpy_2d_async(piece->buf, len, h->target[k], (size_t)stride, len,
			                                (size_t)n, cudaMemcpyDeviceToHost, stream)
			: to_device ? cuda->memcpy_async(h->target[k], piece->buf, len,
			                                 cudaMemcpyHostToDevice, stream)
			            : cuda->memcpy_async(piece->buf, h->target[k], len,
			                                 cudaMemcpyDeviceToHost, stream);
		if (err != cudaSuccess) {
			for (int j = k; j < k + n; j++) {
				if (h->pieces[j].result == 0)
					h->pieces[j].result = -EIO;
				fail(ios, h->origin[j], h->pieces[j].result);
			}
			cuda->get_last_error();
			continue;
		}
		h->pending[device] = true;
	}
	for (int d = 0; d < MAX_DEVICES; d++)
		if (h->pending[d] && (cuda->set_device(d) != cudaSuccess ||
		                      cuda->event_record(s->events[d][index], s->streams[d]) != cudaSuccess))
			h->pending[d] = false, kvc_log_error("usrbio: cudaEventRecord failed");
}

/* Wait for half h's copies; a failed GPU fails the ios of its pieces. */
static void settle(struct kvc_device_stager *s, struct half *h, int index,
                   struct kvc_storage_io *ios, const int *devices)
{
	for (int d = 0; d < MAX_DEVICES; d++) {
		if (!h->pending[d])
			continue;
		h->pending[d] = false;
		if (s->cuda->event_synchronize(s->events[d][index]) == cudaSuccess)
			continue;
		s->cuda->get_last_error();
		for (int k = 0; k < h->count; k++)
			if (devices[h->origin[k]] == d)
				h->pieces[k].result = -EIO, fail(ios, h->origin[k], -EIO);
	}
}

/* Record the pieces' storage results in their ios. */
static void collect(struct half *h, struct kvc_storage_io *ios)
{
	for (int k = 0; k < h->count; k++)
		if (h->pieces[k].result < 0)
			fail(ios, h->origin[k], h->pieces[k].result);
}

static void run_reads(struct kvc_device_stager *s, struct kvc_storage_client *storage,
                      struct kvc_storage_io *ios, const int *devices, int count)
{
	struct cursor at = {0, 0};
	for (int wave = 0; at.io < count; wave++) {
		struct half *h = &s->halves[wave & 1];
		settle(s, h, wave & 1, ios, devices); /* its last copies are done */
		fill(s, h, ios, count, &at);
		merge(s, h);
		kvc_storage_client_read_batch(storage, h->merged, h->merged_count);
		unmerge(h);
		collect(h, ios);
		copy(s, h, wave & 1, ios, devices, true);
	}
	settle(s, &s->halves[0], 0, ios, devices);
	settle(s, &s->halves[1], 1, ios, devices);
}

/* Drop the pieces that already failed, so they are not written. */
static void compact(struct half *h)
{
	int kept = 0;
	for (int k = 0; k < h->count; k++) {
		if (h->pieces[k].result < 0)
			continue;
		h->pieces[kept] = h->pieces[k];
		h->origin[kept] = h->origin[k];
		h->target[kept++] = h->target[k];
	}
	h->count = kept;
}

static void run_writes(struct kvc_device_stager *s, struct kvc_storage_client *storage,
                       struct kvc_storage_io *ios, const int *devices, int count)
{
	struct cursor at = {0, 0};
	fill(s, &s->halves[0], ios, count, &at);
	copy(s, &s->halves[0], 0, ios, devices, false);
	for (int wave = 0; s->halves[wave & 1].count > 0; wave++) {
		struct half *h = &s->halves[wave & 1], *next = &s->halves[(wave + 1) & 1];
		/* Copy the next wave out of the GPU while this one is written. */
		fill(s, next, ios, count, &at);
		copy(s, next, (wave + 1) & 1, ios, devices, false);
		settle(s, h, wave & 1, ios, devices);
		compact(h);
		merge(s, h);
		kvc_storage_client_write_batch(storage, h->merged, h->merged_count);
		unmerge(h);
		collect(h, ios);
		h->count = 0;
	}
}

void kvc_device_io_run(struct kvc_device_stager **stager, size_t staging_bytes,
                       struct kvc_storage_client *storage, struct kvc_storage_io *ios,
                       const int *devices, int count, bool read)
{
	int rc = *stager ? 0 : stager_create(staging_bytes, stager);
	if (rc == 0 && !(*stager)->staging)
		rc = -ENOMEM; /* its memory was given up and none could be had since */
	for (int i = 0; i < count; i++)
		ios[i].result = rc;
	if (rc < 0)
		return;
	uint64_t epoch = kvc_transport_place_epoch(storage);
	if (read)
		run_reads(*stager, storage, ios, devices, count);
	else
		run_writes(*stager, storage, ios, devices, count);
	if ((*stager)->placed && kvc_transport_place_moved(storage, epoch))
		staging_renew(*stager, storage);
}

#else /* built without CUDA: no device iov can be registered */

static int no_open(void *ctx, int device, const uint8_t handle[KVC_WIRE_IPC_HANDLE_SIZE],
                   void **allocation, size_t *size)
{
	(void)ctx, (void)device, (void)handle, (void)allocation, (void)size;
	return -ENOTSUP;
}

static void no_close(void *ctx, int device, void *allocation)
{
	(void)ctx, (void)device, (void)allocation;
}

struct kvc_device_imports *kvc_device_io_imports_create(void)
{
	struct kvc_device_import_ops ops = {no_open, no_close, NULL};
	return kvc_device_imports_create(&ops);
}

int kvc_device_import(struct kvc_device_imports *imports, const struct kvc_device_owner *owner,
                      const struct kvc_msg_iov_register_device *m, struct kvc_device_memory *out)
{
	(void)imports, (void)owner, (void)m, (void)out;
	return -ENOTSUP;
}

void kvc_device_release(struct kvc_device_imports *imports, struct kvc_device_memory *memory)
{
	(void)imports, (void)memory;
}

void kvc_device_io_run(struct kvc_device_stager **stager, size_t staging_bytes,
                       struct kvc_storage_client *storage, struct kvc_storage_io *ios,
                       const int *devices, int count, bool read)
{
	(void)stager, (void)staging_bytes, (void)storage, (void)devices, (void)read;
	for (int i = 0; i < count; i++)
		ios[i].result = -ENOTSUP;
}

#endif
