/*
 * ops.c - the engine's operators and the registry that declares them.
 *
 * The registry (op_registry) is the one place the runtime's operators are
 * listed: each native entry points at the function below that implements
 * it, each fallback names the native operators it is composed of.
 * `inspect` checks a model's operator list against it, so the coverage
 * report cannot claim an operator the engine cannot execute.
 *
 * The kernels follow Hugging Face transformers' semantics: RMSNorm computed
 * in float with the weight applied after normalising; RoPE with the
 * rotate_half convention and cos/sin scaled by the rope's attention factor;
 * inverse frequencies for default, linear, dynamic-NTK, YaRN and Llama-3
 * scaling as modeling_rope_utils.py computes them; MoE routers as Mixtral,
 * Qwen2-MoE and DeepSeek-V3 route.  Matrix products go through OpenBLAS.
 */
#include "engine.h"
#include "ops_vision.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

void op_linear(float *y, const float *x, const float *w, const float *b,
	       int m, int n, int k)
{
	/* y[m,n] = x[m,k] . w[n,k]^T: a Linear layer with W stored [out, in].
	 * One row (decode) is a matrix-vector product: gemv streams W once,
	 * where gemm would first pack all of it. */
	if (m == 1)
		cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, w, k, x, 1,
			    0.0f, y, 1);
	else
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k,
			    1.0f, x, k, w, k, 0.0f, y, n);
	if (b)
		for (int i = 0; i < m; i++)
			for (int j = 0; j < n; j++)
				y[(size_t)i * n + j] += b[j];
}

void op_rms_norm(float *y, const float *x, const float *w, int n, double eps)
{
	double ss = 0;
	float r;
	for (int i = 0; i < n; i++)
		ss += (double)x[i] * x[i];
	r = (float)(1.0 / sqrt(ss / n + eps));
	for (int i = 0; i < n; i++)
		y[i] = w[i] * (x[i] * r);
}

void op_embedding(float *y, const float *table, int64_t id, int h)
{
	memcpy(y, table + id * h, (size_t)h * sizeof *y);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_X86 1
#include <immintrin.h>

/*
 * e^x for 8 floats (Cephes' expf, as avx_mathfun writes it): x = n ln2 +
 * r with |r| <= ln2/2 (ln2 in two parts, so r is exact), e^r by a degree-5
 * polynomial times r^2 plus 1 + r, times 2^n through the exponent bits.
 * Within 2 ulp of exp over [-87.3, 88]; inputs are clamped to it (below,
 * about 1e-38 instead of a subnormal or 0: nothing here divides by it).
 * Prefill evaluates it for every visible attention score and every FFN
 * activation: libm's scalar expf was 5% of a 512-token prefill.
 */
__attribute__((target("avx2,fma"), always_inline)) static inline __m256 exp8(__m256 x)
{
	const __m256 hi = _mm256_set1_ps(88.0f), lo = _mm256_set1_ps(-87.3365447504f);
	__m256 n, r, p;
	x = _mm256_max_ps(_mm256_min_ps(x, hi), lo);
	n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
			    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
	p = _mm256_set1_ps(1.9875691500e-4f);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
	p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
	return _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(
		_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23)));
}

__attribute__((target("avx2,fma"))) static void softmax_avx2(float *x, int n)
{
	__m256 mv = _mm256_set1_ps(x[0]);
	__m256d s0 = _mm256_setzero_pd(), s1 = s0;
	float m, t[8];
	double s;
	int i = 0, n8 = n - n % 8;
	for (; i < n8; i += 8)
		mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
	_mm256_storeu_ps(t, mv);
	m = t[0];
	for (int k = 1; k < 8; k++)
		m = t[k] > m ? t[k] : m;
	for (; i < n; i++)
		m = x[i] > m ? x[i] : m;
	mv = _mm256_set1_ps(m);
	for (i = 0; i < n8; i += 8) {
		__m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
		_mm256_storeu_ps(x + i, e);
		/* the sum in double, as the portable loop keeps it */
		s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
		s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
	}
	{
		double d[4];
		_mm256_storeu_pd(d, _mm256_add_pd(s0, s1));
		s = d[0] + d[1] + d[2] + d[3];
	}
	for (; i < n; i++) {
		x[i] = expf(x[i] - m);
		s += x[i];
	}
	{
		__m256 inv = _mm256_set1_ps((float)(1.0 / s));
		for (i = 0; i < n8; i += 8)
			_mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
		for (; i < n; i++)
			x[i] = (float)(x[i] / s);
	}
}

__attribute__((target("avx2,fma"))) static void swiglu_avx2(float *y, const float *gate,
							    const float *up, int n)
{
	const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
	int i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 g = _mm256_loadu_ps(gate + i);
		__m256 d = _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, g)));
		_mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_div_ps(g, d), _mm256_loadu_ps(up + i)));
	}
	for (; i < n; i++)
		y[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

__attribute__((target("avx2,fma"))) static void sigmoid_avx2(float *x, int n)
{
	const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
	int i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(x + i, _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(
						   zero, _mm256_loadu_ps(x + i))))));
	for (; i < n; i++)
		x[i] = 1.0f / (1.0f + expf(-x[i]));
}
#endif

/* The vector forms with the products' kernel choice (DAY0_KERNEL=portable,
 * op_bf16_set_kernel: the libm loops below). */
static int vec_math(void)
{
#ifdef HAVE_X86
	return strcmp(op_bf16_kernel(), "portable") != 0;
#else
	return 0;
#endif
}

void op_softmax(float *x, int n)
{
	float m = x[0];
	double s = 0;
#ifdef HAVE_X86
	if (n >= 16 && vec_math()) {
		softmax_avx2(x, n);
		return;
	}
#endif
	for (int i = 1; i < n; i++)
		if (x[i] > m)
			m = x[i];
	for (int i = 0; i < n; i++) {
		x[i] = expf(x[i] - m);
		s += x[i];
	}
	for (int i = 0; i < n; i++)
		x[i] = (float)(x[i] / s);
}

