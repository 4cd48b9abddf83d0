/* Writer -> parser round trip and the parser's rules on small buffers. */
#include "engine.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Build "len8 + header + data_len zero bytes" in a malloc'd buffer. */
static uint8_t *mk(const char *hdr, size_t data_len, size_t *len)
{
	size_t n = strlen(hdr);
	uint8_t *b = calloc(8 + n + data_len + 1, 1);
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)((uint64_t)n >> (8 * i));
	memcpy(b + 8, hdr, n);
	*len = 8 + n + data_len;
	return b;
}

static int parses(const char *hdr, size_t data_len, const char *want_msg)
{
	size_t len;
	uint8_t *b = mk(hdr, data_len, &len);
	struct st_file f;
	struct d0_err err = {{0}};
	int rc = st_parse(b, len, len, &f, &err);
	free(b);
	if (rc == 0) {
		st_free(&f);
		return want_msg == NULL;
	}
	return want_msg && strstr(err.msg, want_msg) != NULL;
}

int main(void)
{
	char dir[] = "/tmp/day0-unit-st.XXXXXX", *path;
	struct st_writer *w;
	struct st_file f;
	struct d0_err err;
	uint64_t s1[2] = {2, 3}, s2[1] = {5}, s0[1] = {0};
	float a[6] = {1, 2, 3, 4, 5, 6};
	uint16_t b[5] = {1, 2, 3, 4, 5};
	char hex[65], hex2[65];

	CHECK(mkdtemp(dir) != NULL);
	path = path_join(dir, "x.safetensors");
	w = st_writer_new();
	st_writer_meta(w, "format", "pt");
	CHECK(st_writer_add(w, "a", DT_F32, 2, s1) == 0);
	CHECK(st_writer_add(w, "empty", DT_F32, 1, s0) == 0);
	CHECK(st_writer_add(w, "b", DT_BF16, 1, s2) == 0);
	CHECK(st_writer_begin(w, path, &err) == 0);
	CHECK(st_writer_put(w, 0, 0, a, sizeof a, &err) == 0);
	CHECK(st_writer_put(w, 2, 0, b, sizeof b, &err) == 0);
	CHECK(st_writer_put(w, 2, 8, b, 4, &err) == -1); /* outside tensor */
	CHECK(st_writer_finish(w, &err) == 0);
	CHECK(st_writer_sha256(w, hex) == 0);
	CHECK(sha256_file(path, hex2, NULL, &err) == 0);
	CHECK(strcmp(hex, hex2) == 0); /* streamed hash == file hash */
	st_writer_free(w);

	CHECK(st_open(path, &f, &err) == 0);
	CHECK(f.ntensors == 3);
	CHECK(f.data_off % 8 == 0); /* header padded to alignment */
	{
		const struct st_tensor *t = st_find(&f, "a");
		CHECK(t && t->dtype == DT_F32 && t->ndim == 2 && t->shape[1] == 3);
		CHECK(t && t->end - t->begin == 24);
		t = st_find(&f, "b");
		CHECK(t && t->dtype == DT_BF16 && t->begin == 24 && t->end == 34);
	}
	CHECK(json_is_string(json_object_get(f.metadata, "format")));
	st_free(&f);
	unlink(path);
	free(path);
	rmdir(dir);

	/* parser rules */
	CHECK(parses("{}", 0, NULL));
	CHECK(parses("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}  ", 8, NULL));
	CHECK(parses("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 9, "trailing"));
	CHECK(parses("{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "12 bytes"));
	CHECK(parses("{\"t\":{\"dtype\":\"X9\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype"));
	CHECK(parses("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "gap"));
	CHECK(parses("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "overlap"));
	CHECK(parses("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		     "\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, "duplicate"));
	CHECK(parses("{\"__metadata__\":{\"k\":1}}", 0, "not a string"));
	CHECK(parses("[1]", 0, "start with"));
	CHECK(parses("{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}", 8, "overflow"));
	CHECK(parses("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "beyond"));
	{
		uint8_t tiny[7] = {0};
		struct st_file g;
		CHECK(st_parse(tiny, 7, 7, &g, &err) == -1 && strstr(err.msg, "too short"));
		uint8_t big[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
		CHECK(st_parse(big, 16, 16, &g, &err) == -1 && strstr(err.msg, "limit"));
		uint8_t past[16] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
		CHECK(st_parse(past, 16, 16, &g, &err) == -1 && strstr(err.msg, "past the end"));
	}
	return unit_done();
}
