/* Unit tests of cli: options, --help, bad options and where operands
 * start, as every command line sees them. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <string.h>

#include "core/cli.h"

static const struct option longs[] = {{"config", required_argument, 0, 'c'},
                                      {"verbose", no_argument, 0, 'v'},
                                      {0, 0, 0, 0}};
static const struct kvc_cli cli = {"kvc-test sub", "usage: kvc-test sub [--config FILE]\n",
                                   "c:v", longs, 0};

/* Every option of argv in order, as characters; the last call's result. */
static int parse(const struct kvc_cli *c, int argc, char **argv, char *seen)
{
	int opt;
	optind = 0;
	while ((opt = kvc_cli_next(c, argc, argv)) > 0)
		*seen++ = (char)opt;
	*seen = '\0';
	return opt;
}

Test(cli, options_and_operands)
{
	char *argv[] = {"sub", "-v", "x", "--config", "f.conf", "y", NULL};
	char seen[8];
	cr_assert_eq(parse(&cli, 6, argv, seen), KVC_CLI_END);
	cr_assert_str_eq(seen, "vc");
	cr_assert_eq(optind, 4); /* operands permuted to the end */
	cr_assert_str_eq(argv[optind], "x");
	cr_assert_str_eq(argv[optind + 1], "y");
}

Test(cli, help_prints_usage_to_stdout, .init = cr_redirect_stdout)
{
	char *argv[] = {"sub", "--help", NULL};
	char seen[8];
	int next = parse(&cli, 2, argv, seen);
	cr_assert_eq(next, KVC_CLI_HELP);
	cr_assert_eq(kvc_cli_status(next), 0);
	fflush(stdout);
	cr_assert_stdout_eq_str("usage: kvc-test sub [--config FILE]\n");
}

Test(cli, unknown_long_option, .init = cr_redirect_stderr)
{
	char *argv[] = {"sub", "--bogus", NULL};
	char seen[8];
	int next = parse(&cli, 2, argv, seen);
	cr_assert_eq(next, KVC_CLI_BAD);
	cr_assert_eq(kvc_cli_status(next), 2);
	fflush(stderr);
	cr_assert_stderr_eq_str("kvc-test sub: unknown option '--bogus'\n"
	                        "Try 'kvc-test sub --help' for more information.\n");
}

Test(cli, unknown_short_option, .init = cr_redirect_stderr)
{
	char *argv[] = {"sub", "-x", NULL};
	char seen[8];
	cr_assert_eq(parse(&cli, 2, argv, seen), KVC_CLI_BAD);
	fflush(stderr);
	cr_assert_stderr_eq_str("kvc-test sub: unknown option '-x'\n"
	                        "Try 'kvc-test sub --help' for more information.\n");
}

Test(cli, missing_argument, .init = cr_redirect_stderr)
{
	char *argv[] = {"sub", "--config", NULL};
	char seen[8];
	cr_assert_eq(parse(&cli, 2, argv, seen), KVC_CLI_BAD);
	fflush(stderr);
	cr_assert_stderr_eq_str("kvc-test sub: option '--config' needs an argument\n"
	                        "Try 'kvc-test sub --help' for more information.\n");
}

Test(cli, stop_at_operand_leaves_the_command_its_options)
{
	struct kvc_cli top = cli;
	top.stop_at_operand = 1;
	char *argv[] = {"kvc-test", "-v", "sub", "--bogus", NULL};
	char seen[8];
	cr_assert_eq(parse(&top, 4, argv, seen), KVC_CLI_END);
	cr_assert_str_eq(seen, "v");
	cr_assert_str_eq(argv[optind], "sub");
}

Test(cli, fail_returns_the_status_of_a_wrong_use, .init = cr_redirect_stderr)
{
	cr_assert_eq(kvc_cli_fail(&cli, "needs %d operands", 2), 2);
	fflush(stderr);
	cr_assert_stderr_eq_str("kvc-test sub: needs 2 operands\n"
	                        "Try 'kvc-test sub --help' for more information.\n");
}
