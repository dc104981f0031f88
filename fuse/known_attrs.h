/*
 * known_attrs: the last attributes kvc-meta gave this client of its
 * directories and special files (fifos, sockets, symlinks, devices), by
 * inode, in a direct-mapped table (a slot taken by another inode loses
 * the older one: best effort, never a wrong inode's attributes).
 *
 * One use. Such an inode whose last name is removed while a process holds
 * it (an open directory or fifo, a working directory) is gone from
 * kvc-meta at once: only regular files are kept while open (open
 * sessions). The kernel still asks for its attributes (fstat, stat("."))
 * and lists it (ls in a removed working directory); kvc-fuse answers
 * those from here, with nlink 0, and lists such a directory empty, as a
 * local disk does, instead of ENOENT. An inode kvc-meta answered ENOENT
 * for is gone for good (inode numbers are never reused), so attributes
 * kept from before its removal are its last ones.
 *
 * Regular files are never kept (kvc_known_attrs_note ignores them).
 * Thread-safe: one mutex, held for a slot copy only.
 */
#ifndef KVC_FUSE_KNOWN_ATTRS_H
#define KVC_FUSE_KNOWN_ATTRS_H

#include <stdbool.h>

#include "core/wire.h"

struct kvc_known_attrs;

int kvc_known_attrs_create(struct kvc_known_attrs **out);
void kvc_known_attrs_destroy(struct kvc_known_attrs *table);

/* kvc-meta gave attr (a lookup, a listing's entry, a getattr, a mkdir...). */
void kvc_known_attrs_note(struct kvc_known_attrs *table, const struct kvc_attr *attr);

/* kvc-meta answered ENOENT for ino: its last attributes with nlink 0 in
 * *out, true; false when none are kept here. */
bool kvc_known_attrs_gone(struct kvc_known_attrs *table, uint64_t ino, struct kvc_attr *out);

#endif
