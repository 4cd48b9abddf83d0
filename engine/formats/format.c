/*
 * format.c - what every weight format shares: which unit a config's
 * quantization_config selects, which tensors a format quantises (2-D
 * linear weights; never embeddings, lm_head, norms or routers; never a
 * module the ignore list names) and the sizes and splits that follow from
 * a unit's stored parts.  The units themselves (format_plain.c,
 * format_fp8.c, format_ct.c) know their bytes.
 */
#include "engine.h"

#include <pthread.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

static const struct weight_format *const formats[] = {
	&format_plain, &format_fp8, &format_ct,
};

const struct weight_format *format_of(const struct quant_config *q)
{
	for (size_t i = 0; q && i < sizeof formats / sizeof *formats; i++)
		if (formats[i]->kind == q->kind)
			return formats[i];
	return &format_plain;
}

int quant_config_parse(json_t *root, const char *path, struct quant_config *q,
		       struct d0_err *err)
{
	json_t *qc = json_object_get(root, "quantization_config");
	json_t *m;
	memset(q, 0, sizeof *q);
	q->kind = QUANT_NONE;
	if (!qc || json_is_null(qc))
		return 0;
	if (!json_is_object(qc))
		return d0_errf(err, "%s: 'quantization_config' must be an "
			       "object", path);
	m = json_object_get(qc, "quant_method");
	if (!json_is_string(m))
		return d0_errf(err, "%s: quantization_config needs a string "
			       "'quant_method'", path);
	for (size_t i = 0; i < sizeof formats / sizeof *formats; i++)
		if (formats[i]->method &&
		    !strcmp(formats[i]->method, json_string_value(m))) {
			q->kind = formats[i]->kind;
			return formats[i]->parse(qc, path, q, err);
		}
	return d0_errf(err, "%s: quantization_config.quant_method '%s' is "
		       "not a format the engine reads (known: fp8, "
		       "compressed-tensors)", path, json_string_value(m));
}

json_t *quant_config_to_json(const struct quant_config *q)
{
	const struct weight_format *f = format_of(q);
	return f->to_json ? f->to_json(q) : NULL;
}

const char *quant_describe(const struct quant_config *q, char *buf, size_t n)
{
	if (!q || q->kind == QUANT_NONE)
		snprintf(buf, n, "plain");
	else if (q->kind == QUANT_FP8_BLOCK)
		snprintf(buf, n, "fp8 %s, %lldx%lld blocks",
			 q->fp8_dtype == DT_F8_E5M2 ? "e5m2" : "e4m3fn",
			 (long long)q->block[0], (long long)q->block[1]);
	else if (q->group)
		snprintf(buf, n, "int%d, groups of %lld", q->bits,
			 (long long)q->group);
	else
		snprintf(buf, n, "int%d, per channel", q->bits);
	return buf;
}

/*
 * Compiled "re:" patterns, kept for the process: plan asks about every
 * tensor of every candidate layout (a trillion-parameter MoE has ~70k
 * weights), and compiling a regex per question would dominate.
 */
#define RE_CACHE 64
static struct {
	char *pat;
	regex_t re;
	int ok;
} re_cache[RE_CACHE];
static size_t re_cached;
static pthread_mutex_t re_mu = PTHREAD_MUTEX_INITIALIZER;

static int regex_matches(const char *pat, const char *module)
{
	int hit = 0;
	size_t i;
	pthread_mutex_lock(&re_mu);
	for (i = 0; i < re_cached && strcmp(re_cache[i].pat, pat); i++)
		;
	if (i == re_cached && i < RE_CACHE) {
		/* Python's re.match: anchored at the start */
		size_t len = strlen(pat);
		char *anchored = malloc(len + 8);
		snprintf(anchored, len + 8, "^(%s)", pat);
		re_cache[i].pat = strdup(pat);
		re_cache[i].ok = regcomp(&re_cache[i].re, anchored,
					 REG_EXTENDED | REG_NOSUB) == 0;
		free(anchored);
		re_cached++;
	}
	if (i < re_cached && re_cache[i].ok)
		hit = regexec(&re_cache[i].re, module, 0, NULL, 0) == 0;
	pthread_mutex_unlock(&re_mu);
	return hit;
}

/* Does one ignore entry name this module? */
static int ignore_matches(const struct quant_config *q, const char *pat,
			  const char *module)
{
	if (q->regex_ignore && !strncmp(pat, "re:", 3))
		return regex_matches(pat + 3, module);
	if (q->regex_ignore)
		return !strcmp(pat, module);
	return strstr(module, pat) != NULL; /* transformers' fp8: substring */
}

int quant_applies(const struct quant_config *q, const struct tensor_spec *t)
{
	char module[sizeof t->name];
	size_t len = strlen(t->name);
	const char *pat = q ? q->ignore : NULL;
	if (!q || q->kind == QUANT_NONE || t->ndim != 2 || t->file_ndim)
		return 0; /* a conv kernel (patch embedding) stays as stored */
	switch (t->role) {
	case ROLE_EMBED: case ROLE_LM_HEAD: case ROLE_NORM: case ROLE_ROUTER:
	case ROLE_ROUTER_BIAS:
		return 0;
	default:
		break;
	}
	if (t->shape[0] < 2) /* a gate of one output (shared_expert_gate) */
		return 0;
	memcpy(module, t->name, len + 1);
	if (len > 7 && !strcmp(module + len - 7, ".weight"))
		module[len - 7] = 0;
	for (size_t i = 0; i < q->nignore; i++, pat += strlen(pat) + 1)
		if (ignore_matches(q, pat, module))
			return 0;
	return 1;
}

