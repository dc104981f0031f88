/*
 * cuda_api: the CUDA runtime entry points kvcfs uses, loaded with dlopen
 * on first use (libcudart.so.13 or .12, and cuMemGetAddressRange from the
 * driver, libcuda.so.1), so nothing in kvcfs links against CUDA and every
 * binary runs where CUDA is absent. Used by libkvc (src/client/gpu.c), kvc-fuse
 * (fuse/device_io.c), kvc-bench gpu and the GPU test programs.
 *
 * Owns one process-wide table of entry points, written once under
 * pthread_once and read-only after. Built only with the CUDA headers
 * (KVC_HAVE_CUDA); without them kvc_cuda_get always says "no CUDA".
 */
#ifndef KVC_CUDA_API_H
#define KVC_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

#if defined(KVC_HAVE_CUDA)
#include <cuda_runtime_api.h>

struct kvc_cuda {
	cudaError_t (*host_register)(void *, size_t, unsigned int);
	cudaError_t (*host_unregister)(void *);
	cudaError_t (*host_alloc)(void **, size_t, unsigned int);
	cudaError_t (*free_host)(void *);
	cudaError_t (*malloc)(void **, size_t);
	cudaError_t (*free)(void *);
	cudaError_t (*memcpy)(void *, const void *, size_t, enum cudaMemcpyKind);
	cudaError_t (*memcpy_async)(void *, const void *, size_t, enum cudaMemcpyKind,
	                            cudaStream_t);
	cudaError_t (*memcpy_2d_async)(void *, size_t, const void *, size_t, size_t, size_t,
	                               enum cudaMemcpyKind, cudaStream_t);
	cudaError_t (*memset)(void *, int, size_t);
	cudaError_t (*get_device_count)(int *);
	cudaError_t (*get_device)(int *);
	cudaError_t (*set_device)(int);
	cudaError_t (*device_synchronize)(void);
	cudaError_t (*device_get_pci_bus_id)(char *, int, int);
	cudaError_t (*device_get_by_pci_bus_id)(int *, const char *);
	cudaError_t (*pointer_get_attributes)(struct cudaPointerAttributes *, const void *);
	cudaError_t (*ipc_get_mem_handle)(cudaIpcMemHandle_t *, void *);
	cudaError_t (*ipc_open_mem_handle)(void **, cudaIpcMemHandle_t, unsigned int);
	cudaError_t (*ipc_close_mem_handle)(void *);
	cudaError_t (*stream_create)(cudaStream_t *, unsigned int);
	cudaError_t (*stream_destroy)(cudaStream_t);
	cudaError_t (*stream_synchronize)(cudaStream_t);
	cudaError_t (*event_create)(cudaEvent_t *, unsigned int);
	cudaError_t (*event_record)(cudaEvent_t, cudaStream_t);
	cudaError_t (*event_synchronize)(cudaEvent_t);
	cudaError_t (*event_elapsed_time)(float *, cudaEvent_t, cudaEvent_t);
	cudaError_t (*event_destroy)(cudaEvent_t);
	cudaError_t (*get_last_error)(void);
	const char *(*get_error_string)(cudaError_t);
	/* driver API: the allocation around a device pointer (CUresult) */
	int (*mem_get_address_range)(unsigned long long *, size_t *, unsigned long long);
	int devices;
};

/* The loaded runtime, or NULL when there is none or it sees no device. */
const struct kvc_cuda *kvc_cuda_get(void);

/* The allocation that contains device pointer p: its base and size.
 * 0, -EINVAL (not device memory), -ENOTSUP. */
int kvc_cuda_allocation(const struct kvc_cuda *cuda, const void *p, void **base,
                        size_t *size);
#endif

/* Why CUDA is not usable here, for messages ("" when it is). */
const char *kvc_cuda_unavailable_reason(void);

#endif
