/*
 * format_ct.c - "compressed-tensors" pack-quantized integers, as
 * Kimi-K2-Thinking and Neural Magic's w4a16 releases store them.
 *
 * quantization_config: {"quant_method": "compressed-tensors", "format":
 * "pack-quantized", "config_groups": {"group_0": {"targets": ["Linear"],
 * "weights": {"num_bits": 4, "type": "int", "symmetric": true,
 * "strategy": "group", "group_size": 32}}}, "ignore": ["lm_head",
 * "re:.*self_attn.*", ...]}.  One config group is read; ignore entries are
 * exact module names or "re:" regular expressions matched from the start
 * of the module name (POSIX extended syntax, which the published patterns
 * use).
 *
 * A quantised weight W [R, C] is stored as W.weight_packed (I32
 * [R, C * bits / 32]: values offset by 2^(bits-1) to be unsigned, packed
 * from the least significant bits, compressed-tensors' pack_to_int32),
 * W.weight_scale ([R, C / group], or [R, 1] per channel; BF16, F16 or
 * F32) and W.weight_shape (I32 or I64 [2] = [R, C]).  Symmetric only: no
 * zero point.  W = (q - 2^(bits-1)) * scale of the element's group.
 */
#include "engine.h"

#include <math.h>
#include <string.h>

static int parse(json_t *qc, const char *path, struct quant_config *q,
		 struct d0_err *err)
{
	json_t *fmt = json_object_get(qc, "format"), *groups, *w, *g, *ig, *v;
	const char *key, *strategy;
	char *at = q->ignore;
	size_t i;
	q->regex_ignore = 1;
	if (!json_is_string(fmt) ||
	    strcmp(json_string_value(fmt), "pack-quantized"))
		return d0_errf(err, "%s: compressed-tensors format '%s' is not "
			       "read (only \"pack-quantized\")", path,
			       json_is_string(fmt) ? json_string_value(fmt)
						   : "(none)");
	groups = json_object_get(qc, "config_groups");
	if (!json_is_object(groups) || json_object_size(groups) != 1)
		return d0_errf(err, "%s: quantization_config.config_groups must "
			       "hold exactly one group", path);
	json_object_foreach(groups, key, g) {
		w = json_object_get(g, "weights");
		if (!json_is_object(w))
			return d0_errf(err, "%s: config_groups.%s.weights must be "
				       "an object", path, key);
		v = json_object_get(w, "num_bits");
		if (!json_is_integer(v) || (json_integer_value(v) != 4 &&
					    json_integer_value(v) != 8))
			return d0_errf(err, "%s: config_groups.%s.weights.num_bits "
				       "must be 4 or 8", path, key);
		q->bits = (int)json_integer_value(v);
		v = json_object_get(w, "type");
		if (v && (!json_is_string(v) || strcmp(json_string_value(v), "int")))
			return d0_errf(err, "%s: config_groups.%s.weights.type "
				       "must be \"int\"", path, key);
		if (json_is_false(json_object_get(w, "symmetric")))
			return d0_errf(err, "%s: config_groups.%s.weights: "
				       "asymmetric (zero-point) weights are not "
				       "read", path, key);
		strategy = json_string_value(json_object_get(w, "strategy"));
		if (!strategy || (strcmp(strategy, "group") &&
				  strcmp(strategy, "channel")))
			return d0_errf(err, "%s: config_groups.%s.weights.strategy "
				       "must be \"group\" or \"channel\"", path,
				       key);
		if (!strcmp(strategy, "group")) {
			v = json_object_get(w, "group_size");
			if (!json_is_integer(v) || json_integer_value(v) < 1 ||
			    json_integer_value(v) > (1 << 20))
				return d0_errf(err, "%s: config_groups.%s.weights."
					       "group_size must be a positive "
					       "integer", path, key);
			q->group = json_integer_value(v);
		}
	}
	ig = json_object_get(qc, "ignore");
	if (ig && !json_is_null(ig) && !json_is_array(ig))
		return d0_errf(err, "%s: quantization_config.ignore must be a "
			       "list", path);
	json_array_foreach(ig, i, v) {
		const char *s = json_string_value(v);
		size_t len = s ? strlen(s) : 0;
		if (!len)
			return d0_errf(err, "%s: quantization_config.ignore[%zu] "
				       "is not a module name or \"re:\" pattern",
				       path, i);
		if ((size_t)(at - q->ignore) + len + 1 >= sizeof q->ignore)
			return d0_errf(err, "%s: quantization_config.ignore is "
				       "longer than %d bytes", path,
				       QUANT_IGNORE_BYTES);
		memcpy(at, s, len + 1);
		at += len + 1;
		q->nignore++;
	}
	return 0;
}

static json_t *to_json(const struct quant_config *q)
{
	json_t *ig = json_array();
	const char *p = q->ignore;
	json_t *w = json_pack("{s:n, s:n, s:b, s:i, s:s, s:s, s:b, s:s}",
			      "actorder", "block_structure", "dynamic", 0,
			      "num_bits", q->bits, "observer", "minmax",
			      "strategy", q->group ? "group" : "channel",
			      "symmetric", 1, "type", "int");
	if (q->group)
		json_object_set_new(w, "group_size", json_integer(q->group));
	for (size_t i = 0; i < q->nignore; i++, p += strlen(p) + 1)
		json_array_append_new(ig, json_string(p));
	return json_pack("{s:{s:{s:n, s:n, s:[s], s:o}}, s:s, s:o, s:n, s:s, "
			 "s:s}",
			 "config_groups", "group_0", "input_activations",
			 "output_activations", "targets", "Linear", "weights", w,
			 "format", "pack-quantized", "ignore", ig,
			 "kv_cache_scheme", "quant_method", "compressed-tensors",
			 "quantization_status", "compressed");
}

