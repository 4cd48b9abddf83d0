/*
 * step_verify.c - `day0-engine verify`: are the weights complete and
 * intact, and do they match what config.json says the model is?
 *
 * Three layers of checks, each problem recorded with the file (and tensor)
 * it concerns and reported together:
 *   1. format: every shard's safetensors header, strictly (safetensors.c);
 *   2. integrity (weights.integrity): index <-> shards consistency,
 *      total_size, SHA-256 of every file against SHA256SUMS, hashed in
 *      parallel with bounded memory (hash.c);
 *   3. metadata (weights.metadata): the tensor set and shapes config.json
 *      implies (model.c) against what the shards hold.
 * A single .safetensors file gets the format check only.
 */
#include "engine.h"

#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int run(int argc, char **argv);

const struct step_entry step_verify = {
	.name = "verify",
	.usage = "(MODEL_DIR | FILE.safetensors) [--checksums FILE] "
		 "[--threads N] [--json] [--events]",
	.summary = "check a checkpoint: safetensors format, index, SHA-256, "
		   "tensors against config.json",
	.help = "  MODEL_DIR          a Hugging Face checkpoint: every *.safetensors shard, the\n"
	"                     index (model.safetensors.index.json), config.json; a Hugging\n"
	"                     Face cache snapshot (models--ORG--NAME/snapshots/REV) takes\n"
	"                     each file's SHA-256 from its blob name\n"
	"  FILE.safetensors   one file: its header and tensors only\n"
	"  --checksums FILE   expected SHA-256s in sha256sum format (default: the\n"
	"                     directory's SHA256SUMS, else the cache's blob names, else\n"
	"                     weights.integrity is a warn)\n"
	"  --threads N        hashing threads (default: the online CPUs)\n"
	"  --json             one JSON document on stdout\n"
	"  --events           day0 protocol events (checks weights.integrity and\n"
	"                     weights.metadata) on stdout\n"
	"environment: DAY0_READ=map|read: read the shards through a mapping or with\n"
	"                     pread (default: the mapping, unless a probe at start\n"
	"                     finds it 1.3x slower; --json's \"read\" says which)\n"
	"exit status: 0 every check passed, 1 a check failed, 2 unreadable input\n"
	"example: day0-engine verify /models/DeepSeek-V3 --threads 8 --json",
	.run = run,
};

enum check_id { CK_INTEGRITY, CK_METADATA };
static const char *const check_item[] = {"weights.integrity",
					 "weights.metadata"};

struct problem {
	enum check_id check;
	char *file, *tensor, *msg;
};

struct report {
	struct problem *p;
	size_t n;
	int warn_no_sums;
	char warn_why[240];
	json_t *missing, *unexpected, *misshaped;
};

