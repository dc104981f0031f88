/* chains: see chains.h. */
#include "core/chains.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "core/config.h"

int kvc_chains_build(const struct kvc_config *config, struct kvc_chains *out)
{
	uint32_t replicas = config->replicas ? config->replicas : 1;
	uint32_t left[KVC_CONFIG_MAX_SERVERS], next[KVC_CONFIG_MAX_SERVERS];
	memset(out, 0, sizeof(*out));
	if (config->server_count == 0) /* a client of the managers: theirs (any version) */
		return 0;
	out->version = 1;
	if (replicas > config->server_count || replicas > KVC_WIRE_MAX_REPLICAS ||
	    config->target_count % replicas)
		return -EINVAL;
	out->server_count = config->server_count;
	out->target_count = config->target_count;
	for (uint32_t s = 0; s < config->server_count; s++) {
		struct kvc_chains_server *to = &out->servers[s];
		strcpy(to->name, config->servers[s].name);
		strcpy(to->address, config->servers[s].address);
		to->first_target = config->servers[s].first_target;
		to->target_count = config->servers[s].target_count;
	}
	out->count = config->target_count / replicas;
	if (replicas == 1) { /* chain i is target i */
		for (uint32_t c = 0; c < out->count; c++)
			out->chains[c] = (struct kvc_chain){.version = 1, .count = 1, .targets = {c}};
		return 0;
	}
	for (uint32_t s = 0; s < config->server_count; s++) {
		left[s] = config->servers[s].target_count;
		next[s] = config->servers[s].first_target;
	}
	/* Each chain takes a target from each of the `replicas` servers with
	 * the most targets left (ties: from server c on, so heads rotate): a
	 * server never has more left than chains to fill while one is
	 * possible at all (config.c checks it is). */
	for (uint32_t c = 0; c < out->count; c++) {
		struct kvc_chain *chain = &out->chains[c];
		bool used[KVC_CONFIG_MAX_SERVERS] = {false};
		chain->version = 1;
		for (uint32_t m = 0; m < replicas; m++) {
			int best = -1;
			for (uint32_t k = 0; k < config->server_count; k++) {
				uint32_t s = (c + k) % config->server_count;
				if (!used[s] && left[s] > 0 && (best < 0 || left[s] > left[best]))
					best = (int)s;
			}
			if (best < 0)
				return -EINVAL; /* one server holds too many of the targets */
			used[best] = true;
			left[best]--;
			chain->targets[chain->count++] = next[best]++;
		}
	}
	return 0;
}

int kvc_chains_server_of(const struct kvc_chains *table, uint32_t target)
{
	for (uint32_t s = 0; s < table->server_count; s++) {
		const struct kvc_chains_server *sv = &table->servers[s];
		if (target >= sv->first_target && target - sv->first_target < sv->target_count)
			return (int)s;
	}
	return -1;
}

uint64_t kvc_chains_spare(const struct kvc_chains *table)
{
	uint64_t spare = 0;
	for (uint32_t t = 0; t < table->target_count && t < 64; t++)
		if (kvc_chains_of_target(table, t) < 0)
			spare |= 1ull << t;
	return spare;
}

uint32_t kvc_chains_grow(struct kvc_chains *home, struct kvc_chains *table, uint32_t replicas,
                         const bool *eligible)
{
	uint32_t left[KVC_WIRE_MAX_SERVERS] = {0}, made = 0;
	uint32_t pick[KVC_WIRE_MAX_SERVERS][KVC_WIRE_MAX_TARGETS];
	if (replicas == 0 || replicas > KVC_WIRE_MAX_REPLICAS || home->count != table->count)
		return 0;
	for (uint32_t s = 0; s < home->server_count; s++) {
		const struct kvc_chains_server *sv = &home->servers[s];
		for (uint32_t i = 0; i < sv->target_count && (!eligible || eligible[s]); i++)
			if (kvc_chains_of_target(home, sv->first_target + i) < 0)
				pick[s][left[s]++] = sv->first_target + i;
	}
	uint32_t next[KVC_WIRE_MAX_SERVERS] = {0};
	while (home->count < KVC_WIRE_MAX_TARGETS) {
		struct kvc_chain chain = {.version = 1};
		bool used[KVC_WIRE_MAX_SERVERS] = {false};
		for (uint32_t m = 0; m < replicas; m++) {
			int best = -1;
			for (uint32_t s = 0; s < home->server_count; s++)
				if (!used[s] && left[s] > next[s] &&
				    (best < 0 || left[s] - next[s] > left[best] - next[best]))
					best = (int)s;
			if (best < 0)
				break;
			used[best] = true;
			chain.targets[chain.count++] = pick[best][next[best]];
		}
		if (chain.count < replicas)
			break;
		for (uint32_t s = 0; s < home->server_count; s++)
			next[s] += used[s];
		home->chains[home->count++] = chain;
		table->chains[table->count++] = chain;
		made++;
	}
	return made;
}

