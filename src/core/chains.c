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
	if (replicas > config->server_count || replicas > KVC_WIRE_MAX_REPLICAS ||
	    config->target_count % replicas)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	out->version = 1;
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

int kvc_chains_decode(const struct kvc_wire_chain *in, uint32_t count, uint64_t version,
                      uint32_t target_count, struct kvc_chains *out)
{
	if (count > KVC_WIRE_MAX_TARGETS)
		return -EBADMSG;
	struct kvc_chains t = {.version = version, .count = count};
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
