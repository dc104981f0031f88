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
