/*
 * cli: what every kvcfs command line does with its options, so that all
 * commands behave alike: --help (-h) prints the usage to stdout and the
 * command exits 0; an unknown option, a missing option argument or a
 * wrong operand prints what is wrong and a hint to --help on stderr and
 * the command exits 2. The module keeps no state of its own; it runs
 * getopt_long, whose state (optind) is the process's.
 */
#ifndef KVC_CLI_H
#define KVC_CLI_H

#include <getopt.h>

/* What kvc_cli_next returns besides an option's character. */
enum {
	KVC_CLI_END = -1,  /* no more options: operands start at optind */
	KVC_CLI_HELP = -2, /* --help: usage printed; exit 0 */
	KVC_CLI_BAD = -3,  /* bad option: reported; exit 2 */
};

struct kvc_cli {
	const char *name;          /* as the user typed it: "kvc-bench meta" */
	const char *usage;         /* the whole --help text, "usage: NAME ..." first */
	const char *short_options; /* getopt's, without 'h' */
	const struct option *long_options; /* getopt_long's, without "help" */
	int stop_at_operand;       /* options end at the first operand (a
	                            * command word follows) */
};

/* The next option of argv[optind..] (set optind = 0 to start over on a
 * new argv). Returns the option's character (optarg set as getopt does),
 * KVC_CLI_END, KVC_CLI_HELP (after printing cli->usage to stdout) or
 * KVC_CLI_BAD (after reporting the option on stderr). */
int kvc_cli_next(const struct kvc_cli *cli, int argc, char **argv);

/* The exit status for KVC_CLI_HELP (0) or KVC_CLI_BAD (2). */
int kvc_cli_status(int next);

/* Report a wrong use on stderr ("NAME: <message>" and the hint to
 * --help). Returns 2, the exit status of a wrong use. */
int kvc_cli_fail(const struct kvc_cli *cli, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
