/*
 * format_fp8.c - "fp8": DeepSeek-V3's block-quantised FP8, also used by
 * Kimi-K2 and the Qwen3 FP8 releases.
 *
 * quantization_config: {"quant_method": "fp8", "fmt": "e4m3",
 * "activation_scheme": "dynamic", "weight_block_size": [128, 128]} and
 * optionally "modules_to_not_convert" / "ignored_layers" (substrings of
 * module names, as transformers' fine-grained FP8 reads them).
 *
 * A quantised weight W [R, C] is stored as W.weight (F8_E4M3, or F8_E5M2
 * with fmt "e5m2") and W.weight_scale_inv [ceil(R/br), ceil(C/bc)] (F32,
 * or BF16 as the Qwen releases write it); W = fp8(W.weight) * scale of the
 * element's block.  e4m3fn (OCP "fn": finite) has no infinities, codes
 * 0x7f and 0xff are NaN and the largest value is 448; e5m2 is IEEE-like
 * (Inf at exponent 31, mantissa 0; NaN above), largest 57344.
 *
 * The runtime's decode is a 256-entry table per dtype built from the bit
 * fields; ref.c decodes the same bytes with its own arithmetic.
 */
#include "engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_PATH 1
#endif

static float lut[2][256];
static int lut_ready;

/* decode16's and check's kernels (fp8_kernel, below) */
enum { K_PORTABLE, K_AVX2, K_AVX512, K_VBMI };
static int fp8_kernel(void);

/* Value of an 8-bit float with ebits exponent bits and bias. */
static float fp8_field_value(uint8_t c, int ebits, int bias, int ieee)
{
	int mbits = 7 - ebits;
	int e = (c >> mbits) & ((1 << ebits) - 1), m = c & ((1 << mbits) - 1);
	float sign = c & 0x80 ? -1.0f : 1.0f;
	if (ieee && e == (1 << ebits) - 1)
		return m ? NAN : sign * INFINITY;
	if (!ieee && e == (1 << ebits) - 1 && m == (1 << mbits) - 1)
		return NAN;
	if (e == 0)
		return sign * ldexpf((float)m, 1 - bias - mbits);
	return sign * ldexpf((float)(m | (1 << mbits)), e - bias - mbits);
}

static void lut_init(void)
{
	if (__atomic_load_n(&lut_ready, __ATOMIC_ACQUIRE))
		return;
	for (int c = 0; c < 256; c++) {
		lut[0][c] = fp8_field_value((uint8_t)c, 4, 7, 0);  /* e4m3fn */
		lut[1][c] = fp8_field_value((uint8_t)c, 5, 15, 1); /* e5m2 */
	}
	__atomic_store_n(&lut_ready, 1, __ATOMIC_RELEASE);
}

float fp8_to_f32(int dtype, uint8_t code)
{
	lut_init();
	return lut[dtype == DT_F8_E5M2][code];
}

int fp8_is_nan(int dtype, uint8_t code)
{
	if (dtype == DT_F8_E5M2)
		return (code & 0x7f) > 0x7c;
	return (code & 0x7f) == 0x7f;
}

double fp8_max(int dtype)
{
	return dtype == DT_F8_E5M2 ? 57344.0 : 448.0;
}

/* e4m3fn from the f32 bits: the mantissa rounded to 3 bits, nearest
 * even, as f32_to_bf16 rounds to 7; subnormals through the FPU. */
static uint8_t f32_to_e4m3(float f)
{
	uint32_t u;
	uint8_t sign;
	memcpy(&u, &f, 4);
	sign = (uint8_t)((u >> 24) & 0x80);
	u &= 0x7fffffffu;
	if (u > 0x7f800000u)
		return sign | 0x7f; /* NaN */
	if (u >= 0x43e00000u) /* >= 448: saturate */
		return sign | 0x7e;
	if (u < 0x3c800000u) { /* below 2^-6: a multiple of 2^-9 */
		float a;
		memcpy(&a, &u, 4);
		return sign | (uint8_t)nearbyintf(a * 512.0f);
	}
	u += 0x7ffffu + ((u >> 20) & 1);
	if (u >= 0x43e00000u) /* rounded up past 448 */
		return sign | 0x7e;
	return sign | (uint8_t)((((u >> 23) - 120) << 3) | ((u >> 20) & 7));
}

uint8_t f32_to_fp8(int dtype, float f)
{
	int mbits = 2, bias = 15, emax_field = 30;
	uint8_t sign = signbit(f) ? 0x80 : 0;
	double a = fabs((double)f), m;
	int ex;
	if (dtype != DT_F8_E5M2)
		return f32_to_e4m3(f);
	if (isnan(f))
		return sign | 0x7e;
	if (a == 0)
		return sign;
	if (a >= fp8_max(dtype)) /* saturate (gen-model scales never reach it) */
		return sign | 0x7b;
	frexp(a, &ex); /* a = fr * 2^ex, fr in [0.5, 1) */
	ex -= 1;       /* a = 1.x * 2^ex */
	if (ex < 1 - bias) { /* subnormal: a multiple of 2^(1-bias-mbits) */
		m = nearbyint(ldexp(a, bias - 1 + mbits));
		return sign | (uint8_t)m; /* m == 2^mbits is the smallest normal */
	}
	m = nearbyint(ldexp(a, mbits - ex)); /* in [2^mbits, 2^(mbits+1)] */
	if (m >= (1 << (mbits + 1))) {
		m /= 2;
		ex++;
	}
	if (ex + bias > emax_field)
		return sign | 0x7b;
	return sign | (uint8_t)((ex + bias) << mbits) |
	       (uint8_t)((int)m & ((1 << mbits) - 1));
}

