/*
 * open_table: the open sessions kvc-meta keeps in memory. A plain OPEN of
 * an existing file (every read of a key another client wrote) records the
 * pair (ino, client) here instead of in the store's `opens` table, so an
 * open costs a read transaction, not a write of two tables through the
 * single LMDB writer. Sessions made inside a write transaction anyway
 * (create-open, ADOPT, ring key temps) stay in the store; a file is open
 * when either place has it (meta_opens.c).
 *
 * Invariants, all under the one mutex:
 *  - An ino's node lists each client at most once (sessions are a set).
 *  - The decision that a file nobody has open goes to gc (the store's
 *    inode_unlinked, inside its write transaction) and the adding of a
 *    session are ordered by the mutex: kvc_meta_open_table_doom either
 *    finds a session (the file becomes an orphan, and its node remembers
 *    that: the last close must settle it in a write transaction) or marks
 *    the ino doomed by that transaction's id. An OPEN that finds the mark
 *    and a snapshot older than that id cannot know yet whether the
 *    removal commits: it looks again from a write transaction, which
 *    begins only after the removing one ended (meta_opens.c).
 *  - After kvc-meta starts, the sessions of the process before are not
 *    known: for the hold (set once, the clients' timeout and a margin)
 *    every file counts as open, so nothing is reclaimed under a client
 *    that has not told us yet (RENEW answers -EREMCHG until a client
 *    has opened its files again and renewed with KVC_RENEW_REJOIN,
 *    sessions.h). When the hold ends, the store settles the orphans
 *    nobody reopened (kvc_meta_store_settle_orphans).
 *
 * Lock order: the mutex is a leaf. It is taken inside the store's write
 * transactions and never held across a store call or any I/O.
 */
#ifndef KVC_META_OPEN_TABLE_H
#define KVC_META_OPEN_TABLE_H

#include <stdbool.h>
#include <stdint.h>

#include "meta/meta_store.h"

struct kvc_meta_open_table;

int kvc_meta_open_table_create(struct kvc_meta_open_table **out);
void kvc_meta_open_table_destroy(struct kvc_meta_open_table *t);

/* Count every file as open until hold_ms from now (CLOCK_MONOTONIC). */
void kvc_meta_open_table_hold(struct kvc_meta_open_table *t, uint64_t hold_ms);
/* Whether the hold after the start is still on. */
bool kvc_meta_open_table_holding(struct kvc_meta_open_table *t);

/* Record (ino, client). *doomed: the id of the write transaction that
 * doomed ino (0: none). 1 when the pair is new, 0 when it was there, or
 * -ENOMEM. */
int kvc_meta_open_table_add(struct kvc_meta_open_table *t, uint64_t ino,
                            const uint8_t client[KVC_META_CLIENT_ID], uint64_t *doomed);
/* End (ino, client). Returns 1 when it was the file's last session here
 * and the file became an orphan while held (the caller settles it), 0
 * otherwise (also when the pair was not here). */
int kvc_meta_open_table_remove(struct kvc_meta_open_table *t, uint64_t ino,
                               const uint8_t client[KVC_META_CLIENT_ID]);
/* Forget ino's doomed mark if it is still `doomed` (an OPEN saw it end). */
void kvc_meta_open_table_undoom(struct kvc_meta_open_table *t, uint64_t ino, uint64_t doomed);

/* 1 when some client has ino open here (or the hold is on), else 0. */
int kvc_meta_open_table_has(struct kvc_meta_open_table *t, uint64_t ino);
/* 1 when client has ino open here, else 0. */
int kvc_meta_open_table_has_client(struct kvc_meta_open_table *t, uint64_t ino,
                                   const uint8_t client[KVC_META_CLIENT_ID]);

/* The last name of ino goes in write transaction txn_id: 1 when it is
 * open here (or the hold is on; noted: the last close settles it), else
 * 0 with ino marked doomed by txn_id; -ENOMEM. Marks of transactions
 * older than txn_id are dropped now and then. */
int kvc_meta_open_table_doom(struct kvc_meta_open_table *t, uint64_t ino, uint64_t txn_id);

/* End every session of client here: the inos, in a malloc'd *inos (NULL
 * when none), their count, or -ENOMEM (nothing ended). */
int kvc_meta_open_table_drop_client(struct kvc_meta_open_table *t,
                                    const uint8_t client[KVC_META_CLIENT_ID], uint64_t **inos);

/* Add to out[0 .. count) the clients holding sessions here that are not
 * among out[0 .. count) yet, up to max in all. Returns the new count. */
int kvc_meta_open_table_clients(struct kvc_meta_open_table *t,
                                uint8_t (*out)[KVC_META_CLIENT_ID], int count, int max);

/* Sessions client holds here. */
int kvc_meta_open_table_count_client(struct kvc_meta_open_table *t,
                                     const uint8_t client[KVC_META_CLIENT_ID]);

/* Sessions held here. */
uint64_t kvc_meta_open_table_count(struct kvc_meta_open_table *t);

#endif
