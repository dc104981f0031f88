/* Unit tests of the cluster file parser: defaults, targets, and clear
 * errors with line numbers for every kind of mistake. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/config.h"

static struct kvc_config config;
static char err[512];

static const char *good =
	"# a cluster\n"
	"secret_file = /etc/kvc/secret\n"
	"pool_secret_file = /etc/kvc/pool.secret\n"
	"chunk_size = 0x100000\n"
	"[meta]\n"
	"address = 127.0.0.1:9000\n"
	"data = /tmp/meta\n"
	"http_token_file = /etc/kvc/http.token\n"
	"http_destructive = none\n"
	"[storage a]\n"
	"address = 127.0.0.1:9001\n"
	"target = /tmp/a0\n"
	"target = /tmp/a1  # two targets\n"
	"[storage b]\n"
	"address = 127.0.0.1:9002\n"
	"target = /tmp/b0\n"
	"[fuse]\n"
	"mountpoint = /mnt/x\n";

Test(config, parses_a_good_file)
{
	cr_assert_eq(kvc_config_parse(good, "t", &config, err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(config.secret_file, "/etc/kvc/secret");
	cr_assert_str_eq(config.pool_secret_file, "/etc/kvc/pool.secret");
	cr_assert_str_eq(config.http_token_file, "/etc/kvc/http.token");
	cr_assert_eq(config.http_destructive, KVC_HTTP_DESTRUCTIVE_NONE);
	cr_assert_eq(config.cred.role, KVC_AUTH_NONE, "no secret is read while parsing");
	cr_assert_eq(config.chunk_size, 1u << 20);
	cr_assert_eq(config.stripe, 3, "stripe defaults to all targets");
	cr_assert_eq(config.server_count, 2);
	cr_assert_eq(config.target_count, 3);
	cr_assert_eq(config.servers[1].first_target, 2);
	cr_assert_eq(config.targets[2].server, 1);
	cr_assert_str_eq(config.targets[1].path, "/tmp/a1");
	cr_assert_str_eq(config.mountpoint, "/mnt/x");
	cr_assert_eq(config.io_timeout_ms, 5000);
	cr_assert_not_null(kvc_config_server_find(&config, "b"));
	cr_assert_null(kvc_config_server_find(&config, "c"));
}

static void expect_error(const char *text, const char *needle)
{
	cr_assert_eq(kvc_config_parse(text, "bad.conf", &config, err, sizeof(err)), -EINVAL);
	cr_assert_not_null(strstr(err, needle), "error '%s' lacks '%s'", err, needle);
}

Test(config, errors_name_the_line)
{
	expect_error("[meta]\naddress = x:1\nbogus = 1\n", "bad.conf:3: unknown key 'bogus'");
	expect_error("chunk_size = 3000000\n", "bad.conf:1: chunk_size must be");
	expect_error("chunk_size = 1000\n", "chunk_size must be an integer");
	expect_error("stripe = many\n", "stripe must be an integer");
	expect_error("[metadata]\n", "unknown section [metadata]");
	expect_error("[meta\n", "must end with ']'");
	expect_error("just words\n", "expected 'key = value'");
	expect_error("token = s3cret\n", "bad.conf:1: 'token' is gone: name a secret file");
	expect_error("[meta]\nhttp_destructive = some\n", "http_destructive must be loopback");
}

Test(config, secrets_are_named_not_read)
{
	cr_assert_eq(kvc_config_parse("[meta]\naddress = h:1\n[storage a]\naddress = h:2\n"
	                              "target = /t\n", "t", &config, err, sizeof(err)), 0);
	cr_assert_eq(config.http_destructive, KVC_HTTP_DESTRUCTIVE_LOOPBACK, "the default");
	cr_assert_str_eq(config.http_token_file, "");
	cr_assert_str_eq(config.secret_file, "");
	char e[256];
	cr_assert_eq(kvc_config_load_secret(&config, KVC_AUTH_CLUSTER, e, sizeof(e)), -ENOENT);
	cr_assert_not_null(strstr(e, "names no secret_file"), "%s", e);
}

Test(config, whole_file_checks)
{
	expect_error("", "[meta] address is missing");
	expect_error("[meta]\naddress = h:1\n", "no [storage NAME] section");
	expect_error("[meta]\naddress = h:1\n[storage a]\ntarget = /t\n", "[storage a] address is missing");
	expect_error("[meta]\naddress = h:1\n[storage a]\naddress = h:2\n", "[storage a] has no target");
	expect_error("stripe = 2\n[meta]\naddress = h:1\n[storage a]\naddress = h:2\ntarget = /t\n",
	             "stripe 2 is larger than the 1 chains");
	expect_error("[meta]\naddress = h:1\n[storage a]\n[storage a]\n", "used twice");
}

Test(config, missing_file)
{
	cr_assert_eq(kvc_config_load("/nonexistent/kvc.conf", &config, err, sizeof(err)), -ENOENT);
	cr_assert_not_null(strstr(err, "cannot read"));
}

Test(config, fuse_gpu_staging)
{
	char text[1024];
	cr_assert_eq(kvc_config_parse(good, "t", &config, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(config.gpu_staging_mb, 128, "default 128 MiB");
	snprintf(text, sizeof(text), "%sgpu_staging_mb = 16\n", good);
	cr_assert_eq(kvc_config_parse(text, "t", &config, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(config.gpu_staging_mb, 16);
	snprintf(text, sizeof(text), "%sgpu_staging_mb = 1\n", good);
	expect_error(text, "gpu_staging_mb must be");
	snprintf(text, sizeof(text), "%sgpu_staging_mb = 5000\n", good);
	expect_error(text, "gpu_staging_mb must be");
}

Test(config, fuse_early_creates)
{
	char text[1024];
	cr_assert_eq(kvc_config_parse(good, "t", &config, err, sizeof(err)), 0, "%s", err);
	cr_assert(config.early_creates, "on by default");
	snprintf(text, sizeof(text), "%searly_creates = off\n", good);
	cr_assert_eq(kvc_config_parse(text, "t", &config, err, sizeof(err)), 0, "%s", err);
	cr_assert(!config.early_creates);
	snprintf(text, sizeof(text), "%searly_creates = yes\n", good);
	expect_error(text, "early_creates must be on or off");
	cr_assert_eq(config.early_open_delay_ms, 5, "a file open here is entered at 5 ms");
	snprintf(text, sizeof(text), "%searly_open_delay_ms = 60000\n", good);
	cr_assert_eq(kvc_config_parse(text, "t", &config, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(config.early_open_delay_ms, 60000);
	snprintf(text, sizeof(text), "%searly_open_delay_ms = -1\n", good);
	expect_error(text, "early_open_delay_ms must be an integer in [0, 600000]");
}

/* local_reads (a top-level key): on by default, off, nothing else. */
Test(config, local_reads)
{
	char text[1024];
	cr_assert_eq(kvc_config_parse(good, "t", &config, err, sizeof(err)), 0, "%s", err);
	cr_assert(config.local_reads, "on by default");
	snprintf(text, sizeof(text), "local_reads = off\n%s", good);
	cr_assert_eq(kvc_config_parse(text, "t", &config, err, sizeof(err)), 0, "%s", err);
	cr_assert(!config.local_reads);
	snprintf(text, sizeof(text), "local_reads = maybe\n%s", good);
	expect_error(text, "local_reads must be on or off");
}