static int parse(json_t *qc, const char *path, struct quant_config *q,
		 struct d0_err *err)
{
	json_t *fmt = json_object_get(qc, "fmt"), *bs, *ig;
	const char *keys[] = {"modules_to_not_convert", "ignored_layers"};
	char *at = q->ignore;
	q->fp8_dtype = DT_F8_E4M3;
	if (fmt && !json_is_null(fmt)) {
		const char *s = json_string_value(fmt);
		if (!s || (strcmp(s, "e4m3") && strcmp(s, "e5m2")))
			return d0_errf(err, "%s: quantization_config.fmt must be "
				       "\"e4m3\" or \"e5m2\"", path);
		if (!strcmp(s, "e5m2"))
			q->fp8_dtype = DT_F8_E5M2;
	}
	bs = json_object_get(qc, "weight_block_size");
	if (!json_is_array(bs) || json_array_size(bs) != 2 ||
	    !json_is_integer(json_array_get(bs, 0)) ||
	    !json_is_integer(json_array_get(bs, 1)))
		return d0_errf(err, "%s: quantization_config.weight_block_size "
			       "must be [rows, cols] (per-tensor FP8 is not "
			       "supported)", path);
	q->block[0] = json_integer_value(json_array_get(bs, 0));
	q->block[1] = json_integer_value(json_array_get(bs, 1));
	if (q->block[0] < 1 || q->block[1] < 1 || q->block[0] > 65536 ||
	    q->block[1] > 65536)
		return d0_errf(err, "%s: quantization_config.weight_block_size "
			       "must be positive", path);
	for (int k = 0; k < 2; k++) {
		size_t i;
		json_t *v;
		ig = json_object_get(qc, keys[k]);
		if (!ig || json_is_null(ig))
			continue;
		if (!json_is_array(ig))
			return d0_errf(err, "%s: quantization_config.%s must be "
				       "a list of module names", path, keys[k]);
		json_array_foreach(ig, i, v) {
			const char *s = json_string_value(v);
			size_t len = s ? strlen(s) : 0;
			if (!s || !len)
				return d0_errf(err, "%s: quantization_config.%s[%zu]"
					       " is not a module name", path,
					       keys[k], i);
			if ((size_t)(at - q->ignore) + len + 1 >= sizeof q->ignore)
				return d0_errf(err, "%s: quantization_config.%s "
					       "is longer than %d bytes", path,
					       keys[k], QUANT_IGNORE_BYTES);
			memcpy(at, s, len + 1);
			at += len + 1;
			q->nignore++;
		}
	}
	return 0;
}

static json_t *to_json(const struct quant_config *q)
{
	json_t *o = json_pack("{s:s, s:s, s:s, s:[I,I]}", "activation_scheme",
			      "dynamic", "fmt",
			      q->fp8_dtype == DT_F8_E5M2 ? "e5m2" : "e4m3",
			      "quant_method", "fp8", "weight_block_size",
			      (json_int_t)q->block[0], (json_int_t)q->block[1]);
	if (q->nignore) {
		json_t *a = json_array();
		const char *p = q->ignore;
		for (size_t i = 0; i < q->nignore; i++, p += strlen(p) + 1)
			json_array_append_new(a, json_string(p));
		json_object_set_new(o, "modules_to_not_convert", a);
	}
	return o;
}

static int parts(const struct quant_config *q, const struct tensor_spec *t,
		 struct stored_part *out)
{
	uint64_t R = t->shape[0], C = t->shape[1];
	uint64_t br = (uint64_t)q->block[0], bc = (uint64_t)q->block[1];
	memset(out, 0, 2 * sizeof *out);
	snprintf(out[0].name, sizeof out[0].name, "%s", t->name);
	out[0].kind = PART_VALUES;
	out[0].dtype = q->fp8_dtype;
	out[0].alt_dtype = -1;
	out[0].ndim = 2;
	out[0].shape[0] = R;
	out[0].shape[1] = C;
	out[0].unit[0] = out[0].unit[1] = 1;
	snprintf(out[1].name, sizeof out[1].name, "%s_scale_inv", t->name);
	out[1].kind = PART_SCALE;
	out[1].dtype = DT_F32;
	out[1].alt_dtype = DT_BF16;
	out[1].ndim = 2;
	out[1].shape[0] = (R + br - 1) / br;
	out[1].shape[1] = (C + bc - 1) / bc;
	out[1].unit[0] = br;
	out[1].unit[1] = bc;
	return 2;
}

