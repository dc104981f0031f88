/*
 * watches: which kvc-fuse client caches which names and inodes, so that
 * kvc-meta can tell it when another client changes them (issue 11's
 * visibility rule: a key created or replaced on one client is seen by
 * every other client within milliseconds, while every client still caches
 * entries and attributes in its kernel).
 *
 * A watcher is one kvc-fuse client (its 16-byte client id). Connections
 * act for it after CLIENT_HELLO (kvc_meta_watches_bind); it lives while
 * they or its stream do, and a ttl more (what the client cached still
 * hears of changes, queued for its next stream); what they look up
 * is noted: a watch (watcher, kind, object) lives for the watcher's ttl
 * plus a margin (the client caches for ttl from when it got the answer,
 * which is after the note). A change by any connection (the origin) of a
 * watched object sends one event to every other watcher with a live watch
 * on it and ends those watches (the client looks again, and so watches
 * again). Objects: NAME (parent directory, name), hashed with the name
 * (a collision only sends a needless event), INODE (an inode's
 * attributes or data changed), and DIR (every name of a directory: the
 * client keeps the set of its names, fuse/dir_names.h). A DIR watch is
 * not ended by a change: each change of a name in the directory sends a
 * NAME event to its DIR watchers for as long as the watch lives (the
 * client renews it before its ttl runs out); a note that may have missed
 * a change (note_since) sends a DIR event instead: forget the names.
 *
 * Events queue per watcher (bounded: past KVC_META_WATCH_QUEUE bytes they
 * are dropped and the next frame says so) and go out on the watcher's
 * WATCH connection (kvc_meta_watches_stream), whose server thread sends
 * them with no lock held. The table is bounded too (max_entries): when a
 * watch cannot be noted for lack of room, every change is sent to every
 * watcher until all watches that could have been noted then have expired
 * (a flood, correct and bounded, logged).
 *
 * A start: watches live in memory, so a kvc-meta that starts knows
 * nothing of what clients cached from the one before it. For a window
 * after the start (start_ttl_ms, the cluster's cache_ttl_ms, plus the
 * margin; longer for a client that binds with a longer ttl) every change
 * goes to every watcher (a flood), and is kept in a start log (bounded as
 * a queue is) that a watcher made in its window receives first: a client
 * that comes back after a change still hears of it, and one whose events
 * did not all fit is told they were lost.
 *
 * Lock: one mutex for everything here but the change count (an atomic,
 * so kvc_meta_watches_begin on every request takes no lock), a leaf:
 * nothing else is taken or called under it (no LMDB, no network), and
 * notes and changes are made after the store's transaction has finished.
 */
#ifndef KVC_META_WATCHES_H
#define KVC_META_WATCHES_H

#include <stdint.h>

#include "core/wire.h"

#define KVC_META_WATCH_QUEUE (1u << 20)
#define KVC_META_WATCH_MARGIN_MS 2000
#define KVC_META_WATCH_MAX_TTL_MS 3600000
#define KVC_META_WATCHERS_MAX 4096

struct kvc_meta_watches;
struct kvc_meta_watcher;

/* start_ttl_ms: the start window (above) without the margin; 0: none. */
int kvc_meta_watches_create(uint32_t max_entries, uint32_t start_ttl_ms,
                            struct kvc_meta_watches **out);
/* Streams return; no call may run meanwhile or after but destroy. */
void kvc_meta_watches_stop(struct kvc_meta_watches *w);
void kvc_meta_watches_destroy(struct kvc_meta_watches *w);

/* A connection acts for client id, which caches for ttl_ms (1 ..
 * KVC_META_WATCH_MAX_TTL_MS). *out is held until unbind. -EINVAL, -ENOMEM,
 * -EUSERS (KVC_META_WATCHERS_MAX clients at once). */
int kvc_meta_watches_bind(struct kvc_meta_watches *w, const uint8_t id[KVC_WIRE_CLIENT_ID],
                          uint32_t ttl_ms, struct kvc_meta_watcher **out);
void kvc_meta_watches_unbind(struct kvc_meta_watches *w, struct kvc_meta_watcher *c);

/* Note that c was told about the object (name: NAME only). */
void kvc_meta_watches_note(struct kvc_meta_watches *w, struct kvc_meta_watcher *c,
                           uint32_t kind, uint64_t id, const char *name, uint32_t name_len);
/* A request reads the store after a note could be made: a change that
 * commits after its read but is told before its note would reach nobody,
 * and its answer would be cached stale for the ttl. So a request takes the
 * change count before it reads (begin), and its notes pass it (since): a
 * change of the object by another origin counted after since is sent to c
 * at once (hashed per object in a fixed table: a collision only sends a
 * needless event). */
uint64_t kvc_meta_watches_begin(struct kvc_meta_watches *w);
void kvc_meta_watches_note_since(struct kvc_meta_watches *w, struct kvc_meta_watcher *c,
                                 uint64_t since, uint32_t kind, uint64_t id, const char *name,
                                 uint32_t name_len);
/* The object changed, by origin (NULL: a connection acting for nobody). */
void kvc_meta_watches_changed(struct kvc_meta_watches *w, const struct kvc_meta_watcher *origin,
                              uint32_t kind, uint64_t id, const char *name, uint32_t name_len);

/* Serve c's events on fd (the WATCH connection, reply already sent) until
 * fd fails, the peer hangs up, a newer stream of c replaces this one, or
 * stop. Returns 0 or -errno. */
int kvc_meta_watches_stream(struct kvc_meta_watches *w, struct kvc_meta_watcher *c, int fd);

/* Counters for tests and kvc-admin. */
struct kvc_meta_watch_stats {
	uint64_t entries, notes, events, dropped, floods;
};
void kvc_meta_watches_stats(struct kvc_meta_watches *w, struct kvc_meta_watch_stats *out);

#endif
