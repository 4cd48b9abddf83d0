/*
 * step_merge.c - `day0-engine merge`: the inverse of convert.  Reads
 * layout.json and the per-rank files and writes a Hugging Face checkpoint
 * with the source's shard names, tensor order and shard metadata.  For an
 * f32 conversion the result is bit-identical to the source, which is how
 * the tests prove that convert loses nothing.  Streams in bounded memory
 * like convert.
 */
#include "engine.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MERGE_CHUNK (1u << 20) /* elements */

static int run(int argc, char **argv);

const struct step_entry step_merge = {
	.name = "merge",
	.usage = "CONVERTED_DIR OUT_DIR [--force]",
	.summary = "reassemble per-rank files into a Hugging Face checkpoint",
	.help = "  CONVERTED_DIR      per-rank files and layout.json written by convert\n"
	"  OUT_DIR            a new Hugging Face checkpoint (shards, index, config)\n"
	"  --force            replace OUT_DIR if it exists\n"
	"f32 and FP8-kept layouts merge back byte-identical to the source\n"
	"example: day0-engine merge /scratch/m-tp4 /scratch/m-back",
	.run = run,
};

struct rankfile {
	struct st_file st;
	int fd;
};

struct merge {
	json_t *layout;
	int world;
	struct rankfile *rf;
	unsigned char *buf, *out;
};

/* Where part p of tensor name lives: rank file and tensor, or NULL. */
static const struct st_tensor *part_source(struct merge *m, const char *name,
					   json_t *ranks, int part, int *rank)
{
	size_t i;
	json_t *rp;
	json_array_foreach(ranks, i, rp) {
		int r = (int)json_integer_value(json_array_get(rp, 0));
		if (json_integer_value(json_array_get(rp, 1)) != part ||
		    r < 0 || r >= m->world)
			continue;
		*rank = r;
		return st_find(&m->rf[r].st, name);
	}
	return NULL;
}

static int read_part(struct merge *m, int r, const struct st_tensor *t,
		     uint64_t byte_off, void *dst, size_t n, struct d0_err *err)
{
	if (byte_off + n > t->end - t->begin)
		return d0_errf(err, "%s: tensor '%s' is shorter than layout.json "
			       "says", m->rf[r].st.path, t->name);
	if (pread_full(m->rf[r].fd, dst, n,
		       m->rf[r].st.data_off + t->begin + byte_off) < 0)
		return d0_errf(err, "%s: read failed: %s", m->rf[r].st.path,
			       strerror(errno));
	return 0;
}

/* Reassemble one tensor (index idx in writer w) from its parts. */
static int merge_tensor(struct merge *m, struct st_writer *w, size_t idx,
			const char *name, json_t *info, struct d0_err *err)
{
	json_t *shape = json_object_get(info, "shape");
	int axis = (int)json_integer_value(json_object_get(info, "axis"));
	int parts = (int)json_integer_value(json_object_get(info, "parts"));
	enum dtype dt = dtype_from_name(
		json_string_value(json_object_get(info, "dtype")));
	json_t *ranks = json_object_get(info, "ranks");
	uint64_t numel = 1, outer = 1, row, seg;
	size_t es = dtype_size(dt);
	const struct st_tensor *src[64];
	int srank[64];

	if (axis < 0)
		parts = 1;
	if (parts < 1 || parts > 64 || dt == DT_INVALID)
		return d0_errf(err, "layout.json: tensor '%s': bad split", name);
	for (size_t d = 0; d < json_array_size(shape); d++) {
		uint64_t v = (uint64_t)json_integer_value(json_array_get(shape, d));
		numel *= v;
		if ((int)d < axis)
			outer *= v;
	}
	for (int p = 0; p < parts; p++) {
		src[p] = part_source(m, name, ranks, p, &srank[p]);
		if (!src[p])
			return d0_errf(err, "tensor '%s': no rank file holds part "
				       "%d", name, p);
	}
	if (numel == 0)
		return 0;
	row = numel / outer;
	seg = row / (uint64_t)parts;
	if (row <= MERGE_CHUNK) {
		uint64_t rows_per = MERGE_CHUNK / row;
		for (uint64_t o = 0; o < outer; o += rows_per) {
			uint64_t nr = outer - o < rows_per ? outer - o : rows_per;
			for (int p = 0; p < parts; p++) {
				if (read_part(m, srank[p], src[p], o * seg * es,
					      m->buf, (size_t)(nr * seg * es),
					      err) < 0)
					return -1;
				for (uint64_t j = 0; j < nr; j++)
					memcpy(m->out + (j * row + (uint64_t)p * seg) * es,
					       m->buf + j * seg * es, seg * es);
			}
			if (st_writer_put(w, idx, o * row * es, m->out,
					  (size_t)(nr * row * es), err) < 0)
				return -1;
		}
		return 0;
	}
	for (uint64_t o = 0; o < outer; o++)
		for (int p = 0; p < parts; p++)
			for (uint64_t k = 0; k < seg; k += MERGE_CHUNK) {
				size_t n = (size_t)(seg - k < MERGE_CHUNK ? seg - k
									  : MERGE_CHUNK);
				if (read_part(m, srank[p], src[p],
					      (o * seg + k) * es, m->buf, n * es,
					      err) < 0 ||
				    st_writer_put(w, idx,
						  (o * row + (uint64_t)p * seg + k) * es,
						  m->buf, n * es, err) < 0)
					return -1;
			}
	return 0;
}

