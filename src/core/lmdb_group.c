/* lmdb_group: see lmdb_group.h. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "core/lmdb_group.h"
#include "core/lmdb_txn.h"

#define GROUP_MAX 64 /* calls per transaction: bounds a batch's latency */

struct kvc_lmdb_group_call {
	kvc_lmdb_group_fn fn;
	void *arg;
	int rc;
	bool done;
	struct kvc_lmdb_group_call *next;
};

int kvc_lmdb_group_init(struct kvc_lmdb_group *g, kvc_lmdb_group_begin_fn begin, void *owner)
{
	*g = (struct kvc_lmdb_group){.begin = begin, .owner = owner};
	g->tail = &g->head;
	int rc = -pthread_mutex_init(&g->lock, NULL);
	if (rc == 0 && (rc = -pthread_cond_init(&g->done, NULL)) < 0)
		pthread_mutex_destroy(&g->lock);
	return rc;
}

void kvc_lmdb_group_destroy(struct kvc_lmdb_group *g)
{
	pthread_cond_destroy(&g->done);
	pthread_mutex_destroy(&g->lock);
}

/* One call in a transaction of its own. */
static int run_alone(struct kvc_lmdb_group *g, struct kvc_lmdb_group_call *c)
{
	MDB_txn *txn;
	int rc = g->begin(g->owner, &txn);
	if (rc < 0)
		return rc;
	return kvc_lmdb_finish(txn, c->fn(g->owner, txn, c->arg));
}

/* The batch again, after a call of it failed, in one transaction: each
 * call in a nested transaction of its own, kept when it succeeds and
 * dropped when it fails, so a failing call (which any client can send)
 * costs the batch one rerun, not a transaction per call. */
static void run_nested(struct kvc_lmdb_group *g, struct kvc_lmdb_group_call *batch)
{
	MDB_txn *txn;
	int rc = g->begin(g->owner, &txn);
	for (struct kvc_lmdb_group_call *c = batch; c; c = c->next) {
		MDB_txn *child = NULL;
		c->rc = rc < 0 ? rc : kvc_lmdb_errno(mdb_txn_begin(mdb_txn_env(txn), txn, 0, &child));
		if (c->rc == 0)
			c->rc = kvc_lmdb_finish(child, c->fn(g->owner, child, c->arg));
	}
	if (rc < 0)
		return;
	rc = kvc_lmdb_finish(txn, 0);
	for (struct kvc_lmdb_group_call *c = batch; c; c = c->next)
		if (c->rc >= 0 && rc < 0)
			c->rc = rc;
}

/* Run a batch (a list of calls): together, or nested after a failure. */
static void run_batch(struct kvc_lmdb_group *g, struct kvc_lmdb_group_call *batch)
{
	MDB_txn *txn;
	if (!batch->next) { /* alone: nothing to share */
		batch->rc = run_alone(g, batch);
		return;
	}
	int rc = g->begin(g->owner, &txn);
	bool began = rc == 0;
	for (struct kvc_lmdb_group_call *c = batch; c && rc == 0; c = c->next)
		rc = c->fn(g->owner, txn, c->arg);
	if (rc < 0) {
		/* A call failed: nothing of this run commits; run it nested. */
		if (began)
			mdb_txn_abort(txn);
		run_nested(g, batch);
		return;
	}
	rc = kvc_lmdb_finish(txn, 0);
	for (struct kvc_lmdb_group_call *c = batch; c; c = c->next)
		c->rc = rc;
}

int kvc_lmdb_group_run(struct kvc_lmdb_group *g, kvc_lmdb_group_fn fn, void *arg)
{
	struct kvc_lmdb_group_call me = {.fn = fn, .arg = arg};
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
		struct kvc_lmdb_group_call *batch = g->head, **end = &g->head;
		for (int n = 0; *end && n < GROUP_MAX; n++)
			end = &(*end)->next;
		g->head = *end;
		*end = NULL;
		if (!g->head)
			g->tail = &g->head;
		g->running = true;
		pthread_mutex_unlock(&g->lock);
		run_batch(g, batch);
		pthread_mutex_lock(&g->lock);
		for (struct kvc_lmdb_group_call *c = batch, *next; c; c = next) {
			next = c->next;
			c->done = true;
		}
		g->running = false;
		pthread_cond_broadcast(&g->done);
	}
	pthread_mutex_unlock(&g->lock);
	return me.rc;
}
