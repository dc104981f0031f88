/* libFuzzer harness: the cluster file parser (kvc_config_parse) on
 * arbitrary text. A parse either fills the config or reports an error;
 * it never crashes, reads out of bounds or leaks. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	struct kvc_config config;
	char err[256];
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	kvc_config_parse(text, "fuzz", &config, err, sizeof(err));
	free(text);
	return 0;
}
