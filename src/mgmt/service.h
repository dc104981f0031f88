/*
 * mgmt service: the request handlers of kvc-mgmt (service.c), over a
 * struct kvc_manager (manager.h). One dispatch table (type, body-size
 * rule, handler): a type without a row is -EOPNOTSUPP, a body that breaks
 * its row's rule -EINVAL, a data section -EINVAL (drained first). No lock
 * of the manager is held while a reply is sent.
 */
#ifndef KVC_MGMT_SERVICE_H
#define KVC_MGMT_SERVICE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/server.h"
#include "mgmt/manager.h"

int kvc_mgmt_service_handle(void *service, struct kvc_server_conn *conn,
                            const struct kvc_wire_header *header);
bool kvc_mgmt_service_serves(uint16_t type);

#endif
