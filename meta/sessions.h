/*
 * sessions: which clients (kvc-fuse instances, by their random 16-byte
 * id) are alive, for the open sessions of meta_store. A client renews
 * every second; one not heard from for client_timeout_ms is gone, and its
 * sessions are dropped, so files removed while it had them open are
 * reclaimed. The table is in memory only: after a kvc-meta restart every
 * client holding sessions gets the whole timeout again from the first
 * sweep, so a restart never drops a live client.
 *
 * Owns its table of (id, last heard) under one mutex; thread-safe.
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

/* A client's periodic RENEW: touch, and -ESTALE (once) when its sessions
 * were dropped while it was silent, so it opens its files again and
 * learns which ones are gone. */
int kvc_meta_sessions_renew(struct kvc_meta_sessions *sessions,
                            const uint8_t id[KVC_META_CLIENT_ID], uint64_t now_ms);

/* Drop the sessions of clients silent past the timeout. Returns how many
 * clients were dropped, or -errno. */
int kvc_meta_sessions_sweep(struct kvc_meta_sessions *sessions, struct kvc_meta_store *store,
                            uint64_t now_ms);

#endif
