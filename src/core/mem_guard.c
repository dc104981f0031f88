/* mem_guard: see mem_guard.h. */
#include "core/mem_guard.h"

#include <errno.h>
#include <stdbool.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>

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
};

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
		return -EFAULT;
	}
	guard = &jump;
	__asm__ volatile("" ::: "memory");
	if (w->copy && w->places)
		scatter(w);
	else if (w->copy)
		memcpy(w->dst, w->src, w->length);
	else
		w->crc = kvc_crc32c(0, w->src, w->length);
	__asm__ volatile("" ::: "memory");
	guard = NULL;
	return 0;
}

int kvc_mem_guard_copy(void *dst, const void *src, size_t length)
{
	struct work w = {.dst = dst, .src = src, .length = length, .copy = true};
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
