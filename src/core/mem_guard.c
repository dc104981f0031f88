/* mem_guard: see mem_guard.h. */
#include "core/mem_guard.h"

#include <errno.h>
#include <stdbool.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "core/crc32c.h"

/* Set while this thread copies under the guard. volatile: the stores
 * around the copy must happen where written (a compiler sees memcpy never
 * reads it and would drop them). */
static __thread sigjmp_buf *volatile guard;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int init_rc;

static void on_sigbus(int sig, siginfo_t *info, void *context)
{
	(void)info;
	(void)context;
	if (guard)
		siglongjmp(*guard, 1);
	/* Not a guarded copy: the default action, as without the handler. */
	signal(sig, SIG_DFL);
	raise(sig);
}

static void install(void)
{
	struct sigaction sa = {.sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO | SA_NODEFER};
	sigemptyset(&sa.sa_mask);
	init_rc = sigaction(SIGBUS, &sa, NULL) < 0 ? -errno : 0;
}

int kvc_mem_guard_init(void)
{
	pthread_once(&once, install);
	return init_rc;
}

/* One guarded piece of work: a copy (to dst, or scattered to `places`),
 * or a crc. */
struct work {
	void *dst;
	const struct iovec *places;
	uint32_t place_count;
	const void *src;
	size_t length;
	uint32_t crc;
	bool copy;
	bool stream; /* a copy with non-temporal stores */
	int (*fn)(void *arg); /* kvc_mem_guard_call */
	void *arg;
	int result;
};

/* memcpy with non-temporal stores (SSE2, which every x86-64 has): the
 * destination's first bytes up to a 64-byte boundary and its last
 * partial 64 bytes by memcpy, the rest 64 bytes a turn. stream_fence
 * after the last makes them visible before anything this thread stores
 * next (a reply saying the bytes are there). */
static void stream(uint8_t *dst, const uint8_t *src, size_t length)
{
#if defined(__x86_64__)
	size_t head = (64 - ((uintptr_t)dst & 63)) & 63; /* whole cache lines streamed */
	if (head > length)
		head = length;
	memcpy(dst, src, head);
	dst += head;
	src += head;
	length -= head;
	for (; length >= 64; length -= 64, dst += 64, src += 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)src);
		__m128i b = _mm_loadu_si128((const __m128i *)(src + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(src + 32));
		__m128i d = _mm_loadu_si128((const __m128i *)(src + 48));
		_mm_stream_si128((__m128i *)dst, a);
		_mm_stream_si128((__m128i *)(dst + 16), b);
		_mm_stream_si128((__m128i *)(dst + 32), c);
		_mm_stream_si128((__m128i *)(dst + 48), d);
	}
	memcpy(dst, src, length);
#else
	memcpy(dst, src, length);
#endif
}

static void stream_fence(void)
{
#if defined(__x86_64__)
	_mm_sfence();
#endif
}

static void scatter(const struct work *w)
{
	const uint8_t *src = w->src;
	size_t left = w->length;
	for (uint32_t i = 0; i < w->place_count && left > 0; i++) {
		size_t n = w->places[i].iov_len < left ? w->places[i].iov_len : left;
		memcpy(w->places[i].iov_base, src, n);
		src += n;
		left -= n;
	}
}

/* Run w under the guard. noinline: the jump buffer's frame must be this
 * function's, and nothing of the caller's may live in registers across
 * it. The signal mask is not saved (no sigprocmask per copy): the handler
 * runs with SA_NODEFER and an empty sa_mask, so a SIGBUS leaves the mask
 * as it was. */
__attribute__((noinline)) static int guarded(struct work *w)
{
	sigjmp_buf jump;
	if (sigsetjmp(jump, 0)) {
		guard = NULL;
		stream_fence(); /* streamed stores before the fault, ordered as on success */
		return -EFAULT;
	}
	guard = &jump;
	__asm__ volatile("" ::: "memory");
	if (w->fn) {
		w->result = w->fn(w->arg);
	} else if (w->copy && w->places) {
		scatter(w);
	} else if (w->stream) {
		stream(w->dst, w->src, w->length);
		stream_fence();
	} else if (w->copy) {
		memcpy(w->dst, w->src, w->length);
	} else {
		w->crc = kvc_crc32c(0, w->src, w->length);
	}
	__asm__ volatile("" ::: "memory");
	guard = NULL;
	return 0;
}

int kvc_mem_guard_call(int (*fn)(void *arg), void *arg)
{
	struct work w = {.fn = fn, .arg = arg};
	int rc = guarded(&w);
	return rc < 0 ? rc : w.result;
}

int kvc_mem_guard_copy(void *dst, const void *src, size_t length)
{
	struct work w = {.dst = dst, .src = src, .length = length, .copy = true};
	return guarded(&w);
}

int kvc_mem_guard_stream(void *dst, const void *src, size_t length)
{
	struct work w = {.dst = dst, .src = src, .length = length, .stream = true};
	return guarded(&w);
}

int kvc_mem_guard_scatter(const struct iovec *places, uint32_t count, const void *src,
                          size_t length)
{
	struct work w = {.places = places, .place_count = count, .src = src, .length = length,
	                 .copy = true};
	return guarded(&w);
}

int kvc_mem_guard_crc32c(const void *p, size_t length, uint32_t *crc)
{
	struct work w = {.src = p, .length = length};
	int rc = guarded(&w);
	if (rc == 0)
		*crc = w.crc;
	return rc;
}
