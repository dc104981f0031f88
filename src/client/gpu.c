/*
 * gpu: GPU-registered iovs (include/kvc/gpu.h): pinned host iovs and
 * device-memory iovs shared with kvc-fuse over CUDA IPC. The CUDA runtime
 * comes from src/core/cuda_api.c (dlopen), so libkvc has no link-time CUDA
 * dependency. State: a per-thread error text; the iov handles own the
 * rest (src/client/usrbio.c, through src/client/iov_device.h).
 */
#include "kvc/gpu.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <uuid/uuid.h>

#include "core/cuda_api.h"
#include "client/iov_device.h"

static _Thread_local char last_error[160];

int kvc_gpu_available(void)
{
#if defined(KVC_HAVE_CUDA)
	return kvc_cuda_get() != NULL;
#else
	return 0;
#endif
}

int kvc_gpu_device_count(void)
{
#if defined(KVC_HAVE_CUDA)
	const struct kvc_cuda *cuda = kvc_cuda_get();
	return cuda ? cuda->devices : 0;
#else
	return 0;
#endif
}

const char *kvc_gpu_last_error(void)
{
	return last_error[0] ? last_error : kvc_cuda_unavailable_reason();
}

#if defined(KVC_HAVE_CUDA)

static int failed(const struct kvc_cuda *cuda, cudaError_t err, const char *what)
{
	snprintf(last_error, sizeof(last_error), "%s: %s", what, cuda->get_error_string(err));
	return -EIO;
}

/* The pin state lives in the iov: see usrbio.c's accessors. */
int kvc_iov_pin(struct kvc_iov *iov)
{
	const struct kvc_cuda *cuda = kvc_cuda_get();
	if (!cuda)
		return -ENOTSUP;
	if (kvc_iov_device(iov) >= 0)
		return -EINVAL; /* already GPU memory */
	if (kvc_iov_pinned(iov))
		return -EALREADY;
	cudaError_t err = cuda->host_register(kvc_iov_base(iov), kvc_iov_size(iov),
	                                      cudaHostRegisterDefault);
	if (err != cudaSuccess)
		return failed(cuda, err, "cudaHostRegister");
	kvc_iov_set_pinned(iov, 1);
	return 0;
}

int kvc_iov_unpin(struct kvc_iov *iov)
{
	const struct kvc_cuda *cuda = kvc_cuda_get();
	if (!cuda)
		return -ENOTSUP;
	if (!kvc_iov_pinned(iov))
		return -EINVAL;
	cudaError_t err = cuda->host_unregister(kvc_iov_base(iov));
	kvc_iov_set_pinned(iov, 0);
	return err == cudaSuccess ? 0 : failed(cuda, err, "cudaHostUnregister");
}

static int copy(struct kvc_iov *iov, const struct kvc_gpu_copy *copies, int count,
                void *stream, int to_device)
{
	const struct kvc_cuda *cuda = kvc_cuda_get();
	if (!cuda)
		return -ENOTSUP;
	if (kvc_iov_device(iov) >= 0 || count < 0)
		return -EINVAL;
	uint8_t *base = kvc_iov_base(iov);
	size_t size = kvc_iov_size(iov);
	for (int i = 0; i < count; i++)
		if (copies[i].iov_offset > size || copies[i].length > size - copies[i].iov_offset)
			return -EFAULT;
	for (int i = 0; i < count; i++) {
		const struct kvc_gpu_copy *c = &copies[i];
		cudaError_t err = to_device
			? cuda->memcpy_async(c->device, base + c->iov_offset, c->length,
			                     cudaMemcpyHostToDevice, (cudaStream_t)stream)
			: cuda->memcpy_async(base + c->iov_offset, c->device, c->length,
			                     cudaMemcpyDeviceToHost, (cudaStream_t)stream);
		if (err != cudaSuccess)
			return failed(cuda, err, "cudaMemcpyAsync");
	}
	return 0;
}

int kvc_iov_to_device(struct kvc_iov *iov, const struct kvc_gpu_copy *copies, int count,
                      void *stream)
{
	return copy(iov, copies, count, stream, 1);
}

int kvc_iov_from_device(struct kvc_iov *iov, const struct kvc_gpu_copy *copies, int count,
                        void *stream)
{
	return copy(iov, copies, count, stream, 0);
}

/* Describe base..base+size of device memory to kvc-fuse: the IPC handle of
 * its allocation, the offset in it, and the GPU's PCI bus id. */
