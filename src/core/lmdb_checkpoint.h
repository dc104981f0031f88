/*
 * lmdb_checkpoint: crash consistency for an LMDB environment that runs
 * with MDB_NOSYNC (kvc-meta's namespace and page pools), without a disk
 * flush per transaction.
 *
 * The problem. With MDB_NOSYNC a commit only writes its pages and then
 * its meta page into the page cache; the kernel writes dirty pages back in
 * any order. LMDB documents that a system crash can then corrupt the
 * database (its integrity holds only "if the filesystem preserves write
 * order", which ext4 and XFS do not promise for overwrites): a meta page
 * that reached the disk may name pages that did not, and pages of the last
 * flushed state may have been reused and overwritten. A periodic
 * mdb_env_sync bounds how much is lost, not whether the file is usable.
 * Syncing every commit (MDB_NOMETASYNC) is safe but costs a disk flush per
 * transaction (25x slower commits on the development machine).
 *
 * The checkpoint. A checkpoint is a transaction L that is durable and that
 * a machine crash can always go back to:
 *  1. begin an empty write transaction (no commit can happen now), so L =
 *     the last committed transaction; begin a read transaction (the pin),
 *     whose snapshot is therefore L; read L's meta page from the data file
 *     (its slot cannot have moved on); end the write transaction: writers
 *     are held for that only, never for a flush;
 *  2. flush the environment (mdb_env_sync), while writers go on: every
 *     page of L was written to the page cache before step 1, so it is on
 *     the disk now, and the pin kept any from being reused meanwhile;
 *  3. write L's meta page image, its transaction id and the boot id into
 *     the checkpoint file and flush that file;
 *  4. keep the pin until the next checkpoint is durable, then end it.
 * (Until 2026-11-29 the flush came first and a second one ran with the
 * writers held: a checkpoint after gigabytes of inline chunks stalled
 * every writer of a storage target for seconds.)
 * The pin is a reader at a snapshot of L, so LMDB reuses no page
 * that L's tree uses (it reuses only pages freed by transactions older
 * than its oldest reader): whatever the kernel writes back after the
 * checkpoint, and in whatever order, L's pages on disk stay exactly as
 * flushed. Only the two meta pages (at offsets 0 and page_size) can move
 * past L.
 *
 * Recovery (kvc_lmdb_checkpoint_recover, before mdb_env_open). When the
 * newest checkpoint was written in another boot (/proc/sys/kernel/random/
 * boot_id differs: the machine went down, so the page cache is gone) and
 * the data file's newest meta page names a later transaction than L (or
 * cannot be read), both meta pages are written back: L's image in its
 * slot (L & 1) and, in the other, the same image with transaction L - 1,
 * so LMDB opens exactly L. In the same boot (kvc-meta was killed, the
 * page cache holds every commit) nothing is touched: a process crash loses
 * nothing committed. A clean close takes a last checkpoint, so a reboot
 * after it goes back nowhere.
 *
 * Failures: a record whose write went through but whose flush failed may
 * still reach the disk, so its state stays pinned (with the last good
 * one) until a later record, written to the same slot, is durable. A data
 * flush that fails is final: the kernel may have dropped those pages as
 * clean, so no later checkpoint could be trusted; every checkpoint (and
 * so every fsync) fails from then on, and the last good one stays pinned
 * and is where a crash goes back to.
 *
 * What it costs: one data flush and one 512-byte file flush per
 * checkpoint, writers held only while L's meta page is read. And while a pin holds, LMDB cannot reuse pages freed
 * after it, so every page a commit writes is a new one: what commits
 * write reaches the disk once each (without the pin, hot pages are
 * rewritten in the page cache and mostly never written), and the file
 * grows by what one interval writes, at most KVC_LMDB_CHECKPOINT_GROWTH
 * (kvc_lmdb_checkpoint_admit takes a checkpoint early past it).
 * What a machine crash loses: the transactions after the last checkpoint
 * (kvc-meta takes one every sync_interval_ms and at every fsync).
 *
 * The LMDB format it relies on (data version 1 of LMDB 0.9, 64-bit), only
 * through the first 256 bytes of a meta page: the page header (u64 pgno,
 * u16 pad, u16 flags with P_META = 0x08, u16 lower, u16 upper), then
 * MDB_meta: u32 magic 0xBEEFC0DE at 16, u32 version 1 at 20, ..., u64
 * txnid at 144. Every checkpoint checks these against the transaction it
 * expects; if LMDB ever writes something else, checkpoints stop, an error
 * is logged, and the environment falls back to LMDB's own safe mode
 * (MDB_NOMETASYNC: a data flush per commit).
 *
 * The checkpoint file (`checkpoint` in the environment's directory) is two
 * 512-byte slots, written alternately, each (little-endian):
 *   0    u32  magic 0x504b434b ("KCKP")
 *   4    u32  version 1
 *   8    u64  sequence: one more per checkpoint; the valid slot with the
 *             higher one is the checkpoint
 *   16   u64  txnid L
 *   24   u32  page_size: LMDB's page size (meta slot i at i * page_size)
 *   28   u32  image_len: 256
 *   32   40   boot id of the writer (ASCII, NUL-padded)
 *   72   256  the first 256 bytes of L's meta page
 *   328  u32  crc32c of bytes 0..327
 *   332  180  zero
 * A torn slot fails its crc and the other one counts.
 *
 * Thread-safe: checkpoints run one at a time (a mutex); callers that ask
 * while one runs share the next one. The environment must be opened with
 * MDB_NOTLS (the pin is a read transaction that outlives the thread that
 * began it). No lock is held across anything but local disk I/O.
 *
 * For tests, the environment variable KVC_BOOT_ID replaces the boot id
 * (a "reboot" is a different value).
 */
