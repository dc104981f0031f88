/*
 * kvc-mgmt's requests (docs/protocol.md "Cluster manager"), through one
 * dispatch table as every service: MGMT_HEARTBEAT from storage servers
 * and MGMT_ROUTING from everyone. A manager that does not lead answers
 * both with -EAGAIN (the caller asks the next manager).
 */
#include "mgmt/service.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int h_heartbeat(struct kvc_manager *m, struct kvc_server_conn *conn,
                       const struct kvc_wire_header *h)
{
	struct kvc_msg_mgmt_heartbeat msg;
	memcpy(&msg, conn->body, sizeof(msg));
	if (msg.server >= m->config->server_count || msg.synced_count > KVC_WIRE_MAX_SYNCED ||
	    h->body_len != sizeof(msg) + msg.synced_count * sizeof(struct kvc_msg_mgmt_synced))
		return kvc_server_reply(conn, h, -EINVAL, NULL, 0);
	struct kvc_msg_mgmt_synced synced[KVC_WIRE_MAX_SYNCED];
	memcpy(synced, (const char *)conn->body + sizeof(msg), msg.synced_count * sizeof(synced[0]));
	for (uint32_t i = 0; i < msg.synced_count; i++)
		if (synced[i].target >= m->config->target_count ||
		    m->config->targets[synced[i].target].server != msg.server)
			return kvc_server_reply(conn, h, -EINVAL, NULL, 0); /* not its target */
	int64_t version = kvc_manager_heartbeat(m, msg.server, synced, msg.synced_count);
	struct kvc_msg_mgmt_routing_reply out = {.version = version > 0 ? (uint64_t)version : 0};
	return kvc_server_reply(conn, h, version < 0 ? (int)version : 0, &out, sizeof(out));
}

static int h_routing(struct kvc_manager *m, struct kvc_server_conn *conn,
                     const struct kvc_wire_header *h)
{
	struct kvc_msg_mgmt_routing msg;
	memcpy(&msg, conn->body, sizeof(msg));
	if (msg.wait_ms > KVC_WIRE_MAX_ROUTING_WAIT_MS || msg.reserved)
		return kvc_server_reply(conn, h, -EINVAL, NULL, 0);
	struct {
		struct kvc_msg_mgmt_routing_reply head;
		struct kvc_wire_chain chains[KVC_WIRE_MAX_TARGETS];
	} *out = malloc(sizeof(*out));
	struct kvc_chains *table = malloc(sizeof(*table));
	int rc = out && table ? kvc_manager_routing(m, msg.known_version, msg.wait_ms, table)
	                      : -ENOMEM;
	uint32_t len = sizeof(out->head);
	if (rc >= 0) {
		out->head = (struct kvc_msg_mgmt_routing_reply){.version = msg.known_version};
		if (rc == 1) {
			out->head.version = table->version;
			out->head.chain_count = table->count;
			kvc_chains_encode(table, out->chains);
			len += table->count * (uint32_t)sizeof(out->chains[0]);
		}
	}
	rc = kvc_server_reply(conn, h, rc < 0 ? rc : 0, out, len);
	free(out);
	free(table);
	return rc;
}

static int h_drain(struct kvc_manager *m, struct kvc_server_conn *conn,
                   const struct kvc_wire_header *h)
{
	struct kvc_msg_mgmt_drain msg;
	memcpy(&msg, conn->body, sizeof(msg));
	int64_t version = msg.drain > 1 ? -EINVAL : kvc_manager_drain(m, msg.target, msg.drain);
	struct kvc_msg_mgmt_routing_reply out = {.version = version > 0 ? (uint64_t)version : 0};
	return kvc_server_reply(conn, h, version < 0 ? (int)version : 0, &out, sizeof(out));
}

struct op {
	uint32_t size;
	bool exact;
	int (*handler)(struct kvc_manager *m, struct kvc_server_conn *conn,
	               const struct kvc_wire_header *h);
};

static const struct op ops[] = {
	[KVC_MSG_MGMT_HEARTBEAT] = {sizeof(struct kvc_msg_mgmt_heartbeat), false, h_heartbeat},
	[KVC_MSG_MGMT_ROUTING] = {sizeof(struct kvc_msg_mgmt_routing), true, h_routing},
	[KVC_MSG_MGMT_DRAIN] = {sizeof(struct kvc_msg_mgmt_drain), true, h_drain},
};

bool kvc_mgmt_service_serves(uint16_t type)
{
	return type < sizeof(ops) / sizeof(ops[0]) && ops[type].handler;
}

int kvc_mgmt_service_handle(void *service, struct kvc_server_conn *conn,
                            const struct kvc_wire_header *h)
{
	const struct op *op = kvc_mgmt_service_serves(h->type) ? &ops[h->type] : NULL;
	int status = !op ? -EOPNOTSUPP
	           : (op->exact ? h->body_len != op->size : h->body_len < op->size) || h->data_len
	                   ? -EINVAL
	                   : 0;
	if (status < 0) {
		int rc = kvc_wire_discard(conn->fd, h->data_len);
		return rc < 0 ? rc : kvc_server_reply(conn, h, status, NULL, 0);
	}
	return op->handler(service, conn, h);
}