void op_sigmoid(float *x, int n)
{
#ifdef HAVE_X86
	if (n >= 8 && vec_math()) {
		sigmoid_avx2(x, n);
		return;
	}
#endif
	for (int i = 0; i < n; i++)
		x[i] = 1.0f / (1.0f + expf(-x[i]));
}

void op_swiglu(float *y, const float *gate, const float *up, int n)
{
#ifdef HAVE_X86
	if (n >= 8 && vec_math()) {
		swiglu_avx2(y, gate, up, n);
		return;
	}
#endif
	for (int i = 0; i < n; i++)
		y[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

/* ------------------------------------------------------------------ rope */

static double yarn_mscale(double scale, double mscale)
{
	return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

static double yarn_correction_dim(double rotations, int dim, double base,
				  double max_pos)
{
	return dim * log(max_pos / (rotations * 2 * M_PI)) / (2 * log(base));
}

int op_rope_inv_freq(const struct model_config *c, int dim, int64_t seq_len,
		     double *inv_freq, double *attn_factor)
{
	const struct rope_scaling *r = &c->rope;
	double base = c->rope_theta;
	int half = dim / 2;
	*attn_factor = 1.0;
	if (!strcmp(r->type, "dynamic")) {
		double s = (double)(seq_len > c->max_pos ? seq_len : c->max_pos);
		base *= pow(r->factor * s / (double)c->max_pos - (r->factor - 1),
			    (double)dim / (dim - 2));
	}
	for (int i = 0; i < half; i++)
		inv_freq[i] = 1.0 / pow(base, (double)(2 * i) / dim);
	if (!r->type[0] || !strcmp(r->type, "dynamic"))
		return 0;
	if (!strcmp(r->type, "linear")) {
		for (int i = 0; i < half; i++)
			inv_freq[i] /= r->factor;
		return 0;
	}
	if (!strcmp(r->type, "llama3")) {
		double old = r->original_max_pos;
		double lo_wl = old / r->low_freq_factor;
		double hi_wl = old / r->high_freq_factor;
		for (int i = 0; i < half; i++) {
			double wl = 2 * M_PI / inv_freq[i], f = inv_freq[i];
			if (wl > lo_wl) {
				f = inv_freq[i] / r->factor;
			} else if (wl >= hi_wl) { /* medium: smooth between */
				double sm = (old / wl - r->low_freq_factor) /
					    (r->high_freq_factor - r->low_freq_factor);
				f = (1 - sm) * inv_freq[i] / r->factor +
				    sm * inv_freq[i];
			}
			inv_freq[i] = f;
		}
		return 0;
	}
	if (!strcmp(r->type, "yarn")) {
		double lo, hi;
		lo = yarn_correction_dim(r->beta_fast, dim, base,
					 r->original_max_pos);
		hi = yarn_correction_dim(r->beta_slow, dim, base,
					 r->original_max_pos);
		if (r->truncate) {
			lo = floor(lo);
			hi = ceil(hi);
		}
		if (lo < 0)
			lo = 0;
		if (hi > dim - 1)
			hi = dim - 1;
		if (lo == hi)
			hi += 0.001;
		for (int i = 0; i < half; i++) {
			double ramp = ((double)i - lo) / (hi - lo);
			double extra = 1.0 - (ramp < 0 ? 0 : ramp > 1 ? 1 : ramp);
			double interp = inv_freq[i] / r->factor;
			inv_freq[i] = interp * (1 - extra) + inv_freq[i] * extra;
		}
		if (r->attention_factor != 0)
			*attn_factor = r->attention_factor;
		else if (r->mscale != 0 && r->mscale_all_dim != 0)
			*attn_factor = yarn_mscale(r->factor, r->mscale) /
				       yarn_mscale(r->factor, r->mscale_all_dim);
		else
			*attn_factor = yarn_mscale(r->factor, 1.0);
		return 0;
	}
	return -1; /* a rope type the engine does not implement */
}

void op_rope(float *x, int n_heads, int head_dim, int rot_dim, int64_t pos,
	     const double *inv_freq, double attn_factor)
{
	int half = rot_dim / 2;
	for (int i = 0; i < half; i++) {
		/* angle and cos/sin in double: at long positions a float angle
		 * alone costs ~1e-4 relative */
		double a = (double)pos * inv_freq[i];
		float cs = (float)(cos(a) * attn_factor);
		float sn = (float)(sin(a) * attn_factor);
		for (int h = 0; h < n_heads; h++) {
			float *v = x + (size_t)h * head_dim;
			float x1 = v[i], x2 = v[i + half];
			v[i] = x1 * cs - x2 * sn;       /* x*cos + (-x2)*sin */
			v[i + half] = x2 * cs + x1 * sn; /* x*cos + x1*sin */
		}
	}
}

void op_rope_deinterleave(float *x, int n_heads, int head_dim, int rot_dim)
{
	/* [x0, x1, x2, x3, ...] -> [x0, x2, ..., x1, x3, ...] per head */
	float small[256], *tmp = rot_dim <= 256 ? small : malloc((size_t)rot_dim * 4);
	for (int h = 0; h < n_heads; h++) {
		float *v = x + (size_t)h * head_dim;
		for (int i = 0; i < rot_dim / 2; i++) {
			tmp[i] = v[2 * i];
			tmp[i + rot_dim / 2] = v[2 * i + 1];
		}
		memcpy(v, tmp, (size_t)rot_dim * sizeof *v);
	}
	if (tmp != small)
		free(tmp);
}

/* ------------------------------------------------------------- attention */

/*
 * Attention reads the keys and values where they lie, through a block
 * table (struct kv_view): position p of kv head h is row p % block_tokens
 * of block table[p / block_tokens].  Every score is one dot product and
 * every output column one sum over the positions in order, whatever the
 * blocks, so a sequence spread over many blocks gets the bits of the same
 * sequence in one contiguous run (and a prompt's row those of a decode
 * step at its position: the sums do not depend on how many rows a call
 * has).
 */
struct attn {
	float *out, *S;
	const float *q;
	const struct kv_view *kv;
	int n_q, n_kv, nh, nkv, dqk, dv, window, group;
	int sub;   /* items a kv head's group is cut into */
	int kvper; /* kv heads an item holds (sub 1) */
	int heads; /* the most query heads an item holds */
	int rows;  /* query rows a pass (S holds heads x rows x n_kv a thread) */
	int64_t pos0;
	double scale;
	int vec512; /* the AVX-512 rows, else the portable loops */
};

/* Row p of kv head kh's keys (v: values) in the view. */
static inline const float *kv_row(const struct kv_view *kv, int v, int kh, int64_t p)
{
	int64_t i = p / kv->block_tokens, off = p % kv->block_tokens;
	size_t b = kv->table ? (size_t)kv->table[i] : (size_t)i;
	return v ? kv->v + b * kv->v_bs + (size_t)kh * kv->v_hs + (size_t)off * kv->v_ld
		 : kv->k + b * kv->k_bs + (size_t)kh * kv->k_hs + (size_t)off * kv->k_ld;
}

/* Positions from p on that lie in p's block, at most len. */
static inline int kv_run(const struct kv_view *kv, int64_t p, int64_t len)
{
	int64_t left = kv->block_tokens - p % kv->block_tokens;
	return (int)(left < len ? left : len);
}

#ifdef HAVE_X86
/*
 * AVX-512: a score is one dot product (two accumulators, a masked last
 * vector when d is not whole vectors of 16); an output column a sum over
 * the positions in order, 64 columns a pass, the accumulators kept in o
 * between runs of positions (a float stored and loaded is the same float,
 * so where the runs break does not change a bit).  The sgemv/sgemm calls
 * these replaced read the cache at well below the memory's rate (~15% of
 * a decode step at a 512-token context) and their sums depend on the
 * call's shape.
 */
/* A score's two accumulators (d >= 16), added, before the horizontal sum:
 * q[0..16) r[0..16) in one, the next 16 in the other and so on, a masked
 * last vector where d is not whole vectors of 16. */
__attribute__((target("avx512f"), always_inline)) static inline __m512
dot_lanes(const float *q, const float *r, int d)
{
	__m512 a = _mm512_mul_ps(_mm512_loadu_ps(q), _mm512_loadu_ps(r)), b = _mm512_setzero_ps();
	int c = 16;
#pragma GCC unroll 16
	for (; c + 32 <= d; c += 32) {
		b = _mm512_fmadd_ps(_mm512_loadu_ps(q + c), _mm512_loadu_ps(r + c), b);
		a = _mm512_fmadd_ps(_mm512_loadu_ps(q + c + 16), _mm512_loadu_ps(r + c + 16), a);
	}
	if (c + 16 <= d) {
		b = _mm512_fmadd_ps(_mm512_loadu_ps(q + c), _mm512_loadu_ps(r + c), b);
		c += 16;
	}
	if (c < d) {
		__mmask16 m = (__mmask16)((1u << (d - c)) - 1);
		a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + c),
				    _mm512_maskz_loadu_ps(m, r + c), a);
	}
	return _mm512_add_ps(a, b);
}

__attribute__((target("avx512f"))) static float dot_avx512(const float *q, const float *r,
							   int d)
{
	if (d < 16) {
		__mmask16 m = (__mmask16)((1u << d) - 1);
		return _mm512_reduce_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, q),
							  _mm512_maskz_loadu_ps(m, r)));
	}
	return _mm512_reduce_add_ps(dot_lanes(q, r, d));
}

