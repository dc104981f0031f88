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
 * and opens it (ls in a removed working directory); kvc-fuse answers
 * those from here, with nlink 0, and opens such a directory, as a local
 * disk does, instead of ENOENT (reading it is ENOENT there as on a local
 * disk, which the C library's readdir takes for the end: ls lists it
 * empty). An inode kvc-meta answered ENOENT
 * for is gone for good (kvc-meta does not reuse inode numbers, short of a
 * crash of its host that lost inodes made after its last checkpoint), so
 * attributes kept from before its removal are its last ones. Every answer
 * with attributes is noted (entries, listings, GETATTR, SETATTR), so a
 * chmod before the removal is what fstat shows after it.
 *
 * Regular files are never kept: noting one only clears a slot that held
 * its number as another type (a number handed out again after such a
 * crash).
 * Thread-safe: one mutex, held for a slot copy only (a regular file's
 * note takes it only when a slot names its number).
 */
#ifndef KVC_FUSE_KNOWN_ATTRS_H
#define KVC_FUSE_KNOWN_ATTRS_H

#include <stdbool.h>

#include "core/wire.h"

struct kvc_known_attrs;

int kvc_known_attrs_create(struct kvc_known_attrs **out);
void kvc_known_attrs_destroy(struct kvc_known_attrs *table);

/* kvc-meta gave attr (a lookup, a listing's entry, a getattr, a setattr,
 * a mkdir...). */
void kvc_known_attrs_note(struct kvc_known_attrs *table, const struct kvc_attr *attr);

/* kvc-meta answered ENOENT for ino: its last attributes with nlink 0 in
 * *out, true; false when none are kept here. */
bool kvc_known_attrs_gone(struct kvc_known_attrs *table, uint64_t ino, struct kvc_attr *out);

#endif
