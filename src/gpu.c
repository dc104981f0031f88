/*
 * gpu: pinned iovs (include/kvc/gpu.h). The CUDA runtime is loaded with
 * dlopen on first use, so libkvc has no link-time CUDA dependency and runs
 * on machines without one. Process-wide state: the loaded entry points
 * (written once under pthread_once) and a per-thread error text.
 */
#include "kvc/gpu.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#if defined(KVC_HAVE_CUDA)
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>

struct cuda_api {
	cudaError_t (*host_register)(void *, size_t, unsigned int);
	cudaError_t (*host_unregister)(void *);
	cudaError_t (*memcpy_async)(void *, const void *, size_t, enum cudaMemcpyKind,
	                            cudaStream_t);
	cudaError_t (*device_count)(int *);
	const char *(*error_string)(cudaError_t);
	int devices;
};

static pthread_once_t loaded = PTHREAD_ONCE_INIT;
static struct cuda_api cuda;
static _Thread_local char last_error[160];

static void load(void)
{
	static const char *names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};
	void *lib = NULL;
	for (size_t i = 0; !lib && i < sizeof(names) / sizeof(names[0]); i++)
		lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		return;
	*(void **)&cuda.host_register = dlsym(lib, "cudaHostRegister");
	*(void **)&cuda.host_unregister = dlsym(lib, "cudaHostUnregister");
	*(void **)&cuda.memcpy_async = dlsym(lib, "cudaMemcpyAsync");
	*(void **)&cuda.device_count = dlsym(lib, "cudaGetDeviceCount");
	*(void **)&cuda.error_string = dlsym(lib, "cudaGetErrorString");
	if (!cuda.host_register || !cuda.host_unregister || !cuda.memcpy_async ||
	    !cuda.device_count || !cuda.error_string || cuda.device_count(&cuda.devices) != cudaSuccess)
		cuda.devices = 0;
}

static int ready(void)
{
	pthread_once(&loaded, load);
	return cuda.devices > 0;
}

static int failed(cudaError_t err)
{
	snprintf(last_error, sizeof(last_error), "%s", cuda.error_string(err));
	return -EIO;
}

int kvc_gpu_available(void)
{
	return ready();
}

/* The pin state lives in the iov: see usrbio.c's accessors. */
int kvc_iov_pin(struct kvc_iov *iov)
{
	if (!ready())
		return -ENOTSUP;
	if (kvc_iov_pinned(iov))
		return -EALREADY;
	cudaError_t err = cuda.host_register(kvc_iov_base(iov), kvc_iov_size(iov),
	                                     cudaHostRegisterDefault);
	if (err != cudaSuccess)
		return failed(err);
	kvc_iov_set_pinned(iov, 1);
	return 0;
}

int kvc_iov_unpin(struct kvc_iov *iov)
{
	if (!ready())
		return -ENOTSUP;
	if (!kvc_iov_pinned(iov))
		return -EINVAL;
	cudaError_t err = cuda.host_unregister(kvc_iov_base(iov));
	kvc_iov_set_pinned(iov, 0);
	return err == cudaSuccess ? 0 : failed(err);
}

static int copy(struct kvc_iov *iov, const struct kvc_gpu_copy *copies, int count,
                void *stream, int to_device)
{
	if (!ready())
		return -ENOTSUP;
	uint8_t *base = kvc_iov_base(iov);
	size_t size = kvc_iov_size(iov);
	for (int i = 0; i < count; i++)
		if (copies[i].iov_offset > size || copies[i].length > size - copies[i].iov_offset)
			return -EFAULT;
	for (int i = 0; i < count; i++) {
		const struct kvc_gpu_copy *c = &copies[i];
		cudaError_t err = to_device
			? cuda.memcpy_async(c->device, base + c->iov_offset, c->length,
			                    cudaMemcpyHostToDevice, (cudaStream_t)stream)
			: cuda.memcpy_async(base + c->iov_offset, c->device, c->length,
			                    cudaMemcpyDeviceToHost, (cudaStream_t)stream);
		if (err != cudaSuccess)
			return failed(err);
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

const char *kvc_gpu_last_error(void)
{
	return last_error;
}

#else /* built without the CUDA headers: the API says "not supported" */

int kvc_gpu_available(void) { return 0; }
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
const char *kvc_gpu_last_error(void) { return "built without CUDA"; }

#endif
