/*
 * meta_events: kvc-meta's change events for this client, and how long
 * the kernel may cache what kvc-meta answers.
 *
 * Every connection of this kvc-fuse to kvc-meta acts for its client id
 * (CLIENT_HELLO, sent by the rpc pool), so kvc-meta notes which names and
 * inodes it answered us about (meta/watches.h). One thread holds the WATCH
 * stream: for each event it drops the kernel's entry (a name another
 * client created, removed or replaced) or the inode's attributes and page
 * cache (another client changed them), then tells the USRBIO key waits.
 *
 * The rule (docs/operations.md "Caching and visibility"): while the stream
 * is up, names and attributes are cached for [fuse] cache_ttl_ms and
 * another client's change reaches us within the event's trip (well under
 * 10 ms on one network); while it is down (kvc-meta restarting), for 1 s,
 * as before events existed. An event that arrives while the request that
 * looked the object up is still in flight would be lost on the kernel
 * (nothing cached yet to drop): each request takes a mark before asking
 * kvc-meta, and its answer is cached for 0 s when an event for its object
 * came since the mark (kvc_meta_events_ttl).
 *
 * Threads: one (the stream), and the size flusher's pass over open files
 * (kvc_meta_events_inode_changed). The recent-event table is lock-free
 * (atomic sequence numbers, hashed; a collision only shortens a cache
 * time).
 */
#ifndef KVC_FUSE_META_EVENTS_H
#define KVC_FUSE_META_EVENTS_H

#include <stdbool.h>
#include <stdint.h>

struct kvc_fuse;
struct kvc_meta_events;

/* Start the stream thread (it connects, and reconnects, by itself). */
int kvc_meta_events_start(struct kvc_fuse *fs, struct kvc_meta_events **out);
void kvc_meta_events_stop(struct kvc_meta_events *ev);

/* Taken before a request to kvc-meta whose answer the kernel caches. */
struct kvc_meta_events_mark {
	uint64_t seq, gen;
};
struct kvc_meta_events_mark kvc_meta_events_mark(struct kvc_meta_events *ev);

/* Seconds the kernel may cache an answer about the name (parent, name;
 * name NULL: none) and the inode ino (0: none) asked for after mark. */
double kvc_meta_events_ttl(struct kvc_meta_events *ev, struct kvc_meta_events_mark mark,
                           uint64_t parent, const char *name, uint64_t ino);

/* Move the events' sequence on and return it: a mark taken before this
 * call has a lower seq than the result, one taken after has at least it
 * (attr_cache's forgets). 0 without events. */
uint64_t kvc_meta_events_tick(struct kvc_meta_events *ev);

/* This client changed inode ino (kvc-meta tells no client of its own
 * changes): answers about it asked for before now are not cached. */
void kvc_meta_events_changed_here(struct kvc_meta_events *ev, uint64_t ino);

/* Another client changed inode ino, found without an event (an open
 * file's attributes asked again, file_ops.c): applied as its event would
 * have been. Thread-safe. */
void kvc_meta_events_inode_changed(struct kvc_meta_events *ev, uint64_t ino);

/* Whether the stream is up (changes reach us as events). */
bool kvc_meta_events_up(struct kvc_meta_events *ev);

/* Events received and applied since start (metrics: once counted, the
 * names and attributes it drops are dropped); 0 for NULL. */
uint64_t kvc_meta_events_received(struct kvc_meta_events *ev);

/* How often every cached name was dropped at once (events lost, or the
 * stream back after a gap). */
uint64_t kvc_meta_events_name_drops(struct kvc_meta_events *ev);

#endif