struct entry {
	const char *name;
	json_t *info;
	json_int_t off;
};

static int cmp_entry(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;
	return x->off < y->off ? -1 : x->off > y->off;
}

static int merge_all(struct merge *m, const char *in, const char *out,
		     struct d0_err *err)
{
	json_t *tensors = json_object_get(m->layout, "tensors");
	json_t *shards = json_object_get(json_object_get(m->layout, "source"),
					 "shards");
	json_t *wm = json_object(), *sh;
	size_t si, nsh = json_array_size(shards);
	uint64_t total = 0;
	char (*hex)[65] = calloc(nsh + 1, sizeof *hex);
	FILE *sums;
	char *p;
	int rc = 0;

	json_array_foreach(shards, si, sh) {
		const char *fname = json_string_value(json_object_get(sh, "file"));
		json_t *meta = json_object_get(sh, "metadata"), *info, *mv;
		struct entry *e = calloc(json_object_size(tensors) + 1, sizeof *e);
		struct st_writer *w = st_writer_new();
		size_t n = 0;
		const char *key;
		if (!fname || !shard_name_ok(fname)) {
			free(e);
			st_writer_free(w);
			rc = d0_errf(err, "%s/layout.json: bad source shard name",
				     in);
			break;
		}
		json_object_foreach(meta, key, mv)
			st_writer_meta(w, key, json_string_value(mv));
		json_object_foreach(tensors, key, info) {
			if (strcmp(json_string_value(json_object_get(
					   info, "source_shard")), fname))
				continue;
			e[n].name = key;
			e[n].info = info;
			e[n].off = json_integer_value(
				json_object_get(info, "source_offset"));
			n++;
		}
		qsort(e, n, sizeof *e, cmp_entry);
		for (size_t i = 0; i < n; i++) {
			json_t *shape = json_object_get(e[i].info, "shape");
			uint64_t dims[ST_MAX_DIMS];
			int nd = (int)json_array_size(shape);
			enum dtype dt = dtype_from_name(json_string_value(
				json_object_get(e[i].info, "dtype")));
			uint64_t numel = 1;
			for (int d = 0; d < nd && d < ST_MAX_DIMS; d++) {
				dims[d] = (uint64_t)json_integer_value(
					json_array_get(shape, d));
				numel *= dims[d];
			}
			total += numel * dtype_size(dt);
			st_writer_add(w, e[i].name, dt, nd, dims);
			json_object_set_new(wm, e[i].name, json_string(fname));
		}
		p = path_join(out, fname);
		rc = st_writer_begin(w, p, err);
		for (size_t i = 0; rc == 0 && i < n; i++)
			rc = merge_tensor(m, w, i, e[i].name, e[i].info, err);
		if (rc == 0)
			rc = st_writer_finish(w, err);
		if (rc == 0 && st_writer_sha256(w, hex[si]) < 0)
			rc = sha256_file(p, hex[si], NULL, err);
		free(p);
		free(e);
		st_writer_free(w);
		if (rc < 0)
			break;
	}
	if (rc == 0 && nsh > 1) {
		json_t *doc = json_pack("{s:{s:I}, s:O}", "metadata", "total_size",
					(json_int_t)total, "weight_map", wm);
		p = path_join(out, "model.safetensors.index.json");
		rc = json_write_file(doc, p, 1, err);
		free(p);
		json_decref(doc);
	}
	if (rc == 0) { /* config.json as the source had it */
		char *text, *cfg = path_join(in, "config.json");
		size_t len;
		rc = file_read_all(cfg, 16u << 20, &text, &len, err);
		free(cfg);
		if (rc == 0) {
			int fd;
			p = path_join(out, "config.json");
			fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
			if (fd < 0 || write_full(fd, text, len) < 0)
				rc = d0_errf(err, "%s: write failed", p);
			if (fd >= 0)
				close(fd);
			free(p);
			free(text);
		}
	}
	if (rc == 0)
		rc = tokenizer_copy_files(in, out, err);
	if (rc == 0) {
		p = path_join(out, "SHA256SUMS");
		sums = fopen(p, "w");
		free(p);
		if (!sums) {
			rc = d0_errf(err, "%s/SHA256SUMS: cannot create", out);
		} else {
			char h[65];
			const char *extra[] = {"config.json",
					       "model.safetensors.index.json"};
			for (int k = 0; k < 2 && rc == 0; k++) {
				p = path_join(out, extra[k]);
				if (path_exists(p)) {
					rc = sha256_file(p, h, NULL, err);
					if (rc == 0)
						fprintf(sums, "%s  %s\n", h, extra[k]);
				}
				free(p);
			}
			json_array_foreach(shards, si, sh)
				fprintf(sums, "%s  %s\n", hex[si],
					json_string_value(json_object_get(sh, "file")));
			for (int k = 0; k < 2 && rc == 0; k++) {
				const char *tf = k ? "tokenizer_config.json"
						   : "tokenizer.json";
				p = path_join(out, tf);
				if (path_exists(p)) {
					rc = sha256_file(p, h, NULL, err);
					if (rc == 0)
						fprintf(sums, "%s  %s\n", h, tf);
				}
				free(p);
			}
			if (fclose(sums) != 0 && rc == 0)
				rc = d0_errf(err, "%s/SHA256SUMS: write failed",
					     out);
		}
	}
	json_decref(wm);
	free(hex);
	return rc;
}

