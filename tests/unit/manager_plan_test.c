/* Unit tests of the cluster manager's table changes (kvc_manager_plan,
 * src/mgmt/manager.h): silent servers' targets leave their chains (never
 * the last member serving reads), returning ones rejoin at the tail
 * catching up, and a caught-up report at the chain's version makes them
 * serve again; every change raises the chain's and the table's versions. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "core/chains.h"
#include "core/config.h"
#include "mgmt/manager.h"

static struct kvc_config config;
static struct kvc_chains home, table;
static bool silent[KVC_CONFIG_MAX_SERVERS];
static char err[512];

/* Three servers of one target each, replicas 3: one chain [0, 1, 2]. */
static void setup(void)
{
	const char *text = "replicas = 3\n[meta]\naddress = h:1\n"
	                   "[storage a]\naddress = h:2\ntarget = /a\n"
	                   "[storage b]\naddress = h:3\ntarget = /b\n"
	                   "[storage c]\naddress = h:4\ntarget = /c\n";
	cr_assert_eq(kvc_config_parse(text, "t", &config, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(kvc_chains_build(&config, &home), 0);
	table = home;
	memset(silent, 0, sizeof(silent));
}

TestSuite(manager_plan, .init = setup);

Test(manager_plan, nothing_silent_changes_nothing)
{
	cr_assert_not(kvc_manager_plan(&home, silent, 0, NULL, 0, &table));
	cr_assert_eq(table.version, 1);
	cr_assert_eq(table.chains[0].version, 1);
}

Test(manager_plan, a_silent_member_leaves_and_returns_at_the_tail)
{
	uint32_t victim = table.chains[0].targets[1]; /* the middle */
	silent[config.targets[victim].server] = true;
	cr_assert(kvc_manager_plan(&home, silent, 0, NULL, 0, &table));
	cr_assert_eq(table.version, 2);
	cr_assert_eq(table.chains[0].version, 2);
	cr_assert_eq(table.chains[0].count, 2);
	cr_assert_eq(kvc_chains_position(&table.chains[0], victim), -1);
	/* silent still: no further change */
	cr_assert_not(kvc_manager_plan(&home, silent, 0, NULL, 0, &table));
	/* back: at the tail, catching up */
	silent[config.targets[victim].server] = false;
	cr_assert(kvc_manager_plan(&home, silent, 0, NULL, 0, &table));
	cr_assert_eq(table.chains[0].count, 3);
	cr_assert_eq(table.chains[0].targets[2], victim);
	cr_assert_eq(table.chains[0].syncing, 1u << 2);
	cr_assert_eq(table.chains[0].version, 3);
	/* a report at an old version changes nothing */
	struct kvc_msg_mgmt_synced stale = {victim, 2};
	cr_assert_not(kvc_manager_plan(&home, silent, 0, &stale, 1, &table));
	struct kvc_msg_mgmt_synced done = {victim, 3};
	cr_assert(kvc_manager_plan(&home, silent, 0, &done, 1, &table));
	cr_assert_eq(table.chains[0].syncing, 0);
	cr_assert_eq(table.chains[0].version, 4);
	cr_assert_eq(table.version, 4);
}

Test(manager_plan, the_last_member_serving_stays)
{
	for (uint32_t s = 0; s < 3; s++)
		silent[s] = true;
	cr_assert(kvc_manager_plan(&home, silent, 0, NULL, 0, &table));
	cr_assert_eq(table.chains[0].count, 1, "one member kept");
	cr_assert_eq(table.chains[0].syncing, 0);
	/* a catching-up member is no reader: it goes, the serving one stays */
	uint32_t kept = table.chains[0].targets[0];
	for (uint32_t s = 0; s < 3; s++)
		silent[s] = s == config.targets[kept].server;
	cr_assert(kvc_manager_plan(&home, silent, 0, NULL, 0, &table));
	cr_assert_eq(table.chains[0].count, 3);
	cr_assert_eq(table.chains[0].targets[0], kept);
	cr_assert_eq(table.chains[0].syncing, 6u, "the two back catch up");
	/* now the serving one's server stays silent and the others are back:
	 * it cannot leave, they cannot serve before they caught up */
	cr_assert_not(kvc_manager_plan(&home, silent, 0, NULL, 0, &table));
}