#ifndef KVC_LMDB_CHECKPOINT_H
#define KVC_LMDB_CHECKPOINT_H

#include <lmdb.h>
#include <stdbool.h>

struct kvc_lmdb_checkpoint;

/* Before mdb_env_open of the environment in dir: go back to the last
 * checkpoint after a machine crash (see above). Returns 1 when it went
 * back, 0 when there was nothing to do (no checkpoint file, same boot,
 * nothing after the checkpoint), or -errno (-EIO: unreadable files). */
int kvc_lmdb_checkpoint_recover(const char *dir);

/* After mdb_env_open (MDB_NOTLS) and before any write transaction: take
 * the first checkpoint (it also makes durable whatever a killed process
 * left in the page cache). 0, -ENOMEM, -errno. */
int kvc_lmdb_checkpoint_open(MDB_env *env, const char *dir, struct kvc_lmdb_checkpoint **out);

/* An environment under checkpoints, as kvc-meta's stores open theirs:
 * make dir (0700), recover (above), create the environment with map_size
 * and max_dbs, open it MDB_NOSYNC | MDB_NOTLS (4,096 readers, files 0600)
 * and take the first checkpoint. On success *env and *cp are the caller's
 * (close cp, then env); on failure nothing is left open. 0 or -errno. */
int kvc_lmdb_checkpoint_env_open(const char *dir, size_t map_size, unsigned max_dbs,
                                 MDB_env **env, struct kvc_lmdb_checkpoint **cp);

/* Whether the newest checkpoint found at open was written in another boot:
 * the machine went down since, and whatever the environment gave out
 * after that checkpoint (a counter's values, say) may have been seen by
 * others and forgotten here, even when nothing needed to go back (a clean
 * close looks the same). */
bool kvc_lmdb_checkpoint_after_reboot(const struct kvc_lmdb_checkpoint *cp);

/* Take a checkpoint: when it returns 0, every transaction committed
 * before the call is durable and is where a machine crash goes back to.
 * -EIO (the disk, or an LMDB format this module does not know: the
 * environment then syncs every commit from now on and this returns 0
 * after a plain flush). */
int kvc_lmdb_checkpoint_sync(struct kvc_lmdb_checkpoint *cp);

/* Before a write transaction: when the data file grew by more than
 * KVC_LMDB_CHECKPOINT_GROWTH since the last checkpoint (the pin keeps LMDB
 * from reusing what was freed since, so under a heavy write load the file
 * grows until the next one), take a checkpoint now. This bounds the space
 * the pin costs and holds writers back while the disk catches up. 0 or
 * the checkpoint's error. */
#define KVC_LMDB_CHECKPOINT_GROWTH (64u << 20)
int kvc_lmdb_checkpoint_admit(struct kvc_lmdb_checkpoint *cp);

/* Bytes of pages freed since the last checkpoint, which its pin keeps
 * LMDB from reusing: what the file grows by because of checkpoints (new
 * data grows it either way). Walks LMDB's free list in a read
 * transaction. */
size_t kvc_lmdb_checkpoint_held(struct kvc_lmdb_checkpoint *cp);

/* A last checkpoint, then release everything (before mdb_env_close);
 * safe on NULL. */
void kvc_lmdb_checkpoint_close(struct kvc_lmdb_checkpoint *cp);

#endif
