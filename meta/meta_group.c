/*
 * meta_group: group commit of the meta store's hot writes (creates,
 * size commits, opens, closes and removals). Calls that arrive while a
 * write transaction of the group runs wait, and the next leader runs all
 * of them in one transaction: one commit (one pwrite of each page they
 * share, a directory's leaf page for many creates in it) instead of one
 * each. With nothing else waiting a call runs alone, as before.
 *
 * Each call's work (fn) runs inside the shared transaction and has no
 * effect outside it but its out-parameters, so it can run again: when any
 * call of a batch fails, the batch's transaction is aborted (no partial
 * change is ever committed) and every call of it runs again alone, in a
 * transaction of its own, and gets its own answer. A failed commit is the
 * answer of every call of the batch.
 *
 * Lock order: the group's mutex is never held while a transaction runs
 * (the leader takes the batch, unlocks, then begins); LMDB's writer lock
 * is below it, as for every other write of the store.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "core/lmdb_txn.h"
#include "meta/meta_store_internal.h"

#define GROUP_MAX 64 /* calls per transaction: bounds a batch's latency */

struct kvc_meta_group_call {
	kvc_meta_group_fn fn;
	void *arg;
	int rc;
	bool done;
	struct kvc_meta_group_call *next;
};

int kvc_meta_group_init(struct kvc_meta_group *g)
{
	*g = (struct kvc_meta_group){0};
	g->tail = &g->head;
	int rc = -pthread_mutex_init(&g->lock, NULL);
	if (rc == 0 && (rc = -pthread_cond_init(&g->done, NULL)) < 0)
		pthread_mutex_destroy(&g->lock);
	return rc;
}

void kvc_meta_group_destroy(struct kvc_meta_group *g)
{
	pthread_cond_destroy(&g->done);
	pthread_mutex_destroy(&g->lock);
}

/* One call in a transaction of its own. */
static int run_alone(struct kvc_meta_store *s, struct kvc_meta_group_call *c)
{
	MDB_txn *txn;
	int rc = kvc_meta_begin(s, true, &txn);
	if (rc < 0)
		return rc;
	return kvc_lmdb_finish(txn, c->fn(s, txn, c->arg));
}

/* Run a batch (a list of calls): together, or each alone after a failure. */
static void run_batch(struct kvc_meta_store *s, struct kvc_meta_group_call *batch)
{
	MDB_txn *txn;
	if (!batch->next) { /* alone: nothing to share */
		batch->rc = run_alone(s, batch);
		return;
	}
	int rc = kvc_meta_begin(s, true, &txn);
	bool began = rc == 0;
	for (struct kvc_meta_group_call *c = batch; c && rc == 0; c = c->next)
		rc = c->fn(s, txn, c->arg);
	if (rc < 0) {
		/* A call failed: nothing of the batch commits; each runs alone. */
		if (began)
			mdb_txn_abort(txn);
		for (struct kvc_meta_group_call *c = batch; c; c = c->next)
			c->rc = run_alone(s, c);
		return;
	}
	rc = kvc_lmdb_finish(txn, 0);
	for (struct kvc_meta_group_call *c = batch; c; c = c->next)
		c->rc = rc;
}

int kvc_meta_group_run(struct kvc_meta_store *s, kvc_meta_group_fn fn, void *arg)
{
	struct kvc_meta_group *g = &s->group;
	struct kvc_meta_group_call me = {.fn = fn, .arg = arg};
	pthread_mutex_lock(&g->lock);
	*g->tail = &me;
	g->tail = &me.next;
	while (!me.done) {
		if (g->running) {
			pthread_cond_wait(&g->done, &g->lock);
			continue;
		}
		/* Lead: take up to GROUP_MAX waiting calls (ours among them, as
		 * it waits in order: the first ones go first). */
		struct kvc_meta_group_call *batch = g->head, **end = &g->head;
		for (int n = 0; *end && n < GROUP_MAX; n++)
			end = &(*end)->next;
		g->head = *end;
		*end = NULL;
		if (!g->head)
			g->tail = &g->head;
		g->running = true;
		pthread_mutex_unlock(&g->lock);
		run_batch(s, batch);
		pthread_mutex_lock(&g->lock);
		for (struct kvc_meta_group_call *c = batch, *next; c; c = next) {
			next = c->next;
			c->done = true;
		}
		g->running = false;
		pthread_cond_broadcast(&g->done);
	}
	pthread_mutex_unlock(&g->lock);
	return me.rc;
}