/*
 * The horizontal sums of 16 vectors at once, lane i of the result the sum
 * of v[i]: the same tree as _mm512_reduce_add_ps for every vector (lane j
 * with j + 8, then j + 4, j + 2, j + 1), so each sum is the bits
 * dot_avx512 returns, wherever the row falls among the 16.  15 shuffles
 * and adds a 16 rows against ~8 a row.
 */
__attribute__((target("avx512f"), always_inline)) static inline __m512 hsum16(const __m512 *v)
{
	__m512 r8[8], r4[4], r2[2], s;
#pragma GCC unroll 8
	for (int i = 0; i < 8; i++) /* j + j+8: rows 2i, 2i+1 in 256-bit halves */
		r8[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
				      _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
#pragma GCC unroll 8
	for (int i = 0; i < 4; i++) /* j + j+4: four rows, a 128-bit lane each */
		r4[i] = _mm512_add_ps(_mm512_shuffle_f32x4(r8[2 * i], r8[2 * i + 1], 0x88),
				      _mm512_shuffle_f32x4(r8[2 * i], r8[2 * i + 1], 0xDD));
#pragma GCC unroll 8
	for (int i = 0; i < 2; i++) /* j + j+2 */
		r2[i] = _mm512_add_ps(_mm512_shuffle_ps(r4[2 * i], r4[2 * i + 1], 0x44),
				      _mm512_shuffle_ps(r4[2 * i], r4[2 * i + 1], 0xEE));
	/* j + j+1 */
	s = _mm512_add_ps(_mm512_shuffle_ps(r2[0], r2[1], 0x88), _mm512_shuffle_ps(r2[0], r2[1], 0xDD));
	/* row 4m + k's sum is in lane 4k + m: back in row order */
	return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3,
						       7, 11, 15),
				     s);
}

/* S[p] = scale * (q . K[p]) for len rows, 16 at a time with one
 * transposed sum (d >= 16), each the bits of dot_avx512's; inlined with
 * the common head dims as constants (the loops unrolled, q and the 16
 * sums in registers). */