static void problem(struct report *r, enum check_id ck, const char *file,
		    const char *tensor, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static void problem(struct report *r, enum check_id ck, const char *file,
		    const char *tensor, const char *fmt, ...)
{
	char buf[1200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	r->p = realloc(r->p, (r->n + 1) * sizeof *r->p);
	if (!r->p)
		abort();
	r->p[r->n].check = ck;
	r->p[r->n].file = strdup(file ? file : "");
	r->p[r->n].tensor = tensor ? strdup(tensor) : NULL;
	r->p[r->n].msg = strdup(buf);
	r->n++;
}

static size_t count(const struct report *r, enum check_id ck)
{
	size_t k = 0;
	for (size_t i = 0; i < r->n; i++)
		k += r->p[i].check == ck;
	return k;
}

static void report_free(struct report *r)
{
	for (size_t i = 0; i < r->n; i++) {
		free(r->p[i].file);
		free(r->p[i].tensor);
		free(r->p[i].msg);
	}
	free(r->p);
	json_decref(r->missing);
	json_decref(r->unexpected);
	json_decref(r->misshaped);
}

/* Progress events while hashing. */
struct progress {
	uint64_t done, total;
	double last;
};

static void tick(void *arg)
{
	struct progress *p = arg;
	uint64_t d = __atomic_load_n(&p->done, __ATOMIC_RELAXED);
	char msg[96], a[32], b[32];
	if (!events_enabled())
		return;
	snprintf(msg, sizeof msg, "hashed %s of %s", fmt_bytes(d, a),
		 fmt_bytes(p->total, b));
	events_stage("verify", "progress",
		     p->total ? (double)d / (double)p->total : 1.0, 0, msg);
}

/* Index <-> shards: every mapped tensor exists where the map says, every
 * shard tensor is mapped there, no tensor twice, total_size adds up. */
static void check_index(struct ckpt *c, struct report *r)
{
	json_t *wm = json_object_get(c->index, "weight_map");
	json_t *meta = json_object_get(c->index, "metadata");
	json_t *ts = json_is_object(meta) ? json_object_get(meta, "total_size")
					  : NULL;
	json_t *seen = json_object();
	const char *iname = "model.safetensors.index.json";
	uint64_t total = 0;
	int all_parsed = 1;
	const char *key;
	json_t *v;

	for (size_t s = 0; s < c->nshards; s++) {
		struct ckpt_shard *sh = &c->shards[s];
		if (!sh->parsed) {
			all_parsed = 0;
			continue;
		}
		for (size_t i = 0; i < sh->st.ntensors; i++) {
			const struct st_tensor *t = &sh->st.tensors[i];
			json_t *m = json_object_get(wm, t->name);
			json_t *prev = json_object_get(seen, t->name);
			total += t->end - t->begin;
			if (prev)
				problem(r, CK_INTEGRITY, sh->name, t->name,
					"tensor also stored in %s",
					json_string_value(prev));
			else
				json_object_set_new(seen, t->name,
						    json_string(sh->name));
			if (!m)
				problem(r, CK_INTEGRITY, sh->name, t->name,
					"tensor is not in %s's weight_map",
					iname);
			else if (strcmp(json_string_value(m), sh->name))
				problem(r, CK_INTEGRITY, sh->name, t->name,
					"weight_map says this tensor is in %s",
					json_string_value(m));
		}
	}
	json_object_foreach(wm, key, v) {
		const char *shard = json_string_value(v);
		for (size_t s = 0; s < c->nshards; s++) {
			struct ckpt_shard *sh = &c->shards[s];
			if (strcmp(sh->name, shard) || !sh->parsed)
				continue;
			if (!st_find(&sh->st, key))
				problem(r, CK_INTEGRITY, iname, key,
					"weight_map names %s, which has no "
					"such tensor", shard);
		}
	}
	if (!json_is_integer(ts))
		problem(r, CK_INTEGRITY, iname, NULL,
			"missing integer metadata.total_size");
	else if (all_parsed && (uint64_t)json_integer_value(ts) != total)
		problem(r, CK_INTEGRITY, iname, NULL,
			"metadata.total_size is %lld but the shards hold %llu "
			"tensor bytes", (long long)json_integer_value(ts),
			(unsigned long long)total);
	json_decref(seen);
}

/* Would name be in a shard we could not parse (so "missing" is unknown)? */
static int in_unreadable_shard(const struct ckpt *c, const char *name)
{
	json_t *m = json_object_get(json_object_get(c->index, "weight_map"),
				    name);
	for (size_t s = 0; s < c->nshards; s++) {
		if (c->shards[s].parsed)
			continue;
		if (!c->has_index || (json_is_string(m) &&
				      !strcmp(json_string_value(m),
					      c->shards[s].name)))
			return 1;
	}
	return 0;
}

/* Where tensor name is stored: the shard and its header entry. */
static const struct st_tensor *find_stored(struct ckpt *c, const char *name,
					   struct ckpt_shard **where)
{
	for (size_t s = 0; s < c->nshards; s++) {
		const struct st_tensor *t;
		if (c->shards[s].parsed && (t = st_find(&c->shards[s].st, name))) {
			*where = &c->shards[s];
			return t;
		}
	}
	return NULL;
}

static void shape_str(char *buf, size_t n, int ndim, const uint64_t *shape)
{
	int o = snprintf(buf, n, "[");
	for (int d = 0; d < ndim && o < (int)n - 24; d++)
		o += snprintf(buf + o, n - (size_t)o, "%s%llu", d ? ", " : "",
			      (unsigned long long)shape[d]);
	snprintf(buf + o, n - (size_t)o, "]");
}

/*
 * FP8 value bytes are checked for NaN codes while they are hashed (one
 * read of every byte): per shard, the FP8 parts' byte ranges in the file.
 */
struct scan_item {
	uint64_t begin, end; /* file offsets */
	int dtype;
	const char *tensor;
	struct part_check pc;
};
struct shard_scan {
	struct scan_item *it;
	size_t n;
	const struct quant_config *q;
};

static void scan_bytes(void *arg, uint64_t off, const void *buf, size_t n)
{
	struct shard_scan *s = arg;
	for (size_t i = 0; i < s->n; i++) {
		struct scan_item *x = &s->it[i];
		uint64_t lo = x->begin > off ? x->begin : off;
		uint64_t hi = x->end < off + n ? x->end : off + n;
		struct stored_part p = {.kind = PART_VALUES};
		if (lo >= hi)
			continue;
		format_fp8.check(s->q, &p, x->dtype, (const char *)buf + (lo - off),
				 hi - lo, lo - x->begin, &x->pc);
	}
}

static void free_scans(struct shard_scan *scans, size_t n)
{
	for (size_t i = 0; scans && i < n; i++)
		free(scans[i].it);
	free(scans);
}

/* The FP8 value parts config.json says each shard holds. */
static void plan_scans(struct ckpt *c, const struct model_config *cfg,
		       struct shard_scan *scans)
{
	struct tensor_spec *t = NULL;
	size_t n = 0;
	struct d0_err err;
	if (cfg->qc.kind != QUANT_FP8_BLOCK || model_tensors(cfg, &t, &n, &err) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		struct ckpt_shard *sh = NULL;
		const struct st_tensor *x;
		struct scan_item *it;
		size_t s;
		if (!quant_applies(&cfg->qc, &t[i]) ||
		    !(x = find_stored(c, t[i].name, &sh)) ||
		    (x->dtype != DT_F8_E4M3 && x->dtype != DT_F8_E5M2))
			continue;
		s = (size_t)(sh - c->shards);
		scans[s].q = &cfg->qc;
		scans[s].it = realloc(scans[s].it,
				      (scans[s].n + 1) * sizeof *scans[s].it);
		it = &scans[s].it[scans[s].n++];
		memset(it, 0, sizeof *it);
		it->begin = sh->st.data_off + x->begin;
		it->end = sh->st.data_off + x->end;
		it->dtype = x->dtype;
		it->tensor = x->name;
	}
	free(t);
}

/* Read a whole (small) stored tensor: scales, weight_shape. */
static void *read_stored(const struct ckpt_shard *sh, const struct st_tensor *x)
{
	void *b = malloc(x->end - x->begin + 1);
	int fd = open(sh->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || pread_full(fd, b, x->end - x->begin,
				 sh->st.data_off + x->begin) < 0) {
		if (fd >= 0)
			close(fd);
		free(b);
		return NULL;
	}
	close(fd);
	return b;
}

static int dtype_ok(const struct stored_part *p, int dt)
{
	if (p->dtype == DT_INVALID) /* a plain tensor: any float */
		return dt == DT_F32 || dt == DT_BF16 || dt == DT_F16;
	return dt == p->dtype || dt == p->alt_dtype;
}

/* Values of a scale or weight_shape part. */
static void check_part_values(const struct model_config *cfg,
			      const struct tensor_spec *t,
			      const struct stored_part *p, struct ckpt_shard *sh,
			      const struct st_tensor *x, struct report *r)
{
	void *b = read_stored(sh, x);
	struct part_check pc = {0};
	if (!b) {
		problem(r, CK_METADATA, sh->name, x->name, "cannot read");
		return;
	}
	if (p->kind == PART_SCALE) {
		format_of(&cfg->qc)->check(&cfg->qc, p, x->dtype, b, st_numel(x),
					   0, &pc);
		if (pc.bad)
			problem(r, CK_METADATA, sh->name, x->name,
				"%llu of %llu %s (first at element %llu): the "
				"weight '%s' cannot be dequantised",
				(unsigned long long)pc.bad,
				(unsigned long long)st_numel(x), pc.what,
				(unsigned long long)pc.first, t->name);
	} else if (p->kind == PART_SHAPE) {
		int64_t v[2];
		for (int i = 0; i < 2; i++) {
			int32_t w;
			if (x->dtype == DT_I64) {
				memcpy(&v[i], (char *)b + 8 * i, 8);
			} else {
				memcpy(&w, (char *)b + 4 * i, 4);
				v[i] = w;
			}
		}
		if ((uint64_t)v[0] != t->shape[0] || (uint64_t)v[1] != t->shape[1])
			problem(r, CK_METADATA, sh->name, x->name,
				"weight_shape says [%lld, %lld] but config.json "
				"implies [%llu, %llu] for '%s'", (long long)v[0],
				(long long)v[1], (unsigned long long)t->shape[0],
				(unsigned long long)t->shape[1], t->name);
	}
	free(b);
}

/* One stored part of spec t: present, dtype, shape, values. */
static void check_part(struct ckpt *c, const struct model_config *cfg,
		       const struct tensor_spec *t, const struct stored_part *p,
		       int quantised, struct report *r, size_t *unchecked)
{
	struct ckpt_shard *sh = NULL;
	const struct st_tensor *got = find_stored(c, p->name, &sh);
	char want[64], have[128], fmt[64];
	int ok;
	quant_describe(&cfg->qc, fmt, sizeof fmt);
	if (!got) {
		if (in_unreadable_shard(c, p->name)) {
			(*unchecked)++;
			return;
		}
		json_array_append_new(r->missing, json_string(p->name));
		if (p->kind == PART_VALUES)
			problem(r, CK_METADATA, "config.json", p->name,
				"expected by config.json (%s%s%s) but in no shard",
				cfg->model_type, quantised ? ", " : "",
				quantised ? fmt : "");
		else
			problem(r, CK_METADATA, "config.json", p->name,
				"missing %s: config.json declares %s, so '%s' "
				"needs it", p->kind == PART_SCALE ? "scale tensor"
								  : "weight_shape",
				fmt, t->name);
		return;
	}
	shape_str(want, sizeof want, p->ndim, p->shape);
	shape_str(have, sizeof have, got->ndim, got->shape);
	ok = got->ndim == p->ndim;
	for (int d = 0; ok && d < got->ndim; d++)
		ok = got->shape[d] == p->shape[d];
	if (!ok) {
		json_array_append_new(r->misshaped,
				      json_pack("{s:s, s:s, s:s}", "tensor",
						p->name, "expected", want,
						"actual", have));
		if (p->kind == PART_SCALE && cfg->qc.kind == QUANT_FP8_BLOCK)
			problem(r, CK_METADATA, sh->name, p->name,
				"scale shape %s, expected %s: ceil(%llu/%lld) x "
				"ceil(%llu/%lld) blocks of weight '%s'", have,
				want, (unsigned long long)t->shape[0],
				(long long)cfg->qc.block[0],
				(unsigned long long)t->shape[1],
				(long long)cfg->qc.block[1], t->name);
		else
			problem(r, CK_METADATA, sh->name, p->name,
				"shape %s, config.json implies %s%s%s", have,
				want, quantised ? " for " : "",
				quantised ? fmt : "");
		return;
	}
	if (!dtype_ok(p, got->dtype)) {
		problem(r, CK_METADATA, sh->name, p->name,
			"stored as %s, %s expects %s%s%s", dtype_name(got->dtype),
			quantised ? fmt : "an unquantised tensor",
			p->dtype == DT_INVALID ? "F32, BF16 or F16"
					       : dtype_name(p->dtype),
			p->alt_dtype >= 0 ? " or " : "",
			p->alt_dtype >= 0 ? dtype_name(p->alt_dtype) : "");
		return;
	}
	if (p->kind != PART_VALUES)
		check_part_values(cfg, t, p, sh, got, r);
}

/* A scale-like name whose weight the format keeps unquantised. */
static const char *orphan_scale_base(const char *name, char *base, size_t n)
{
	static const char *const suffix[] = {"_scale_inv", "_scale", "_packed",
					     "_shape"};
	size_t len = strlen(name);
	for (size_t i = 0; i < sizeof suffix / sizeof *suffix; i++) {
		size_t sl = strlen(suffix[i]);
		if (len > sl && !strcmp(name + len - sl, suffix[i]) &&
		    len - sl < n) {
			memcpy(base, name, len - sl);
			base[len - sl] = 0;
			return base;
		}
	}
	return NULL;
}

/* The tensors config.json implies (in the format it declares), against
 * what the shards hold. */
static void check_config(struct ckpt *c, const struct model_config *cfg,
			 struct report *r, struct shard_scan *scans)
{
	struct tensor_spec *t = NULL;
	size_t n = 0, unchecked = 0;
	struct d0_err err;
	json_t *expected = json_object(), *specs = json_object();
	const struct weight_format *f = format_of(&cfg->qc);
	char why[240];

	if (model_tensors(cfg, &t, &n, &err) < 0) {
		problem(r, CK_METADATA, "config.json", NULL, "%s", err.msg);
		json_decref(expected);
		json_decref(specs);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		struct stored_part sp[3];
		int np = quant_parts(&cfg->qc, &t[i], DT_INVALID, sp);
		int quantised = np > 1;
		json_object_set_new(specs, t[i].name, json_integer(quantised));
		for (int p = 0; p < np; p++)
			json_object_set_new(expected, sp[p].name,
					    json_integer((json_int_t)i));
		if (quantised && f->unfit &&
		    f->unfit(&cfg->qc, &t[i], why, sizeof why)) {
			problem(r, CK_METADATA, "config.json", t[i].name, "%s",
				why);
			continue;
		}
		for (int p = 0; p < np; p++)
			check_part(c, cfg, &t[i], &sp[p], quantised, r, &unchecked);
	}
	if (unchecked)
		problem(r, CK_METADATA, "config.json", NULL,
			"%zu expected tensors not checked: the shard holding "
			"them could not be read", unchecked);
	for (size_t s = 0; s < c->nshards; s++) {
		struct ckpt_shard *sh = &c->shards[s];
		if (!sh->parsed)
			continue;
		for (size_t i = 0; i < scans[s].n; i++) {
			const struct scan_item *x = &scans[s].it[i];
			if (x->pc.bad)
				problem(r, CK_METADATA, sh->name, x->tensor,
					"%llu %s (first at element %llu): "
					"e4m3fn has no Inf, 0x7f/0xff are NaN",
					(unsigned long long)x->pc.bad, x->pc.what,
					(unsigned long long)x->pc.first);
		}
		for (size_t i = 0; i < sh->st.ntensors; i++) {
			const char *name = sh->st.tensors[i].name;
			char base[200];
			if (json_object_get(expected, name))
				continue;
			json_array_append_new(r->unexpected, json_string(name));
			if (orphan_scale_base(name, base, sizeof base) &&
			    json_object_get(specs, base)) {
				if (cfg->qc.kind == QUANT_NONE)
					problem(r, CK_METADATA, sh->name, name,
						"unexpected tensor: a quantisation "
						"scale, but config.json declares no "
						"quantization_config");
				else
					problem(r, CK_METADATA, sh->name, name,
						"a scale for '%s', which %s keeps "
						"unquantised (norms, routers, "
						"embeddings, lm_head and ignored "
						"modules are not quantised)", base,
						cfg->quant);
				continue;
			}
			problem(r, CK_METADATA, sh->name, name,
				"unexpected tensor: config.json (%s) implies "
				"no such tensor", cfg->model_type);
		}
	}
	json_decref(expected);
	json_decref(specs);
	free(t);
}

/* Hash every shard (and every other file SHA256SUMS lists). */
static int check_sums(struct ckpt *c, const char *sums_path, int explicit_sums,
		      int threads, struct report *r, json_t **sums_out,
		      struct shard_scan *scans, int snapshot)
{
	json_t *sums = NULL, *v;
	struct d0_err err;
	struct hash_job *jobs;
	struct progress pr = {0};
	const char **names;
	size_t nj = 0, nsh;
	const char *key;

	if (!path_exists(sums_path)) {
		if (explicit_sums) {
			fprintf(stderr, "day0-engine: %s: no such file\n",
				sums_path);
			return -1;
		}
		r->warn_no_sums = 1;
		for (size_t s = 0; snapshot && s < c->nshards; s++)
			r->warn_no_sums &= !c->shards[s].expected_sha;
	} else if (sums_load(sums_path, &sums, &err) < 0) {
		problem(r, CK_INTEGRITY, sums_path, NULL, "%s", err.msg);
		sums = NULL;
	}
	jobs = calloc(c->nshards + (sums ? json_object_size(sums) : 0) + 1,
		      sizeof *jobs);
	names = calloc(c->nshards + (sums ? json_object_size(sums) : 0) + 1,
		       sizeof *names);
	for (size_t s = 0; s < c->nshards; s++) {
		struct ckpt_shard *sh = &c->shards[s];
		json_t *e = sums ? json_object_get(sums, sh->name) : NULL;
		if (e) {
			free(sh->expected_sha);
			sh->expected_sha = strdup(json_string_value(e));
		} else if (sums && !sh->expected_sha)
			problem(r, CK_INTEGRITY, sh->name, NULL,
				"no checksum for this shard in %s", sums_path);
		struct stat st;
		if (stat(sh->path, &st) < 0 || !S_ISREG(st.st_mode))
			continue; /* already reported as missing or not a file */
		jobs[nj].path = sh->path;
		if (scans[s].n) {
			jobs[nj].on_bytes = scan_bytes;
			jobs[nj].on_bytes_arg = &scans[s];
		}
		names[nj++] = sh->name;
	}
	nsh = nj; /* jobs past nsh own their path */
	/* Other listed files (config.json, the index) are checked too. */
	if (sums)
		json_object_foreach(sums, key, v) {
			int is_shard = 0;
			for (size_t s = 0; s < c->nshards; s++)
				is_shard |= !strcmp(c->shards[s].name, key);
			if (is_shard)
				continue;
			char *p = path_join(c->dir, key);
			if (!path_exists(p)) {
				problem(r, CK_INTEGRITY, key, NULL,
					"listed in %s but missing", sums_path);
				free(p);
				continue;
			}
			jobs[nj].path = p;
			names[nj++] = key;
		}
	for (size_t i = 0; i < nj; i++) {
		struct stat st;
		if (stat(jobs[i].path, &st) == 0)
			pr.total += (uint64_t)st.st_size;
	}
	hash_files(jobs, nj, threads, &pr.done, tick, &pr);
	tick(&pr);
	for (size_t i = 0; i < nj; i++) {
		const char *want = sums ? json_string_value(
						  json_object_get(sums, names[i]))
					: NULL;
		if (jobs[i].rc < 0) {
			const char *m = jobs[i].err.msg;
			size_t pl = strlen(jobs[i].path);
			if (!strncmp(m, jobs[i].path, pl) && m[pl] == ':')
				m += pl + 2; /* problem() names the file */
			problem(r, CK_INTEGRITY, names[i], NULL, "%s", m);
			continue;
		}
		for (size_t s = 0; s < c->nshards; s++)
			if (!strcmp(c->shards[s].name, names[i])) {
				memcpy(c->shards[s].sha, jobs[i].hex, 65);
				if (!want && c->shards[s].expected_sha) {
					want = c->shards[s].expected_sha;
					if (strcmp(want, jobs[i].hex))
						problem(r, CK_INTEGRITY, names[i], NULL,
							"SHA-256 mismatch: file has %s, "
							"its Hugging Face cache blob is "
							"named %s", jobs[i].hex, want);
					want = NULL;
				}
			}
		if (want && strcmp(want, jobs[i].hex))
			problem(r, CK_INTEGRITY, names[i], NULL,
				"SHA-256 mismatch: file has %s, %s expects %s",
				jobs[i].hex, sums_path, want);
	}
	for (size_t i = nsh; i < nj; i++)
		free((char *)jobs[i].path);
	free(jobs);
	free(names);
	*sums_out = sums;
	return 0;
}

static const char *status_of(const struct report *r, enum check_id ck)
{
	if (count(r, ck))
		return "fail";
	if (ck == CK_INTEGRITY && r->warn_no_sums)
		return "warn";
	return "pass";
}

static void print_table(const struct ckpt *c, const struct report *r)
{
	char b[32];
	printf("%-44s %8s %12s  %-7s %s\n", "shard", "tensors", "bytes",
	       "header", "sha256");
	for (size_t s = 0; s < c->nshards; s++) {
		const struct ckpt_shard *sh = &c->shards[s];
		const char *hs = "-";
		int bad_hash = 0;
		for (size_t i = 0; i < r->n; i++)
			if (!strcmp(r->p[i].file, sh->name) &&
			    strstr(r->p[i].msg, "SHA-256 mismatch"))
				bad_hash = 1;
		if (sh->sha[0])
			hs = bad_hash ? "MISMATCH"
				      : sh->expected_sha ? "ok" : "unchecked";
		else if (!path_exists(sh->path))
			hs = "MISSING";
		printf("%-44s %8zu %12s  %-7s %s\n", sh->name,
		       sh->parsed ? sh->st.ntensors : 0,
		       sh->parsed ? fmt_bytes(sh->st.file_size, b) : "-",
		       sh->parsed ? "ok" : "BAD", hs);
	}
}

static json_t *report_json(const char *path, const struct ckpt *c,
			   const struct model_config *cfg, int cfg_ok,
			   const struct report *r)
{
	json_t *doc = json_object(), *shards = json_array(), *probs = json_array();
	json_t *checks = json_object();
	for (size_t s = 0; c && s < c->nshards; s++) {
		const struct ckpt_shard *sh = &c->shards[s];
		json_array_append_new(
			shards,
			json_pack("{s:s, s:b, s:I, s:I, s:s?, s:s?}", "file",
				  sh->name, "header_ok", sh->parsed, "tensors",
				  (json_int_t)(sh->parsed ? sh->st.ntensors : 0),
				  "bytes",
				  (json_int_t)(sh->parsed ? sh->st.file_size : 0),
				  "sha256", sh->sha[0] ? sh->sha : NULL,
				  "expected_sha256", sh->expected_sha));
	}
	for (size_t i = 0; i < r->n; i++)
		json_array_append_new(
			probs, json_pack("{s:s, s:s, s:s?, s:s}", "check",
					 check_item[r->p[i].check], "file",
					 r->p[i].file, "tensor", r->p[i].tensor,
					 "msg", r->p[i].msg));
	for (int ck = 0; ck < 2; ck++)
		json_object_set_new(checks, check_item[ck],
				    json_pack("{s:s, s:I}", "status",
					      status_of(r, ck), "problems",
					      (json_int_t)count(r, ck)));
	json_object_set_new(doc, "path", json_string(path));
	json_object_set_new(doc, "model_type",
			    cfg_ok ? json_string(cfg->model_type) : json_null());
	json_object_set_new(doc, "ok", json_boolean(r->n == 0));
	json_object_set_new(doc, "checks", checks);
	json_object_set_new(doc, "shards", shards);
	json_object_set_new(doc, "config",
			    json_pack("{s:O, s:O, s:O}", "missing", r->missing,
				      "unexpected", r->unexpected, "misshaped",
				      r->misshaped));
	json_object_set_new(doc, "problems", probs);
	json_object_set_new(doc, "read", json_string(read_path_name()));
	return doc;
}

#define PRINT_MAX 40 /* per check; --json has them all */

static void print_problems(const char *dir, const struct report *r)
{
	size_t shown[2] = {0, 0};
	for (size_t i = 0; i < r->n; i++) {
		const struct problem *p = &r->p[i];
		if (shown[p->check]++ == PRINT_MAX) {
			size_t more = count(r, p->check) - PRINT_MAX;
			fprintf(stderr, "day0-engine: %s: ... and %zu more %s "
				"problem%s (see --json)\n", dir, more,
				check_item[p->check], more == 1 ? "" : "s");
		}
		if (shown[p->check] > PRINT_MAX)
			continue;
		const char *sep = dir && p->file[0] != '/' ? "/" : "";
		fprintf(stderr, "day0-engine: %s%s%s: %s%s%s%s\n",
			dir && p->file[0] != '/' ? dir : "", sep, p->file,
			p->tensor ? "tensor '" : "", p->tensor ? p->tensor : "",
			p->tensor ? "': " : "", p->msg);
	}
}

/* A lone .safetensors file: format rules only. */
static int verify_file(const char *path, int json)
{
	struct st_file f;
	struct d0_err err;
	char b[32];
	if (!path_exists(path)) {
		fprintf(stderr, "day0-engine: %s: no such file\n", path);
		return EXIT_USAGE;
	}
	events_stage("verify", "start", 0, 0, path);
	if (st_open(path, &f, &err) < 0) {
		int unreadable = strstr(err.msg, "cannot open") != NULL ||
				 strstr(err.msg, "not a regular file") != NULL;
		fprintf(stderr, "day0-engine: %s\n", err.msg);
		if (json) {
			json_t *d = json_pack("{s:s, s:b, s:s}", "path", path,
					      "ok", 0, "error", err.msg);
			json_dumpf(d, stdout, JSON_INDENT(2));
			putchar('\n');
			json_decref(d);
		}
		events_check("weights.integrity", "fail", err.msg, NULL, NULL);
		events_stage("verify", "end", 1, unreadable ? 2 : 1, err.msg);
		return unreadable ? EXIT_USAGE : EXIT_CHECK_FAILED;
	}
	if (json) {
		json_t *d = json_pack("{s:s, s:b, s:I, s:I}", "path", path,
				      "ok", 1, "tensors",
				      (json_int_t)f.ntensors, "bytes",
				      (json_int_t)f.file_size);
		json_dumpf(d, stdout, JSON_INDENT(2));
		putchar('\n');
		json_decref(d);
	} else if (!events_enabled()) {
		printf("%s: ok: %zu tensors, %s, header %llu bytes\n", path,
		       f.ntensors, fmt_bytes(f.file_size, b),
		       (unsigned long long)f.header_len);
	}
	events_check("weights.integrity", "pass", "safetensors format ok",
		     json_integer((json_int_t)f.ntensors), NULL);
	events_stage("verify", "end", 1, 0, path);
	st_free(&f);
	return EXIT_OK;
}

static int run(int argc, char **argv)
{
	static const struct option lo[] = {
		{"checksums", 1, 0, 'c'}, {"threads", 1, 0, 't'},
		{"json", 0, 0, 'j'},      {"events", 0, 0, 'e'},
		{"help", 0, 0, 'h'},      {0, 0, 0, 0},
	};
	const struct step_entry *S = &step_verify;
	const char *path, *sums_arg = NULL;
	long threads = sysconf(_SC_NPROCESSORS_ONLN);
	int ch, json = 0, events = 0, cfg_ok = 0, rc;
	struct report r = {0};
	struct ckpt c;
	struct model_config cfg;
	struct d0_err err;
	json_t *sums = NULL;
	char *cfg_path, *sums_path;
	struct hf_snapshot snap;
	struct shard_scan *scans = NULL;
	int snapshot = 0;

	memset(&snap, 0, sizeof snap);
	memset(&cfg, 0, sizeof cfg);
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case 'c': sums_arg = optarg; break;
		case 't':
			if (parse_long(optarg, 1, 1024, &threads) < 0)
				return step_usage_error(S, "--threads: expected "
							"1..1024, got '%s'",
							optarg);
			break;
		case 'j': json = 1; break;
		case 'e': events = 1; break;
		case 'h': step_help(S); return EXIT_OK;
		default:
			return step_usage_error(S, "unknown or incomplete "
						"option '%s'", argv[optind - 1]);
		}
	}
	if (optind != argc - 1)
		return step_usage_error(S, "expected one MODEL_DIR or FILE");
	if (threads < 1)
		threads = 1;
	path = argv[optind];
	events_init(stdout, events && !json);
	if (!path_is_dir(path))
		return verify_file(path, json);

	events_stage("verify", "start", 0, 0, path);
	r.missing = json_array();
	r.unexpected = json_array();
	r.misshaped = json_array();
	if (ckpt_open(path, &c, &err) < 0) {
		fprintf(stderr, "day0-engine: %s\n", err.msg);
		events_check("weights.integrity", "fail", err.msg, NULL, NULL);
		events_stage("verify", "end", 1, 1, err.msg);
		report_free(&r);
		return EXIT_CHECK_FAILED;
	}
	snapshot = hf_snapshot_open(path, &snap);
	scans = calloc(c.nshards + 1, sizeof *scans);
	for (size_t s = 0; s < c.nshards; s++) {
		struct ckpt_shard *sh = &c.shards[s];
		char blob[65];
		int b = snapshot ? hf_snapshot_blob(&snap, path, sh->name, blob,
						    &err)
				 : 0;
		if (b < 0) { /* a link out of the snapshot: never opened */
			problem(&r, CK_INTEGRITY, sh->name, NULL, "%s",
				err.msg + strlen(sh->name) + 2);
			continue;
		}
		if (b == 1)
			sh->expected_sha = strdup(blob);
		if (!path_exists(sh->path)) {
			problem(&r, CK_INTEGRITY, sh->name, NULL,
				"shard named by the index does not exist");
			continue;
		}
		if (st_open(sh->path, &sh->st, &err) < 0) {
			/* err.msg starts with the path; keep the rest */
			const char *m = err.msg + strlen(sh->path);
			problem(&r, CK_INTEGRITY, sh->name, NULL, "%s",
				*m == ':' ? m + 2 : err.msg);
			continue;
		}
		sh->parsed = 1;
	}
	if (c.has_index)
		check_index(&c, &r);

	/* config first: it says which bytes to scan while hashing */
	cfg_path = path_join(path, "config.json");
	{
		char blob[65];
		if (snapshot &&
		    hf_snapshot_blob(&snap, path, "config.json", blob, &err) < 0)
			problem(&r, CK_METADATA, "config.json", NULL, "%s",
				err.msg + strlen("config.json") + 2);
		else if (model_config_load(cfg_path, &cfg, &err) < 0) {
			const char *m = err.msg + strlen(cfg_path);
			problem(&r, CK_METADATA, "config.json", NULL, "%s",
				*m == ':' ? m + 2 : err.msg);
		} else {
			cfg_ok = 1;
			plan_scans(&c, &cfg, scans);
		}
	}
	free(cfg_path);

	sums_path = sums_arg ? strdup(sums_arg) : path_join(path, "SHA256SUMS");
	rc = check_sums(&c, sums_path, sums_arg != NULL, (int)threads, &r,
			&sums, scans, snapshot);
	free(sums_path);
	if (rc < 0) {
		if (cfg_ok)
			model_config_free(&cfg);
		free_scans(scans, c.nshards);
		hf_snapshot_close(&snap);
		ckpt_close(&c);
		report_free(&r);
		return EXIT_USAGE;
	}
	if (cfg_ok)
		check_config(&c, &cfg, &r, scans);
	if (r.warn_no_sums)
		snprintf(r.warn_why, sizeof r.warn_why,
			 "checksums not compared: no SHA256SUMS, no "
			 "--checksums FILE%s",
			 snapshot ? ", and the Hugging Face cache snapshot's "
				    "shards are not links to SHA-256-named blobs"
				  : ", and not a Hugging Face cache snapshot "
				    "(whose blob names are the SHA-256)");

	for (int ck = 0; ck < 2; ck++) {
		char detail[512];
		size_t k = count(&r, ck);
		const struct problem *first = NULL;
		for (size_t i = 0; i < r.n && !first; i++)
			if (r.p[i].check == (enum check_id)ck)
				first = &r.p[i];
		/* the first problem with the shard (and tensor) it is in */
		if (k)
			snprintf(detail, sizeof detail, "%zu problem%s: %s%s%s%s: %s",
				 k, k == 1 ? "" : "s", first->file,
				 first->tensor ? " tensor '" : "",
				 first->tensor ? first->tensor : "",
				 first->tensor ? "'" : "", first->msg);
		else if (ck == CK_INTEGRITY)
			snprintf(detail, sizeof detail, "%zu shard%s%s%s",
				 c.nshards, c.nshards == 1 ? "" : "s",
				 r.warn_no_sums ? ", " : ", sha256 ok",
				 r.warn_no_sums ? r.warn_why : "");
		else
			snprintf(detail, sizeof detail,
				 "every tensor matches config.json (%s)",
				 cfg.model_type);
		if (ck == CK_INTEGRITY && events_enabled()) {
			/* The checksums themselves, per shard, for the
			 * reproducibility manifest (the report reads them). */
			json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:i}", "item",
					      check_item[ck], "status",
					      status_of(&r, ck), "detail", detail,
					      "value", (json_int_t)k, "threshold",
					      0),
			       *sums_o = json_object();
			for (size_t sh = 0; sh < c.nshards; sh++)
				if (c.shards[sh].sha[0])
					json_object_set_new(
					    sums_o, c.shards[sh].name,
					    json_string(c.shards[sh].sha));
			json_object_set_new(o, "sha256", sums_o);
			events_emit("check", o);
			continue;
		}
		events_check(check_item[ck], status_of(&r, ck), detail,
			     json_integer((json_int_t)k), json_integer(0));
	}

	if (json) {
		json_t *doc = report_json(path, &c, &cfg, cfg_ok, &r);
		json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		putchar('\n');
		json_decref(doc);
	} else if (!events_enabled()) {
		print_table(&c, &r);
		for (int ck = 0; ck < 2; ck++)
			printf("%-18s %s%s%s%s\n", check_item[ck],
			       status_of(&r, ck),
			       ck == CK_INTEGRITY && r.warn_no_sums ? " (" : "",
			       ck == CK_INTEGRITY && r.warn_no_sums ? r.warn_why
								    : "",
			       ck == CK_INTEGRITY && r.warn_no_sums ? ")" : "");
		if (snapshot)
			printf("%-18s Hugging Face cache %s, revision %s: shard "
			       "blob names checked as SHA-256\n", "source",
			       snap.name, snap.revision);
	}
	print_problems(path, &r);
	rc = r.n ? EXIT_CHECK_FAILED : EXIT_OK;
	events_stage("verify", "end", 1, rc, rc ? "verification failed" : "ok");
	if (cfg_ok)
		model_config_free(&cfg);
	free_scans(scans, c.nshards);
	hf_snapshot_close(&snap);
	json_decref(sums);
	ckpt_close(&c);
	report_free(&r);
	return rc;
}
