/*
 * host_id: this host's identity for same-host placement
 * (src/client/transport.h): sha256 over /etc/machine-id and the kernel's
 * boot id, so two processes agree only when they run on the same host
 * since the same boot. Stateless; computed once per call.
 */
#ifndef KVC_HOST_ID_H
#define KVC_HOST_ID_H

#include <stdint.h>

#include "core/wire.h"

/* Fill id. Returns 0, or -ENOENT when neither file could be read (then
 * the host has no identity and placement is never chosen). */
int kvc_host_id(uint8_t id[KVC_PLACE_HOST_ID]);

#endif
