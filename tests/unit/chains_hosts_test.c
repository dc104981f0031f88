/* Unit tests of the hosts in the routing table (core/chains.h): chains
 * made of spare targets (kvc_chains_grow: `replicas` members on distinct
 * servers, existing chains untouched, too few servers leave targets
 * spare), and a hostile table from a manager refused by
 * kvc_chains_decode (bad names, addresses, target ranges, members). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/chains.h"

static struct kvc_chains home, table, out;

/* A server of n targets appended to t (ids dense). */
static void add_server(struct kvc_chains *t, const char *name, uint32_t n)
{
	struct kvc_chains_server *s = &t->servers[t->server_count++];
	memset(s, 0, sizeof(*s));
	snprintf(s->name, sizeof(s->name), "%s", name);
	snprintf(s->address, sizeof(s->address), "10.0.0.%u:9101", t->server_count);
	s->first_target = t->target_count;
	s->target_count = n;
	t->target_count += n;
}

static void setup_three_old(void)
{
	memset(&home, 0, sizeof(home));
	home.version = 1;
	for (int s = 0; s < 3; s++)
		add_server(&home, (const char *[]){"s1", "s2", "s3"}[s], 1);
	home.count = 1; /* one chain of 3: targets 0, 1, 2 */
	home.chains[0] = (struct kvc_chain){.version = 4, .count = 3, .targets = {0, 1, 2}};
	table = home;
}

Test(chains_hosts, spare_targets_make_chains_on_distinct_servers)
{
	setup_three_old();
	cr_assert_eq(kvc_chains_grow(&home, &table, 3, NULL), 0, "nothing spare");
	add_server(&home, "s4", 2);
	add_server(&home, "s5", 1);
	add_server(&home, "s6", 1);
	table.server_count = home.server_count;
	table.target_count = home.target_count;
	memcpy(table.servers, home.servers, sizeof(table.servers));
	cr_assert_eq(kvc_chains_spare(&home), 0xfull << 3, "targets 3..6 spare");
	/* Four spare targets on three servers (s4 has two): one chain of 3,
	 * then s4's second target is alone: it stays spare. */
	cr_assert_eq(kvc_chains_grow(&home, &table, 3, NULL), 1);
	cr_assert_eq(home.count, 2);
	cr_assert_eq(table.count, 2);
	const struct kvc_chain *c = &table.chains[1];
	cr_assert_eq(c->count, 3);
	cr_assert_eq(c->version, 1);
	cr_assert_eq(c->syncing, 0, "new chains serve at once: nothing to catch up");
	int servers[3];
	for (int m = 0; m < 3; m++)
		servers[m] = kvc_chains_server_of(&table, c->targets[m]);
	cr_assert(servers[0] != servers[1] && servers[1] != servers[2] &&
	          servers[0] != servers[2]);
	cr_assert_eq(servers[0], 3, "the server with the most spare targets first");
	cr_assert_eq(table.chains[0].version, 4, "the old chain is untouched");
	cr_assert_eq(table.chains[0].targets[2], 2);
	cr_assert_eq(kvc_chains_spare(&table), 1ull << 4, "s4's second target");
	cr_assert_eq(kvc_chains_grow(&home, &table, 3, NULL), 0);
}

Test(chains_hosts, only_eligible_servers_and_replicas_one)
{
	setup_three_old();
	add_server(&home, "s4", 2);
	add_server(&home, "s5", 1);
	table.server_count = home.server_count;
	table.target_count = home.target_count;
	memcpy(table.servers, home.servers, sizeof(table.servers));
	bool eligible[KVC_WIRE_MAX_SERVERS] = {true, true, true, true, false};
	cr_assert_eq(kvc_chains_grow(&home, &table, 1, eligible), 2, "s4's two targets");
	cr_assert_eq(table.chains[1].targets[0], 3);
	cr_assert_eq(table.chains[2].targets[0], 4);
	cr_assert_eq(kvc_chains_spare(&table), 1ull << 5, "s5 not heard yet");
	eligible[4] = true;
	cr_assert_eq(kvc_chains_grow(&home, &table, 1, eligible), 1);
	cr_assert_eq(table.chains[3].targets[0], 5);
	cr_assert_eq(kvc_chains_spare(&table), 0);
}

