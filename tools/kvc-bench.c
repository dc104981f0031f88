/*
 * kvc-bench: benchmarks of a running kvcfs cluster. Each prints a table,
 * writes JSON with --json FILE, and measures its baseline in the same run.
 *
 *   kvc-bench fs   [options]   the FUSE path against the TCP ceiling
 *   kvc-bench ring [options]   USRBIO rings against FUSE and TCP
 *   kvc-bench meta [options]   page pools over HTTP and the binary protocol
 *   kvc-bench gpu  [options]   KV pages into GPU memory by each path
 *   kvc-bench keys [options]   one file per key, against a local directory
 *   kvc-bench multihost [opts] scale-out over network namespaces (needs root)
 *
 * `kvc-bench COMMAND --help` lists a command's options.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "bench/fs.h"
#include "bench/gpu.h"
#include "bench/keys.h"
#include "bench/meta.h"
#include "bench/multihost.h"
#include "bench/ring.h"
#include "core/cli.h"

static const struct command {
	const char *name;
	int (*main)(int argc, char **argv);
} commands[] = {
	{"fs", bench_fs_main},
	{"ring", bench_ring_main},
	{"meta", bench_meta_main},
	{"gpu", bench_gpu_main},
	{"keys", bench_keys_main},
	{"multihost", bench_multihost_main},
};

static const char usage[] =
	"usage: kvc-bench COMMAND [options]\n"
	"Benchmarks of a running kvcfs cluster; each prints a table (JSON with\n"
	"--json FILE) and measures its baseline in the same run.\n"
	"  fs      the FUSE path against the raw loopback TCP ceiling\n"
	"  ring    USRBIO rings against FUSE and TCP\n"
	"  meta    page pools over HTTP and the binary protocol\n"
	"  gpu     KV pages into GPU memory by each path\n"
	"  keys    one file per key through the mount, against a local directory\n"
	"  multihost  1..5 storage hosts in network namespaces, links shaped by tc:\n"
	"          read scaling and replicas 3 against 1 writes (needs root; starts\n"
	"          its own clusters)\n"
	"'kvc-bench COMMAND --help' lists a command's options.\n";

int main(int argc, char **argv)
{
	static const struct kvc_cli cli = {"kvc-bench", usage, "", NULL, 1};
	int opt = kvc_cli_next(&cli, argc, argv);
	if (opt != KVC_CLI_END)
		return kvc_cli_status(opt);
	if (optind >= argc)
		return kvc_cli_fail(&cli, "a COMMAND is required (fs, ring, meta, gpu, keys or multihost)");
	const char *name = argv[optind];
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		if (strcmp(name, commands[i].name) != 0)
			continue;
		signal(SIGPIPE, SIG_IGN);
		int first = optind;
		optind = 0; /* the command parses its own options from scratch */
		return commands[i].main(argc - first, argv + first);
	}
	return kvc_cli_fail(&cli, "unknown command '%s'", name);
}
