/*
 * open_table: in-memory open sessions; see open_table.h for what it owns
 * and its invariants. A chained hash of nodes by ino; a node holds the
 * file's clients (a small array), its doomed mark and whether it became
 * an orphan while held. A node with no client and no mark is freed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "meta/open_table.h"

struct node {
	struct node *next;
	uint64_t ino;
	uint64_t doomed; /* the write transaction that doomed ino, or 0 */
	bool orphaned;   /* went nameless while held here */
	uint32_t count, cap;
	uint8_t (*clients)[KVC_META_CLIENT_ID];
};

struct kvc_meta_open_table {
	pthread_mutex_t lock;
	struct node **buckets;
	uint64_t mask;     /* buckets - 1 (a power of two) */
	uint64_t nodes;    /* in the table */
	uint64_t sessions; /* pairs held */
	uint64_t marks;    /* nodes with a doomed mark */
	uint64_t prune_at; /* prune the marks when there are this many */
	_Atomic int64_t hold_until_ns;
};

#define INITIAL_BUCKETS 1024
#define PRUNE_MIN 4096

int kvc_meta_open_table_create(struct kvc_meta_open_table **out)
{
	struct kvc_meta_open_table *t = calloc(1, sizeof(*t));
	struct node **buckets = calloc(INITIAL_BUCKETS, sizeof(*buckets));
	if (!t || !buckets) {
		free(t);
		free(buckets);
		return -ENOMEM;
	}
	pthread_mutex_init(&t->lock, NULL);
	t->buckets = buckets;
	t->mask = INITIAL_BUCKETS - 1;
	t->prune_at = PRUNE_MIN;
	*out = t;
	return 0;
}

