/*
 * lmdb_txn: what every LMDB user of kvcfs shares (chunk index, namespace,
 * page pools): LMDB's return codes as -errno, and ending a write
 * transaction by its outcome. Stateless.
 */
#ifndef KVC_LMDB_TXN_H
#define KVC_LMDB_TXN_H

#include <lmdb.h>

/* 0 -> 0; MDB_NOTFOUND -> -ENOENT; map or transaction full -> -ENOSPC;
 * plain errno values (LMDB passes them through) -> -errno; else -EIO. */
int kvc_lmdb_errno(int rc);

/* Commit when rc >= 0, abort otherwise; returns rc, or the commit's
 * error. */
int kvc_lmdb_finish(MDB_txn *txn, int rc);

/* Flush and close an environment; safe on NULL. */
void kvc_lmdb_close(MDB_env *env);

#endif
