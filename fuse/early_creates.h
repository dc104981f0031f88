/*
 * early_creates: regular files this kvc-fuse makes, and names it removes,
 * ahead of kvc-meta. The kernel holds a directory's lock across an O_CREAT
 * open's CREATE and across an UNLINK, so one directory's creates and
 * unlinks run one at a time; answered here, without kvc-meta's round trip,
 * they run at the pace of this process.
 *
 * How: kvc-meta reserves inode numbers for this client (INO_GRANT). A
 * truncating, non-exclusive create (O_CREAT|O_TRUNC) of a name this client
 * knows to be absent (dir_names.h) in a directory whose attributes it holds
 * (attr_cache.h) takes one, builds the file's attributes and layout as
 * kvc-meta would (the parent's layout over the chains of the routing table,
 * the parent's group when it is setgid) and answers the kernel; the file's
 * chunks are written as any file's. A thread here enters the files made in
 * batches (ADOPT: name, inode, size, open session, one transaction), in the
 * order they were made: a file may go once it is closed here or
 * early_open_delay_ms old (config.h), and the files that may go are sent
 * when BATCH_FULL of them wait or BATCH_DELAY_US after the first was made.
 * A key written and closed at once (a connector's put) thus reaches
 * kvc-meta as one record of a batch, with its size and no open session: no
 * CREATE, EXTEND_SIZE or CLOSE of its own. An unlink of a name whose inode
 * this client knows (dir_names.h) is queued the same way
 * (kvc_early_creates_remove; REMOVE_MANY removes the name only while it
 * still names that inode), in order with the creates; a message carries one
 * kind.
 *
 * Order: a kvc-meta call of this client first waits until the files it
 * depends on are entered (kvc_early_creates_settle, run by the meta
 * client's before_call): a call about inodes (GETATTR, SETATTR, OPEN,
 * EXTEND_SIZE, CLOSE, xattrs) waits for those inodes' files and removals,
 * and for a directory the files made and names removed in it (its times
 * change with them); a LOOKUP or READDIR in a directory waits for the files
 * made and names removed in it (all it reads: a file made elsewhere gets a
 * name here only by LINK or RENAME, which wait for everything); any other
 * (changes of names: UNLINK, RENAME, LINK, MKDIR, ...; META_SYNC) for every
 * file made before it. So a listing or lookup elsewhere does not send this
 * directory's files before their time. The attributes such an answer
 * carries for a name may depend on entries elsewhere (a subdirectory's
 * times on the files made in it, a file's link count on a removal of
 * another of its names): kvc-fuse's lookup enters those first and asks
 * again, and its readdirplus gives such an entry's attributes no cache time
 * (kvc_early_creates_pending), so the kernel's GETATTR, which waits for
 * them, answers. So nothing reaches kvc-meta before the create it depends
 * on. Two calls fold into a file still waiting here instead: its size
 * commit (flush: the size travels with the ADOPT) and its last close (the
 * ADOPT opens no session). A file already on its way is not folded: the
 * call goes to kvc-meta after it. Two of this process's own passes leave
 * a file made here and not entered alone (kvc_early_creates_unentered: a
 * queued removal does not count): the one that keeps open files watched
 * (file_ops.c) and the reopen kvc-meta asks of a new client and after a
 * restart (not the one after a drop, whose OPEN must learn whether the
 * file was lost); its entry stores its session and notes its watch. A
 * WATCH_DIR waits as a READDIR of its directory does. An ADOPT a caller
 * waits for that fails as a whole (a connection lost, kvc-meta restarting)
 * is sent again RETRY_MS later, for up to io_timeout_ms from the call;
 * then the call fails with that error.
 *
 * Visibility: other clients see a file when its ADOPT commits: at most
 * early_open_delay_ms (5 ms) plus a round trip after the create returned
 * here, BATCH_DELAY_US (1 ms) for a file closed at once, and hear of it as
 * of any create (meta_events.h). This client sees it at once. fsync,
 * fsyncdir and syncfs settle first, so what they promise holds for early
 * creates too.
 *
 * What is weaker than a create made by kvc-meta: a name another client
 * creates in the window before it hears of it is replaced by ours when ours
 * is entered (as if ours were renamed over it; an exclusive create never
 * comes here), and a file kvc-meta refuses when it is entered (its
 * directory was removed meanwhile, the namespace is at its space reserve)
 * is lost: it turns stale here (its I/O fails with ESTALE), is logged and
 * counted, and early creates stop for LOST_PAUSE_S so the next creates get
 * kvc-meta's answer themselves. An ADOPT whose answer was lost (its
 * connection died after kvc-meta committed it) is sent again, and kvc-meta
 * refuses a record of it -ESTALE when another client renamed or replaced
 * the name meanwhile (its number is entered already, and a resend cannot
 * be told from a second use there); kvc-fuse then asks for the number's
 * file, which, the number being this client's alone, is this one: entered,
 * not lost. If kvc-fuse dies, the files still waiting
 * here (at most one batch delay's worth) are lost. Grants belong to this
 * client (meta_grants.c): a file kvc-meta refuses has its chunks removed at
 * once, and numbers it made files with and never sent are reclaimed when it
 * stops (INO_RETURN) or, if it died, once kvc-meta declares it gone
 * (client_timeout_ms). A removal answered here reaches kvc-meta a round
 * trip later: another client that opens the name meanwhile (not
 * exclusively) opens the file being removed, and what it writes goes with
 * it.
 *
 * Threads: any FUSE worker, the thread here, and every caller of the meta
 * client (settle). One mutex, a leaf: never held across a kvc-meta call;
 * one ADOPT is in flight at a time.
 */
