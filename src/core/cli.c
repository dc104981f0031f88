/* cli: see cli.h. */
#include "core/cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Short and long options of cli plus -h/--help, in the caller's buffers. */
static int with_help(const struct kvc_cli *cli, char *shorts, size_t shorts_size,
                     struct option *longs, size_t longs_size)
{
	size_t n = 0;
	int len = snprintf(shorts, shorts_size, "%s:h%s", cli->stop_at_operand ? "+" : "",
	                   cli->short_options ? cli->short_options : "");
	if (len < 0 || (size_t)len >= shorts_size)
		return -1;
	for (const struct option *o = cli->long_options; o && o->name; o++) {
		if (n + 2 >= longs_size)
			return -1;
		longs[n++] = *o;
	}
	longs[n++] = (struct option){"help", no_argument, 0, 'h'};
	longs[n] = (struct option){0, 0, 0, 0};
	return 0;
}

int kvc_cli_fail(const struct kvc_cli *cli, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", cli->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s --help' for more information.\n", cli->name);
	return 2;
}

int kvc_cli_next(const struct kvc_cli *cli, int argc, char **argv)
{
	char shorts[128];
	struct option longs[64];
	if (with_help(cli, shorts, sizeof(shorts), longs, sizeof(longs) / sizeof(longs[0])) < 0) {
		kvc_cli_fail(cli, "too many options for the parser");
		return KVC_CLI_BAD;
	}
	opterr = 0; /* the messages are ours (getopt's name argv[0], not the command) */
	int opt = getopt_long(argc, argv, shorts, longs, NULL);
	if (opt == 'h') {
		fputs(cli->usage, stdout);
		return KVC_CLI_HELP;
	}
	if (opt == ':' || opt == '?') {
		const char *arg = argv[optind - 1];
		if (opt == ':')
			kvc_cli_fail(cli, "option '%s' needs an argument", arg);
		else if (optopt && strncmp(arg, "--", 2) != 0)
			kvc_cli_fail(cli, "unknown option '-%c'", optopt);
		else
			kvc_cli_fail(cli, "unknown option '%s'", arg);
		return KVC_CLI_BAD;
	}
	return opt;
}

int kvc_cli_status(int next)
{
	return next == KVC_CLI_HELP ? 0 : 2;
}
