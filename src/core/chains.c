/* chains: see chains.h. */
#include "core/chains.h"

#include <errno.h>
#include <string.h>

#include "core/config.h"

int kvc_chains_build(const struct kvc_config *config, struct kvc_chains *out)
{
	uint32_t order[KVC_WIRE_MAX_TARGETS], at[KVC_WIRE_MAX_TARGETS], n = 0;
	uint32_t replicas = config->replicas ? config->replicas : 1;
	if (replicas > config->server_count || replicas > KVC_WIRE_MAX_REPLICAS)
		return -EINVAL;
	/* Interleave: the r-th target of every server, for r = 0, 1, ... */
	for (uint32_t r = 0; n < config->target_count; r++)
		for (uint32_t s = 0; s < config->server_count; s++)
			if (r < config->servers[s].target_count) {
				uint32_t t = config->servers[s].first_target + r;
				at[t] = n;
				order[n++] = t;
			}
	memset(out, 0, sizeof(*out));
	out->count = config->target_count;
	for (uint32_t c = 0; c < out->count; c++) {
		struct kvc_chain *chain = &out->chains[c];
		chain->version = 1;
		chain->targets[chain->count++] = c;
		for (uint32_t k = 1; k < n && chain->count < replicas; k++) {
			uint32_t t = order[(at[c] + k) % n];
			uint32_t server = config->targets[t].server;
			bool taken = false;
			for (uint32_t m = 0; m < chain->count; m++)
				taken |= config->targets[chain->targets[m]].server == server;
			if (!taken)
				chain->targets[chain->count++] = t;
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
