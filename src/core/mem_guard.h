/*
 * mem_guard: copies from and into memory a client owns and may shrink
 * under us (a USRBIO iov's shared memory, mapped by this process), without
 * a fault: a shared mapping past the end of its shrunk file raises SIGBUS
 * on access, and a copy under the guard answers -EFAULT instead.
 *
 * How: a process-wide SIGBUS handler (kvc_mem_guard_init, once) and a
 * thread-local jump buffer set only for the length of one guarded copy;
 * a SIGBUS outside a guarded copy gets the default action, as without the
 * handler. A guarded copy is a plain memcpy otherwise: several times
 * cheaper than the kernel's process_vm_readv/writev, which pin every page
 * (about 12 us against 2 us for 64 KiB on the development machine).
 *
 * Rules: the copy takes no lock and calls nothing that could (a jump out
 * of it leaves nothing half-held); the memory must be a mapping of the
 * process that stays mapped (only its file may shrink): a munmap under
 * the copy is SIGSEGV, which is not guarded.
 */
#ifndef KVC_CORE_MEM_GUARD_H
#define KVC_CORE_MEM_GUARD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* Install the SIGBUS handler (idempotent, thread-safe). Returns 0 or
 * -errno. */
int kvc_mem_guard_init(void);

/* memcpy(dst, src, length), either side client memory. Returns 0, or
 * -EFAULT when the memory was gone (the bytes copied so far are
 * undefined). kvc_mem_guard_init must have succeeded. */
int kvc_mem_guard_copy(void *dst, const void *src, size_t length);

/* As kvc_mem_guard_copy, with stores that bypass the caches (x86-64;
 * elsewhere a memcpy): the destination is written without being read
 * first, and left in memory, not in this CPU's caches. For large copies
 * into memory this thread will not read again (a client's iov): they
 * cost the memory bus one pass over the destination instead of two.
 * Small copies that a reader takes next are better left in the caches
 * (kvc_mem_guard_copy): chunk_read.c streams only large pieces. */
int kvc_mem_guard_stream(void *dst, const void *src, size_t length);

/* The first `length` bytes of src to places[0], places[1], ... in turn
 * (each its iov_len, the last cut short; places holding fewer bytes take
 * fewer), under one guard: as kvc_mem_guard_copy for each place. */
int kvc_mem_guard_scatter(const struct iovec *places, uint32_t count, const void *src,
                          size_t length);

/* fn(arg) under the guard: its result, or -EFAULT when a SIGBUS ended it
 * (a read of a shared mapping whose file shrank, or whose disk failed:
 * another process's LMDB index). fn follows the rules above: no lock,
 * nothing half-done that a jump out of it would leave behind. */
int kvc_mem_guard_call(int (*fn)(void *arg), void *arg);

/* *crc = kvc_crc32c(0, p, length) of client memory. Returns 0 or
 * -EFAULT. */
int kvc_mem_guard_crc32c(const void *p, size_t length, uint32_t *crc);

#endif