static double scale_at(const struct quant_view *v, uint64_t i)
{
	if (v->scale_dtype == DT_BF16) {
		uint16_t h;
		memcpy(&h, (const char *)v->scale + 2 * i, 2);
		return bf16_to_f32(h);
	}
	float f;
	memcpy(&f, (const char *)v->scale + 4 * i, 4);
	return f;
}

/*
 * How many bytes have (b & 0x7f) >= lo (lo >= 0x7d: the NaN codes), eight
 * at a time in one 64-bit word (gcc -O2 does not vectorise the byte loop,
 * and verify runs this over every FP8 byte beside SHA-256): adding
 * 0x80 - lo to each 7-bit lane sets the lane's top bit exactly when the
 * lane is >= lo, with no carry into the next lane (0x7f + 3 < 0x100).
 * The top bits add up in byte lanes for at most 255 words, then fold.
 */
#ifdef HAVE_AVX2_PATH
/* 64 lanes a step with AVX-512 BW: a compare into a mask, popcounted
 * (perf, verify --threads 2 of the FP8 bench model: the SSE2 loop was
 * 3.5% of the samples beside SHA-256's 85%). */
__attribute__((target("avx512f,avx512bw"))) static uint64_t
count_nan_codes_avx512(const uint8_t *b, uint64_t n, uint8_t lo)
{
	const __m512i m7 = _mm512_set1_epi8(0x7f), vlo = _mm512_set1_epi8((char)lo);
	uint64_t k = 0, i = 0;
	for (; i + 64 <= n; i += 64) {
		__m512i w = _mm512_and_si512(_mm512_loadu_si512(b + i), m7);
		k += (uint64_t)__builtin_popcountll(
			_mm512_cmpge_epu8_mask(w, vlo));
	}
	for (; i < n; i++)
		k += (uint8_t)(b[i] & 0x7f) >= lo;
	return k;
}
#endif

static uint64_t count_nan_codes(const uint8_t *b, uint64_t n, uint8_t lo)
{
	const uint64_t ones = 0x0101010101010101ULL, low7 = ones * 0x7f,
		       add = ones * (uint64_t)(0x80 - lo),
		       m16 = 0x00ff00ff00ff00ffULL;
	uint64_t k = 0, i = 0;
#ifdef __SSE2__
	/* 16 lanes a step: (b & 0x7f) > lo - 1 as signed bytes (the masked
	 * lanes are 0..127), the 0xff masks subtracted into byte counters
	 * for at most 255 steps, summed by _mm_sad_epu8. */
	const __m128i m7 = _mm_set1_epi8(0x7f), lim = _mm_set1_epi8((char)(lo - 1)),
		      zero = _mm_setzero_si128();
	while (n - i >= 16) {
		__m128i acc = zero;
		uint64_t stop = n - i >= 16 * 255 ? i + 16 * 255 : n - 15;
		for (; i < stop; i += 16) {
			__m128i w = _mm_loadu_si128((const __m128i *)(b + i));
			acc = _mm_sub_epi8(
			    acc, _mm_cmpgt_epi8(_mm_and_si128(w, m7), lim));
		}
		acc = _mm_sad_epu8(acc, zero);
		k += (uint64_t)_mm_cvtsi128_si64(acc) +
		     (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(acc, acc));
	}
#endif
	while (n - i >= 8) {
		uint64_t acc = 0, stop = n - i >= 8 * 255 ? i + 8 * 255 : n - 7;
		for (; i < stop; i += 8) {
			uint64_t w;
			memcpy(&w, b + i, 8);
			acc += (((w & low7) + add) >> 7) & ones;
		}
		acc = (acc & m16) + ((acc >> 8) & m16);
		k += (acc * 0x0001000100010001ULL) >> 48;
	}
	for (; i < n; i++)
		k += (uint8_t)(b[i] & 0x7f) >= lo;
	return k;
}

static void check(const struct quant_config *q, const struct stored_part *p,
		  int dtype, const void *bytes, uint64_t n, uint64_t el0,
		  struct part_check *c)
{
	const uint8_t *b = bytes;
	if (p->kind == PART_VALUES) {
		/* runs while verify hashes: a branch-free count first (it
		 * vectorises), the position only when there is something */
		uint8_t lo = dtype == DT_F8_E5M2 ? 0x7d : 0x7f;
		uint64_t k;
#ifdef HAVE_AVX2_PATH
		if (fp8_kernel() >= K_AVX512)
			k = count_nan_codes_avx512(b, n, lo);
		else
#endif
			k = count_nan_codes(b, n, lo);
		snprintf(c->what, sizeof c->what, "FP8 bytes that encode NaN");
		for (uint64_t i = 0; k && i < n; i++)
			if (fp8_is_nan(dtype, b[i])) {
				if (c->bad == 0)
					c->first = el0 + i;
				break;
			}
		c->bad += k;
		return;
	}
	if (p->kind == PART_SCALE) {
		struct quant_view v = {.scale = bytes, .scale_dtype = dtype};
		snprintf(c->what, sizeof c->what,
			 "scales that are not finite and > 0");
		for (uint64_t i = 0; i < n; i++) {
			double s = scale_at(&v, i);
			if (!(isfinite(s) && s > 0) && c->bad++ == 0)
				c->first = el0 + i;
		}
	}
	(void)q;
}

