/* mem_guard: see mem_guard.h. */
#include "core/mem_guard.h"

#include <errno.h>
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

/* noinline: the jump buffer's frame must be this function's, and nothing
 * of the caller's may live in registers across it. The signal mask is not
 * saved (no sigprocmask per copy): the handler runs with SA_NODEFER and an
 * empty sa_mask, so a SIGBUS leaves the mask as it was. */
__attribute__((noinline)) int kvc_mem_guard_copy(void *dst, const void *src, size_t length)
{
	sigjmp_buf jump;
	if (sigsetjmp(jump, 0)) {
		guard = NULL;
		return -EFAULT;
	}
	guard = &jump;
	__asm__ volatile("" ::: "memory");
	memcpy(dst, src, length);
	__asm__ volatile("" ::: "memory");
	guard = NULL;
	return 0;
}

__attribute__((noinline)) int kvc_mem_guard_crc32c(const void *p, size_t length, uint32_t *crc)
{
	sigjmp_buf jump;
	if (sigsetjmp(jump, 0)) {
		guard = NULL;
		return -EFAULT;
	}
	guard = &jump;
	__asm__ volatile("" ::: "memory");
	uint32_t c = kvc_crc32c(0, p, length);
	__asm__ volatile("" ::: "memory");
	guard = NULL;
	*crc = c;
	return 0;
}
