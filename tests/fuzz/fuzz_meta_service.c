/* libFuzzer harness: kvc-meta's request handlers (namespace and page
 * pools) on a real LMDB store, fed a sequence of frames whose types come
 * from the namespace and pool tables and whose bodies are arbitrary.
 * Input: repeated (u16 type, u16 body_len, body bytes). Every handler
 * must answer (or refuse) without crashing, leaking or reading past the
 * body; the store stays usable for the next input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "meta/meta_store.h"
#include "meta/pool_store.h"
#include "meta/collector.h"
#include "meta/service.h"

static struct kvc_meta_service svc;
static struct kvc_storage_client storage;
static struct kvc_server_conn conn;

static void setup(void)
{
	const char *dir = fuzz_temp_dir();
	char path[128];
	struct kvc_layout layout = {.chunk_size = 1 << 20, .stripe = 1, .chain_count = 1};
	static struct kvc_config config;
	char err[256];
	/* Storage that cannot be reached: truncates fail fast with an error. */
	if (kvc_config_parse("chunk_size = 1048576\nconnect_timeout_ms = 50\n"
	                     "io_timeout_ms = 50\n[meta]\naddress = 127.0.0.1:1\n"
	                     "[storage s]\naddress = 127.0.0.1:1\ntarget = /nonexistent\n",
	                     "fuzz", &config, err, sizeof(err)) != 0)
		abort();
	snprintf(path, sizeof(path), "%s/meta", dir);
	if (kvc_meta_store_open(path, &layout, &svc.store) != 0)
		abort();
	snprintf(path, sizeof(path), "%s/pools", dir);
	if (kvc_pool_store_open(path, &svc.pools) != 0)
		abort();
	if (kvc_storage_client_init(&storage, &config) != 0)
		abort();
	svc.storage = &storage;
	/* kvc-meta always runs its collector: shrinking truncates cut chunks
	 * through it (against the unreachable storage, they fail and stay
	 * recorded, as with a storage server down). */
	if (kvc_meta_collector_start(svc.store, svc.pools, NULL, &storage, 3600 * 1000,
	                             &svc.collector) != 0)
		abort();
	conn.fd = fuzz_reply_fd();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint16_t types[] = {
		KVC_MSG_LOOKUP, KVC_MSG_GETATTR, KVC_MSG_CREATE, KVC_MSG_MKDIR, KVC_MSG_UNLINK,
		KVC_MSG_RMDIR, KVC_MSG_RENAME, KVC_MSG_READDIR, KVC_MSG_SETATTR,
		KVC_MSG_EXTEND_SIZE, KVC_MSG_STATFS, KVC_MSG_OPEN, KVC_MSG_CLOSE, KVC_MSG_RENEW,
		KVC_MSG_MKNOD, KVC_MSG_SYMLINK, KVC_MSG_LINK, KVC_MSG_READLINK, KVC_MSG_SETXATTR,
		KVC_MSG_GETXATTR, KVC_MSG_LISTXATTR, KVC_MSG_REMOVEXATTR, KVC_MSG_POOL_INIT,
		KVC_MSG_POOL_WORLD, KVC_MSG_POOL_ALLOCATE, KVC_MSG_POOL_CONFIRM,
		KVC_MSG_POOL_EXISTS, KVC_MSG_POOL_LOCATIONS, KVC_MSG_POOL_RELEASE_LEASES,
		KVC_MSG_POOL_DELETE, KVC_MSG_POOL_CLEAR, KVC_MSG_POOL_STATS, KVC_MSG_POOL_LIST,
		KVC_MSG_POOL_FSCK, KVC_MSG_POOL_KEYS, KVC_MSG_POOL_BIND, KVC_MSG_POOL_BINDING,
		KVC_MSG_META_SYNC,
		0, 1, 55, 54, 200, KVC_MSG_POOL_WAIT, KVC_MSG_CLOSE_MANY, KVC_MSG_KEYS_LOOKUP,
		KVC_MSG_KEYS_CREATE, KVC_MSG_KEYS_PUBLISH, KVC_MSG_KEYS_REMOVE,
		KVC_MSG_INO_GRANT, KVC_MSG_ADOPT, KVC_MSG_REMOVE_MANY, KVC_MSG_INO_RETURN};
	if (!svc.store)
		setup();
	size_t at = 0;
	while (at + 4 <= size) {
		uint16_t pick, len;
		memcpy(&pick, data + at, 2);
		memcpy(&len, data + at + 2, 2);
		at += 4;
		if (len > size - at)
			len = (uint16_t)(size - at);
		/* A copy of exactly the body's length, so ASan sees any overread. */
		void *body = malloc(len ? len : 1);
		memcpy(body, data + at, len);
		at += len;
		struct kvc_wire_header h;
		uint16_t type = types[pick % (sizeof(types) / sizeof(types[0]))];
		/* Pools of millions of pages are valid but slow: keep them small, so
		 * the fuzzer spends its time on decoding. */
		if (type == KVC_MSG_POOL_INIT && len >= sizeof(struct kvc_msg_pool))
			((struct kvc_msg_pool *)body)->value %= 4096;
		/* A wait blocks up to its timeout: a few ms here (the cap of
		 * 600000 is checked before the value is cut, as sent). */
		if (type == KVC_MSG_POOL_WAIT && len >= sizeof(struct kvc_msg_pool) &&
		    ((struct kvc_msg_pool *)body)->value <= KVC_POOL_MAX_WAIT_MS)
			((struct kvc_msg_pool *)body)->value %= 4;
		kvc_wire_header_init(&h, type, 1, 0, len, 0);
		/* The pick's top bit: a connection of the pool secret, which
		 * may send page-pool messages only. */
		conn.role = pick >> 15 ? KVC_AUTH_POOL : KVC_AUTH_CLUSTER;
		conn.body = body;
		conn.body_capacity = len;
		kvc_meta_service_handle(&svc, &conn, &h);
		free(body);
	}
	return 0;
}