/*
 * Walk elements [el0, el0 + n) of a rows x cols weight as runs that share
 * one scale (the rest of a block's row segment), so the scale lookup and
 * the divisions happen once a run, not once an element: convert's
 * FP8 -> bf16 streams gigabytes through here.
 */
#define FOR_SCALE_RUNS(q, v, el0, n, ...)                                     \
	do {                                                                  \
		uint64_t br_ = (uint64_t)(q)->block[0];                       \
		uint64_t bc_ = (uint64_t)(q)->block[1];                       \
		uint64_t r_ = (el0) / (v)->cols, c_ = (el0) % (v)->cols;      \
		size_t i0 = 0;                                                \
		while (i0 < (n)) {                                            \
			uint64_t cb_ = c_ / bc_, len_ = (cb_ + 1) * bc_ - c_; \
			double s;                                             \
			size_t i1;                                            \
			if (len_ > (v)->cols - c_)                            \
				len_ = (v)->cols - c_;                        \
			if (len_ > (n) - i0)                                  \
				len_ = (n) - i0;                              \
			s = scale_at((v), (r_ / br_) * (v)->scale_cols + cb_); \
			i1 = i0 + (size_t)len_;                               \
			__VA_ARGS__;                                          \
			i0 = i1;                                              \
			c_ += len_;                                           \
			if (c_ == (v)->cols) {                                \
				c_ = 0;                                       \
				r_++;                                         \
			}                                                     \
		}                                                             \
	} while (0)

static int decode(const struct quant_config *q, const struct quant_view *v,
		  uint64_t el0, size_t n, float *out)
{
	const uint8_t *b = v->values;
	const float *tab;
	lut_init();
	tab = lut[q->fp8_dtype == DT_F8_E5M2];
	/* the product of a 4-bit significand and a float is exact in double:
	 * rounded once, to f32 */
	FOR_SCALE_RUNS(q, v, el0, n, {
		for (size_t i = i0; i < i1; i++)
			out[i] = (float)((double)tab[b[i]] * s);
	});
	return 0;
}

/*
 * convert's FP8 -> bf16/f16 path.  With one scale per 128x128 block, a run
 * of a block's row segment maps each of the 256 codes to one 16-bit
 * result, so it pays to build that 256-entry table once per scale and look
 * every element up: the table entry is computed exactly as decode + the
 * f32 -> 16-bit conversion compute it, so the output is bit-identical.
 * Tables are memoised per thread by column block (a block row of a 4096-
 * wide weight needs 32 of them, built once per 128 rows), keyed by the
 * scale's bits; runs too short to repay a table are computed directly.
 * The lookup is the kernel the CPU has (fp8_kernel): AVX-512 VBMI 64 codes
 * a step, AVX-512 F+BW 32, a scalar loop 8 a word; on AVX2 alone the
 * arithmetic fp8_bf16_avx2 (16 codes a step) does bf16 without tables.
 */
#define MEMO_SLOTS 256
#define MEMO_MIN_RUN 48
/* The lookups prefetch the codes this far ahead: the source is page-cache
 * pages, 4 KiB apart in memory, and the hardware prefetcher stops at each
 * page's end; a page ahead cut the lookup's CPU time in convert by ~20%
 * (perf samples 2159 -> 1700 on bench/weights.sh's model; 1 KiB: 1824). */
#define FP8_PF 4096
static __thread struct {
	int combo; /* 1 + fp8 dtype index * 2 + (to == DT_F16) + 4 * VBMI's
		    * split form (lookup16_vbmi); 0: empty */
	uint64_t key[MEMO_SLOTS]; /* 1 + the scale's double bits; 0: empty */
	uint16_t tab[MEMO_SLOTS][256];
} memo;

static void code_to16(const float *tab, double s, int to, size_t n,
		      const uint8_t *codes, uint16_t *out)
{
	float f[256];
	for (size_t i = 0; i < n; i++)
		f[i] = (float)((double)tab[codes ? codes[i] : i] * s);
	dtype_convert(DT_F32, f, to, out, n);
}

/* out[i] = t[codes[i]], eight codes read and four results stored a word
 * at a time (the byte loop is bound by its 16-bit stores). */
static void lookup16(const uint16_t *t, const uint8_t *codes, uint16_t *out,
		     size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w, lo, hi;
		memcpy(&w, codes + i, 8);
		lo = (uint64_t)t[w & 0xff] | (uint64_t)t[(w >> 8) & 0xff] << 16 |
		     (uint64_t)t[(w >> 16) & 0xff] << 32 |
		     (uint64_t)t[(w >> 24) & 0xff] << 48;
		hi = (uint64_t)t[(w >> 32) & 0xff] |
		     (uint64_t)t[(w >> 40) & 0xff] << 16 |
		     (uint64_t)t[(w >> 48) & 0xff] << 32 |
		     (uint64_t)t[w >> 56] << 48;
		memcpy(out + i, &lo, 8);
		memcpy(out + i + 4, &hi, 8);
	}
	for (; i < n; i++)
		out[i] = t[codes[i]];
}