int quant_parts(const struct quant_config *q, const struct tensor_spec *t,
		int plain_dtype, struct stored_part out[3])
{
	if (!quant_applies(q, t)) {
		format_plain.parts(q, t, out);
		out[0].dtype = plain_dtype;
		return 1;
	}
	return format_of(q)->parts(q, t, out);
}

double quant_level_max(const struct quant_config *q)
{
	if (q->kind == QUANT_FP8_BLOCK)
		return fp8_max(q->fp8_dtype);
	if (q->kind == QUANT_PACKED_INT)
		return (double)((1 << (q->bits - 1)) - 1);
	return 1.0;
}

int quant_read_f32(const struct quant_config *q, int quantised, uint64_t rows,
		   uint64_t cols, const struct part_ref *refs, float *out,
		   const char *file, const char *name, struct d0_err *err)
{
	const struct weight_format *f = quantised ? format_of(q) : &format_plain;
	struct quant_view v = {.rows = rows, .cols = cols};
	unsigned char *val, *sc = NULL;
	uint64_t vbytes = refs[0].numel * dtype_size(refs[0].dtype), sbytes = 0;
	int rc = 0;
	val = malloc(vbytes + 1);
	if (!val)
		return d0_errf(err, "%s: tensor '%s': out of memory", file, name);
	if (pread_full(refs[0].fd, val, vbytes, refs[0].off) < 0)
		rc = d0_errf(err, "%s: tensor '%s': read failed", file, name);
	if (rc == 0 && quantised) {
		sbytes = refs[1].numel * dtype_size(refs[1].dtype);
		sc = malloc(sbytes + 1);
		if (!sc || pread_full(refs[1].fd, sc, sbytes, refs[1].off) < 0)
			rc = d0_errf(err, "%s: tensor '%s': cannot read its "
				     "scales", file, name);
	}
	v.values = val;
	v.values_dtype = refs[0].dtype;
	v.scale = sc;
	v.scale_dtype = quantised ? refs[1].dtype : DT_INVALID;
	v.scale_cols = quantised ? refs[1].cols : 0;
	if (rc == 0 && f->decode(q, &v, 0, (size_t)(rows * cols), out) < 0)
		rc = d0_errf(err, "%s: tensor '%s': cannot decode %s data as "
			     "%s", file, name, dtype_name(refs[0].dtype),
			     quantised ? f->method : "f32");
	free(val);
	free(sc);
	return rc;
}

static uint64_t part_bytes(const struct stored_part *p, int axis, int parts)
{
	uint64_t n = 1;
	for (int d = 0; d < p->ndim; d++) /* a conv kernel's file shape too */
		n *= p->shape[d];
	if (axis >= 0 && parts > 1 && p->kind != PART_SHAPE)
		n /= (uint64_t)parts;
	return n * dtype_size(p->dtype);
}

uint64_t quant_stored_bytes(const struct quant_config *q,
			    const struct tensor_spec *t, int plain_dtype,
			    int axis, int parts)
{
	struct stored_part p[3];
	int np = quant_parts(q, t, plain_dtype, p);
	uint64_t b = 0;
	for (int i = 0; i < np; i++)
		b += part_bytes(&p[i], axis, parts);
	return b;
}

/* Does a 1/parts slice along axis keep every part's units whole? */
static int split_fits(const struct stored_part *p, int np, uint64_t len,
		      int axis, int parts)
{
	if (len % (uint64_t)parts)
		return 0;
	for (int i = 0; i < np; i++) {
		uint64_t u = p[i].unit[axis];
		if (p[i].kind == PART_SHAPE)
			return parts == 1;
		if (u == 0 || (len / (uint64_t)parts) % u)
			return 0;
	}
	return 1;
}

int quant_split_ok(const struct quant_config *q, const struct tensor_spec *t,
		   int axis, int parts, struct d0_err *err)
{
	struct stored_part p[3];
	int np, below = 0, above = 0;
	uint64_t len;
	if (axis < 0 || parts <= 1 || !quant_applies(q, t))
		return 0;
	np = quant_parts(q, t, DT_BF16, p);
	len = t->shape[axis];
	if (split_fits(p, np, len, axis, parts))
		return 0;
	for (int k = parts - 1; k >= 1 && !below; k--)
		if (split_fits(p, np, len, axis, k))
			below = k;
	for (int k = parts + 1; k <= 4096 && (uint64_t)k <= len && !above; k++)
		if (split_fits(p, np, len, axis, k))
			above = k;
	if (q->kind == QUANT_PACKED_INT && np == 3 && parts > 1)
		return d0_errf(err, "tensor '%s': a %s split into %d would "
			       "rewrite its weight_shape; keeping packed "
			       "integers is not supported (dequantise with "
			       "--dtype bf16 or f32)", t->name,
			       axis ? "row-parallel" : "column-parallel", parts);
	return d0_errf(err, "tensor '%s': axis %d of %llu %s split %d ways "
		       "cuts a %s %llu wide; the nearest parts that keep them "
		       "whole are %d%s%.0d", t->name, axis,
		       (unsigned long long)len,
		       axis ? "columns" : "rows", parts,
		       q->kind == QUANT_FP8_BLOCK ? "scale block" : "group",
		       (unsigned long long)(p[1].unit[axis] ? p[1].unit[axis] : 1),
		       below, above ? " or " : "", above);
}