__attribute__((target("avx512f"), always_inline)) static inline void
scores_body(float *S, const float *q, const float *K, int len, int ld, int d, float scale)
{
	int p = 0;
	if (d >= 16) {
		__m512 sc = _mm512_set1_ps(scale);
		for (; p + 16 <= len; p += 16) {
			__m512 v[16];
#pragma GCC unroll 16
			for (int i = 0; i < 16; i++)
				v[i] = dot_lanes(q, K + (size_t)(p + i) * ld, d);
			_mm512_storeu_ps(S + p, _mm512_mul_ps(sc, hsum16(v)));
		}
	}
	for (; p < len; p++)
		S[p] = scale * dot_avx512(q, K + (size_t)p * ld, d);
}

__attribute__((target("avx512f"))) static void
scores_avx512(float *S, const float *q, const float *K, int len, int ld, int d, float scale)
{
	if (d == 128)
		scores_body(S, q, K, len, ld, 128, scale);
	else if (d == 64)
		scores_body(S, q, K, len, ld, 64, scale);
	else
		scores_body(S, q, K, len, ld, d, scale);
}

/* o[c..] += sum over len positions of S[p] V[p][c..]: one chunk of 64
 * columns (or d's last, fewer) of one head. */
__attribute__((target("avx512f"))) static void values_cols(float *o, const float *S,
							   const float *V, int len, int ld,
							   int d, int c)
{
	int w = d - c < 64 ? (d - c + 15) / 16 : 4, tail = (d - c) % 16;
	__mmask16 lm = w * 16 > d - c ? (__mmask16)((1u << tail) - 1) : (__mmask16)0xffff;
	__m512 acc[4];
	const float *v = V + c;
	for (int j = 0; j < w - 1; j++)
		acc[j] = _mm512_loadu_ps(o + c + 16 * j);
	acc[w - 1] = _mm512_maskz_loadu_ps(lm, o + c + 16 * (w - 1));
	if (w == 4 && lm == 0xffff)
		for (int p = 0; p < len; p++, v += ld) {
			__m512 x = _mm512_set1_ps(S[p]);
			acc[0] = _mm512_fmadd_ps(x, _mm512_loadu_ps(v), acc[0]);
			acc[1] = _mm512_fmadd_ps(x, _mm512_loadu_ps(v + 16), acc[1]);
			acc[2] = _mm512_fmadd_ps(x, _mm512_loadu_ps(v + 32), acc[2]);
			acc[3] = _mm512_fmadd_ps(x, _mm512_loadu_ps(v + 48), acc[3]);
		}
	else
		for (int p = 0; p < len; p++, v += ld) {
			__m512 x = _mm512_set1_ps(S[p]);
			for (int j = 0; j < w - 1; j++)
				acc[j] = _mm512_fmadd_ps(x, _mm512_loadu_ps(v + 16 * j), acc[j]);
			acc[w - 1] = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(lm, v + 16 * (w - 1)),
						     acc[w - 1]);
		}
	for (int j = 0; j < w - 1; j++)
		_mm512_storeu_ps(o + c + 16 * j, acc[j]);
	_mm512_mask_storeu_ps(o + c + 16 * (w - 1), lm, acc[w - 1]);
}

/*
 * nh (1-4) heads of one kv head: o[h] += sum over len positions of
 * S[h][p] V[p], each row of V loaded once for all of them (a GQA group's
 * heads read the same values), 64 columns a pass with 4 x nh independent
 * accumulators.  Every column is the sum values_cols makes, the same
 * fused multiply-adds in the same order, so the bits do not depend on
 * how many heads share a call.
 */
__attribute__((target("avx512f"), always_inline)) static inline void
values_nh(float *const *o, const float *const *S, int nh, const float *V, int len, int ld,
	  int d)
{
	int c = 0;
	for (; c + 64 <= d; c += 64) {
		__m512 acc[4][4];
		const float *v = V + c;
#pragma GCC unroll 4
		for (int h = 0; h < nh; h++)
#pragma GCC unroll 4
			for (int j = 0; j < 4; j++)
				acc[h][j] = _mm512_loadu_ps(o[h] + c + 16 * j);
		for (int p = 0; p < len; p++, v += ld) {
			__m512 r0 = _mm512_loadu_ps(v), r1 = _mm512_loadu_ps(v + 16);
			__m512 r2 = _mm512_loadu_ps(v + 32), r3 = _mm512_loadu_ps(v + 48);
#pragma GCC unroll 4
			for (int h = 0; h < nh; h++) {
				__m512 x = _mm512_set1_ps(S[h][p]);
				acc[h][0] = _mm512_fmadd_ps(x, r0, acc[h][0]);
				acc[h][1] = _mm512_fmadd_ps(x, r1, acc[h][1]);
				acc[h][2] = _mm512_fmadd_ps(x, r2, acc[h][2]);
				acc[h][3] = _mm512_fmadd_ps(x, r3, acc[h][3]);
			}
		}
#pragma GCC unroll 4
		for (int h = 0; h < nh; h++)
#pragma GCC unroll 4
			for (int j = 0; j < 4; j++)
				_mm512_storeu_ps(o[h] + c + 16 * j, acc[h][j]);
	}
	if (c < d)
		for (int h = 0; h < nh; h++)
			values_cols(o[h], S[h], V, len, ld, d, c);
}

__attribute__((target("avx512f"))) static void values_heads(float *const *o,
							    const float *const *S, int nh,
							    const float *V, int len, int ld, int d)
{
	switch (nh) {
	case 4: values_nh(o, S, 4, V, len, ld, d); break;
	case 3: values_nh(o, S, 3, V, len, ld, d); break;
	case 2: values_nh(o, S, 2, V, len, ld, d); break;
	default: values_nh(o, S, 1, V, len, ld, d); break;
	}
}
#endif

/* The portable loops, in the same fixed order (each sum front to back). */
static void scores_portable(float *S, const float *q, const float *K, int len, int ld, int d,
			    float scale)
{
	for (int p = 0; p < len; p++) {
		const float *r = K + (size_t)p * ld;
		float acc = 0;
		for (int c = 0; c < d; c++)
			acc += q[c] * r[c];
		S[p] = scale * acc;
	}
}

static void values_portable(float *o, const float *S, const float *V, int len, int ld, int d)
{
	for (int p = 0; p < len; p++)
		for (int c = 0; c < d; c++)
			o[c] += S[p] * V[(size_t)p * ld + c];
}