#ifdef HAVE_AVX2_PATH
/*
 * FP8 -> bf16 with AVX2, 16 codes a step, by arithmetic rather than a
 * table: the code's low seven bits shifted into a float's exponent and
 * top mantissa bits give the value times 2^(bias - 127) exactly, also for
 * the subnormal codes (they land on float subnormals), so one multiply by
 * 2^(127 - bias) restores it; NaN (and e5m2's Inf) codes are blended in
 * from the table.  Then times the scale in float (the exact product of a
 * 4-bit and a 24-bit significand rounded once, as decode's double product
 * rounded to float is) and rounded to bf16 as f32_to_bf16_n does.
 */
__attribute__((target("avx2"))) static size_t
fp8_bf16_avx2(const float *tab, int e5, float s, const uint8_t *b, size_t n,
	      uint16_t *out)
{
	const __m256i low7 = _mm256_set1_epi32(0x7f), one = _mm256_set1_epi32(1),
		      rnd = _mm256_set1_epi32(0x7fff),
		      abs = _mm256_set1_epi32(0x7fffffff),
		      inf = _mm256_set1_epi32(0x7f800000),
		      quiet = _mm256_set1_epi32(0x40),
		      special = _mm256_set1_epi32(e5 ? 0x7b : 0x7e);
	const __m256 rebias = _mm256_set1_ps(e5 ? 0x1p112f : 0x1p120f),
		     vs = _mm256_set1_ps(s);
	const int shift = e5 ? 21 : 20;
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m128i c16 = _mm_loadu_si128((const __m128i *)(b + i));
		__m256i h[2];
		for (int k = 0; k < 2; k++) {
			__m256i c = _mm256_cvtepu8_epi32(k ? _mm_srli_si128(c16, 8)
							   : c16);
			__m256i m = _mm256_and_si256(c, low7);
			__m256i bits = _mm256_or_si256(
				_mm256_slli_epi32(m, shift),
				_mm256_slli_epi32(_mm256_srli_epi32(c, 7), 31));
			__m256 v = _mm256_mul_ps(_mm256_castsi256_ps(bits), rebias);
			__m256i sp = _mm256_cmpgt_epi32(m, special);
			if (!_mm256_testz_si256(sp, sp))
				v = _mm256_blendv_ps(
					v, _mm256_i32gather_ps(tab, c, 4),
					_mm256_castsi256_ps(sp));
			__m256i u = _mm256_castps_si256(_mm256_mul_ps(v, vs));
			__m256i r = _mm256_srli_epi32(
				_mm256_add_epi32(
					_mm256_add_epi32(u, rnd),
					_mm256_and_si256(_mm256_srli_epi32(u, 16), one)),
				16);
			__m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
			__m256i qn = _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet);
			h[k] = _mm256_blendv_epi8(r, qn, nan);
		}
		__m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(h[0], h[1]),
						     0xd8);
		_mm256_storeu_si256((__m256i *)(out + i), p);
	}
	return i;
}

/*
 * FP8 -> 16-bit through a per-scale table with AVX-512 (F+BW+VL): the
 * 256-entry table (the exact results code_to16 or fp8_bf16_avx2 compute,
 * so the output is bit-identical by construction) sits in eight zmm
 * registers; 32 codes a step are widened to 16-bit indices, looked up in
 * the four 64-entry quarters with vpermt2w (index bits 0-5) and picked
 * by bits 6 and 7 with two mask blends.  It serves bf16 and f16, e4m3 and
 * e5m2 alike (NaN and Inf codes are table entries like the others); the
 * tail is a masked load and store.  One call does `rows` rows `stride`
 * codes apart (their results ostride apart), each row's n codes front to back, column block by column
 * block (bc codes each, table tabs[j] for block j, loaded into the
 * registers at the block's start: eight loads from L1 per 128 codes).  The
 * codes come from the source mapping's page-cache pages, i.e. from memory:
 * reading them in file order is one stream the hardware prefetcher
 * follows; block by block down a column (before 2026-12-03: a table load
 * per 16 K codes, but every 128-code row segment a page from the last)
 * read at ~3 GB/s, a third of this.
 */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void