void kvc_meta_open_table_destroy(struct kvc_meta_open_table *t)
{
	if (!t)
		return;
	for (uint64_t b = 0; b <= t->mask; b++) {
		for (struct node *n = t->buckets[b], *next; n; n = next) {
			next = n->next;
			free(n->clients);
			free(n);
		}
	}
	free(t->buckets);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

void kvc_meta_open_table_hold(struct kvc_meta_open_table *t, uint64_t hold_ms)
{
	atomic_store(&t->hold_until_ns, kvc_clock_monotonic_ns() + (int64_t)hold_ms * 1000000);
}

bool kvc_meta_open_table_holding(struct kvc_meta_open_table *t)
{
	return kvc_clock_monotonic_ns() < atomic_load(&t->hold_until_ns);
}

static uint64_t slot(const struct kvc_meta_open_table *t, uint64_t ino)
{
	return (ino * 0x9e3779b97f4a7c15ull) >> 20 & t->mask;
}

static struct node *find(struct kvc_meta_open_table *t, uint64_t ino, struct node ***link)
{
	struct node **at = &t->buckets[slot(t, ino)];
	while (*at && (*at)->ino != ino)
		at = &(*at)->next;
	if (link)
		*link = at;
	return *at;
}

/* Twice the buckets when there are more nodes than buckets; a failed
 * allocation keeps the table as it is (longer chains, still correct). */
static void grow(struct kvc_meta_open_table *t)
{
	uint64_t count = (t->mask + 1) * 2;
	struct node **buckets = calloc(count, sizeof(*buckets));
	if (!buckets)
		return;
	struct node **old = t->buckets;
	uint64_t old_count = t->mask + 1;
	t->buckets = buckets;
	t->mask = count - 1;
	for (uint64_t b = 0; b < old_count; b++) {
		for (struct node *n = old[b], *next; n; n = next) {
			next = n->next;
			uint64_t s = slot(t, n->ino);
			n->next = buckets[s];
			buckets[s] = n;
		}
	}
	free(old);
}

/* The node of ino, made if absent (NULL: out of memory). */
static struct node *get(struct kvc_meta_open_table *t, uint64_t ino)
{
	struct node **link, *n = find(t, ino, &link);
	if (n)
		return n;
	n = calloc(1, sizeof(*n));
	if (!n)
		return NULL;
	n->ino = ino;
	*link = n;
	if (++t->nodes > t->mask + 1)
		grow(t);
	return n;
}

/* Free n when it holds nothing any more. */
static void put_back(struct kvc_meta_open_table *t, struct node *n)
{
	if (n->count > 0 || n->doomed)
		return;
	struct node **link;
	find(t, n->ino, &link);
	*link = n->next;
	t->nodes--;
	free(n->clients);
	free(n);
}

static int index_of(const struct node *n, const uint8_t *client)
{
	for (uint32_t i = 0; i < n->count; i++)
		if (memcmp(n->clients[i], client, KVC_META_CLIENT_ID) == 0)
			return (int)i;
	return -1;
}

int kvc_meta_open_table_add(struct kvc_meta_open_table *t, uint64_t ino,
                            const uint8_t client[KVC_META_CLIENT_ID], uint64_t *doomed)
{
	int rc = 0;
	pthread_mutex_lock(&t->lock);
	struct node *n = get(t, ino);
	if (!n) {
		rc = -ENOMEM;
	} else if (index_of(n, client) < 0) {
		rc = 1;
		if (n->count == n->cap) {
			uint32_t cap = n->cap ? n->cap * 2 : 1;
			void *grown = realloc(n->clients, (size_t)cap * KVC_META_CLIENT_ID);
			if (grown) {
				n->clients = grown;
				n->cap = cap;
			}
		}
		if (n->count < n->cap) {
			memcpy(n->clients[n->count++], client, KVC_META_CLIENT_ID);
			t->sessions++;
		} else {
			rc = -ENOMEM;
		}
	}
	*doomed = n && rc >= 0 ? n->doomed : 0;
	if (n && rc < 0)
		put_back(t, n);
	pthread_mutex_unlock(&t->lock);
	return rc;
}

int kvc_meta_open_table_remove(struct kvc_meta_open_table *t, uint64_t ino,
                               const uint8_t client[KVC_META_CLIENT_ID])
{
	int settle = 0;
	pthread_mutex_lock(&t->lock);
	struct node *n = find(t, ino, NULL);
	int i = n ? index_of(n, client) : -1;
	if (i >= 0) {
		if ((uint32_t)i != --n->count)
			memcpy(n->clients[i], n->clients[n->count], KVC_META_CLIENT_ID);
		t->sessions--;
		settle = n->count == 0 && n->orphaned;
		if (n->count == 0)
			n->orphaned = false;
		put_back(t, n);
	}
	pthread_mutex_unlock(&t->lock);
	return settle;
}

void kvc_meta_open_table_undoom(struct kvc_meta_open_table *t, uint64_t ino, uint64_t doomed)
{
	pthread_mutex_lock(&t->lock);
	struct node *n = find(t, ino, NULL);
	if (n && n->doomed == doomed && doomed) {
		n->doomed = 0;
		t->marks--;
		put_back(t, n);
	}
	pthread_mutex_unlock(&t->lock);
}

int kvc_meta_open_table_has(struct kvc_meta_open_table *t, uint64_t ino)
{
	if (kvc_meta_open_table_holding(t))
		return 1;
	pthread_mutex_lock(&t->lock);
	struct node *n = find(t, ino, NULL);
	int has = n && n->count > 0;
	pthread_mutex_unlock(&t->lock);
	return has;
}

int kvc_meta_open_table_has_client(struct kvc_meta_open_table *t, uint64_t ino,
                                   const uint8_t client[KVC_META_CLIENT_ID])
{
	pthread_mutex_lock(&t->lock);
	struct node *n = find(t, ino, NULL);
	int has = n && index_of(n, client) >= 0;
	pthread_mutex_unlock(&t->lock);
	return has;
}

/* Drop the marks of transactions before txn_id: they committed or were
 * aborted, and an OPEN after them reads what they did. */
static void prune(struct kvc_meta_open_table *t, uint64_t txn_id)
{
	for (uint64_t b = 0; b <= t->mask; b++) {
		for (struct node *n = t->buckets[b], *next; n; n = next) {
			next = n->next;
			if (n->doomed && n->doomed < txn_id) {
				n->doomed = 0;
				t->marks--;
				put_back(t, n);
			}
		}
	}
	t->prune_at = t->marks * 2 > PRUNE_MIN ? t->marks * 2 : PRUNE_MIN;
}

int kvc_meta_open_table_doom(struct kvc_meta_open_table *t, uint64_t ino, uint64_t txn_id)
{
	bool holding = kvc_meta_open_table_holding(t);
	int rc = 0;
	pthread_mutex_lock(&t->lock);
	if (t->marks >= t->prune_at)
		prune(t, txn_id);
	struct node *n = get(t, ino);
	if (!n) {
		rc = -ENOMEM;
	} else if (n->count > 0 || holding) {
		n->orphaned = n->count > 0; /* (held: the settling pass takes it) */
		rc = 1;
	} else {
		t->marks += n->doomed == 0;
		n->doomed = txn_id;
	}
	if (n)
		put_back(t, n);
	pthread_mutex_unlock(&t->lock);
	return rc;
}

int kvc_meta_open_table_drop_client(struct kvc_meta_open_table *t,
                                    const uint8_t client[KVC_META_CLIENT_ID], uint64_t **inos)
{
	int rc = 0;
	uint64_t *out = NULL;
	pthread_mutex_lock(&t->lock);
	/* Every node may hold it: room for as many as there are nodes. */
	if (t->nodes > 0 && !(out = malloc(t->nodes * sizeof(*out))))
		rc = -ENOMEM;
	for (uint64_t b = 0; b <= t->mask && rc >= 0; b++) {
		for (struct node *n = t->buckets[b], *next; n; n = next) {
			next = n->next;
			int i = index_of(n, client);
			if (i < 0)
				continue;
			if ((uint32_t)i != --n->count)
				memcpy(n->clients[i], n->clients[n->count], KVC_META_CLIENT_ID);
			t->sessions--;
			out[rc++] = n->ino;
			if (n->count == 0)
				n->orphaned = false; /* the drop settles every one */
			put_back(t, n);
		}
	}
	pthread_mutex_unlock(&t->lock);
	if (rc <= 0) {
		free(out);
		out = NULL;
	}
	*inos = out;
	return rc;
}

static bool listed(uint8_t (*out)[KVC_META_CLIENT_ID], int count, const uint8_t *id)
{
	for (int i = 0; i < count; i++)
		if (memcmp(out[i], id, KVC_META_CLIENT_ID) == 0)
			return true;
	return false;
}

int kvc_meta_open_table_clients(struct kvc_meta_open_table *t,
                                uint8_t (*out)[KVC_META_CLIENT_ID], int count, int max)
{
	pthread_mutex_lock(&t->lock);
	for (uint64_t b = 0; b <= t->mask && count < max; b++) {
		for (struct node *n = t->buckets[b]; n && count < max; n = n->next) {
			for (uint32_t i = 0; i < n->count && count < max; i++)
				if (!listed(out, count, n->clients[i]))
					memcpy(out[count++], n->clients[i], KVC_META_CLIENT_ID);
		}
	}
	pthread_mutex_unlock(&t->lock);
	return count;
}

int kvc_meta_open_table_count_client(struct kvc_meta_open_table *t,
                                     const uint8_t client[KVC_META_CLIENT_ID])
{
	int count = 0;
	pthread_mutex_lock(&t->lock);
	for (uint64_t b = 0; b <= t->mask; b++)
		for (struct node *n = t->buckets[b]; n; n = n->next)
			count += index_of(n, client) >= 0;
	pthread_mutex_unlock(&t->lock);
	return count;
}

uint64_t kvc_meta_open_table_count(struct kvc_meta_open_table *t)
{
	pthread_mutex_lock(&t->lock);
	uint64_t n = t->sessions;
	pthread_mutex_unlock(&t->lock);
	return n;
}
