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

Test(chains, each_target_in_one_chain_on_distinct_servers)
{
	cr_assert_eq(parse(5, 3, 3), 0, "%s", err);
	cr_assert_eq(config.stripe, 5, "stripe defaults to every chain");
	cr_assert_eq(kvc_chains_build(&config, &chains), 0);
	cr_assert_eq(chains.count, 5);
	int seen[15] = {0}, heads[5] = {0};
	for (uint32_t c = 0; c < chains.count; c++) {
		const struct kvc_chain *ch = &chains.chains[c];
		cr_assert_eq(ch->count, 3);
		cr_assert_eq(ch->version, 1);
		heads[config.targets[ch->targets[0]].server]++;
		for (uint32_t i = 0; i < 3; i++) {
			seen[ch->targets[i]]++;
			for (uint32_t j = 0; j < i; j++)
				cr_assert_neq(config.targets[ch->targets[i]].server,
				              config.targets[ch->targets[j]].server);
			cr_assert_eq(kvc_chains_position(ch, ch->targets[i]), (int)i);
		}
	}
	for (int t = 0; t < 15; t++)
		cr_assert_eq(seen[t], 1, "target %d is in %d chains", t, seen[t]);
	int servers_heading = 0;
	for (int s = 0; s < 5; s++)
		servers_heading += heads[s] > 0;
	cr_assert_geq(servers_heading, 3, "heads spread over the servers");
}

Test(chains, uneven_servers_still_distinct)
{
	/* servers of 1, 2 and 3 targets, replicas 2: 6 targets, 3 chains */
	char text[] = "replicas = 2\n[meta]\naddress = 127.0.0.1:9000\n"
	              "[storage a]\naddress = 127.0.0.1:9001\ntarget = /a0\n"
	              "[storage b]\naddress = 127.0.0.1:9002\ntarget = /b0\ntarget = /b1\n"
	              "[storage c]\naddress = 127.0.0.1:9003\ntarget = /c0\ntarget = /c1\n"
	              "target = /c2\n";
	cr_assert_eq(kvc_config_parse(text, "t", &config, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(kvc_chains_build(&config, &chains), 0);
	cr_assert_eq(chains.count, 3);
	for (uint32_t c = 0; c < chains.count; c++) {
		const struct kvc_chain *ch = &chains.chains[c];
		cr_assert_neq(config.targets[ch->targets[0]].server,
		              config.targets[ch->targets[1]].server, "chain %u", c);
		cr_assert_eq(kvc_chains_position(ch, 99), -1);
	}
}

Test(chains, more_replicas_than_servers_is_refused)
{
	cr_assert_eq(parse(2, 3, 3), -EINVAL);
	cr_assert(strstr(err, "replicas = 3 needs as many storage servers"), "%s", err);
	cr_assert_eq(parse(4, 1, 3), -EINVAL); /* 4 targets: no whole chains of 3 */
	cr_assert(strstr(err, "do not make chains of 3"), "%s", err);
	cr_assert_eq(parse(2, 1, 9), -EINVAL); /* past the protocol's limit */
	cr_assert(strstr(err, "replicas"), "%s", err);
}