lookup16_avx512(const uint16_t *const *tabs, size_t bc, const uint8_t *codes,
		uint16_t *out, size_t n, size_t rows, size_t stride,
		size_t ostride)
{
	const __m512i b6 = _mm512_set1_epi16(0x40), b7 = _mm512_set1_epi16(0x80);
	for (size_t r = 0; r < rows; r++, codes += stride, out += ostride)
		for (size_t c0 = 0, j = 0; c0 < n; c0 += bc, j++) {
			const uint16_t *t = tabs[j];
			const __m512i t0 = _mm512_loadu_si512(t),
				      t1 = _mm512_loadu_si512(t + 32),
				      t2 = _mm512_loadu_si512(t + 64),
				      t3 = _mm512_loadu_si512(t + 96),
				      t4 = _mm512_loadu_si512(t + 128),
				      t5 = _mm512_loadu_si512(t + 160),
				      t6 = _mm512_loadu_si512(t + 192),
				      t7 = _mm512_loadu_si512(t + 224);
			size_t end = n - c0 < bc ? n : c0 + bc;
			for (size_t i = c0; i < end; i += 32) {
				__mmask32 live = end - i >= 32
							 ? ~(__mmask32)0
							 : (__mmask32)((1ull << (end - i)) - 1);
				__m512i c, r0, r1, r2, r3, lo, hi;
				__mmask32 m6, m7;
				_mm_prefetch((const char *)codes + i + FP8_PF, _MM_HINT_T0);
				c = _mm512_cvtepu8_epi16(
					end - i >= 32
						? _mm256_loadu_si256((const __m256i *)(codes + i))
						: _mm256_maskz_loadu_epi8(live, codes + i));
				m6 = _mm512_test_epi16_mask(c, b6);
				m7 = _mm512_test_epi16_mask(c, b7);
				r0 = _mm512_permutex2var_epi16(t0, c, t1);
				r1 = _mm512_permutex2var_epi16(t2, c, t3);
				r2 = _mm512_permutex2var_epi16(t4, c, t5);
				r3 = _mm512_permutex2var_epi16(t6, c, t7);
				lo = _mm512_mask_blend_epi16(m6, r0, r1);
				hi = _mm512_mask_blend_epi16(m6, r2, r3);
				_mm512_mask_storeu_epi16(out + i, live,
							 _mm512_mask_blend_epi16(m7, lo, hi));
			}
		}
}

/*
 * The same lookup with AVX-512 VBMI, 64 codes a step: the table is kept
 * split into its 256 low bytes and 256 high bytes (split16), four zmm
 * each; vpermi2b looks a code's low seven bits up in 128 bytes at once
 * (one uop where vpermt2w is three), bit 7 picks the half (vpmovb2m),
 * and the low and high bytes are interleaved into the 16-bit results.
 * The interleave works inside 128-bit lanes, so the codes are first put
 * in the order that makes its output contiguous (one vpermb).
 */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi"))) static void
lookup16_vbmi(const uint8_t *const *tabs, size_t bc, const uint8_t *codes,
	      uint16_t *out, size_t n, size_t rows, size_t stride,
	      size_t ostride)
{
	/* byte 16j + b of the permuted codes: code 8j + b (b < 8), else
	 * code 32 + 8j + b - 8: unpacklo then yields codes 0-31 in order,
	 * unpackhi codes 32-63 */
	const __m512i order = _mm512_set_epi8(
		63, 62, 61, 60, 59, 58, 57, 56, 31, 30, 29, 28, 27, 26, 25, 24,
		55, 54, 53, 52, 51, 50, 49, 48, 23, 22, 21, 20, 19, 18, 17, 16,
		47, 46, 45, 44, 43, 42, 41, 40, 15, 14, 13, 12, 11, 10, 9, 8,
		39, 38, 37, 36, 35, 34, 33, 32, 7, 6, 5, 4, 3, 2, 1, 0);
	for (size_t r = 0; r < rows; r++, codes += stride, out += ostride)
		for (size_t c0 = 0, j = 0; c0 < n; c0 += bc, j++) {
			const uint8_t *t = tabs[j];
			const __m512i l0 = _mm512_loadu_si512(t),
				      l1 = _mm512_loadu_si512(t + 64),
				      l2 = _mm512_loadu_si512(t + 128),
				      l3 = _mm512_loadu_si512(t + 192),
				      h0 = _mm512_loadu_si512(t + 256),
				      h1 = _mm512_loadu_si512(t + 320),
				      h2 = _mm512_loadu_si512(t + 384),
				      h3 = _mm512_loadu_si512(t + 448);
			size_t end = n - c0 < bc ? n : c0 + bc;
			for (size_t i = c0; i < end; i += 64) {
				__mmask64 live = end - i >= 64
							 ? ~(__mmask64)0
							 : (((__mmask64)1 << (end - i)) - 1);
				__m512i c, lo, hi;
				__mmask64 top;
				_mm_prefetch((const char *)codes + i + FP8_PF, _MM_HINT_T0);
				c = _mm512_permutexvar_epi8(
					order,
					end - i >= 64
						? _mm512_loadu_si512(codes + i)
						: _mm512_maskz_loadu_epi8(live, codes + i));
				top = _mm512_movepi8_mask(c);
				lo = _mm512_mask_blend_epi8(
					top, _mm512_permutex2var_epi8(l0, c, l1),
					_mm512_permutex2var_epi8(l2, c, l3));
				hi = _mm512_mask_blend_epi8(
					top, _mm512_permutex2var_epi8(h0, c, h1),
					_mm512_permutex2var_epi8(h2, c, h3));
				_mm512_mask_storeu_epi16(out + i, (__mmask32)live,
							 _mm512_unpacklo_epi8(lo, hi));
				if (end - i > 32)
					_mm512_mask_storeu_epi16(
						out + i + 32, (__mmask32)(live >> 32),
						_mm512_unpackhi_epi8(lo, hi));
			}
		}
}

/* A 16-bit table as lookup16_vbmi keeps it: low bytes, then high bytes. */
static void split16(const uint16_t *t, uint8_t *split)
{
	for (int c = 0; c < 256; c++) {
		split[c] = (uint8_t)(t[c] & 0xff);
		split[256 + c] = (uint8_t)(t[c] >> 8);
	}
}