#ifndef KVC_FUSE_EARLY_CREATES_H
#define KVC_FUSE_EARLY_CREATES_H

#include <stdbool.h>
#include <stdint.h>

#include "core/wire.h"

struct kvc_fuse;
struct kvc_early_creates;

/* Start the thread (it asks for the first numbers). Stop enters what is
 * still waiting, joins it and gives the grants back (INO_RETURN); the
 * state lives until exit. */
int kvc_early_creates_start(struct kvc_fuse *fs, struct kvc_early_creates **out);
void kvc_early_creates_stop(struct kvc_early_creates *c);
/* kvc-meta declared this client gone (RENEW answered ESTALE): it
 * reclaimed our grants, so ask for new numbers; files still waiting with
 * old ones are refused when they are entered (lost, as refused ones). */
void kvc_early_creates_forget_grants(struct kvc_early_creates *c);

/* Make regular file (parent, name) here, for uid/gid with mode (umask
 * applied): 0 with *attr (the new file's) and *dir (the parent's, as it
 * is after the create) set, the file open once for this client; -EAGAIN
 * when it must be made by kvc-meta (no number left, the parent's
 * attributes not held, set-id bits, paused). ticket: dir_names' ticket of
 * the create, ended here once kvc-meta has the file. NULL c: -EAGAIN. */
int kvc_early_creates_make(struct kvc_early_creates *c, uint64_t parent, const char *name,
                           uint32_t mode, uint32_t uid, uint32_t gid, uint32_t ticket,
                           struct kvc_attr *attr, struct kvc_attr *dir);
/* A size commit of ino: true when it was still waiting here (the size
 * goes with its ADOPT; *attr: the file's attributes now). */
bool kvc_early_creates_fold_size(struct kvc_early_creates *c, uint64_t ino, uint64_t size,
                                 struct kvc_attr *attr);
/* The last close of ino here: true when it was still waiting here (its
 * ADOPT opens no session). */
bool kvc_early_creates_fold_close(struct kvc_early_creates *c, uint64_t ino);
/* Wait until the files among inos (count unaligned u64; count 0: every
 * file made before this call) are entered in kvc-meta, sending them and
 * the files made before them from this thread if no ADOPT is on its way:
 * 0, or the ADOPT's -errno when kvc-meta could not be reached (they wait
 * for the next try). The meta client's before_call. */
int kvc_early_creates_settle(void *c, const void *inos, uint32_t count);

/* Whether a file or removal about inode ino (its own, or, for a
 * directory, one made in it) still waits to be entered: an answer about
 * ino kvc-meta gave now may predate it. NULL c: false. */
bool kvc_early_creates_pending(struct kvc_early_creates *c, uint64_t ino);
/* Whether file ino was made here and its entry (ADOPT) has not been
 * answered yet: kvc-meta may not know it (a removal of it queued here
 * does not count). NULL c: false. */
bool kvc_early_creates_unentered(struct kvc_early_creates *c, uint64_t ino);

/* Remove (parent, name), which names ino as this client last heard
 * (dir_names.h), here: 0 with the removal queued in order with the files
 * made here (REMOVE_MANY, which removes the name only while it still names
 * ino: a name another client changed meanwhile stays, as if our removal
 * came first); -EAGAIN: ask kvc-meta. */
int kvc_early_creates_remove(struct kvc_early_creates *c, uint64_t parent, const char *name,
                             uint64_t ino);

struct kvc_early_creates_stats {
	uint64_t made, entered, lost, batches;
	uint64_t removes, removed, removes_missed;
};
void kvc_early_creates_stats(struct kvc_early_creates *c, struct kvc_early_creates_stats *out);

#endif
