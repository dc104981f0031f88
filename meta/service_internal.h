/*
 * service_internal: what meta/service.c (the dispatch table and the
 * namespace handlers) shares with meta/service_batch.c (the messages of
 * many files at once: KEYS_*, INO_GRANT, INO_RETURN, ADOPT, REMOVE_MANY,
 * CLOSE_MANY). A handler gets its request, takes its variable parts with
 * kvc_meta_req_take, must end exactly at the body's end
 * (kvc_meta_req_done), and answers with kvc_meta_req_reply once; the
 * watch helpers tell other clients what changed (made, removed) and note
 * what this connection's client was answered (note_*), as watches.h
 * describes.
 */
#ifndef KVC_META_SERVICE_INTERNAL_H
#define KVC_META_SERVICE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/server.h"
#include "meta/service.h"

/* A request: its fixed struct (checked to be in the body) and the offset
 * of what follows it. Handlers take their variable parts with kvc_meta_req_take() and
 * must end exactly at the body's end (kvc_meta_req_done()). */
struct kvc_meta_request {
	struct kvc_meta_service *svc;
	struct kvc_server_conn *conn;
	const struct kvc_wire_header *h;
	const void *msg;
	uint32_t off;
	uint64_t since; /* the watches' change count before the store was read */
};

const void *kvc_meta_req_take(struct kvc_meta_request *r, uint32_t len);
bool kvc_meta_req_done(const struct kvc_meta_request *r);
int kvc_meta_req_reply(struct kvc_meta_request *r, int rc, const void *body, uint32_t len);
/* -EINVAL: a malformed body. */
int kvc_meta_req_bad(struct kvc_meta_request *r);
void kvc_meta_req_note_name(struct kvc_meta_request *r, uint64_t parent, const char *name,
                            uint32_t len);
void kvc_meta_req_note_inode(struct kvc_meta_request *r, uint64_t ino);
void kvc_meta_req_changed_inode(struct kvc_meta_request *r, uint64_t ino);
/* A new name (parent, name) of ino; a name removed or replaced (its old
 * inode ino and its parent changed too). */
void kvc_meta_req_made(struct kvc_meta_request *r, uint64_t parent, const char *name,
                       uint32_t len, uint64_t ino);
void kvc_meta_req_removed(struct kvc_meta_request *r, uint64_t parent, const char *name,
                          uint32_t len, uint64_t ino);

/* service_batch.c's handlers (rows of service.c's table). */
int kvc_meta_service_keys(struct kvc_meta_request *r);
int kvc_meta_service_ino_grant(struct kvc_meta_request *r);
int kvc_meta_service_ino_return(struct kvc_meta_request *r);
int kvc_meta_service_adopt(struct kvc_meta_request *r);
int kvc_meta_service_remove_many(struct kvc_meta_request *r);
int kvc_meta_service_close_many(struct kvc_meta_request *r);

#endif
