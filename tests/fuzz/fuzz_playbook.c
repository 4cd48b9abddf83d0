/*
 * fuzz_playbook.c - libFuzzer target for the playbook parser (tui/
 * playbook.c): the input is a playbook's text, which playbook_parse must
 * load or refuse with a message naming it, never crash; a loaded
 * playbook's stages come in a dependency order that covers each stage
 * once, and every stage argument expands (built-ins as "x") within the
 * bounds, so a variable cycle or a runaway expansion can only be refused,
 * never loop or overflow.
 *
 *   make fuzz FUZZ_SECONDS=60    (seeded with tests/fuzz/playbook-corpus)
 */
#include "playbook.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *lookup(void *arg, const char *name)
{
	const struct playbook *pb = arg;
	json_t *v = json_object_get(pb->vars, name);
	for (int i = 0; playbook_builtins[i]; i++)
		if (!strcmp(name, playbook_builtins[i]))
			return "x";
	return json_string_value(v);
}

static int nested(void *arg, const char *name)
{
	(void)arg;
	for (int i = 0; playbook_builtins[i]; i++)
		if (!strcmp(name, playbook_builtins[i]))
			return 0;
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct playbook pb;
	struct d0_err err;
	char *text = malloc(size + 1), *out = malloc(65536);
	unsigned char *seen;
	if (!text || !out)
		return 0;
	memcpy(text, data, size);
	text[size] = 0;
	err.msg[0] = 0;
	memset(&pb, 0, sizeof pb);
	if (playbook_parse(text, "fuzz.json", &pb, &err) == 0) {
		seen = calloc(pb.n + 1, 1);
		for (size_t k = 0; k < pb.n; k++) {
			if (pb.order[k] >= pb.n || seen[pb.order[k]]++)
				__builtin_trap();
			for (size_t a = 0; a < pb.stages[k].n_args; a++)
				playbook_expand_deep(pb.stages[k].args[a], lookup,
						     nested, &pb, "arg", out,
						     65536, &err);
		}
		free(seen);
	} else if (strncmp(err.msg, "fuzz.json", 9)) {
		__builtin_trap(); /* every refusal names the file */
	}
	playbook_free(&pb);
	free(text);
	free(out);
	return 0;
}
