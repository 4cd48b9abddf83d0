/*
 * fuzz_safetensors.c - libFuzzer target for the strict safetensors header
 * parser.  The input is a whole file: st_parse gets every byte and the
 * input's size as the file size, so any header the length prefix describes
 * is fully present and the JSON, dtype, shape and range rules all run.
 *
 *   make fuzz FUZZ_SECONDS=60    (seeded with tests/corpus)
 */
#include "engine.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct st_file f;
	struct d0_err err;

	err.msg[0] = 0;
	if (st_parse(data, size, size, &f, &err) == 0) {
		/* Accepted: the ranges must tile the data buffer exactly. */
		uint64_t bytes = 0;
		for (size_t i = 0; i < f.ntensors; i++) {
			const struct st_tensor *t = &f.tensors[i];
			if (t->end < t->begin || t->end > size - f.data_off ||
			    st_find(&f, t->name) == NULL)
				__builtin_trap();
			bytes += t->end - t->begin;
		}
		if (f.data_off + bytes != size)
			__builtin_trap();
		st_free(&f);
	} else if (!err.msg[0] || strlen(err.msg) >= sizeof err.msg) {
		__builtin_trap(); /* every rejection must say why */
	}
	return 0;
}
