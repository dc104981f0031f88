/*
 * kvc-mgmt's requests (docs/protocol.md "Cluster manager"), through one
 * dispatch table as every service: MGMT_HEARTBEAT and MGMT_REGISTER from
 * storage servers, MGMT_ROUTING from everyone, MGMT_DRAIN, MGMT_ADD_HOST
 * and MGMT_HOSTS from kvc-admin. A manager that does not lead answers
 * -EAGAIN (the caller asks the next manager).
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
	if (msg.synced_count > KVC_WIRE_MAX_SYNCED ||
	    h->body_len != sizeof(msg) + msg.synced_count * sizeof(struct kvc_msg_mgmt_synced))
		return kvc_server_reply(conn, h, -EINVAL, NULL, 0);
	struct kvc_msg_mgmt_synced synced[KVC_WIRE_MAX_SYNCED];
	memcpy(synced, (const char *)conn->body + sizeof(msg), msg.synced_count * sizeof(synced[0]));
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
		struct kvc_wire_server servers[KVC_WIRE_MAX_SERVERS];
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
			out->head.server_count = table->server_count;
			kvc_chains_encode(table, out->chains);
			len += table->count * (uint32_t)sizeof(out->chains[0]);
			/* the servers right after the chains */
			kvc_chains_encode_servers(table, (struct kvc_wire_server *)(void *)&out->chains[table->count]);
			len += table->server_count * (uint32_t)sizeof(out->servers[0]);
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

/* A NUL-terminated, non-empty string of a fixed field. */
static bool field_ok(const char *field, size_t size)
{
	return field[0] && memchr(field, 0, size);
}

static int h_register(struct kvc_manager *m, struct kvc_server_conn *conn,
                      const struct kvc_wire_header *h)
{
	struct kvc_msg_mgmt_register msg;
	memcpy(&msg, conn->body, sizeof(msg));
	struct kvc_msg_mgmt_register_reply out = {0};
	int rc = !field_ok(msg.name, sizeof(msg.name)) ||
	                 !field_ok(msg.address, sizeof(msg.address)) ||
	                 (msg.flags & ~KVC_MGMT_REGISTER_JOIN)
	         ? -EINVAL
	         : kvc_manager_register(m, msg.name, msg.address, msg.target_count,
	                                msg.flags & KVC_MGMT_REGISTER_JOIN, &out);
	return kvc_server_reply(conn, h, rc < 0 ? rc : 0, &out, sizeof(out));
}

static int h_add_host(struct kvc_manager *m, struct kvc_server_conn *conn,
                      const struct kvc_wire_header *h)
{
	struct kvc_msg_mgmt_add_host msg;
	memcpy(&msg, conn->body, sizeof(msg));
	struct kvc_msg_mgmt_register_reply out = {0};
	int rc = !field_ok(msg.name, sizeof(msg.name)) ? -EINVAL
	                                               : kvc_manager_add_host(m, msg.name, &out);
	return kvc_server_reply(conn, h, rc, &out, sizeof(out));
}

static int h_hosts(struct kvc_manager *m, struct kvc_server_conn *conn,
                   const struct kvc_wire_header *h)
{
	uint32_t max = KVC_WIRE_MAX_SERVERS + KVC_MGMT_MAX_PENDING;
	struct {
		struct kvc_msg_mgmt_hosts_reply head;
		struct kvc_wire_host hosts[KVC_WIRE_MAX_SERVERS + KVC_MGMT_MAX_PENDING];
	} *out = calloc(1, sizeof(*out));
	int rc = out ? kvc_manager_hosts(m, out->hosts, max, &out->head.spare) : -ENOMEM;
	uint32_t len = 0;
	if (rc >= 0) {
		out->head.count = (uint32_t)rc;
		len = sizeof(out->head) + (uint32_t)rc * sizeof(out->hosts[0]);
	}
	rc = kvc_server_reply(conn, h, rc < 0 ? rc : 0, out, len);
	free(out);
	return rc;
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
	[KVC_MSG_MGMT_REGISTER] = {sizeof(struct kvc_msg_mgmt_register), true, h_register},
	[KVC_MSG_MGMT_ADD_HOST] = {sizeof(struct kvc_msg_mgmt_add_host), true, h_add_host},
	[KVC_MSG_MGMT_HOSTS] = {0, true, h_hosts},
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
