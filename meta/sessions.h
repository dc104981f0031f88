/*
 * sessions: which clients (kvc-fuse instances, by their random 16-byte
 * id) are alive, for the open sessions of meta_store. A client renews
 * every second; one not heard from for client_timeout_ms is gone, and its
 * sessions and grants are dropped, so files removed while it had them
 * open, and files it made ahead and never entered (meta_grants.c), are
 * reclaimed. The table of last contacts is in memory only: after a
 * kvc-meta restart every client holding sessions gets the whole timeout
 * again from the first sweep, so a restart never drops a live client.
 *
 * A dropped client must hear of it before it does I/O again, or it would
 * read holes where its removed files were. The meta store records the
 * drop (table `dropped`, in the transaction that ends the sessions), so
 * the word survives restarts and any number of other drops: every RENEW
 * of a dropped client answers ESTALE; the client opens its files again
 * (those gone turn stale on its side) and then rejoins with a RENEW
 * flagged KVC_RENEW_REJOIN. Rejoining forgets the record only if no drop
 * came after the one this client was told of (what it was told is kept
 * here; after a restart it is told again), so a client dropped again
 * while it was reopening hears ESTALE again instead of holes.
 *
 * Open sessions of plain OPENs live in memory (meta/open_table.h), so a
 * new process does not know them: a client's RENEW is answered -EREMCHG
 * until it has opened its files again and renewed with KVC_RENEW_REJOIN
 * (also when it was never dropped), once per kvc-meta process. Its lease
 * is not renewed before that, so it does no I/O on a file kvc-meta may
 * have reclaimed after its hold.
 *
 * Owns its table of (id, last heard, drop told, announced) under one mutex;
 * thread-safe. Lock order: the table's mutex is never held across a
 * meta store call.
 */
#ifndef KVC_META_SESSIONS_H
#define KVC_META_SESSIONS_H

#include <stdint.h>

#include "meta/meta_store.h"

struct kvc_meta_sessions;

int kvc_meta_sessions_create(uint32_t timeout_ms, struct kvc_meta_sessions **out);
void kvc_meta_sessions_destroy(struct kvc_meta_sessions *sessions);

/* The clock every now_ms below is read on (CLOCK_MONOTONIC, ms). */
uint64_t kvc_meta_sessions_now_ms(void);

/* The client was heard from at now_ms. */
void kvc_meta_sessions_touch(struct kvc_meta_sessions *sessions,
                             const uint8_t id[KVC_META_CLIENT_ID], uint64_t now_ms);

/* A client's periodic RENEW (flags 0) or its rejoining after a drop or a
 * start (KVC_RENEW_REJOIN: its files are open again): touch, then 0,
 * -ESTALE while the client's sessions were dropped and it has not
 * rejoined since the last drop it was told of, -EREMCHG while it has
 * not rejoined since this process started; -EINVAL for unknown flags,
 * -errno from the store. */
int kvc_meta_sessions_renew(struct kvc_meta_sessions *sessions, struct kvc_meta_store *store,
                            const uint8_t id[KVC_META_CLIENT_ID], uint32_t flags,
                            uint64_t now_ms);

/* Drop the sessions of clients silent past the timeout. Returns how many
 * clients were dropped, or -errno. */
int kvc_meta_sessions_sweep(struct kvc_meta_sessions *sessions, struct kvc_meta_store *store,
                            uint64_t now_ms);

#endif