static int describe(const struct kvc_cuda *cuda, void *base, size_t size, int device,
                    struct kvc_msg_iov_register_device *m)
{
	struct cudaPointerAttributes attributes;
	cudaError_t err = cuda->set_device(device);
	if (err == cudaSuccess)
		err = cuda->pointer_get_attributes(&attributes, base);
	if (err != cudaSuccess) {
		cuda->get_last_error(); /* clear it: a bad pointer is the caller's error */
		failed(cuda, err, "cudaPointerGetAttributes");
		return -EINVAL;
	}
	if (attributes.type != cudaMemoryTypeDevice || attributes.device != device) {
		snprintf(last_error, sizeof(last_error), "not device memory of GPU %d", device);
		return -EINVAL;
	}
	void *allocation;
	size_t allocation_size;
	if (kvc_cuda_allocation(cuda, base, &allocation, &allocation_size) < 0)
		return -EINVAL;
	uint64_t offset = (uint64_t)((char *)base - (char *)allocation);
	if (offset > allocation_size || size > allocation_size - offset) {
		snprintf(last_error, sizeof(last_error), "range outside its CUDA allocation");
		return -EFAULT;
	}
	cudaIpcMemHandle_t handle;
	err = cuda->ipc_get_mem_handle(&handle, allocation);
	if (err != cudaSuccess) /* e.g. cudaMallocAsync pools or VMM memory */
		return failed(cuda, err, "cudaIpcGetMemHandle");
	err = cuda->device_get_pci_bus_id(m->pci_bus_id, sizeof(m->pci_bus_id), device);
	if (err != cudaSuccess)
		return failed(cuda, err, "cudaDeviceGetPCIBusId");
	m->size = size;
	m->offset = offset;
	_Static_assert(sizeof(handle) == KVC_WIRE_IPC_HANDLE_SIZE, "");
	memcpy(m->ipc_handle, &handle, sizeof(handle));
	return 0;
}

/* The calling thread's current GPU, to give back after we used another:
 * the caller's (PyTorch's, say) choice is not ours to change. */
static int current_device(const struct kvc_cuda *cuda)
{
	int device = 0;
	return cuda->get_device(&device) == cudaSuccess ? device : 0;
}

static int wrap_device(struct kvc_iov **out, void *base, const uint8_t id[16],
                       const char *mount, size_t size, int device, bool owned)
{
	const struct kvc_cuda *cuda = kvc_cuda_get();
	struct kvc_msg_iov_register_device m = {0};
	if (!cuda)
		return -ENOTSUP;
	if (!base || size == 0 || device < 0 || device >= cuda->devices)
		return -EINVAL;
	if (id)
		memcpy(m.id, id, 16);
	int previous = current_device(cuda);
	int rc = describe(cuda, base, size, device, &m);
	cuda->set_device(previous);
	return rc < 0 ? rc : kvc_iov_register_device(out, mount, base, size, device, owned, &m);
}

int kvc_iov_create_device(struct kvc_iov **out, const char *mount, size_t size, int device,
                          uint8_t id_out[16])
{
	const struct kvc_cuda *cuda = kvc_cuda_get();
	void *memory = NULL;
	uuid_t id;
	if (!cuda)
		return -ENOTSUP;
	if (size == 0 || device < 0 || device >= cuda->devices)
		return -EINVAL;
	int previous = current_device(cuda);
	cudaError_t err = cuda->set_device(device);
	if (err == cudaSuccess)
		err = cuda->malloc(&memory, size);
	cuda->set_device(previous);
	if (err != cudaSuccess)
		return err == cudaErrorMemoryAllocation ? -ENOMEM : failed(cuda, err, "cudaMalloc");
	uuid_generate_random(id);
	int rc = wrap_device(out, memory, id, mount, size, device, true);
	if (rc < 0)
		cuda->free(memory);
	else if (id_out)
		memcpy(id_out, id, 16);
	return rc;
}

int kvc_iov_wrap_device(struct kvc_iov **out, void *device_pointer, const uint8_t id[16],
                        const char *mount, size_t size, int device)
{
	return wrap_device(out, device_pointer, id, mount, size, device, false);
}

void kvc_gpu_device_free(void *base, int device)
{
	const struct kvc_cuda *cuda = kvc_cuda_get();
	if (!cuda)
		return;
	int previous = current_device(cuda);
	if (cuda->set_device(device) == cudaSuccess)
		cuda->free(base);
	cuda->set_device(previous);
}

#else /* built without the CUDA headers: the API says "not supported" */

int kvc_iov_pin(struct kvc_iov *iov) { (void)iov; return -ENOTSUP; }
int kvc_iov_unpin(struct kvc_iov *iov) { (void)iov; return -ENOTSUP; }
int kvc_iov_to_device(struct kvc_iov *iov, const struct kvc_gpu_copy *copies, int count,
                      void *stream)
{
	(void)iov, (void)copies, (void)count, (void)stream;
	return -ENOTSUP;
}
int kvc_iov_from_device(struct kvc_iov *iov, const struct kvc_gpu_copy *copies, int count,
                        void *stream)
{
	(void)iov, (void)copies, (void)count, (void)stream;
	return -ENOTSUP;
}
int kvc_iov_create_device(struct kvc_iov **out, const char *mount, size_t size, int device,
                          uint8_t id_out[16])
{
	(void)out, (void)mount, (void)size, (void)device, (void)id_out;
	return -ENOTSUP;
}
int kvc_iov_wrap_device(struct kvc_iov **out, void *device_pointer, const uint8_t id[16],
                        const char *mount, size_t size, int device)
{
	(void)out, (void)device_pointer, (void)id, (void)mount, (void)size, (void)device;
	return -ENOTSUP;
}
void kvc_gpu_device_free(void *base, int device) { (void)base, (void)device; }

#endif
