/* libFuzzer harness: kvc-meta's HTTP front (routes of vLLM's and SGLang's
 * metadata servers, JSON bodies) on a real pool store, without a socket.
 * Input: "METHOD URL\n" then the body. Every request gets a status and a
 * well-formed answer; nothing crashes or leaks. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "meta/http.h"
#include "meta/pool_store.h"

static struct kvc_http_server *server;
static struct kvc_pool_store *pools;

static void setup(void)
{
	/* Waits run here, inline: cap their timeout at a few ms. */
	struct kvc_http_options options = {.address = "127.0.0.1:0", .max_body = 1 << 16,
	                                   .lease_ms = 1000, .world_size = 2,
	                                   .vllm_namespace = "vllm", .max_wait_ms = 3};
	char path[128];
	snprintf(path, sizeof(path), "%s/pools", fuzz_temp_dir());
	if (kvc_pool_store_open(path, &pools) != 0 || kvc_http_create(&options, pools, &server))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char method[16], url[512];
	if (!server)
		setup();
	const uint8_t *nl = memchr(data, '\n', size < 600 ? size : 600);
	if (!nl)
		return 0;
	size_t head = (size_t)(nl - data);
	const uint8_t *space = memchr(data, ' ', head);
	if (!space || (size_t)(space - data) >= sizeof(method) ||
	    head - (size_t)(space - data) - 1 >= sizeof(url))
		return 0;
	memcpy(method, data, (size_t)(space - data));
	method[space - data] = '\0';
	memcpy(url, space + 1, head - (size_t)(space - data) - 1);
	url[head - (size_t)(space - data) - 1] = '\0';
	size_t length = size - head - 1;
	char *body = malloc(length ? length : 1);
	memcpy(body, nl + 1, length);
	/* Both sides of the access rules: the first body byte picks whether
	 * the peer is on this host. */
	struct kvc_http_request request = {.method = method, .url = url, .data = body,
	                                   .length = length,
	                                   .loopback = length == 0 || (body[0] & 1) == 0};
	struct kvc_http_answer answer;
	kvc_http_serve(server, &request, &answer);
	if (answer.wait)
		kvc_http_wait_run(server, answer.wait, NULL, 0, &answer);
	if (answer.status < 200 || answer.status > 599)
		abort();
	free(answer.text);
	free(body);
	return 0;
}