static uint64_t per_word(const struct quant_config *q)
{
	return 32u / (unsigned)q->bits;
}

static int parts(const struct quant_config *q, const struct tensor_spec *t,
		 struct stored_part *out)
{
	uint64_t R = t->shape[0], C = t->shape[1], pw = per_word(q);
	uint64_t g = q->group ? (uint64_t)q->group : C;
	memset(out, 0, 3 * sizeof *out);
	snprintf(out[0].name, sizeof out[0].name, "%.*s_packed",
		 (int)strlen(t->name), t->name);
	out[0].kind = PART_VALUES;
	out[0].dtype = DT_I32;
	out[0].alt_dtype = -1;
	out[0].ndim = 2;
	out[0].shape[0] = R;
	out[0].shape[1] = (C + pw - 1) / pw;
	out[0].unit[0] = 1;
	out[0].unit[1] = pw;
	snprintf(out[1].name, sizeof out[1].name, "%s_scale", t->name);
	out[1].kind = PART_SCALE;
	out[1].dtype = DT_BF16;
	out[1].alt_dtype = DT_F32;
	out[1].ndim = 2;
	out[1].shape[0] = R;
	out[1].shape[1] = (C + g - 1) / g;
	out[1].unit[0] = 1;
	out[1].unit[1] = g;
	snprintf(out[2].name, sizeof out[2].name, "%s_shape", t->name);
	out[2].kind = PART_SHAPE;
	out[2].dtype = DT_I32;
	out[2].alt_dtype = DT_I64;
	out[2].ndim = 1;
	out[2].shape[0] = 2;
	return 3;
}

static const char *unfit(const struct quant_config *q,
			 const struct tensor_spec *t, char *buf, size_t n)
{
	uint64_t C = t->shape[1];
	if (q->group && C % (uint64_t)q->group) {
		snprintf(buf, n, "group_size %lld does not divide its %llu "
			 "columns (a group would run past the row)",
			 (long long)q->group, (unsigned long long)C);
		return buf;
	}
	if (C % per_word(q)) {
		snprintf(buf, n, "%llu columns do not fill whole int32 words of "
			 "%llu %d-bit values", (unsigned long long)C,
			 (unsigned long long)per_word(q), q->bits);
		return buf;
	}
	return NULL;
}

static double scale_at(const struct quant_view *v, uint64_t i)
{
	uint16_t h;
	float f;
	switch (v->scale_dtype) {
	case DT_BF16:
		memcpy(&h, (const char *)v->scale + 2 * i, 2);
		return bf16_to_f32(h);
	case DT_F16:
		memcpy(&h, (const char *)v->scale + 2 * i, 2);
		return f16_to_f32(h);
	default:
		memcpy(&f, (const char *)v->scale + 4 * i, 4);
		return f;
	}
}

static void check(const struct quant_config *q, const struct stored_part *p,
		  int dtype, const void *bytes, uint64_t n, uint64_t el0,
		  struct part_check *c)
{
	struct quant_view v = {.scale = bytes, .scale_dtype = dtype};
	if (p->kind != PART_SCALE)
		return; /* every bit pattern of a packed word is a value */
	snprintf(c->what, sizeof c->what, "scales that are not finite and > 0");
	for (uint64_t i = 0; i < n; i++) {
		double s = scale_at(&v, i);
		if (!(isfinite(s) && s > 0) && c->bad++ == 0)
			c->first = el0 + i;
	}
	(void)q;
}

static int decode(const struct quant_config *q, const struct quant_view *v,
		  uint64_t el0, size_t n, float *out)
{
	uint64_t pw = per_word(q), g = q->group ? (uint64_t)q->group : v->cols;
	uint64_t r = el0 / v->cols, c = el0 % v->cols;
	uint32_t mask = (1u << q->bits) - 1, off = 1u << (q->bits - 1);
	const uint8_t *words = v->values;
	if (el0 % pw || v->cols % pw)
		return -1;
	for (size_t i = 0; i < n; i++) {
		uint32_t w;
		memcpy(&w, words + 4 * (i / pw), 4);
		int32_t val = (int32_t)((w >> (q->bits * (i % pw))) & mask) -
			      (int32_t)off;
		out[i] = (float)(val * scale_at(v, r * v->scale_cols + c / g));
		if (++c == v->cols) {
			c = 0;
			r++;
		}
	}
	return 0;
}

static void encode(const struct quant_config *q, const struct quant_view *v,
		   uint64_t el0, size_t n, const float *in, void *values)
{
	uint64_t pw = per_word(q), g = q->group ? (uint64_t)q->group : v->cols;
	uint64_t r = el0 / v->cols, c = el0 % v->cols;
	int32_t hi = (1 << (q->bits - 1)) - 1, lo = -(1 << (q->bits - 1));
	uint8_t *words = values;
	memset(values, 0, 4 * ((n + pw - 1) / pw));
	for (size_t i = 0; i < n; i++) {
		double s = scale_at(v, r * v->scale_cols + c / g);
		double x = nearbyint(in[i] / s);
		int32_t val = x > hi ? hi : x < lo ? lo : (int32_t)x;
		uint32_t w;
		memcpy(&w, words + 4 * (i / pw), 4);
		w |= (uint32_t)(val - lo) << (q->bits * (i % pw));
		memcpy(words + 4 * (i / pw), &w, 4);
		if (++c == v->cols) {
			c = 0;
			r++;
		}
	}
}

const struct weight_format format_ct = {
	.method = "compressed-tensors",
	.kind = QUANT_PACKED_INT,
	.parse = parse,
	.to_json = to_json,
	.parts = parts,
	.check = check,
	.decode = decode,
	.unfit = unfit,
	.encode = encode,
};