static int open_ranks(struct merge *m, const char *in, struct d0_err *err)
{
	json_t *ranks = json_object_get(m->layout, "ranks"), *r;
	size_t i;
	m->world = (int)json_integer_value(json_object_get(m->layout, "world_size"));
	if (m->world < 1 || (size_t)m->world != json_array_size(ranks))
		return d0_errf(err, "%s/layout.json: world_size does not match "
			       "the ranks list", in);
	m->rf = calloc((size_t)m->world, sizeof *m->rf);
	for (int k = 0; k < m->world; k++)
		m->rf[k].fd = -1;
	json_array_foreach(ranks, i, r) {
		const char *f = json_string_value(json_object_get(r, "file"));
		const char *want = json_string_value(json_object_get(r, "sha256"));
		char *p, hex[65];
		if (!f || !shard_name_ok(f))
			return d0_errf(err, "%s/layout.json: rank %zu: bad file "
				       "name", in, i);
		p = path_join(in, f);
		if (st_open(p, &m->rf[i].st, err) < 0) {
			free(p);
			return -1;
		}
		if (want && (sha256_file(p, hex, NULL, err) < 0 ||
			     strcmp(hex, want))) {
			d0_errf(err, "%s: SHA-256 differs from layout.json's", p);
			free(p);
			return -1;
		}
		m->rf[i].fd = open(p, O_RDONLY | O_CLOEXEC);
		free(p);
		if (m->rf[i].fd < 0)
			return d0_errf(err, "%s/%s: cannot open", in, f);
	}
	return 0;
}

static int run(int argc, char **argv)
{
	static const struct option lo[] = {
		{"force", 0, 0, 'f'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
	const struct step_entry *S = &step_merge;
	struct merge m = {0};
	struct outdir od = {0};
	struct d0_err err;
	json_error_t jerr;
	int ch, force = 0, rc;
	char *lp;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		if (ch == 'f')
			force = 1;
		else if (ch == 'h') {
			step_help(S);
			return EXIT_OK;
		} else
			return step_usage_error(S, "unknown option '%s'",
						argv[optind - 1]);
	}
	if (optind != argc - 2)
		return step_usage_error(S, "expected CONVERTED_DIR and OUT_DIR");
	lp = path_join(argv[optind], "layout.json");
	m.layout = json_load_file(lp, JSON_REJECT_DUPLICATES, &jerr);
	if (!m.layout || !json_is_object(json_object_get(m.layout, "tensors"))) {
		fprintf(stderr, "day0-engine: %s: %s\n", lp,
			m.layout ? "no 'tensors' object" : jerr.text);
		free(lp);
		json_decref(m.layout);
		return EXIT_USAGE;
	}
	free(lp);
	m.buf = malloc((size_t)MERGE_CHUNK * 8);
	m.out = malloc((size_t)MERGE_CHUNK * 8);
	rc = open_ranks(&m, argv[optind], &err);
	if (rc == 0)
		rc = outdir_begin(&od, argv[optind + 1], force, &err);
	if (rc == 0) {
		rc = merge_all(&m, argv[optind], od.partial, &err);
		if (rc == 0)
			rc = outdir_commit(&od, &err);
		else
			outdir_abort(&od);
	}
	if (rc == 0)
		printf("merged %s -> %s\n", argv[optind], argv[optind + 1]);
	else
		fprintf(stderr, "day0-engine: %s\n", err.msg);
	for (int k = 0; m.rf && k < m.world; k++) {
		if (m.rf[k].fd >= 0)
			close(m.rf[k].fd);
		st_free(&m.rf[k].st);
	}
	free(m.rf);
	free(m.buf);
	free(m.out);
	json_decref(m.layout);
	return rc == 0 ? EXIT_OK : EXIT_USAGE;
}