/* Query row i's visible positions first..last (last < first: none). */
static void visible(const struct attn *a, int i, int64_t *first, int64_t *last)
{
	int64_t qpos = a->pos0 + i; /* kv j is visible if j <= qpos */
	*last = qpos < a->n_kv - 1 ? qpos : a->n_kv - 1;
	*first = a->window > 0 && qpos - a->window + 1 > 0 ? qpos - a->window + 1 : 0;
}

#define KV_RUN 64 /* positions a pass over the rows: their K or V in L1 */

/*
 * One item: the query heads h0..h1-1 of kv heads k0..k1-1 (a GQA group,
 * part of one, or for decode rows on small blocks several kv heads'
 * groups, op_attention_paged).  The positions go by runs (inside one
 * block, at most KV_RUN) and each run serves every head and query row of
 * the pass while its keys (then its values) are in cache: the scores of
 * all, the softmax of each head's rows, then the values.  So a group's kv
 * rows come from memory once for all its heads, not once a head.  A row's
 * sums are those of the row alone, each head's the same whatever the item
 * holds.
 */
static void attn_item(void *ctx, int it, int slot)
{
	const struct attn *a = ctx;
	const struct kv_view *kv = a->kv;
	/* kv heads k0..k1-1 (kvper of them), or part of one kv head's group */
	int k0 = it / a->sub * a->kvper, part = it % a->sub;
	int k1 = k0 + a->kvper < a->nkv ? k0 + a->kvper : a->nkv;
	int h0 = k0 * a->group + part * a->group / a->sub;
	int h1 = a->sub > 1 ? k0 * a->group + (part + 1) * a->group / a->sub : k1 * a->group;
	size_t per_head = (size_t)a->rows * (size_t)a->n_kv;
	float *S = a->S + (size_t)slot * (size_t)a->heads * per_head;
	for (int i0 = 0; i0 < a->n_q; i0 += a->rows) {
		int i1 = i0 + a->rows < a->n_q ? i0 + a->rows : a->n_q;
		int64_t lo, hi, f, l;
		visible(a, i0, &lo, &l);
		visible(a, i1 - 1, &f, &hi);
		for (int i = i0; i < i1; i++)
			memset(a->out + (size_t)i * a->nh * a->dv + (size_t)h0 * a->dv, 0,
			       (size_t)(h1 - h0) * a->dv * sizeof(float));
		for (int pass = 0; pass < 3; pass++) {
			if (pass == 1) { /* the softmax of each head's rows */
				for (int h = h0; h < h1; h++)
					for (int i = i0; i < i1; i++) {
						visible(a, i, &f, &l);
						if (l >= f)
							op_softmax(S + (size_t)(h - h0) * per_head +
									   (size_t)(i - i0) * a->n_kv,
								   (int)(l - f + 1));
					}
				continue;
			}
			for (int64_t p = lo; p <= hi;) {
				int m = kv_run(kv, p, hi - p + 1 < KV_RUN ? hi - p + 1 : KV_RUN);
				for (int kh = k0; kh < k1; kh++) {
					const float *base = kv_row(kv, pass == 2, kh, p);
					int g0 = kh * a->group > h0 ? kh * a->group : h0;
					int g1 = (kh + 1) * a->group < h1 ? (kh + 1) * a->group : h1;
#ifdef HAVE_X86
					if (a->vec512 && pass == 2) { /* up to 4 heads a row of V */
						for (int i = i0; i < i1; i++) {
							int64_t s, e;
							visible(a, i, &f, &l);
							s = f > p ? f : p;
							e = l < p + m - 1 ? l : p + m - 1;
							if (e < s)
								continue;
							for (int g = g0; g < g1; g += 4) {
								float *o[4];
								const float *Sg[4];
								int nhd = g1 - g < 4 ? g1 - g : 4;
								for (int t = 0; t < nhd; t++) {
									o[t] = a->out + (size_t)i * a->nh * a->dv +
									       (size_t)(g + t) * a->dv;
									Sg[t] = S + (size_t)(g + t - h0) * per_head +
										(size_t)(i - i0) * a->n_kv + (s - f);
								}
								values_heads(o, Sg, nhd, base + (s - p) * kv->v_ld,
									     (int)(e - s + 1), kv->v_ld, a->dv);
							}
						}
						continue;
					}
#endif
					for (int h = g0; h < g1; h++)
						for (int i = i0; i < i1; i++) {
							int64_t s, e;
							float *Si = S + (size_t)(h - h0) * per_head +
								    (size_t)(i - i0) * a->n_kv;
							const float *q = a->q + (size_t)i * a->nh * a->dqk +
									 (size_t)h * a->dqk;
							float *o = a->out + (size_t)i * a->nh * a->dv +
								   (size_t)h * a->dv;
							visible(a, i, &f, &l);
							s = f > p ? f : p;
							e = l < p + m - 1 ? l : p + m - 1;
							if (e < s)
								continue;
#ifdef HAVE_X86
							if (a->vec512) { /* the scores (values above) */
								scores_avx512(Si + (s - f), q,
									      base + (s - p) * kv->k_ld,
									      (int)(e - s + 1), kv->k_ld, a->dqk,
									      (float)a->scale);
								continue;
							}
#endif
							if (pass == 0)
								scores_portable(Si + (s - f), q,
										base + (s - p) * kv->k_ld,
										(int)(e - s + 1), kv->k_ld, a->dqk,
										(float)a->scale);
							else
								values_portable(o, Si + (s - f),
										base + (s - p) * kv->v_ld,
										(int)(e - s + 1), kv->v_ld, a->dv);
						}
				}
				p += m;
			}
		}
	}
}