/*
 * The kernel, read each call (once a chunk): DAY0_KERNEL=portable takes
 * the scalar tables, avx2 the AVX2 arithmetic, anything else the best the
 * CPU has (AVX-512 F+BW+VL tables, else AVX2, else portable).
 */
static int fp8_kernel(void)
{
	const char *e = getenv("DAY0_KERNEL");
	if (e && !strcmp(e, "portable"))
		return K_PORTABLE;
	if (!__builtin_cpu_supports("avx2"))
		return K_PORTABLE;
	if (e && !strcmp(e, "avx2"))
		return K_AVX2;
	if (!__builtin_cpu_supports("avx512f") ||
	    !__builtin_cpu_supports("avx512bw") ||
	    !__builtin_cpu_supports("avx512vl"))
		return K_AVX2;
	if (e && !strcmp(e, "avx512"))
		return K_AVX512;
	return __builtin_cpu_supports("avx512vbmi") ? K_VBMI : K_AVX512;
}
#else
static int fp8_kernel(void)
{
	return K_PORTABLE;
}
#endif

/* The 256 results of one scale: with AVX2 (bf16) 16 codes a step over the
 * identity codes, else code_to16; the same bits either way. */
static void build16(const float *tab, int e5, double s, int to, int k,
		    uint16_t *t)
{
#ifdef HAVE_AVX2_PATH
	if (to == DT_BF16 && k != K_PORTABLE) {
		uint8_t id[256];
		for (int c = 0; c < 256; c++)
			id[c] = (uint8_t)c;
		fp8_bf16_avx2(tab, e5, (float)s, id, 256, t);
		return;
	}
#endif
	(void)e5;
	(void)k;
	code_to16(tab, s, to, 256, NULL, t);
}

/* out[i] = t[codes[i]] for n codes of each of rows rows, stride codes
 * apart (results ostride apart), column block j (bc codes) with table
 * tabs[j] (in split16's form for K_VBMI). */
static void lookup_k(int k, const uint16_t *const *tabs, size_t bc,
		     const uint8_t *codes, uint16_t *out, size_t n, size_t rows,
		     size_t stride, size_t ostride)
{
#ifdef HAVE_AVX2_PATH
	if (k == K_VBMI) {
		lookup16_vbmi((const uint8_t *const *)tabs, bc, codes, out, n,
			      rows, stride, ostride);
		return;
	}
	if (k == K_AVX512) {
		lookup16_avx512(tabs, bc, codes, out, n, rows, stride, ostride);
		return;
	}
#endif
	(void)k;
	for (size_t r = 0; r < rows; r++)
		for (size_t c0 = 0, j = 0; c0 < n; c0 += bc, j++)
			lookup16(tabs[j], codes + r * stride + c0,
				 out + r * ostride + c0, n - c0 < bc ? n - c0 : bc);
}

/* The memoised table of scale s for column block cb (built if the slot
 * holds another scale's). */
static const uint16_t *memo_table(const float *tab, int e5, double s, int to,
				  int k, uint64_t cb)
{
	uint64_t bits, slot = cb % MEMO_SLOTS;
	memcpy(&bits, &s, sizeof bits);
	if (memo.key[slot] != bits + 1) {
		build16(tab, e5, s, to, k, memo.tab[slot]);
#ifdef HAVE_AVX2_PATH
		if (k == K_VBMI) {
			uint16_t w[256];
			memcpy(w, memo.tab[slot], sizeof w);
			split16(w, (uint8_t *)memo.tab[slot]);
		}
#endif
		memo.key[slot] = bits + 1;
	}
	return memo.tab[slot];
}

/*
 * Rows [r0, r0 + nrows) x columns [c0, c0 + ncols) (values points at
 * element (r0, c0); c0 a multiple of the block's columns), into out with
 * rows ostride apart, a block row at a time: the tables of its column
 * blocks first (up to MEMO_SLOTS at once, so no two share a memo slot),
 * then its rows front to back in one lookup call, so the scales and
 * tables come once a block (16 K codes for 128 x 128) instead of once a
 * 128-code row segment (FOR_SCALE_RUNS's divisions and the table build
 * cost as much as the lookup itself there), and the codes are read in
 * file order.
 */
static void decode16_blocks(const struct quant_config *q,
			    const struct quant_view *v, uint64_t r0,
			    uint64_t nrows, uint64_t c0, uint64_t ncols,
			    size_t ostride, int to, int k, const float *tab,
			    int e5, uint16_t *out)
{
	const uint8_t *b = v->values;
	uint64_t cols = v->cols, r1 = r0 + nrows, c1 = c0 + ncols;
	uint64_t br = (uint64_t)q->block[0], bc = (uint64_t)q->block[1];
	uint64_t cb0 = c0 / bc, cb1 = (c1 + bc - 1) / bc;
	const uint16_t *tabs[MEMO_SLOTS];
	for (uint64_t r = r0; r < r1;) {
		uint64_t rb = r / br, rend = (rb + 1) * br;
		if (rend > r1)
			rend = r1;
		for (uint64_t g = cb0; g < cb1; g += MEMO_SLOTS) {
			uint64_t gend = cb1 - g < MEMO_SLOTS ? cb1 : g + MEMO_SLOTS;
			uint64_t x0 = g * bc, x1 = gend * bc < c1 ? gend * bc : c1;
			for (uint64_t cb = g; cb < gend; cb++)
				tabs[cb - g] = memo_table(
					tab, e5, scale_at(v, rb * v->scale_cols + cb),
					to, k, cb);
			lookup_k(k, tabs, (size_t)bc,
				 b + (r - r0) * cols + (x0 - c0),
				 out + (r - r0) * ostride + (x0 - c0),
				 (size_t)(x1 - x0), (size_t)(rend - r), (size_t)cols,
				 ostride);
		}
		r = rend;
	}
}

