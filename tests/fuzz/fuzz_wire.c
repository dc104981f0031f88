/* libFuzzer harness: receiving frames (kvc_wire_recv: header checks,
 * body limits) from a socket holding arbitrary bytes, then the body
 * decoders every service uses on what was received: names, key lists,
 * body_take, and a routing table (MGMT_ROUTING's reply: chains, then
 * servers) as clients check it. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/chains.h"
#include "core/wire.h"

/* body as a MGMT_ROUTING reply (client/storage_routing.c's checks). */
static void decode_routing(const uint8_t *body, uint32_t len)
{
	static struct kvc_wire_chain chains[KVC_WIRE_MAX_TARGETS];
	static struct kvc_wire_server servers[KVC_WIRE_MAX_SERVERS];
	static struct kvc_chains table;
	struct kvc_msg_mgmt_routing_reply head;
	if (len < sizeof(head))
		return;
	memcpy(&head, body, sizeof(head));
	if (head.chain_count > KVC_WIRE_MAX_TARGETS || head.server_count > KVC_WIRE_MAX_SERVERS ||
	    len != sizeof(head) + head.chain_count * sizeof(chains[0]) +
	                   head.server_count * sizeof(servers[0]))
		return;
	memcpy(chains, body + sizeof(head), head.chain_count * sizeof(chains[0]));
	memcpy(servers, body + sizeof(head) + head.chain_count * sizeof(chains[0]),
	       head.server_count * sizeof(servers[0]));
	if (kvc_chains_decode(chains, head.chain_count, head.version, servers, head.server_count,
	                      &table) == 0)
		for (uint32_t t = 0; t < table.target_count; t++)
			if (kvc_chains_server_of(&table, t) < 0)
				abort(); /* decode promised dense target ids */
}

static void decode_body(const uint8_t *body, uint32_t len, uint32_t count)
{
	decode_routing(body, len);
	struct kvc_wire_key keys[64];
	uint32_t off = 0;
	kvc_wire_keys_decode(body, len, &off, keys, count > 64 ? 64 : count, 400);
	for (uint32_t i = 0; i < len && i < 300; i += 37)
		kvc_wire_name_check((const char *)body + i, len - i > 255 ? 256 : len - i);
	off = 0;
	while (kvc_wire_body_take(body, len, &off, 24))
		;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int sv[2];
	static uint8_t body[1 << 16];
	struct kvc_wire_header h;
	if (size > 60000 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
		return 0;
	if (size && write(sv[1], data, size) != (ssize_t)size)
		abort();
	shutdown(sv[1], SHUT_WR);
	int rc;
	while ((rc = kvc_wire_recv(sv[0], &h, body, sizeof(body))) == 0) {
		if (h.data_len)
			kvc_wire_discard(sv[0], h.data_len);
		decode_body(body, h.body_len, h.body_len ? body[0] : 0);
	}
	close(sv[0]);
	close(sv[1]);
	return 0;
}