void op_attention_paged(float *out, const float *q, const struct kv_view *kv, int n_q,
			int n_kv, int64_t pos0, int nh, int nkv, int dqk, int dv,
			double scale, int window)
{
	/* The items run in parallel over the products' pool, scores of their
	 * own per thread (a decode step's products are too small for threads
	 * of their own, and the heads are independent).  An item is a kv
	 * head's query heads, or a part of them where there are fewer kv
	 * heads than threads (sub parts a group); the rows go in passes
	 * whose scores stay under 256 MiB in all. */
	int threads = op_pool_threads(), group = nh / nkv;
	int sub = nkv >= threads ? 1 : (threads + nkv - 1) / nkv;
	int items, slots;
	size_t per = (size_t)(n_kv > 0 ? n_kv : 1), cap;
	struct attn a = {out, NULL, q, kv, n_q, n_kv, nh, nkv, dqk, dv, window,
			 group, 1, 1, 1, n_q, pos0, scale, 0};
#ifdef HAVE_X86
	a.vec512 = !strcmp(op_bf16_kernel(), "avx512");
#endif
	if (sub > group)
		sub = group;
	if (sub < 1)
		sub = 1;
	a.sub = sub;
	a.heads = (group + sub - 1) / sub;
	items = nkv * sub;
	if (sub == 1 && kv->table && kv->block_tokens < KV_RUN && nkv > threads && n_q <= 4) {
		/* decode rows on small blocks (serve's paged cache): a block
		 * holds every kv head's rows side by side, so an item of
		 * several kv heads reads one longer piece of each block (a
		 * thread's share of them) instead of one head's rows, which no
		 * prefetcher can follow from block to block.  Not for a
		 * prefill's rows: their scores for that many heads would
		 * leave the caches (a 256-row chunk took 3x as long) */
		a.kvper = (nkv + threads - 1) / threads;
		items = (nkv + a.kvper - 1) / a.kvper;
		a.heads = a.kvper * group;
	}
	slots = threads < items ? threads : items;
	if (slots < 1)
		slots = 1;
	cap = ((size_t)256 << 20) / sizeof(float) / (size_t)slots / (size_t)a.heads / per;
	if ((size_t)a.rows > cap)
		a.rows = cap > 0 ? (int)cap : 1;
	if (a.rows < 1)
		a.rows = 1;
	a.S = malloc((size_t)slots * (size_t)a.heads * (size_t)a.rows * per * sizeof *a.S);
	if (!a.S)
		abort();
	if (slots > 1)
		op_parallel_for(items, attn_item, &a);
	else
		for (int it = 0; it < items; it++)
			attn_item(&a, it, 0);
	free(a.S);
}

void op_attention_kv(float *out, const float *q, const float *k, const float *v,
		     int n_q, int n_kv, int64_t pos0, int nh, int nkv, int dqk, int dv,
		     double scale, int window, size_t k_hs, int k_ld, size_t v_hs,
		     int v_ld)
{
	/* one block holding every position */
	struct kv_view kv = {k, v, NULL, n_kv > 0 ? n_kv : 1, 0, 0, k_hs, v_hs, k_ld, v_ld};
	op_attention_paged(out, q, &kv, n_q, n_kv, pos0, nh, nkv, dqk, dv, scale, window);
}

void op_attention(float *out, const float *q, const float *k, const float *v,
		  int n_q, int n_kv, int64_t pos0, int nh, int nkv, int dqk,
		  int dv, double scale, int window)
{
	op_attention_kv(out, q, k, v, n_q, n_kv, pos0, nh, nkv, dqk, dv, scale, window,
			(size_t)dqk, nkv * dqk, (size_t)dv, nkv * dv);
}

/* ---------------------------------------------------------------- routers */

/* Indices of the k largest of x[0..n) (ties: lower index first). */
static void topk(const float *x, int n, int k, int *idx)
{
	for (int j = 0; j < k; j++) {
		int best = -1;
		for (int i = 0; i < n; i++) {
			int taken = 0;
			for (int t = 0; t < j; t++)
				taken |= idx[t] == i;
			if (!taken && (best < 0 || x[i] > x[best]))
				best = i;
		}
		idx[j] = best;
	}
}

void op_router_softmax_topk(const float *logits, int E, int k, int renorm,
			    int *idx, float *w)
{
	float *p = malloc((size_t)E * sizeof *p);
	double sum = 0;
	memcpy(p, logits, (size_t)E * sizeof *p);
	op_softmax(p, E);
	topk(p, E, k, idx);
	for (int j = 0; j < k; j++) {
		w[j] = p[idx[j]];
		sum += w[j];
	}
	if (renorm)
		for (int j = 0; j < k; j++)
			w[j] = (float)(w[j] / sum);
	free(p);
}

void op_router_sigmoid_group_topk(const float *logits, const float *bias,
				  int E, int k, int n_group, int topk_group,
				  int renorm, double scaling, int *idx, float *w)
{
	float *s = malloc((size_t)E * sizeof *s), *choice = malloc((size_t)E * sizeof *s);
	float *gs = calloc((size_t)n_group, sizeof *gs);
	int *gidx = malloc((size_t)n_group * sizeof *gidx), per = E / n_group;
	double sum = 0;
	memcpy(s, logits, (size_t)E * sizeof *s);
	op_sigmoid(s, E);
	for (int e = 0; e < E; e++)
		choice[e] = s[e] + (bias ? bias[e] : 0.0f);
	/* a group's score: the sum of its two best biased scores */
	for (int g = 0; g < n_group; g++) {
		int two[2];
		topk(choice + g * per, per, per >= 2 ? 2 : 1, two);
		gs[g] = choice[g * per + two[0]] +
			(per >= 2 ? choice[g * per + two[1]] : 0.0f);
	}
	topk(gs, n_group, topk_group, gidx);
	for (int g = 0; g < n_group; g++) {
		int keep = 0;
		for (int t = 0; t < topk_group; t++)
			keep |= gidx[t] == g;
		if (!keep)
			for (int e = g * per; e < (g + 1) * per; e++)
				choice[e] = 0.0f; /* masked_fill(~mask, 0.0) */
	}
	topk(choice, E, k, idx);
	for (int j = 0; j < k; j++) {
		w[j] = s[idx[j]]; /* weights from unbiased scores */
		sum += w[j];
	}
	for (int j = 0; j < k; j++)
		w[j] = (float)((renorm ? w[j] / (sum + 1e-20) : w[j]) * scaling);
	free(s);
	free(choice);
	free(gs);
	free(gidx);
}