/* The memo's state for this call's dtype pair and kernel (K_VBMI's tables
 * are split16's form); the decode table. */
static const float *decode16_setup(const struct quant_config *q, int to, int k)
{
	int e5 = q->fp8_dtype == DT_F8_E5M2;
	int combo = 1 + e5 * 2 + (to == DT_F16) + 4 * (k == K_VBMI);
	lut_init();
	if (memo.combo != combo) {
		memset(memo.key, 0, sizeof memo.key);
		memo.combo = combo;
	}
	return lut[e5];
}

/*
 * decode16 of a rectangle: rows [r0, r0 + nrows) x columns [c0, c0 +
 * ncols) of the weight, values pointing at element (r0, c0) and rows
 * v->cols codes apart, into out as nrows x ncols contiguous results (a
 * column slice of a chunk of rows, decoded without the rest of the row).
 * -1 where this CPU's kernel has no block lookup or c0 is not at a block
 * column: the caller then decodes row by row with decode16.
 */
static int decode16_rect(const struct quant_config *q,
			 const struct quant_view *v, uint64_t r0, uint64_t nrows,
			 uint64_t c0, uint64_t ncols, int to, uint16_t *out)
{
	int k = fp8_kernel();
	const float *tab;
	if ((to != DT_BF16 && to != DT_F16) || k < K_AVX512 || !v->cols ||
	    q->block[1] <= 0 || c0 % (uint64_t)q->block[1] ||
	    c0 + ncols > v->cols)
		return -1;
	tab = decode16_setup(q, to, k);
	decode16_blocks(q, v, r0, nrows, c0, ncols, (size_t)ncols, to, k, tab,
			q->fp8_dtype == DT_F8_E5M2, out);
	return 0;
}

static int decode16(const struct quant_config *q, const struct quant_view *v,
		    uint64_t el0, size_t n, int to, uint16_t *out)
{
	const uint8_t *b = v->values;
	int e5 = q->fp8_dtype == DT_F8_E5M2;
	int k = fp8_kernel();
	const float *tab;
	if (to != DT_BF16 && to != DT_F16)
		return -1;
	tab = decode16_setup(q, to, k);
#ifdef HAVE_AVX2_PATH
	/* AVX2: arithmetic on every run (no tables: 16 codes a step cost
	 * about what a table lookup costs without vpermt2w) */
	if (to == DT_BF16 && k == K_AVX2) {
		FOR_SCALE_RUNS(q, v, el0, n, {
			size_t j = i0 + fp8_bf16_avx2(tab, e5, (float)s, b + i0,
						      i1 - i0, out + i0);
			if (j < i1)
				code_to16(tab, s, to, i1 - j, b + j, out + j);
		});
		return 0;
	}
#endif
	if (k >= K_AVX512 && v->cols && el0 % v->cols == 0 &&
	    n % v->cols == 0) {
		decode16_blocks(q, v, el0 / v->cols, n / v->cols, 0, v->cols,
				(size_t)v->cols, to, k, tab, e5, out);
		return 0;
	}
	FOR_SCALE_RUNS(q, v, el0, n, {
		size_t len = i1 - i0;
		if (len < MEMO_MIN_RUN) {
			size_t j = i0;
#ifdef HAVE_AVX2_PATH
			if (to == DT_BF16 && k != K_PORTABLE)
				j += fp8_bf16_avx2(tab, e5, (float)s, b + i0,
						   len, out + i0);
#endif
			for (; j < i1; j += 256)
				code_to16(tab, s, to, i1 - j < 256 ? i1 - j : 256,
					  b + j, out + j);
		} else {
			const uint16_t *t1 = memo_table(tab, e5, s, to, k, cb_);
			lookup_k(k, &t1, len, b + i0, out + i0, len, 1, 0, 0);
		}
	});
	return 0;
}

static void encode(const struct quant_config *q, const struct quant_view *v,
		   uint64_t el0, size_t n, const float *in, void *values)
{
	uint8_t *b = values;
	FOR_SCALE_RUNS(q, v, el0, n, {
		for (size_t i = i0; i < i1; i++)
			b[i] = f32_to_fp8(q->fp8_dtype, (float)(in[i] / s));
	});
}

const struct weight_format format_fp8 = {
	.method = "fp8",
	.kind = QUANT_FP8_BLOCK,
	.parse = parse,
	.to_json = to_json,
	.parts = parts,
	.check = check,
	.decode = decode,
	.decode16 = decode16,
	.decode16_rect = decode16_rect,
	.encode = encode,
};
