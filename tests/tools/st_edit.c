/*
 * st_edit - rewrite a safetensors file with one planted defect, for the
 * quantised malformed corpus (tests/corpus/quant/MANIFEST):
 *   st_edit FILE EDIT...
 * EDITs, applied in order, then FILE is rewritten in place (tensors in
 * their original order, __metadata__ kept):
 *   --drop NAME                 remove a tensor
 *   --add NAME DTYPE D0[,D1]    add a zero-filled tensor
 *   --reshape NAME D0[,D1]      new shape (bytes kept up to the new size,
 *                               zeros after)
 *   --retype NAME DTYPE         new dtype of the same byte size
 *   --poke NAME ELEMENT HEX     overwrite element ELEMENT's bytes with HEX
 *                               (little-endian bytes as written, e.g.
 *                               0000c07f is an f32 NaN)
 * Exit 0, or 2 with a message.
 */
#include "engine.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct tensor {
	char *name;
	enum dtype dt;
	int ndim;
	uint64_t shape[2];
	unsigned char *data;
	uint64_t bytes;
	int gone;
};

static int die(const char *fmt, const char *arg)
{
	fprintf(stderr, "st_edit: ");
	fprintf(stderr, fmt, arg);
	fputc('\n', stderr);
	return 2;
}

static int parse_shape(const char *s, struct tensor *t)
{
	char *end;
	t->ndim = 0;
	while (*s && t->ndim < 2) {
		t->shape[t->ndim++] = strtoull(s, &end, 10);
		if (end == s)
			return -1;
		s = *end == ',' ? end + 1 : end;
	}
	return *s ? -1 : 0;
}

static uint64_t nbytes(const struct tensor *t)
{
	uint64_t n = dtype_size(t->dt);
	for (int d = 0; d < t->ndim; d++)
		n *= t->shape[d];
	return n;
}

static struct tensor *find(struct tensor *v, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!v[i].gone && !strcmp(v[i].name, name))
			return &v[i];
	return NULL;
}

int main(int argc, char **argv)
{
	struct st_file f;
	struct d0_err err;
	struct tensor *v;
	size_t n;
	int fd, a;
	struct st_writer *w;
	const char *key;
	json_t *mv;

	if (argc < 3)
		return die("%s", "usage: st_edit FILE EDIT...");
	if (st_open(argv[1], &f, &err) < 0)
		return die("%s", err.msg);
	n = f.ntensors;
	v = calloc(n + (size_t)argc, sizeof *v);
	fd = open(argv[1], O_RDONLY);
	for (size_t i = 0; i < n; i++) {
		const struct st_tensor *t = &f.tensors[i];
		v[i].name = strdup(t->name);
		v[i].dt = t->dtype;
		v[i].ndim = t->ndim > 2 ? 2 : t->ndim;
		memcpy(v[i].shape, t->shape, sizeof v[i].shape);
		v[i].bytes = t->end - t->begin;
		v[i].data = calloc(1, v[i].bytes + 1);
		if (pread_full(fd, v[i].data, v[i].bytes, f.data_off + t->begin) < 0)
			return die("%s: read failed", argv[1]);
	}
	close(fd);
	for (a = 2; a < argc; a++) {
		const char *op = argv[a];
		struct tensor *t;
		if (a + 1 >= argc)
			return die("%s: missing arguments", op);
		if (!strcmp(op, "--add")) {
			if (a + 3 >= argc)
				return die("%s: NAME DTYPE SHAPE", op);
			t = &v[n++];
			t->name = strdup(argv[a + 1]);
			t->dt = dtype_from_name(argv[a + 2]);
			if (t->dt == DT_INVALID || parse_shape(argv[a + 3], t) < 0)
				return die("--add %s: bad dtype or shape", argv[a + 1]);
			t->bytes = nbytes(t);
			t->data = calloc(1, t->bytes + 1);
			a += 3;
			continue;
		}
		t = find(v, n, argv[a + 1]);
		if (!t)
			return die("no tensor '%s'", argv[a + 1]);
		if (!strcmp(op, "--drop")) {
			t->gone = 1;
			a += 1;
		} else if (!strcmp(op, "--reshape") && a + 2 < argc) {
			uint64_t old = t->bytes;
			if (parse_shape(argv[a + 2], t) < 0)
				return die("--reshape %s: bad shape", t->name);
			t->bytes = nbytes(t);
			t->data = realloc(t->data, t->bytes + 1);
			if (t->bytes > old)
				memset(t->data + old, 0, t->bytes - old);
			a += 2;
		} else if (!strcmp(op, "--retype") && a + 2 < argc) {
			enum dtype dt = dtype_from_name(argv[a + 2]);
			if (dt == DT_INVALID || dtype_size(dt) != dtype_size(t->dt))
				return die("--retype: '%s' is not a dtype of the "
					   "same size", argv[a + 2]);
			t->dt = dt;
			a += 2;
		} else if (!strcmp(op, "--poke") && a + 3 < argc) {
			uint64_t el = strtoull(argv[a + 2], NULL, 10);
			const char *hex = argv[a + 3];
			size_t hl = strlen(hex), es = dtype_size(t->dt);
			if (hl != 2 * es || (el + 1) * es > t->bytes)
				return die("--poke %s: element or byte count off",
					   t->name);
			for (size_t b = 0; b < es; b++) {
				char two[3] = {hex[2 * b], hex[2 * b + 1], 0};
				t->data[el * es + b] =
					(unsigned char)strtoul(two, NULL, 16);
			}
			a += 3;
		} else {
			return die("unknown edit '%s'", op);
		}
	}
	w = st_writer_new();
	json_object_foreach(f.metadata, key, mv)
		st_writer_meta(w, key, json_string_value(mv));
	for (size_t i = 0; i < n; i++)
		if (!v[i].gone)
			st_writer_add(w, v[i].name, v[i].dt, v[i].ndim, v[i].shape);
	if (st_writer_begin(w, argv[1], &err) < 0)
		return die("%s", err.msg);
	for (size_t i = 0, k = 0; i < n; i++)
		if (!v[i].gone &&
		    st_writer_put(w, k++, 0, v[i].data, v[i].bytes, &err) < 0)
			return die("%s", err.msg);
	if (st_writer_finish(w, &err) < 0)
		return die("%s", err.msg);
	st_writer_free(w);
	for (size_t i = 0; i < n; i++) {
		free(v[i].name);
		free(v[i].data);
	}
	free(v);
	st_free(&f);
	return 0;
}