int kvc_chains_position(const struct kvc_chain *chain, uint32_t target)
{
	for (uint32_t i = 0; i < chain->count; i++)
		if (chain->targets[i] == target)
			return (int)i;
	return -1;
}

int kvc_chains_of_target(const struct kvc_chains *table, uint32_t target)
{
	for (uint32_t c = 0; c < table->count; c++)
		if (kvc_chains_position(&table->chains[c], target) >= 0)
			return (int)c;
	return -1;
}

void kvc_chains_encode(const struct kvc_chains *table, struct kvc_wire_chain *out)
{
	for (uint32_t c = 0; c < table->count; c++) {
		const struct kvc_chain *ch = &table->chains[c];
		out[c] = (struct kvc_wire_chain){.version = ch->version, .count = ch->count,
		                                 .syncing = ch->syncing};
		memcpy(out[c].targets, ch->targets, sizeof(out[c].targets));
	}
}

void kvc_chains_encode_servers(const struct kvc_chains *table, struct kvc_wire_server *out)
{
	for (uint32_t s = 0; s < table->server_count; s++) {
		const struct kvc_chains_server *sv = &table->servers[s];
		memset(&out[s], 0, sizeof(out[s]));
		memcpy(out[s].name, sv->name, sizeof(out[s].name));
		memcpy(out[s].address, sv->address, sizeof(out[s].address));
		out[s].first_target = sv->first_target;
		out[s].target_count = sv->target_count;
	}
}

/* "host:port" with a port in 1..65535 and no space. */
static bool address_ok(const char *a)
{
	const char *colon = strrchr(a, ':');
	if (!colon || colon == a || colon[1] == '\0' || strchr(a, ' '))
		return false;
	uint32_t port = 0;
	for (const char *p = colon + 1; *p; p++) {
		if (*p < '0' || *p > '9' || port > 65535)
			return false;
		port = port * 10 + (uint32_t)(*p - '0');
	}
	return port >= 1 && port <= 65535;
}

static int decode_servers(const struct kvc_wire_server *in, uint32_t count,
                          struct kvc_chains *t)
{
	if (count > KVC_WIRE_MAX_SERVERS)
		return -EBADMSG;
	uint32_t next = 0;
	for (uint32_t s = 0; s < count; s++) {
		const struct kvc_wire_server *w = &in[s];
		if (!memchr(w->name, 0, sizeof(w->name)) || !w->name[0] ||
		    !memchr(w->address, 0, sizeof(w->address)) || !address_ok(w->address) ||
		    w->first_target != next || w->target_count == 0 ||
		    w->target_count > KVC_WIRE_MAX_TARGETS - next)
			return -EBADMSG;
		for (uint32_t k = 0; k < s; k++)
			if (strcmp(in[k].name, w->name) == 0)
				return -EBADMSG;
		struct kvc_chains_server *sv = &t->servers[s];
		memcpy(sv->name, w->name, sizeof(sv->name));
		memcpy(sv->address, w->address, sizeof(sv->address));
		sv->first_target = w->first_target;
		sv->target_count = w->target_count;
		next += w->target_count;
	}
	t->server_count = count;
	t->target_count = next;
	return 0;
}

int kvc_chains_decode(const struct kvc_wire_chain *in, uint32_t count, uint64_t version,
                      const struct kvc_wire_server *servers, uint32_t server_count,
                      struct kvc_chains *out)
{
	static const struct kvc_chains empty;
	if (count > KVC_WIRE_MAX_TARGETS)
		return -EBADMSG;
	struct kvc_chains t = empty;
	t.version = version;
	t.count = count;
	if (decode_servers(servers, server_count, &t) < 0)
		return -EBADMSG;
	uint32_t target_count = t.target_count;
	for (uint32_t c = 0; c < count; c++) {
		const struct kvc_wire_chain *w = &in[c];
		if (w->count > KVC_WIRE_MAX_REPLICAS || w->reserved || (w->syncing >> w->count) ||
		    (w->count && w->syncing == (1u << w->count) - 1))
			return -EBADMSG;
		for (uint32_t m = 0; m < w->count; m++) {
			if (w->targets[m] >= target_count)
				return -EBADMSG;
			for (uint32_t k = 0; k < m; k++)
				if (w->targets[k] == w->targets[m])
					return -EBADMSG;
		}
		t.chains[c] = (struct kvc_chain){.version = w->version, .count = w->count,
		                                 .syncing = w->syncing};
		memcpy(t.chains[c].targets, w->targets, sizeof(w->targets));
	}
	*out = t;
	return 0;
}