/* metrics = host:port in [storage NAME] and [fuse]; off or absent: none. */
Test(config, metrics_addresses)
{
	char text[2048];
	cr_assert_eq(kvc_config_parse(good, "t", &config, err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(config.servers[0].metrics, "", "off by default");
	cr_assert_str_eq(config.fuse_metrics, "", "off by default");
	snprintf(text, sizeof(text),
	         "[meta]\naddress = 127.0.0.1:9000\n"
	         "[storage a]\naddress = 127.0.0.1:9001\nmetrics = 127.0.0.1:9201\ntarget = /t\n"
	         "[storage b]\naddress = 127.0.0.1:9002\nmetrics = off\ntarget = /u\n"
	         "[fuse]\nmetrics = localhost:9299\n");
	cr_assert_eq(kvc_config_parse(text, "t", &config, err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(config.servers[0].metrics, "127.0.0.1:9201");
	cr_assert_str_eq(config.servers[1].metrics, "");
	cr_assert_str_eq(config.fuse_metrics, "localhost:9299");
	static const char *const bad[] = {"9201", ":9201", "127.0.0.1:", "127.0.0.1:0",
	                                  "127.0.0.1:65536", "127.0.0.1:9x", "a b:1"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(text, sizeof(text), "%smetrics = %s\n", good, bad[i]);
		expect_error(text, "metrics must be host:port");
		snprintf(text, sizeof(text),
		         "[meta]\naddress = 127.0.0.1:9000\n[storage a]\naddress = 127.0.0.1:9001\n"
		         "metrics = %s\ntarget = /t\n", bad[i]);
		expect_error(text, "metrics must be host:port");
	}
	/* Not a key of [meta] (kvc-meta serves /metrics on its http address). */
	snprintf(text, sizeof(text), "[meta]\naddress = 1.2.3.4:1\nmetrics = 127.0.0.1:1\n");
	expect_error(text, "unknown key 'metrics'");
}

Test(config, managers)
{
	static const char *servers = "[meta]\naddress = h:1\n[storage a]\naddress = h:2\ntarget = /t\n";
	char text[1024];
	snprintf(text, sizeof(text),
	         "etcd = http://127.0.0.1:2379,http://10.0.0.2:2379\nheartbeat_ms = 200\n"
	         "failure_timeout_ms = 1500\n%s[mgmt m1]\naddress = h:3\n[mgmt m2]\naddress = h:4\n",
	         servers);
	cr_assert_eq(kvc_config_parse(text, "t", &config, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(config.manager_count, 2);
	cr_assert_str_eq(config.managers[1].name, "m2");
	cr_assert_str_eq(config.managers[1].address, "h:4");
	cr_assert_str_eq(config.etcd, "http://127.0.0.1:2379,http://10.0.0.2:2379");
	cr_assert_eq(config.heartbeat_ms, 200);
	cr_assert_eq(config.failure_timeout_ms, 1500);
	/* with managers (a multi-host cluster): three copies unless told */
	cr_assert_eq(config.replicas, 3);
	cr_assert_eq(config.min_write_replicas, 2);
	snprintf(text, sizeof(text), "replicas = 1\netcd = http://e:1\n%s[mgmt m1]\naddress = h:3\n",
	         servers);
	cr_assert_eq(kvc_config_parse(text, "t", &config, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(config.replicas, 1);
	cr_assert_eq(config.min_write_replicas, 1);
	/* defaults: none, 500 ms, 3 s, one copy */
	cr_assert_eq(kvc_config_parse(servers, "t", &config, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(config.replicas, 1);
	cr_assert_eq(config.manager_count, 0);
	cr_assert_eq(config.heartbeat_ms, 500);
	cr_assert_eq(config.failure_timeout_ms, 3000);
	snprintf(text, sizeof(text), "%s[mgmt m1]\naddress = h:3\n", servers);
	expect_error(text, "need etcd = URL");
	snprintf(text, sizeof(text), "etcd = http://e:1\n%s[mgmt m1]\n", servers);
	expect_error(text, "[mgmt m1] address is missing");
	snprintf(text, sizeof(text), "etcd = http://e:1\n%s[mgmt m1]\naddress = a:1\n[mgmt m1]\n",
	         servers);
	expect_error(text, "used twice");
	snprintf(text, sizeof(text), "%s[mgmt]\n", servers);
	expect_error(text, "unknown section");
	snprintf(text, sizeof(text), "heartbeat_ms = 2000\nfailure_timeout_ms = 3000\n%s", servers);
	expect_error(text, "at least twice heartbeat_ms");
	snprintf(text, sizeof(text), "%s[mgmt m1]\nbogus = 1\n", servers);
	expect_error(text, "unknown key 'bogus'");
}
