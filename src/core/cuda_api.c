/* cuda_api: see cuda_api.h. */
#include "core/cuda_api.h"

#include <errno.h>

#if defined(KVC_HAVE_CUDA)
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

static pthread_once_t loaded = PTHREAD_ONCE_INIT;
static struct kvc_cuda cuda;
static const char *reason = "no CUDA runtime (libcudart.so.13 or .12) on the library path, or no driver (libcuda.so.1)";

#define LOAD(lib, field, name) \
	(*(void **)&cuda.field = dlsym(lib, name), cuda.field != NULL)

static int load_runtime(void *lib)
{
	return LOAD(lib, host_register, "cudaHostRegister") &&
	       LOAD(lib, host_unregister, "cudaHostUnregister") &&
	       LOAD(lib, host_alloc, "cudaHostAlloc") && LOAD(lib, free_host, "cudaFreeHost") &&
	       LOAD(lib, malloc, "cudaMalloc") && LOAD(lib, free, "cudaFree") &&
	       LOAD(lib, memcpy, "cudaMemcpy") && LOAD(lib, memcpy_async, "cudaMemcpyAsync") &&
	       LOAD(lib, memcpy_2d_async, "cudaMemcpy2DAsync") &&
	       LOAD(lib, memset, "cudaMemset") &&
	       LOAD(lib, get_device_count, "cudaGetDeviceCount") &&
	       LOAD(lib, get_device, "cudaGetDevice") && LOAD(lib, set_device, "cudaSetDevice") &&
	       LOAD(lib, device_synchronize, "cudaDeviceSynchronize") &&
	       LOAD(lib, device_get_pci_bus_id, "cudaDeviceGetPCIBusId") &&
	       LOAD(lib, device_get_by_pci_bus_id, "cudaDeviceGetByPCIBusId") &&
	       LOAD(lib, pointer_get_attributes, "cudaPointerGetAttributes") &&
	       LOAD(lib, ipc_get_mem_handle, "cudaIpcGetMemHandle") &&
	       LOAD(lib, ipc_open_mem_handle, "cudaIpcOpenMemHandle") &&
	       LOAD(lib, ipc_close_mem_handle, "cudaIpcCloseMemHandle") &&
	       LOAD(lib, stream_create, "cudaStreamCreateWithFlags") &&
	       LOAD(lib, stream_destroy, "cudaStreamDestroy") &&
	       LOAD(lib, stream_synchronize, "cudaStreamSynchronize") &&
	       LOAD(lib, event_create, "cudaEventCreateWithFlags") &&
	       LOAD(lib, event_record, "cudaEventRecord") &&
	       LOAD(lib, event_synchronize, "cudaEventSynchronize") &&
	       LOAD(lib, event_elapsed_time, "cudaEventElapsedTime") &&
	       LOAD(lib, event_destroy, "cudaEventDestroy") &&
	       LOAD(lib, get_last_error, "cudaGetLastError") &&
	       LOAD(lib, get_error_string, "cudaGetErrorString");
}

static void load(void)
{
	static const char *names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};
	void *lib = NULL;
	for (size_t i = 0; !lib && i < sizeof(names) / sizeof(names[0]); i++)
		lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib || !driver)
		return;
	if (!load_runtime(lib) || !LOAD(driver, mem_get_address_range, "cuMemGetAddressRange_v2")) {
		reason = "the CUDA runtime lacks an entry point kvcfs needs";
		return;
	}
	if (cuda.get_device_count(&cuda.devices) != cudaSuccess || cuda.devices <= 0) {
		cuda.devices = 0;
		reason = "the CUDA runtime sees no GPU";
		return;
	}
	reason = "";
}

const struct kvc_cuda *kvc_cuda_get(void)
{
	pthread_once(&loaded, load);
	return cuda.devices > 0 ? &cuda : NULL;
}

const char *kvc_cuda_unavailable_reason(void)
{
	pthread_once(&loaded, load);
	return reason;
}

int kvc_cuda_allocation(const struct kvc_cuda *c, const void *p, void **base, size_t *size)
{
	unsigned long long start = 0;
	size_t length = 0;
	if (!c)
		return -ENOTSUP;
	if (c->mem_get_address_range(&start, &length, (unsigned long long)(uintptr_t)p) != 0)
		return -EINVAL;
	*base = (void *)(uintptr_t)start;
	*size = length;
	return 0;
}

#else

const char *kvc_cuda_unavailable_reason(void)
{
	return "kvcfs was built without CUDA (meson option cuda)";
}

#endif