/* --------------------------------------------------------------- registry */

#define NATIVE(n, f, what) {n, OP_NATIVE, NULL, what, (void (*)(void))(f)}
#define FALLBACK(n, uses, what) {n, OP_FALLBACK, uses, what, NULL}

const struct op_entry op_registry[] = {
	NATIVE("embedding", op_embedding, "token embedding lookup"),
	NATIVE("linear", op_linear,
	       "x W^T: OpenBLAS sgemm/sgemv (f32 weights), own GEMV or "
	       "widened panels through sgemm (bf16 weights, ops_bf16.c)"),
	NATIVE("linear.bias", op_linear, "x W^T + b"),
	NATIVE("rms_norm", op_rms_norm, "RMSNorm, float, weight after"),
	NATIVE("softmax", op_softmax, "softmax in float"),
	NATIVE("sigmoid", op_sigmoid, "logistic"),
	NATIVE("swiglu", op_swiglu, "silu(gate) * up"),
	NATIVE("rope.default", op_rope, "RoPE, rotate_half convention"),
	NATIVE("rope.linear", op_rope_inv_freq, "position interpolation"),
	NATIVE("rope.dynamic", op_rope_inv_freq, "dynamic NTK base"),
	NATIVE("rope.yarn", op_rope_inv_freq, "YaRN ramp + mscale"),
	NATIVE("rope.llama3", op_rope_inv_freq, "Llama-3 frequency bands"),
	NATIVE("rope.interleave", op_rope_deinterleave,
	       "interleaved rope layout (DeepSeek) to rotate_half"),
	NATIVE("attention.gqa", op_attention,
	       "causal softmax attention, kv heads shared by query groups"),
	NATIVE("attention.sliding_window", op_attention,
	       "causal attention over the last W positions"),
	FALLBACK("attention.mha", "attention.gqa",
		 "grouped attention with one query head per kv head"),
	FALLBACK("attention.mla", "linear,rms_norm,attention.gqa",
		 "latent kv expanded by kv_b_proj, then attention with "
		 "qk dim != v dim"),
	FALLBACK("qk_norm", "rms_norm", "RMSNorm over each head"),
	NATIVE("moe.router.softmax_topk", op_router_softmax_topk,
	       "softmax over experts, top-k, weights as is"),
	NATIVE("moe.router.softmax_topk_norm", op_router_softmax_topk,
	       "softmax over experts, top-k, renormalised"),
	NATIVE("moe.router.sigmoid_group_topk", op_router_sigmoid_group_topk,
	       "sigmoid scores + correction bias, grouped top-k, scaled"),
	FALLBACK("moe.combine", "linear,swiglu",
		 "experts run as SwiGLU MLPs, outputs summed with router "
		 "weights"),
	FALLBACK("moe.shared_expert_gate", "linear,sigmoid",
		 "sigmoid(x w) times the shared expert's output"),
	FALLBACK("embedding.tied", "embedding,linear",
		 "lm_head reads the embedding matrix"),
	/*
	 * The image channel (model_vision.c lists what a tower needs; the
	 * runtime's towers are image/vision.c, their kernels ops_vision.c).
	 * What composes from the kernels above is a fallback.  Every entry
	 * here is executable (test_ops holds it), and a fallback is made of
	 * native entries only.
	 */
	NATIVE("layer_norm", op_layer_norm,
	       "LayerNorm (biased variance, statistics in double)"),
	NATIVE("gelu", op_act, "gelu (erf); op_act also runs quick_gelu, "
	       "gelu_pytorch_tanh, silu"),
	NATIVE("image_splice", op_image_splice,
	       "the tower's features replace the image placeholders' "
	       "embedding rows (stage 0, after the embedding all-reduce)"),
	FALLBACK("patch_merger", "rms_norm,layer_norm,linear,gelu",
		 "ln_q, merge^2 neighbours as one row, Linear-GELU-Linear"),
	FALLBACK("projector.mlp", "linear,gelu",
		 "LLaVA's multi_modal_projector: Linear-act-Linear"),
	FALLBACK("patch_embed.conv3d", "linear",
		 "Conv3d with stride = kernel (T x P x P): the flattened "
		 "patches times the kernel as a matrix"),
	FALLBACK("patch_embed.conv2d", "linear",
		 "Conv2d with stride = kernel (P x P): the flattened patches "
		 "times the kernel as a matrix"),
	FALLBACK("vision.rope_2d", "rope.default",
		 "rotate_half with per-pair angles h*f (first quarter) and w*f "
		 "(second) of each patch's row and column"),
	FALLBACK("mrope", "rope.default",
		 "M-RoPE: per-pair angles from the t, h or w position that "
		 "mrope_section gives the frequency"),
	FALLBACK("attention.bidirectional", "attention.gqa",
		 "non-causal attention within an image (every query placed "
		 "after the last key)"),
	FALLBACK("attention.window", "attention.gqa",
		 "patches reordered into windows, attention within each "
		 "(Qwen2.5-VL; fullatt_block_indexes attend the whole image)"),
	NATIVE("pos_emb.bicubic", op_interp_bicubic,
	       "learned 2D positions resized as torch's bicubic "
	       "F.interpolate (A = -0.75, align_corners=False; MoonViT)"),
	FALLBACK("vision.rope_2d_pairs", "rope.default",
		 "Rope2DPosEmb: interleaved complex pairs, pair 2i turned by "
		 "w*f_i and pair 2i+1 by h*f_i (MoonViT)"),
	FALLBACK("quick_gelu", "sigmoid", "x * sigmoid(1.702 x)"),
	FALLBACK("vision.class_token", "embedding",
		 "CLIP's class embedding before the patches, learned "
		 "positions added"),
	{NULL, 0, NULL, NULL, NULL},
};

