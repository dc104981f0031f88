/* lmdb_txn: see lmdb_txn.h. */
#include "core/lmdb_txn.h"

#include <errno.h>

int kvc_lmdb_errno(int rc)
{
	if (rc == 0)
		return 0;
	if (rc == MDB_NOTFOUND)
		return -ENOENT;
	if (rc == MDB_MAP_FULL || rc == MDB_TXN_FULL)
		return -ENOSPC;
	if (rc > 0 && rc < 1000)
		return -rc;
	return -EIO;
}

int kvc_lmdb_finish(MDB_txn *txn, int rc)
{
	if (rc < 0) {
		mdb_txn_abort(txn);
		return rc;
	}
	int crc = kvc_lmdb_errno(mdb_txn_commit(txn));
	return crc < 0 ? crc : rc;
}

void kvc_lmdb_close(MDB_env *env)
{
	if (!env)
		return;
	mdb_env_sync(env, 1);
	mdb_env_close(env);
}
