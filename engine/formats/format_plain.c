/*
 * format_plain.c - weights as transformers saves them: one tensor per
 * weight in torch_dtype (f32, bf16 or f16), norms as the checkpoint has
 * them.  The unit every tensor a quantised format leaves alone uses too.
 */
#include "engine.h"

#include <string.h>

static int parts(const struct quant_config *q, const struct tensor_spec *t,
		 struct stored_part *out)
{
	memset(out, 0, sizeof *out);
	snprintf(out->name, sizeof out->name, "%s", t->name);
	out->kind = PART_VALUES;
	out->dtype = DT_INVALID; /* the caller's plain dtype */
	out->alt_dtype = -1;
	out->ndim = t->ndim;
	out->shape[0] = t->shape[0];
	out->shape[1] = t->ndim == 2 ? t->shape[1] : 0;
	if (t->file_ndim) { /* a conv kernel: stored [out, in, (t,) kh, kw] */
		out->ndim = t->file_ndim;
		memcpy(out->shape, t->file_shape,
		       (size_t)t->file_ndim * sizeof *out->shape);
	}
	out->unit[0] = out->unit[1] = 1;
	(void)q;
	return 1;
}

static int decode(const struct quant_config *q, const struct quant_view *v,
		  uint64_t el0, size_t n, float *out)
{
	(void)q;
	(void)el0;
	return dtype_convert(v->values_dtype, v->values, DT_F32, out, n);
}

const struct weight_format format_plain = {
	.method = NULL,
	.kind = QUANT_NONE,
	.parts = parts,
	.decode = decode,
};
