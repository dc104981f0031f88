/*
 * reserve: the free space a volume keeps back for metadata, so that a
 * full cache can always be emptied from inside. The LMDB databases on a
 * volume (kvc-meta's namespace and page pools, each target's chunk index)
 * need free pages to commit anything, deletes included: a volume filled
 * to the last block refuses the very `rm` that would free it.
 *
 * Two users, nested (docs/operations.md "Full disks"):
 *   - kvc-storage refuses new chunk data that would take a target's
 *     filesystem below its reserve (KVC_RESERVE_DATA; auto:
 *     min(1 GiB, max(8 MiB, 2% of the volume)));
 *   - kvc-meta refuses namespace growth while its volume is below its
 *     own reserve (KVC_RESERVE_META; auto: half the data one).
 * Removing, truncating and punching are never refused: they may use the
 * reserve. On a shared volume (the embedded cluster) data stops first;
 * the gap between the two reserves absorbs what other processes write
 * between two looks at the volume, and below both the deletes still find
 * room.
 *
 * The free figure is cached, so a write costs no statvfs: it is taken
 * again at most every KVC_RESERVE_REFRESH_NS, or once refresh_bytes have
 * been admitted since the last look, and in between lowered by every
 * byte admitted:
 *
 *   available = free (at the last look) - charged (admitted and done
 *               since then) - in_flight (admitted, not done yet)
 *
 * A write of n bytes is admitted when available - n >= reserve. Bytes in
 * flight when a look is taken stay counted (some may be on disk already).
 * The figure errs both ways between looks: low, because overwrites are
 * charged as new bytes (a store cannot tell a hole from written bytes
 * cheaply); high, because other processes' writes show only at the next
 * look. So near the reserve (available - n < reserve + refresh_bytes)
 * every write looks again, unless the last look is under a millisecond
 * old and nothing was charged since: a refusal is true when it is made,
 * and what others write is seen before the last bytes above the reserve
 * are handed out. Far from it, writes cost no syscall.
 *
 * Thread-safe: one mutex, held for the arithmetic and the statvfs (a
 * local syscall; never network I/O, never a call on a client's object).
 */
#ifndef KVC_RESERVE_H
#define KVC_RESERVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define KVC_RESERVE_AUTO (-1)
#define KVC_RESERVE_REFRESH_NS (100ull * 1000 * 1000)

enum kvc_reserve_kind {
	KVC_RESERVE_DATA, /* a storage target's chunk data */
	KVC_RESERVE_META, /* kvc-meta's namespace growth: half the data one */
};

/* Seams for tests: how the volume is looked at and what time it is.
 * stat returns 0 and the volume's size and the bytes an unprivileged
 * writer may still use (statvfs f_blocks and f_bavail), or -errno. */
struct kvc_reserve_ops {
	int (*stat)(void *arg, uint64_t *total_bytes, uint64_t *free_bytes);
	uint64_t (*now_ns)(void *arg);
	void *arg;
};

struct kvc_reserve {
	pthread_mutex_t lock;
	int fd;                            /* a directory on the volume; not owned */
	const struct kvc_reserve_ops *ops; /* NULL: fstatvfs(fd), CLOCK_MONOTONIC */
	uint64_t reserve_bytes;            /* 0: nothing is refused; set at init */
	uint64_t refresh_bytes;            /* look again after this many admitted */
	/* under lock */
	uint64_t total_bytes;   /* at the last look */
	uint64_t free_bytes;    /* at the last look */
	uint64_t looked_ns;     /* when */
	uint64_t charged;       /* admitted and done since the last look */
	uint64_t in_flight;     /* admitted, not done */
	uint64_t refused;       /* refusals since init */
	uint64_t last_refused;  /* bytes of the last write refused, until one as
	                           large is admitted; 0: none */
	bool ready;
};

/* What a volume looks like now (kvc_reserve_state). */
struct kvc_reserve_state {
	uint64_t total_bytes;
	uint64_t free_bytes;      /* the volume's free bytes, fresh */
	uint64_t reserve_bytes;
	uint64_t available_bytes; /* free - in flight - reserve, or 0 */
	uint64_t refused;         /* writes refused since start */
	bool refusing;            /* a write as large as the last one refused
	                             (1 byte when none was) would be refused now */
};

/* The reserve "auto" gives a volume of total_bytes. */
uint64_t kvc_reserve_auto_bytes(enum kvc_reserve_kind kind, uint64_t total_bytes);

/* Set up the reserve of the volume holding directory fd (kept open by the
 * caller while r lives): setting is bytes, or KVC_RESERVE_AUTO; ops NULL
 * for the real volume and clock. Looks at the volume once. Returns 0 or
 * -errno from the look. */
int kvc_reserve_init(struct kvc_reserve *r, int fd, int64_t setting,
                     enum kvc_reserve_kind kind, const struct kvc_reserve_ops *ops);

/* Free the mutex; safe on a reserve never set up (zeroed). */
void kvc_reserve_destroy(struct kvc_reserve *r);

/* Admit a write of `bytes` new bytes: 0 (counted in flight until
 * kvc_reserve_done) or -ENOSPC (it would go below the reserve; nothing to
 * undo). With a reserve of 0, or one never set up, always 0. A failed
 * look keeps the previous figure. bytes 0 asks whether the volume is above
 * its reserve at all (kvc-meta's namespace growth). */
int kvc_reserve_admit(struct kvc_reserve *r, uint64_t bytes);

/* The admitted write of `bytes` is over (whether it succeeded or not: a
 * failed write may have allocated some of them; the next look knows). */
void kvc_reserve_done(struct kvc_reserve *r, uint64_t bytes);

/* Look at the volume now and say how it stands. Returns 0 or -errno (the
 * look failed; out is left as it was). */
int kvc_reserve_state(struct kvc_reserve *r, struct kvc_reserve_state *out);

#endif
