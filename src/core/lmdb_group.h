/*
 * lmdb_group: group commit for an LMDB environment's hot writes (kvc-meta's
 * creates, size commits, opens, closes and removals; kvc-storage's inline
 * chunk writes). Calls that arrive while a write transaction of the group
 * runs wait, and the next leader runs all of them in one transaction: one
 * commit (one pwrite of each page they share: a directory's leaf page for
 * many creates in it, the index's branch pages) instead of one each. With
 * nothing else waiting a call runs alone, as before.
 *
 * Each call's work (fn) runs inside the shared transaction and has no
 * effect outside it but its out-parameters, so it can run again: when any
 * call of a batch fails, the batch's transaction is aborted (no partial
 * change is ever committed) and the batch runs once more in one
 * transaction, each call in a nested transaction of its own (LMDB's child
 * transactions): a call that fails again leaves nothing, the others are
 * kept, and each gets its own answer. So a failing call, which any client
 * can send at will (an -EEXIST create), costs its batch one rerun, not a
 * transaction per call. (Near LMDB's size limits a call may get -ENOSPC
 * there that alone it would not: the pages its batch's earlier calls
 * copied are freed only at the commit.) A failed commit is the answer of every call of
 * the batch that had succeeded. fn must not open databases (LMDB refuses
 * that in a child transaction) and the environment must not use
 * MDB_WRITEMAP (no child transactions there).
 *
 * Lock order: the group's mutex is never held while a transaction runs
 * (the leader takes the batch, unlocks, then begins); LMDB's writer lock
 * is below it, as for every other write of the environment. Locks a
 * caller holds around kvc_lmdb_group_run (kvc-storage's chunk locks) come
 * before the group's, and no fn takes one.
 */
#ifndef KVC_LMDB_GROUP_H
#define KVC_LMDB_GROUP_H

#include <lmdb.h>
#include <pthread.h>
#include <stdbool.h>

/* Begin a write transaction for the group's owner (kvc-meta admits it to
 * its checkpoint first). */
typedef int (*kvc_lmdb_group_begin_fn)(void *owner, MDB_txn **txn);
/* One call's work inside txn: 0 or -errno. */
typedef int (*kvc_lmdb_group_fn)(void *owner, MDB_txn *txn, void *arg);

struct kvc_lmdb_group_call;
struct kvc_lmdb_group {
	pthread_mutex_t lock; /* the queue and running; never held in a txn */
	pthread_cond_t done;  /* a batch finished */
	bool running;         /* a leader runs a batch */
	struct kvc_lmdb_group_call *head, **tail;
	kvc_lmdb_group_begin_fn begin;
	void *owner;
};

int kvc_lmdb_group_init(struct kvc_lmdb_group *g, kvc_lmdb_group_begin_fn begin, void *owner);
void kvc_lmdb_group_destroy(struct kvc_lmdb_group *g);
/* Run fn(owner, txn, arg) in a transaction of the group; its answer, or
 * the commit's error. */
int kvc_lmdb_group_run(struct kvc_lmdb_group *g, kvc_lmdb_group_fn fn, void *arg);

#endif
