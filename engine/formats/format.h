/*
 * format.h - how a checkpoint stores its weights.
 *
 * Release checkpoints do not all ship as bf16: DeepSeek-V3, Kimi-K2 and the
 * Qwen3 FP8 releases store linear weights as FP8 (e4m3fn) with one float
 * scale per 128x128 block (`weight_scale_inv`); Kimi-K2-Thinking-style
 * releases store INT4 packed eight to an int32 with a scale per group of 32
 * inputs (compressed-tensors "pack-quantized").  Every consumer (verify,
 * convert, inspect, plan, the runtime) asks this interface which tensors a
 * logical weight is stored as and how to turn the stored bytes back into
 * numbers, so a new format is one new file:
 *
 *   format_plain.c  f32 / bf16 / f16 as transformers saves them
 *   format_fp8.c    "fp8": FP8 e4m3fn or e5m2, block scales
 *   format_ct.c     "compressed-tensors" pack-quantized int4 / int8,
 *                   symmetric, group or channel strategy
 *
 * The float64 reference (ref.c) decodes the same bytes with its own code.
 */
#ifndef DAY0_FORMAT_H
#define DAY0_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct d0_err;
struct tensor_spec;

enum quant_kind { QUANT_NONE, QUANT_FP8_BLOCK, QUANT_PACKED_INT };

#define QUANT_IGNORE_BYTES 8192 /* NUL-separated patterns */

/* quantization_config, as far as the formats read it. */
struct quant_config {
	enum quant_kind kind;
	int fp8_dtype;      /* FP8: DT_F8_E4M3 (fmt "e4m3") or DT_F8_E5M2 */
	int64_t block[2];   /* FP8: weight_block_size (rows, cols) */
	int bits;           /* packed: num_bits, 4 or 8 */
	int64_t group;      /* packed: group_size; 0: "channel" strategy */
	int regex_ignore;   /* ignore entries may be "re:REGEX" (compressed-
			     * tensors) rather than substrings (fp8) */
	size_t nignore;
	char ignore[QUANT_IGNORE_BYTES];
};

/* What one stored tensor of a logical weight holds. */
enum part_kind { PART_VALUES, PART_SCALE, PART_SHAPE };

struct stored_part {
	char name[200];
	enum part_kind kind;
	int dtype;          /* expected enum dtype */
	int alt_dtype;      /* also accepted (BF16 scales), or -1 */
	int ndim;
	uint64_t shape[5]; /* [2] but a conv kernel's file shape (plain) */
	/* logical elements per stored element along each axis: how a split
	 * of the logical tensor maps onto this part (0: not splittable) */
	uint64_t unit[2];
};

/* Counts from checking a part's bytes. */
struct part_check {
	uint64_t bad;        /* NaN codes, non-finite or non-positive scales */
	uint64_t first;      /* element index of the first bad one */
	char what[96];       /* "NaN FP8 codes", "scales <= 0 or not finite" */
};

/*
 * Decoding input: a 2-D logical tensor rows x cols whose stored values
 * start at logical element el0 (values points at that element's storage)
 * and the whole scale tensor.
 */
struct quant_view {
	uint64_t rows, cols;
	const void *values;
	int values_dtype;
	const void *scale;
	int scale_dtype;
	uint64_t scale_cols;
};