/* The wire form of table, decoded back. */
static int roundtrip(const struct kvc_chains *t, void (*spoil)(struct kvc_wire_chain *,
                                                               struct kvc_wire_server *))
{
	struct kvc_wire_chain chains[KVC_WIRE_MAX_TARGETS];
	struct kvc_wire_server servers[KVC_WIRE_MAX_SERVERS];
	kvc_chains_encode(t, chains);
	kvc_chains_encode_servers(t, servers);
	if (spoil)
		spoil(chains, servers);
	return kvc_chains_decode(chains, t->count, t->version, servers, t->server_count, &out);
}

static void name_unterminated(struct kvc_wire_chain *c, struct kvc_wire_server *s)
{
	(void)c;
	memset(s[1].name, 'x', sizeof(s[1].name));
}
static void name_empty(struct kvc_wire_chain *c, struct kvc_wire_server *s)
{
	(void)c;
	s[0].name[0] = '\0';
}
static void name_twice(struct kvc_wire_chain *c, struct kvc_wire_server *s)
{
	(void)c;
	strcpy(s[2].name, s[0].name);
}
static void address_no_port(struct kvc_wire_chain *c, struct kvc_wire_server *s)
{
	(void)c;
	strcpy(s[1].address, "10.0.0.2");
}
static void address_bad_port(struct kvc_wire_chain *c, struct kvc_wire_server *s)
{
	(void)c;
	strcpy(s[1].address, "10.0.0.2:99999");
}
static void address_unterminated(struct kvc_wire_chain *c, struct kvc_wire_server *s)
{
	(void)c;
	memset(s[0].address, '1', sizeof(s[0].address));
}
static void targets_gap(struct kvc_wire_chain *c, struct kvc_wire_server *s)
{
	(void)c;
	s[1].first_target = 5;
}
static void targets_overlap(struct kvc_wire_chain *c, struct kvc_wire_server *s)
{
	(void)c;
	s[1].first_target = 0;
}
static void targets_none(struct kvc_wire_chain *c, struct kvc_wire_server *s)
{
	(void)c;
	s[2].target_count = 0;
}
static void targets_too_many(struct kvc_wire_chain *c, struct kvc_wire_server *s)
{
	(void)c;
	s[2].target_count = 0xffffffffu;
}
static void member_past_targets(struct kvc_wire_chain *c, struct kvc_wire_server *s)
{
	(void)s;
	c[0].targets[1] = 3;
}

Test(chains_hosts, a_hostile_table_is_refused)
{
	setup_three_old();
	cr_assert_eq(roundtrip(&table, NULL), 0);
	cr_assert_eq(out.server_count, 3);
	cr_assert_eq(out.target_count, 3);
	cr_assert_str_eq(out.servers[2].name, "s3");
	cr_assert_eq(kvc_chains_server_of(&out, 2), 2);
	cr_assert_eq(kvc_chains_server_of(&out, 3), -1);
	void (*spoils[])(struct kvc_wire_chain *, struct kvc_wire_server *) = {
		name_unterminated, name_empty, name_twice, address_no_port, address_bad_port,
		address_unterminated, targets_gap, targets_overlap, targets_none, targets_too_many,
		member_past_targets};
	for (size_t i = 0; i < sizeof(spoils) / sizeof(spoils[0]); i++) {
		out.version = 77;
		cr_assert_eq(roundtrip(&table, spoils[i]), -EBADMSG, "spoil %zu", i);
		cr_assert_eq(out.version, 77, "out untouched on refusal (spoil %zu)", i);
	}
	struct kvc_wire_chain chains[1];
	struct kvc_wire_server servers[1];
	cr_assert_eq(kvc_chains_decode(chains, 0, 1, servers, KVC_WIRE_MAX_SERVERS + 1, &out),
	             -EBADMSG, "too many servers");
}
