/* hosts: the manager's hosts, admitted and pending (manager.h "Hosts"):
 * MGMT_REGISTER's, MGMT_ADD_HOST's and MGMT_HOSTS's work. Everything here
 * runs under the manager's lock; the monitor (manager.c) stores an
 * admission in etcd on its next pass. */
#include <errno.h>
#include <string.h>

#include "core/clock.h"
#include "mgmt/manager.h"

static int admitted_index(const struct kvc_manager *m, const char *name)
{
	for (uint32_t s = 0; s < m->host_count; s++)
		if (strcmp(m->hosts[s].name, name) == 0)
			return (int)s;
	return -1;
}

static int pending_index(const struct kvc_manager *m, const char *name)
{
	for (uint32_t i = 0; i < m->pending_count; i++)
		if (strcmp(m->pending[i].name, name) == 0)
			return (int)i;
	return -1;
}

int kvc_manager_register(struct kvc_manager *m, const char *name, const char *address,
                         uint32_t target_count, bool join,
                         struct kvc_msg_mgmt_register_reply *out)
{
	if (!name[0] || !address[0] || target_count == 0 || target_count > KVC_WIRE_MAX_TARGETS)
		return -EINVAL;
	int rc;
	pthread_mutex_lock(&m->lock);
	int s = admitted_index(m, name);
	if (!m->leader) {
		rc = -EAGAIN;
	} else if (s >= 0) {
		const struct kvc_chains_server *h = &m->hosts[s];
		if (strcmp(h->address, address) != 0 || h->target_count != target_count) {
			rc = -EEXIST;
		} else if ((uint32_t)s >= m->table.server_count) {
			rc = 0; /* admitted, not stored yet: pending a little longer */
		} else {
			*out = (struct kvc_msg_mgmt_register_reply){1, (uint32_t)s, h->first_target,
			                                            h->target_count};
			rc = 1;
		}
	} else if (!join) {
		rc = -ENOENT; /* a restart of a host never admitted: not listed */
	} else {
		int i = pending_index(m, name);
		if (i < 0 && m->pending_count < KVC_MGMT_MAX_PENDING)
			i = (int)m->pending_count++;
		rc = i < 0 ? -ENOSPC : 0;
		if (i >= 0) {
			struct kvc_mgmt_pending *p = &m->pending[i];
			memset(p, 0, sizeof(*p));
			strcpy(p->name, name);
			strcpy(p->address, address);
			p->target_count = target_count;
			p->seen_ns = (int64_t)kvc_clock_monotonic_ns();
		}
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

int kvc_manager_add_host(struct kvc_manager *m, const char *name,
                         struct kvc_msg_mgmt_register_reply *out)
{
	int rc = 0;
	pthread_mutex_lock(&m->lock);
	int i = pending_index(m, name);
	uint32_t first = m->host_count ? m->hosts[m->host_count - 1].first_target +
	                                     m->hosts[m->host_count - 1].target_count
	                               : 0;
	if (!m->leader)
		rc = -EAGAIN;
	else if (admitted_index(m, name) >= 0)
		rc = -EEXIST;
	else if (i < 0)
		rc = -ENOENT;
	else if (m->host_count == KVC_WIRE_MAX_SERVERS ||
	         m->pending[i].target_count > KVC_WIRE_MAX_TARGETS - first)
		rc = -ENOSPC;
	if (rc == 0) {
		const struct kvc_mgmt_pending *p = &m->pending[i];
		struct kvc_chains_server *h = &m->hosts[m->host_count];
		memset(h, 0, sizeof(*h));
		strcpy(h->name, p->name);
		strcpy(h->address, p->address);
		h->first_target = first;
		h->target_count = p->target_count;
		*out = (struct kvc_msg_mgmt_register_reply){1, m->host_count, first, h->target_count};
		m->host_count++;
		m->pending[i] = m->pending[--m->pending_count];
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

int kvc_manager_hosts(struct kvc_manager *m, struct kvc_wire_host *out, uint32_t max,
                      uint64_t *spare)
{
	int rc = 0;
	pthread_mutex_lock(&m->lock);
	int64_t now = (int64_t)kvc_clock_monotonic_ns();
	if (!m->leader)
		rc = -EAGAIN;
	for (uint32_t s = 0; rc >= 0 && s < m->host_count && (uint32_t)rc < max; s++) {
		const struct kvc_chains_server *h = &m->hosts[s];
		struct kvc_wire_host *w = &out[rc++];
		*w = (struct kvc_wire_host){.admitted = 1, .server = s,
		                            .first_target = h->first_target,
		                            .target_count = h->target_count,
		                            .heartbeat_age_ms = m->heard[s]
		                                                ? (now - m->last_heartbeat_ns[s]) / 1000000
		                                                : -1};
		memcpy(w->name, h->name, sizeof(w->name));
		memcpy(w->address, h->address, sizeof(w->address));
	}
	for (uint32_t i = 0; rc >= 0 && i < m->pending_count && (uint32_t)rc < max; i++) {
		const struct kvc_mgmt_pending *p = &m->pending[i];
		struct kvc_wire_host *w = &out[rc++];
		*w = (struct kvc_wire_host){.server = UINT32_MAX, .first_target = UINT32_MAX,
		                            .target_count = p->target_count,
		                            .heartbeat_age_ms = (now - p->seen_ns) / 1000000};
		memcpy(w->name, p->name, sizeof(w->name));
		memcpy(w->address, p->address, sizeof(w->address));
	}
	if (rc >= 0)
		*spare = kvc_chains_spare(&m->home);
	pthread_mutex_unlock(&m->lock);
	return rc;
}
