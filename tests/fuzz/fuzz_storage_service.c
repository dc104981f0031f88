/* libFuzzer harness: kvc-storage's request handlers on two real chunk
 * stores (targets 0 and 1), fed a sequence of frames whose types come
 * from the storage table (and a few that are not in it), with arbitrary
 * bodies and data sections. Input: repeated (u16 type, u16 body_len,
 * u16 data_len, body bytes, data bytes). The data section goes through
 * the socket the handler reads it from, as a client's would. Every
 * handler must answer or refuse without crashing, leaking or reading past
 * the body, and leave the socket in frame.
 * Placement: the socket is a Unix socketpair of this process, so PLACE_*
 * messages pass the peer check, and region 1 (4 MiB of a memfd) is
 * registered for this pid on the connection: PLACE_READ / PLACE_WRITE
 * bodies with arbitrary pieces, spans and lengths meet a real region
 * and real chunk stores. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "storage/place.h"
#include "storage/service.h"

static struct kvc_storage_service svc;
static struct kvc_server_conn conn;
static struct kvc_place_table places;
static int peer;

/* Region 1 on this connection (dropped with it: registered again). */
static void register_region(void)
{
	const struct kvc_msg_place_register m = {.region = 1, .size = 4 << 20};
	int fd = memfd_create("fuzz-region", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)m.size) != 0 ||
	    kvc_place_register(&places, &conn, getpid(), fd, &m) != 0)
		abort();
}

static void setup(void)
{
	const char *dir = fuzz_temp_dir();
	char path[128];
	int sv[2];
	pthread_t t;
	svc.first_target = 0;
	svc.target_count = 2;
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/t%d", dir, i);
		if (kvc_chunk_store_open(path, &svc.stores[i]) != 0)
			abort();
	}
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 || kvc_place_init(&places) != 0)
		abort();
	svc.place = &places;
	conn.fd = sv[0];
	peer = sv[1];
	register_region();
	if (pthread_create(&t, NULL, fuzz_drain, (void *)(intptr_t)dup(peer)) != 0)
		abort();
	pthread_detach(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint16_t types[] = {
		KVC_MSG_CHUNK_WRITE, KVC_MSG_CHUNK_READ, KVC_MSG_CHUNK_REMOVE, KVC_MSG_CHUNK_TRUNCATE,
		KVC_MSG_CHUNK_LAST, KVC_MSG_SPACE, KVC_MSG_SYNC, KVC_MSG_CHUNK_PUNCH,
		KVC_MSG_HELLO, KVC_MSG_LOOKUP, 63, 90, 96, 65535, KVC_MSG_CHUNK_LIST,
		KVC_MSG_CHUNK_RESYNC, KVC_MSG_CHUNK_RESYNC_STATUS,
		/* placement: region 1 is registered (PLACE_REGISTER itself has
		 * no fd here: refused) */
		KVC_MSG_PLACE_HELLO, KVC_MSG_PLACE_REGISTER, KVC_MSG_PLACE_UNREGISTER,
		KVC_MSG_PLACE_READ, KVC_MSG_PLACE_WRITE};
	if (!svc.stores[0])
		setup();
	/* Each input starts with region 1 there (an earlier one may have
	 * unregistered it). */
	kvc_place_unregister(&places, &conn, getpid(), 1);
	register_region();
	size_t at = 0;
	while (at + 6 <= size) {
		uint16_t pick, len, data_len;
		memcpy(&pick, data + at, 2);
		memcpy(&len, data + at + 2, 2);
		memcpy(&data_len, data + at + 4, 2);
		at += 6;
		if (len > size - at)
			len = (uint16_t)(size - at);
		void *body = malloc(len ? len : 1);
		memcpy(body, data + at, len);
		at += len;
		if (data_len > size - at)
			data_len = (uint16_t)(size - at);
		/* The data section waits in the socket, as a client sent it. */
		if (data_len && write(peer, data + at, data_len) != data_len)
			abort();
		at += data_len;
		struct kvc_wire_header h;
		kvc_wire_header_init(&h, types[pick % (sizeof(types) / sizeof(types[0]))], 1, 0, len,
		                     data_len);
		conn.body = body;
		conn.body_capacity = len;
		int rc = kvc_storage_service_handle(&svc, &conn, &h);
		free(body);
		if (rc < 0) {
			/* A protocol error closes the connection: start a fresh one,
			 * as a client would, so no stale data is left in the socket. */
			kvc_storage_service_cleanup(&svc, &conn);
			close(conn.fd);
			close(peer);
			int sv[2];
			pthread_t t;
			if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
				abort();
			conn = (struct kvc_server_conn){.fd = sv[0]};
			peer = sv[1];
			register_region();
			if (pthread_create(&t, NULL, fuzz_drain, (void *)(intptr_t)dup(peer)) != 0)
				abort();
			pthread_detach(t);
		}
	}
	return 0;
}