struct weight_format {
	const char *method;  /* quantization_config.quant_method */
	enum quant_kind kind;
	/* Read quantization_config (object qc) of config file path. */
	int (*parse)(json_t *qc, const char *path, struct quant_config *q,
		     struct d0_err *err);
	json_t *(*to_json)(const struct quant_config *q);
	/* The stored tensors of quantised weight t (values first). */
	int (*parts)(const struct quant_config *q, const struct tensor_spec *t,
		     struct stored_part *out);
	/* Check n stored elements of a part; counts accumulate in c. */
	void (*check)(const struct quant_config *q, const struct stored_part *p,
		      int dtype, const void *bytes, uint64_t n, uint64_t el0,
		      struct part_check *c);
	/* Decode n logical elements from el0 to f32; -1 if el0 or n is not
	 * on a stored-element boundary. */
	int (*decode)(const struct quant_config *q, const struct quant_view *v,
		      uint64_t el0, size_t n, float *out);
	/* Optional: the same elements decoded straight to 16-bit dtype to
	 * (DT_BF16 or DT_F16), bit-identical to decode followed by
	 * dtype_convert from f32; NULL where the format has no faster way. */
	int (*decode16)(const struct quant_config *q, const struct quant_view *v,
			uint64_t el0, size_t n, int to, uint16_t *out);
	/* Optional: decode16 of rows [r0, r0 + nrows) x columns [c0, c0 +
	 * ncols) (values at element (r0, c0), rows v->cols apart) into
	 * nrows x ncols contiguous results; -1 where it cannot (the caller
	 * then decodes row by row with decode16). */
	int (*decode16_rect)(const struct quant_config *q,
			     const struct quant_view *v, uint64_t r0,
			     uint64_t nrows, uint64_t c0, uint64_t ncols, int to,
			     uint16_t *out);
	/* Why t cannot be stored in this format (a group that does not
	 * divide the row, ...), or NULL. */
	const char *(*unfit)(const struct quant_config *q,
			     const struct tensor_spec *t, char *buf, size_t n);
	/* Encode n f32 values from el0 with the scales in v (gen-model). */
	void (*encode)(const struct quant_config *q, const struct quant_view *v,
		       uint64_t el0, size_t n, const float *in, void *values);
};

extern const struct weight_format format_plain, format_fp8, format_ct;

/* The unit for q (format_plain when q is NULL or QUANT_NONE). */
const struct weight_format *format_of(const struct quant_config *q);
/* Parse config.json's quantization_config (or its absence). */
int quant_config_parse(json_t *root, const char *path, struct quant_config *q,
		       struct d0_err *err);
json_t *quant_config_to_json(const struct quant_config *q);
/* "fp8 e4m3 128x128", "int4 group 32", "plain" */
const char *quant_describe(const struct quant_config *q, char *buf, size_t n);

/* Is t stored quantised under q (2-D linear weight, not ignored)? */
int quant_applies(const struct quant_config *q, const struct tensor_spec *t);
/*
 * The stored tensors of t: 1 for a plain tensor (in plain_dtype), 2 for
 * FP8 (values, scale), 3 for packed (values, scale, shape).
 */
int quant_parts(const struct quant_config *q, const struct tensor_spec *t,
		int plain_dtype, struct stored_part out[3]);
/* Bytes t occupies on disk under q, or of a 1/parts slice along axis. */
uint64_t quant_stored_bytes(const struct quant_config *q,
			    const struct tensor_spec *t, int plain_dtype,
			    int axis, int parts);
/*
 * Can t be split into parts slices along axis without cutting a block or
 * group (or a packed word)?  If not, err says why and names the nearest
 * part counts that work.
 */
int quant_split_ok(const struct quant_config *q, const struct tensor_spec *t,
		   int axis, int parts, struct d0_err *err);

/*
 * Read and decode one tensor to f32: a rows x cols weight (or slice of
 * one) whose stored parts (quant_parts order) are at refs.  Messages name
 * file and tensor.
 */
struct part_ref {
	int fd;
	uint64_t off;   /* file offset of the part's first byte */
	int dtype;
	uint64_t numel; /* stored elements */
	uint64_t cols;  /* the part's second dimension (1 for 1-D) */
};
int quant_read_f32(const struct quant_config *q, int quantised, uint64_t rows,
		   uint64_t cols, const struct part_ref *refs, float *out,
		   const char *file, const char *name, struct d0_err *err);
/* Largest quantised level: 448 (e4m3), 57344 (e5m2), 7 (int4), 127. */
double quant_level_max(const struct quant_config *q);

/* FP8 codecs (format_fp8.c): value of a code, nearest code to a value
 * (round to nearest even, saturating at the largest finite value). */
float fp8_to_f32(int dtype, uint8_t code);
uint8_t f32_to_fp8(int dtype, float f);
int fp8_is_nan(int dtype, uint8_t code);
double fp8_max(int dtype);

#endif
