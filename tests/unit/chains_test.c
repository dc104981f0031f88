/* Unit tests of the chain table a cluster file gives (core/chains.h):
 * one chain per target headed by it, members on distinct servers, the
 * positions balanced, replicas = 1 the identity, and clear refusals. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/chains.h"
#include "core/config.h"

static struct kvc_config config;
static struct kvc_chains chains;
static char err[512];

/* servers x targets_each, `replicas` per chain. */
static int parse(int servers, int targets_each, int replicas)
{
	char text[8192];
	int n = snprintf(text, sizeof(text), "replicas = %d\n[meta]\naddress = 127.0.0.1:9000\n",
	                 replicas);
	for (int s = 0; s < servers; s++) {
		n += snprintf(text + n, sizeof(text) - (size_t)n,
		              "[storage s%d]\naddress = 127.0.0.1:%d\n", s, 9001 + s);
		for (int t = 0; t < targets_each; t++)
			n += snprintf(text + n, sizeof(text) - (size_t)n, "target = /t/%d/%d\n", s, t);
	}
	return kvc_config_parse(text, "t", &config, err, sizeof(err));
}

Test(chains, one_replica_is_the_target_table)
{
	cr_assert_eq(parse(3, 2, 1), 0, "%s", err);
	cr_assert_eq(config.replicas, 1);
	cr_assert_eq(kvc_chains_build(&config, &chains), 0);
	cr_assert_eq(chains.count, 6);
	for (uint32_t c = 0; c < chains.count; c++) {
		cr_assert_eq(chains.chains[c].count, 1);
		cr_assert_eq(chains.chains[c].targets[0], c);
		cr_assert_eq(chains.chains[c].version, 1);
	}
}

Test(chains, members_on_distinct_servers_and_balanced)
{
	cr_assert_eq(parse(5, 2, 3), 0, "%s", err);
	cr_assert_eq(kvc_chains_build(&config, &chains), 0);
	cr_assert_eq(chains.count, 10);
	int at[10][3] = {{0}};
	for (uint32_t c = 0; c < chains.count; c++) {
		const struct kvc_chain *ch = &chains.chains[c];
		cr_assert_eq(ch->count, 3);
		cr_assert_eq(ch->targets[0], c, "chain %u starts at its own target", c);
		for (uint32_t i = 0; i < 3; i++) {
			for (uint32_t j = 0; j < i; j++)
				cr_assert_neq(config.targets[ch->targets[i]].server,
				              config.targets[ch->targets[j]].server);
			at[ch->targets[i]][i]++;
			cr_assert_eq(kvc_chains_position(ch, ch->targets[i]), (int)i);
		}
	}
	for (int t = 0; t < 10; t++)
		for (int i = 0; i < 3; i++)
			cr_assert_eq(at[t][i], 1, "target %d at position %d: %d chains", t, i, at[t][i]);
}

Test(chains, uneven_servers_still_distinct)
{
	/* five servers, replicas 4: each chain's members distinct */
	cr_assert_eq(parse(5, 1, 4), 0, "%s", err);
	cr_assert_eq(kvc_chains_build(&config, &chains), 0);
	for (uint32_t c = 0; c < chains.count; c++) {
		cr_assert_eq(chains.chains[c].count, 4);
		cr_assert_eq(kvc_chains_position(&chains.chains[c], 99), -1);
	}
}

Test(chains, more_replicas_than_servers_is_refused)
{
	cr_assert_eq(parse(2, 3, 3), -EINVAL);
	cr_assert(strstr(err, "replicas = 3 needs as many storage servers"), "%s", err);
	cr_assert_eq(parse(2, 1, 9), -EINVAL); /* past the protocol's limit */
	cr_assert(strstr(err, "replicas"), "%s", err);
}
