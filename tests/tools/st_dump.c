/*
 * st_dump - list a safetensors file's tensors for tests:
 *   st_dump FILE [--as f32|bf16|f16] [--skip-norms]
 * prints "name dtype [shape] sha256-of-bytes" per tensor, in name order.
 * With --as, floating tensors are first converted to that dtype (so an f32
 * source can be compared with a bf16 conversion); --skip-norms leaves
 * tensors whose name contains "norm" as stored.
 *   st_dump FILE --data-bytes
 * prints the size of the data buffer (all tensor bytes).
 *   st_dump FILE --slice NAME AXIS PART PARTS
 * prints the sha256 of one slice of a 2-D (or 1-D, axis 0) tensor: the
 * PART-th of PARTS equal blocks along AXIS, cut out by plain row/column
 * loops, independently of the engine's streaming splitter.  f32 -> bf16 uses the
 * independent reference below; other pairs use the engine's conversion.
 */
#include "engine.h"

#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

/*
 * Reference f32 -> bf16, written independently of the engine's: pick the
 * nearer of the two bf16 neighbours in double precision, ties to the even
 * one; NaN stays NaN.  So a test comparing conversions is not the engine
 * checking itself.
 */
static uint16_t ref_bf16(float f)
{
	uint32_t u, lo, hi;
	float flo, fhi;
	double dlo, dhi;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	lo = u & 0xffff0000u;
	if (lo == u)
		return (uint16_t)(u >> 16);
	hi = lo + 0x10000u; /* next bf16 away from zero */
	memcpy(&flo, &lo, 4);
	memcpy(&fhi, &hi, 4);
	dlo = fabs((double)f - (double)flo);
	dhi = (hi & 0x7fffffffu) == 0x7f800000u
		      ? fabs(ldexp(f < 0 ? -1.0 : 1.0, 128) - (double)f)
		      : fabs((double)fhi - (double)f);
	if (dlo < dhi || (dlo == dhi && !((lo >> 16) & 1)))
		return (uint16_t)(lo >> 16);
	return (uint16_t)(hi >> 16);
}

static int convert(enum dtype from, const void *src, enum dtype to, void *dst,
		   size_t n)
{
	if (from == DT_F32 && to == DT_BF16) {
		for (size_t i = 0; i < n; i++) {
			float f;
			uint16_t h;
			memcpy(&f, (const char *)src + 4 * i, 4);
			h = ref_bf16(f);
			memcpy((char *)dst + 2 * i, &h, 2);
		}
		return 0;
	}
	return dtype_convert(from, src, to, dst, n);
}

static int cmp(const void *a, const void *b)
{
	return strcmp(((const struct st_tensor *)a)->name,
		      ((const struct st_tensor *)b)->name);
}

static int slice(const char *path, const char *name, int axis, int part,
		 int parts)
{
	struct st_file f;
	struct d0_err err;
	const struct st_tensor *t;
	unsigned char *buf, *out, md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	size_t es, rows, cols, k = 0;
	int fd;
	if (st_open(path, &f, &err) < 0 || !(t = st_find(&f, name))) {
		fprintf(stderr, "st_dump: %s: no tensor %s\n", path, name);
		return 1;
	}
	es = dtype_size(t->dtype);
	rows = t->shape[0];
	cols = t->ndim == 2 ? t->shape[1] : 1;
	buf = malloc(rows * cols * es + 1);
	out = malloc(rows * cols * es + 1);
	fd = open(path, O_RDONLY);
	if (pread_full(fd, buf, rows * cols * es, f.data_off + t->begin) < 0)
		return 1;
	close(fd);
	for (size_t r = 0; r < rows; r++)
		for (size_t c = 0; c < cols; c++) {
			size_t idx = axis == 0 ? r : c, len = axis == 0 ? rows : cols;
			if (idx / (len / (size_t)parts) != (size_t)part)
				continue;
			memcpy(out + k * es, buf + (r * cols + c) * es, es);
			k++;
		}
	EVP_Digest(out, k * es, md, &mdlen, EVP_sha256(), NULL);
	for (unsigned i = 0; i < mdlen; i++)
		printf("%02x", md[i]);
	printf("\n");
	free(buf);
	free(out);
	st_free(&f);
	return 0;
}

int main(int argc, char **argv)
{
	struct st_file f;
	struct d0_err err;
	enum dtype as = DT_INVALID;
	int skip_norms = 0, fd;
	if (argc < 2) {
		fprintf(stderr, "usage: st_dump FILE [--as DTYPE] [--skip-norms]\n");
		return 2;
	}
	if (argc == 3 && !strcmp(argv[2], "--data-bytes")) {
		/* total tensor bytes: what a layout planner must predict */
		struct st_file g;
		struct d0_err e;
		if (st_open(argv[1], &g, &e) < 0) {
			fprintf(stderr, "st_dump: %s\n", e.msg);
			return 1;
		}
		printf("%llu\n", (unsigned long long)(g.file_size - g.data_off));
		st_free(&g);
		return 0;
	}
	if (argc == 7 && !strcmp(argv[2], "--slice"))
		return slice(argv[1], argv[3], atoi(argv[4]), atoi(argv[5]),
			     atoi(argv[6]));
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--as") && i + 1 < argc)
			as = dtype_from_user(argv[++i]);
		else if (!strcmp(argv[i], "--skip-norms"))
			skip_norms = 1;
	}
	if (st_open(argv[1], &f, &err) < 0) {
		fprintf(stderr, "st_dump: %s\n", err.msg);
		return 1;
	}
	fd = open(argv[1], O_RDONLY);
	qsort(f.tensors, f.ntensors, sizeof *f.tensors, cmp);
	for (size_t i = 0; i < f.ntensors; i++) {
		const struct st_tensor *t = &f.tensors[i];
		size_t n = (size_t)(t->end - t->begin);
		unsigned char *buf = malloc(n + 1), *conv = buf;
		unsigned char md[EVP_MAX_MD_SIZE];
		unsigned int mdlen = 0;
		enum dtype dt = t->dtype;
		if (pread_full(fd, buf, n, f.data_off + t->begin) < 0)
			return 1;
		if (as != DT_INVALID && as != t->dtype &&
		    !(skip_norms && strstr(t->name, "norm"))) {
			uint64_t numel = st_numel(t);
			conv = malloc(numel * dtype_size(as) + 1);
			if (convert(t->dtype, buf, as, conv, numel) == 0) {
				n = numel * dtype_size(as);
				dt = as;
			} else {
				free(conv);
				conv = buf;
			}
		}
		EVP_Digest(conv, n, md, &mdlen, EVP_sha256(), NULL);
		printf("%s %s [", t->name, dtype_name(dt));
		for (int d = 0; d < t->ndim; d++)
			printf("%s%llu", d ? "," : "", (unsigned long long)t->shape[d]);
		printf("] ");
		for (unsigned k = 0; k < mdlen; k++)
			printf("%02x", md[k]);
		printf("\n");
		if (conv != buf)
			free(conv);
		free(buf);
	}
	close(fd);
	st_free(&f);
	return 0;
}