const struct op_entry *op_find(const char *name)
{
	for (int i = 0; op_registry[i].name; i++)
		if (!strcmp(op_registry[i].name, name))
			return &op_registry[i];
	return NULL;
}

/* Is name executable: native, or a fallback whose parts all are? */
enum op_status op_status(const char *name)
{
	const struct op_entry *e = op_find(name);
	char buf[256], *tok, *save = NULL;
	if (!e)
		return OP_MISSING;
	if (e->kind == OP_NATIVE)
		return OP_IS_NATIVE;
	snprintf(buf, sizeof buf, "%s", e->uses);
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		const struct op_entry *p = op_find(tok);
		if (!p || p->kind != OP_NATIVE)
			return OP_MISSING;
	}
	return OP_IS_FALLBACK;
}

static void need(const char **list, size_t *n, const char *name)
{
	for (size_t i = 0; i < *n; i++)
		if (!strcmp(list[i], name))
			return;
	list[(*n)++] = name;
}

/*
 * The image channel's operators: the tower's, its projector's, M-RoPE and
 * the splice of the features into the LM's input.  A tower the engine has
 * no table for is one operator, "vision_tower.<type>", missing by name.
 */
static void vision_ops(const struct model_config *c, const char **list,
		       size_t *n, char *scratch, size_t scratch_len)
{
	const struct vision_config *v = &c->vision;
	size_t used = strlen(scratch) + 1;
	if (used < scratch_len && c->hidden_act[0] &&
	    strcmp(c->hidden_act, "silu")) /* glu.<act> follows rope.<type> */
		used += strlen(scratch + used) + 1;
	switch (v->kind) {
	case VISION_NONE:
		return;
	case VISION_UNSUPPORTED:
		if (used < scratch_len) {
			snprintf(scratch + used, scratch_len - used,
				 "vision_tower.%s", v->vl_type);
			need(list, n, scratch + used);
		}
		return;
	case VISION_CLIP:
		need(list, n, "patch_embed.conv2d");
		need(list, n, "vision.class_token");
		need(list, n, "layer_norm");
		need(list, n, "attention.bidirectional");
		need(list, n, "linear.bias");
		need(list, n, !strcmp(v->act, "quick_gelu") ? "quick_gelu"
							    : "gelu");
		need(list, n, "projector.mlp");
		need(list, n, "gelu");
		break;
	case VISION_KIMI:
		need(list, n, "patch_embed.conv2d");
		need(list, n, "pos_emb.bicubic");
		need(list, n, "vision.rope_2d_pairs");
		need(list, n, "layer_norm");
		need(list, n, "attention.bidirectional");
		need(list, n, "linear.bias");
		need(list, n, "gelu");
		need(list, n, "patch_merger");
		need(list, n, "projector.mlp");
		break;
	default: /* Qwen2-VL, Qwen2.5-VL */
		need(list, n, "patch_embed.conv3d");
		need(list, n, "vision.rope_2d");
		need(list, n, "attention.bidirectional");
		if (v->kind == VISION_QWEN2_5_VL) {
			need(list, n, "attention.window");
			need(list, n, "rms_norm");
			need(list, n, "swiglu");
		} else {
			need(list, n, "layer_norm");
			need(list, n, !strcmp(v->act, "quick_gelu") ? "quick_gelu"
								    : "gelu");
		}
		need(list, n, "linear.bias");
		need(list, n, "patch_merger");
		need(list, n, "gelu");
		if (v->mrope)
			need(list, n, "mrope");
		break;
	}
	need(list, n, "image_splice");
}

size_t model_operators(const struct model_config *c, const char **list,
		       char *scratch, size_t scratch_len)
{
	size_t n = 0;
	int moe = c->experts > 0;
	need(list, &n, "embedding");
	need(list, &n, "rms_norm");
	need(list, &n, c->attention_bias || c->mlp_bias ? "linear.bias"
							 : "linear");
	if (c->attention_bias || c->mlp_bias)
		need(list, &n, "linear");
	/* rope: "rope.<type>" names come from the config, so build them */
	snprintf(scratch, scratch_len, "rope.%s",
		 c->rope.type[0] ? c->rope.type : "default");
	need(list, &n, "rope.default");
	need(list, &n, scratch);
	if (c->mla && c->rope_interleave)
		need(list, &n, "rope.interleave");
	if (c->mla)
		need(list, &n, "attention.mla");
	else if (c->kv_heads == c->heads)
		need(list, &n, "attention.mha");
	else
		need(list, &n, "attention.gqa");
	for (int64_t l = 0; l < c->layers; l++)
		if (model_layer_window(c, l)) {
			need(list, &n, "attention.sliding_window");
			break;
		}
	need(list, &n, "softmax");
	if (!strcmp(c->model_type, "qwen3") || !strcmp(c->model_type, "qwen3_moe"))
		need(list, &n, "qk_norm");
	if (!strcmp(c->hidden_act, "silu") || !c->hidden_act[0]) {
		need(list, &n, "swiglu");
	} else {
		char *act = scratch + strlen(scratch) + 1;
		snprintf(act, scratch_len - strlen(scratch) - 1, "glu.%s",
			 c->hidden_act);
		need(list, &n, act);
	}
	if (moe) {
		if (!strcmp(c->scoring, "sigmoid"))
			need(list, &n, "moe.router.sigmoid_group_topk");
		else if (c->norm_topk_prob)
			need(list, &n, "moe.router.softmax_topk_norm");
		else
			need(list, &n, "moe.router.softmax_topk");
		need(list, &n, "moe.combine");
		if (!strcmp(c->model_type, "qwen2_moe") && c->shared_ffn > 0)
			need(list, &n, "moe.shared_expert_gate");
	}
	if (c->tie_embeddings)
		need(list, &n, "embedding.tied");
	vision_ops(c, list, &n, scratch, scratch_len);
	return n;
}
