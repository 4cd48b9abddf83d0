/*
 * ops_fp8.c - products with block-scaled FP8 weights kept as stored.
 *
 * An FP8 checkpoint (DeepSeek-V3, Kimi-K2, the Qwen3 FP8 releases) stays
 * FP8 in memory: one byte a weight plus one f32 scale per br x bc block
 * (struct wmat), a quarter of f32's bytes and half of bf16's, so a decode
 * step streams half the bytes of the same model in bf16.  The scale is
 * applied once per block: y_j = sum_b s_jb * sum_{c in b} w_jc x_c, the
 * inner sum in f32 over the codes' values.
 *
 * A code becomes a float through f16, which the CPU converts in hardware
 * (F16C's vcvtph2ps), subnormals included:
 *   e5m2 is the top byte of an f16 (same sign, exponent and bias), so
 *        f16 = code << 8, exactly its value (Inf and NaN too);
 *   e4m3 moved into an f16's fields, f16 = sign << 15 | (code & 0x7f) << 7,
 *        is its value times 2^-8 (the exponent bias 15 against 7), for the
 *        subnormal codes too; the runtime keeps the block scales times 2^8
 *        (exact), so the product is the same.  Its NaN codes (0x7f, 0xff)
 *        would read as finite numbers: the runtime keeps a weight with NaN
 *        codes as f32 instead (runtime.c, load_w).
 * Two integer ops (unpack the byte into the high half of a 16-bit lane,
 * e4m3: an arithmetic shift right by one and a mask) and the conversion a
 * group of eight weights.  The portable loop reads the same values from a
 * 256-entry table.
 *
 * The pool, the choice of kernel and the split of a product into chunks
 * are ops_bf16.c's (op_linear_w): it calls op_fp8_gemv_rows for up to four
 * rows of x over a range of W's rows, op_fp8_widen_rows to widen a panel
 * of W to f32 for sgemm (prefill).
 *
 * With DAY0_KERNEL=avx512-gf4 the runtime takes e4m3's subnormal codes
 * out at load (op_fp8_wants_nosub, op_fp8_take_subnormals: a zero of the
 * same sign in the codes, the code's weight in a sparse per-row list,
 * ~1e-4 of a real checkpoint's codes), so that the one-row GFNI kernel gf
 * can read every code as the bf16 bits of its value times 2^-120 without
 * meeting an f32 denormal; every kernel, the widening too, adds such a
 * list back (sub_gemv, sub_widen), so each reads the original values.
 */
#include "engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_X86 1
#include <cpuid.h>
#include <immintrin.h>
#endif

#define PREFETCH 1024

/* The value the kernels read for each code: e4m3's times 2^-8 (see top). */
static float tab[2][256];
static int tab_ready;

static const float *fp8_tab(int dtype)
{
	if (!__atomic_load_n(&tab_ready, __ATOMIC_ACQUIRE)) {
		for (int c = 0; c < 256; c++) {
			tab[0][c] = fp8_to_f32(DT_F8_E4M3, (uint8_t)c) * 0x1p-8f;
			tab[1][c] = fp8_to_f32(DT_F8_E5M2, (uint8_t)c);
		}
		__atomic_store_n(&tab_ready, 1, __ATOMIC_RELEASE);
	}
	return tab[dtype == DT_F8_E5M2];
}

float op_fp8_scale_factor(int dtype)
{
	return dtype == DT_F8_E5M2 ? 1.0f : 256.0f;
}

static inline const float *scale_row(const struct wmat *w, int j)
{
	return w->scale + (size_t)(j / w->br) * (size_t)w->sc_cols;
}

static void gemv_portable(float *y, int ldy, const float *x, const struct wmat *w,
			  int m, int j0, int j1, int k)
{
	const float *t = fp8_tab(w->dtype);
	for (int j = j0; j < j1; j++) {
		const uint8_t *wr = (const uint8_t *)w->p + (size_t)j * k;
		const float *s = scale_row(w, j);
		float acc[4] = {0, 0, 0, 0};
		for (int c0 = 0, b = 0; c0 < k; c0 += w->bc, b++) {
			int c1 = c0 + w->bc < k ? c0 + w->bc : k;
			float part[4] = {0, 0, 0, 0};
			for (int c = c0; c < c1; c++) {
				float wv = t[wr[c]];
				for (int i = 0; i < m; i++)
					part[i] += x[(size_t)i * k + c] * wv;
			}
			for (int i = 0; i < m; i++)
				acc[i] += s[b] * part[i];
		}
		for (int i = 0; i < m; i++)
			y[(size_t)i * ldy + j] = acc[i];
	}
}

static void widen_portable(float *out, const struct wmat *w, int j0, int n, int k)
{
	const float *t = fp8_tab(w->dtype);
	for (int j = j0; j < j0 + n; j++) {
		const uint8_t *wr = (const uint8_t *)w->p + (size_t)j * k;
		const float *s = scale_row(w, j);
		float *o = out + (size_t)(j - j0) * k;
		for (int c0 = 0, b = 0; c0 < k; c0 += w->bc, b++) {
			int c1 = c0 + w->bc < k ? c0 + w->bc : k;
			for (int c = c0; c < c1; c++)
				o[c] = t[wr[c]] * s[b];
		}
	}
}

#ifdef HAVE_X86
/* 16 codes to two vectors of 8 floats (codes 0-7, 8-15). */
__attribute__((target("avx2,fma,f16c"), always_inline)) static inline void
fp8x16(const uint8_t *p, const int e5, __m256 *lo, __m256 *hi)
{
	__m128i v = _mm_loadu_si128((const __m128i *)p), z = _mm_setzero_si128();
	__m128i a = _mm_unpacklo_epi8(z, v), b = _mm_unpackhi_epi8(z, v);
	if (!e5) {
		const __m128i mask = _mm_set1_epi16((short)0xbf80);
		a = _mm_and_si128(_mm_srai_epi16(a, 1), mask);
		b = _mm_and_si128(_mm_srai_epi16(b, 1), mask);
	}
	*lo = _mm256_cvtph_ps(a);
	*hi = _mm256_cvtph_ps(b);
}

__attribute__((target("avx2,fma,f16c"))) static inline float hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
	return _mm_cvtss_f32(s);
}

/*
 * m rows of x (a compile-time constant in each instance, so the
 * accumulators stay in registers), rows [j0, j1) of W, a block's codes in
 * steps of 16 (a block is as narrow as 16 in the generated models), its
 * sum scaled into the row's total; the block's last k % 16 codes from the
 * table.
 */
__attribute__((target("avx2,fma,f16c"), always_inline)) static inline void
gemv_body(float *y, int ldy, const float *x, const struct wmat *w, const int m,
	  const int e5, int j0, int j1, int k)
{
	const float *t = fp8_tab(w->dtype);
	const int bc = w->bc;
	for (int j = j0; j < j1; j++) {
		const uint8_t *wr = (const uint8_t *)w->p + (size_t)j * k;
		const float *s = scale_row(w, j);
		__m256 tot[4];
		float tail[4] = {0, 0, 0, 0};
#pragma GCC unroll 4
		for (int i = 0; i < m; i++)
			tot[i] = _mm256_setzero_ps();
		for (int c0 = 0, b = 0; c0 < k; c0 += bc, b++) {
			int c1 = c0 + bc < k ? c0 + bc : k, c = c0;
			int c16 = c0 + (c1 - c0) / 16 * 16;
			__m256 a[4], a2[4];
			float part[4] = {0, 0, 0, 0};
#pragma GCC unroll 4
			for (int i = 0; i < m; i++)
				a[i] = a2[i] = _mm256_setzero_ps();
			if (m == 1) {
				/* two steps at a time into two more sums: each
				 * FMA chain waits for its last one (4-5 cycles),
				 * which bounded the one-step loop */
				__m256 b0 = _mm256_setzero_ps(), b1 = b0;
				for (; c + 32 <= c16; c += 32) {
					__m256 lo, hi, lo2, hi2;
					if (!(c & 63))
						_mm_prefetch((const char *)(wr + c) + PREFETCH,
							     _MM_HINT_T0);
					fp8x16(wr + c, e5, &lo, &hi);
					fp8x16(wr + c + 16, e5, &lo2, &hi2);
					a[0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + c), lo, a[0]);
					a2[0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + c + 8), hi, a2[0]);
					b0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + c + 16), lo2, b0);
					b1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + c + 24), hi2, b1);
				}
				a[0] = _mm256_add_ps(a[0], b0);
				a2[0] = _mm256_add_ps(a2[0], b1);
			}
			for (; c < c16; c += 16) {
				__m256 lo, hi;
				if (!(c & 63))
					_mm_prefetch((const char *)(wr + c) + PREFETCH, _MM_HINT_T0);
				fp8x16(wr + c, e5, &lo, &hi);
#pragma GCC unroll 4
				for (int i = 0; i < m; i++) {
					const float *xr = x + (size_t)i * k + c;
					a[i] = _mm256_fmadd_ps(_mm256_loadu_ps(xr), lo, a[i]);
					a2[i] = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 8), hi, a2[i]);
				}
			}
			for (; c < c1; c++) {
				float wv = t[wr[c]];
#pragma GCC unroll 4
				for (int i = 0; i < m; i++)
					part[i] += x[(size_t)i * k + c] * wv;
			}
			__m256 sv = _mm256_set1_ps(s[b]);
#pragma GCC unroll 4
			for (int i = 0; i < m; i++) {
				tot[i] = _mm256_fmadd_ps(sv, _mm256_add_ps(a[i], a2[i]), tot[i]);
				tail[i] += s[b] * part[i];
			}
		}
#pragma GCC unroll 4
		for (int i = 0; i < m; i++)
			y[(size_t)i * ldy + j] = hsum8(tot[i]) + tail[i];
	}
}

#define GEMV_INSTANCE(M, E5)                                                        \
	__attribute__((target("avx2,fma,f16c"))) static void gemv_##M##_##E5(        \
		float *y, int ldy, const float *x, const struct wmat *w, int j0,    \
		int j1, int k)                                                      \
	{                                                                           \
		gemv_body(y, ldy, x, w, M, E5, j0, j1, k);                          \
	}
GEMV_INSTANCE(1, 0)
GEMV_INSTANCE(2, 0)
GEMV_INSTANCE(3, 0)
GEMV_INSTANCE(4, 0)
GEMV_INSTANCE(1, 1)
GEMV_INSTANCE(2, 1)
GEMV_INSTANCE(3, 1)
GEMV_INSTANCE(4, 1)

__attribute__((target("avx2,fma,f16c"))) static void
widen_avx2(float *out, const struct wmat *w, int j0, int n, int k)
{
	const float *t = fp8_tab(w->dtype);
	const int e5 = w->dtype == DT_F8_E5M2;
	for (int j = j0; j < j0 + n; j++) {
		const uint8_t *wr = (const uint8_t *)w->p + (size_t)j * k;
		const float *s = scale_row(w, j);
		float *o = out + (size_t)(j - j0) * k;
		for (int c0 = 0, b = 0; c0 < k; c0 += w->bc, b++) {
			int c1 = c0 + w->bc < k ? c0 + w->bc : k, c = c0;
			int c16 = c0 + (c1 - c0) / 16 * 16;
			__m256 sv = _mm256_set1_ps(s[b]);
			for (; c < c16; c += 16) {
				__m256 lo, hi;
				if (e5)
					fp8x16(wr + c, 1, &lo, &hi);
				else
					fp8x16(wr + c, 0, &lo, &hi);
				_mm256_storeu_ps(o + c, _mm256_mul_ps(lo, sv));
				_mm256_storeu_ps(o + c + 8, _mm256_mul_ps(hi, sv));
			}
			for (; c < c1; c++)
				o[c] = t[wr[c]] * s[b];
		}
	}
}

/*
 * The same with AVX-512 (F and BW; vec == 2): 16 codes widened to 16-bit
 * lanes in one instruction (vpmovzxbw), the same integer ops, and one
 * conversion of 16 f16 to a vector of 16 floats, in the codes' order (no
 * permutation of x).  The conversion bounds the FP8 GEMV (bench/README.md),
 * and a 512-bit one converts twice the codes of F16C's.
 */
__attribute__((target("avx512f,avx512bw"), always_inline)) static inline __m512
fp8x16_512(const uint8_t *p, const int e5)
{
	__m256i h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p)), 8);
	if (!e5)
		h = _mm256_and_si256(_mm256_srai_epi16(h, 1), _mm256_set1_epi16((short)0xbf80));
	return _mm512_cvtph_ps(h);
}

__attribute__((target("avx512f,avx512bw"), always_inline)) static inline void
gemv512_body(float *y, int ldy, const float *x, const struct wmat *w, const int m,
	     const int e5, int j0, int j1, int k)
{
	const float *t = fp8_tab(w->dtype);
	const int bc = w->bc;
	for (int j = j0; j < j1; j++) {
		const uint8_t *wr = (const uint8_t *)w->p + (size_t)j * k;
		const float *s = scale_row(w, j);
		__m512 tot[4];
		float tail[4] = {0, 0, 0, 0};
#pragma GCC unroll 4
		for (int i = 0; i < m; i++)
			tot[i] = _mm512_setzero_ps();
		for (int c0 = 0, b = 0; c0 < k; c0 += bc, b++) {
			int c1 = c0 + bc < k ? c0 + bc : k, c = c0;
			int c16 = c0 + (c1 - c0) / 16 * 16;
			__m512 a[4];
			float part[4] = {0, 0, 0, 0};
#pragma GCC unroll 4
			for (int i = 0; i < m; i++)
				a[i] = _mm512_setzero_ps();
			if (m == 1) {
				/* four steps at a time into four sums */
				__m512 a1 = _mm512_setzero_ps(), a2 = a1, a3 = a1;
				for (; c + 64 <= c16; c += 64) {
					_mm_prefetch((const char *)(wr + c) + PREFETCH, _MM_HINT_T0);
					a[0] = _mm512_fmadd_ps(_mm512_loadu_ps(x + c),
							       fp8x16_512(wr + c, e5), a[0]);
					a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c + 16),
							     fp8x16_512(wr + c + 16, e5), a1);
					a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c + 32),
							     fp8x16_512(wr + c + 32, e5), a2);
					a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c + 48),
							     fp8x16_512(wr + c + 48, e5), a3);
				}
				a[0] = _mm512_add_ps(_mm512_add_ps(a[0], a1), _mm512_add_ps(a2, a3));
			}
			for (; c < c16; c += 16) {
				__m512 v = fp8x16_512(wr + c, e5);
				if (!(c & 63))
					_mm_prefetch((const char *)(wr + c) + PREFETCH, _MM_HINT_T0);
#pragma GCC unroll 4
				for (int i = 0; i < m; i++)
					a[i] = _mm512_fmadd_ps(_mm512_loadu_ps(x + (size_t)i * k + c),
							       v, a[i]);
			}
			for (; c < c1; c++) {
				float wv = t[wr[c]];
#pragma GCC unroll 4
				for (int i = 0; i < m; i++)
					part[i] += x[(size_t)i * k + c] * wv;
			}
			__m512 sv = _mm512_set1_ps(s[b]);
#pragma GCC unroll 4
			for (int i = 0; i < m; i++) {
				tot[i] = _mm512_fmadd_ps(sv, a[i], tot[i]);
				tail[i] += s[b] * part[i];
			}
		}
#pragma GCC unroll 4
		for (int i = 0; i < m; i++)
			y[(size_t)i * ldy + j] = _mm512_reduce_add_ps(tot[i]) + tail[i];
	}
}

/*
 * One row of x (decode) with AVX-512 VBMI (vec == 3), where every scale
 * block is whole steps of 64 codes: 64 codes become 64 bf16 values by two
 * byte lookups (vpermi2b over a 128-entry table of each value's high and
 * low byte, indexed by the code's low 7 bits) and the sign bit merged back
 * in, interleaved into 16-bit lanes, then widened to f32 by the bf16
 * kernel's shift and mask.  Every FP8 value is a bf16 exactly (e4m3's
 * times 2^-8 too), so the products are the same as vec 2's; the work per
 * code is half of vcvtph2ps's, which bounded the FP8 GEMV (standalone,
 * codes in L2: 20 -> 42 GB/s).  x comes permuted to the lanes' order
 * (op_fp8_permute_x).  vec == 4: the same over four streams
 * (gemv_tab4_body), the default with the AVX-512 GEMV; 3 with
 * DAY0_KERNEL=avx512-stream.
 */
static uint8_t tab16[2][2][128]; /* [e5m2][high, low byte][code & 0x7f] */
static float tabg[256]; /* e4m3's value times 2^-120 (gf's tails; exact but
			 * for the subnormal codes, which gf never meets) */
static int tab16_ready;

/* The GFNI kernel's patches: the bf16 bytes of e4m3's codes 0-7 (zero
 * and the subnormals), read by vpermb at index code & 63. */
static uint8_t fixtab[2][64];

static void fp8_tab16(void)
{
	if (!__atomic_load_n(&tab16_ready, __ATOMIC_ACQUIRE)) {
		for (int e = 0; e < 2; e++) {
			const float *t = fp8_tab(e ? DT_F8_E5M2 : DT_F8_E4M3);
			for (int c = 0; c < 128; c++) {
				uint32_t u;
				memcpy(&u, &t[c], 4);
				tab16[e][0][c] = (uint8_t)(u >> 24);
				tab16[e][1][c] = (uint8_t)(u >> 16);
			}
		}
		for (int c = 0; c < 256; c++) /* exact: normal codes and zero */
			tabg[c] = (float)((double)fp8_to_f32(DT_F8_E4M3, (uint8_t)c) * 0x1p-120);
		memcpy(fixtab[0], tab16[0][0], 64); /* codes 0-63; 0-7 are read */
		memcpy(fixtab[1], tab16[0][1], 64);
		__atomic_store_n(&tab16_ready, 1, __ATOMIC_RELEASE);
	}
}

/* Where the kernel's four vectors of a 64-code step take their codes: the
 * byte unpacks interleave within each 128-bit lane (w0: codes 0-7 of each
 * lane's 16, w1: 8-15), then each 32-bit pair splits into its even and
 * odd 16-bit halves. */
static inline int lane_code(int p)
{
	int half = p / 32, par = p / 16 % 2, lane = p / 4 % 4, q = p % 4;
	return lane * 16 + half * 8 + 2 * q + par;
}

void op_fp8_permute_x(float *xp, const float *x, int k)
{
	int kk = k - k % 64;
	for (int c = 0; c < kk; c += 64)
		for (int p = 0; p < 64; p++)
			xp[c + p] = x[c + lane_code(p)];
	for (int c = kk; c < k; c++)
		xp[c] = x[c];
}

__attribute__((target("avx512f,avx512bw,avx512vbmi"), always_inline)) static inline void
gemv_tab_body(float *y, const float *xp, const struct wmat *w, const int e5, int j0,
	      int j1, int k)
{
	const float *t = fp8_tab(w->dtype);
	const int bc = w->bc, kk = k - k % 64;
	const __m512i h0 = _mm512_loadu_si512(tab16[e5][0]), h1 = _mm512_loadu_si512(tab16[e5][0] + 64);
	const __m512i l0 = _mm512_loadu_si512(tab16[e5][1]), l1 = _mm512_loadu_si512(tab16[e5][1] + 64);
	const __m512i sign = _mm512_set1_epi8((char)0x80);
	const __m512i mask = _mm512_set1_epi32((int)0xffff0000u);
	for (int j = j0; j < j1; j++) {
		const uint8_t *wr = (const uint8_t *)w->p + (size_t)j * k;
		const float *s = scale_row(w, j);
		__m512 tot = _mm512_setzero_ps();
		float tail = 0;
		for (int c0 = 0, b = 0; c0 < k; c0 += bc, b++) {
			int c1 = c0 + bc < k ? c0 + bc : k, c = c0;
			__m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
			float part = 0;
			for (; c + 64 <= c1 && c < kk; c += 64) {
				__m512i v = _mm512_loadu_si512((const void *)(wr + c));
				/* 4 KiB ahead: the lookups read memory faster than
				 * vcvtph2ps did, and 1-2 KiB left them waiting on it
				 * (standalone from memory: 24.5 against 26.4 GB/s) */
				_mm_prefetch((const char *)(wr + c) + 4 * PREFETCH, _MM_HINT_T0);
				__m512i hi = _mm512_permutex2var_epi8(h0, v, h1);
				__m512i lo = _mm512_permutex2var_epi8(l0, v, l1);
				hi = _mm512_ternarylogic_epi32(hi, v, sign, 0xf8); /* hi | (v & sign) */
				__m512i w0 = _mm512_unpacklo_epi8(lo, hi), w1 = _mm512_unpackhi_epi8(lo, hi);
				a0 = _mm512_fmadd_ps(_mm512_loadu_ps(xp + c),
						     _mm512_castsi512_ps(_mm512_slli_epi32(w0, 16)), a0);
				a1 = _mm512_fmadd_ps(_mm512_loadu_ps(xp + c + 16),
						     _mm512_castsi512_ps(_mm512_and_si512(w0, mask)), a1);
				a2 = _mm512_fmadd_ps(_mm512_loadu_ps(xp + c + 32),
						     _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16)), a2);
				a3 = _mm512_fmadd_ps(_mm512_loadu_ps(xp + c + 48),
						     _mm512_castsi512_ps(_mm512_and_si512(w1, mask)), a3);
			}
			for (; c < c1; c++) /* past the last whole 64: x as it is */
				part += xp[c] * t[wr[c]];
			tot = _mm512_fmadd_ps(_mm512_set1_ps(s[b]),
					      _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
					      tot);
			tail += s[b] * part;
		}
		y[j] = _mm512_reduce_add_ps(tot) + tail;
	}
}

/*
 * The same lookups over four streams (vec 4): the range's quarters side
 * by side, a row of each per step sharing the loads of x, as the bf16
 * AVX-512 GEMV reads (ops_bf16.c: one core of the Sapphire Rapids VM reads
 * several pages at once faster than one stream).  Two sums a stream, each
 * block's scaled into the row's total.  The rows past the quarters go
 * through gemv_tab_body.
 *
 * gfx (e4m3 where the CPU has GFNI, the default, and where gf is named
 * but a weight's codes hold subnormals; DAY0_KERNEL=avx512-vbmi keeps the
 * lookups): the same two bytes of each code's bf16 without
 * vpermi2b, which Sapphire Rapids runs as 3 uops, 2 of them on port 5 (2
 * cycles a lookup; the tables kernel's 17 uops a 64-byte line bounded it
 * at ~18 GB/s a core from L2 against ~17 GB/s from memory).  A normal
 * code's bf16 (value times 2^-8) is S | (E + 112) << 7 | M << 4: its high
 * byte S 0 1 1 1 E3 E2 E1 and low byte E0 M2 M1 M0 0 0 0 0 are moves of
 * the code's bits, one GF2P8AFFINEQB each (the +112 an XOR, E < 16; one
 * uop on port 0); the 16 codes of a zero exponent (zero, the subnormals:
 * not bit moves) are patched by a masked vpermb from their own 8 entries.
 * Same bf16 values, same sums in the same order: bit for bit vec 4's
 * tables (test_ops), 16 uops a line, 1.12x from L2 (bench/fp8_gemv.c).
 * (The bf16 bits of value times 2^-120 need no patch, but make subnormal
 * codes f32 denormals, which cost the FMA a microcode assist each: 50x
 * slower on a block of them.)
 */
#define GF_HI 0x1020400000000080ull /* S . . . . E3 E2 E1 (XOR 0x38) */
#define GF_LO 0x0000000001020408ull /* E0 M2 M1 M0 . . . . */

/* GF2P8AFFINEQB: bit i of each byte of v = parity(byte 7 - i of m's qword
 * & the byte) ^ bit i of imm.  In asm so that one kernel body serves the
 * CPUs without GFNI too (its intrinsic would need the GFNI target on the
 * tables' instances; there the asm is never reached). */
#define GF_AFFINE(v, m, imm)                                                           \
	({                                                                             \
		__m512i r_;                                                            \
		__asm__("vgf2p8affineqb %3, %2, %1, %0" : "=v"(r_) : "v"(v), "v"(m), "i"(imm)); \
		r_;                                                                    \
	})

__attribute__((target("avx512f,avx512bw,avx512vbmi"), always_inline)) static inline void
gemv_tab4_body(float *y, const float *xp, const struct wmat *w, const int e5, const int gfx,
	       int j0, int j1, int k)
{
	const float *t = fp8_tab(w->dtype);
	const int bc = w->bc, kk = k - k % 64, q = (j1 - j0) / 4;
	const __m512i h0 = _mm512_loadu_si512(tab16[e5][0]), h1 = _mm512_loadu_si512(tab16[e5][0] + 64);
	const __m512i l0 = _mm512_loadu_si512(tab16[e5][1]), l1 = _mm512_loadu_si512(tab16[e5][1] + 64);
	const __m512i fh = _mm512_loadu_si512(fixtab[0]), fl = _mm512_loadu_si512(fixtab[1]);
	const __m512i gh = _mm512_set1_epi64((long long)GF_HI), gl = _mm512_set1_epi64((long long)GF_LO);
	const __m512i expo = _mm512_set1_epi8(0x78);
	const __m512i sign = _mm512_set1_epi8((char)0x80);
	const __m512i mask = _mm512_set1_epi32((int)0xffff0000u);
	for (int j = j0; j < j0 + q; j++) {
		const uint8_t *wr[4];
		const float *sr[4];
		__m512 tot[4];
		float tail[4] = {0, 0, 0, 0};
#pragma GCC unroll 4
		for (int s = 0; s < 4; s++) {
			wr[s] = (const uint8_t *)w->p + (size_t)(j + s * q) * k;
			sr[s] = scale_row(w, j + s * q);
			tot[s] = _mm512_setzero_ps();
		}
		for (int c0 = 0, b = 0; c0 < k; c0 += bc, b++) {
			int c1 = c0 + bc < k ? c0 + bc : k, c = c0;
			__m512 a[4], d[4];
#pragma GCC unroll 4
			for (int s = 0; s < 4; s++)
				a[s] = d[s] = _mm512_setzero_ps();
			for (; c + 64 <= c1 && c < kk; c += 64) {
				__m512 x0 = _mm512_loadu_ps(xp + c), x1 = _mm512_loadu_ps(xp + c + 16);
				__m512 x2 = _mm512_loadu_ps(xp + c + 32), x3 = _mm512_loadu_ps(xp + c + 48);
#pragma GCC unroll 4
				for (int s = 0; s < 4; s++) {
					__m512i v = _mm512_loadu_si512((const void *)(wr[s] + c)), hi, lo;
					_mm_prefetch((const char *)(wr[s] + c) + PREFETCH, _MM_HINT_T0);
					if (gfx) {
						__mmask64 z = _mm512_testn_epi8_mask(v, expo);
						hi = GF_AFFINE(v, gh, 0x38);
						lo = GF_AFFINE(v, gl, 0);
						hi = _mm512_mask_permutexvar_epi8(hi, z, v, fh);
						lo = _mm512_mask_permutexvar_epi8(lo, z, v, fl);
					} else {
						hi = _mm512_permutex2var_epi8(h0, v, h1);
						lo = _mm512_permutex2var_epi8(l0, v, l1);
					}
					hi = _mm512_ternarylogic_epi32(hi, v, sign, 0xf8);
					__m512i w0 = _mm512_unpacklo_epi8(lo, hi), w1 = _mm512_unpackhi_epi8(lo, hi);
					a[s] = _mm512_fmadd_ps(x0, _mm512_castsi512_ps(_mm512_slli_epi32(w0, 16)), a[s]);
					d[s] = _mm512_fmadd_ps(x1, _mm512_castsi512_ps(_mm512_and_si512(w0, mask)), d[s]);
					a[s] = _mm512_fmadd_ps(x2, _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16)), a[s]);
					d[s] = _mm512_fmadd_ps(x3, _mm512_castsi512_ps(_mm512_and_si512(w1, mask)), d[s]);
				}
			}
#pragma GCC unroll 4
			for (int s = 0; s < 4; s++) {
				float part = 0;
				for (int cc = c; cc < c1; cc++) /* past the last whole 64 */
					part += xp[cc] * t[wr[s][cc]];
				tot[s] = _mm512_fmadd_ps(_mm512_set1_ps(sr[s][b]), _mm512_add_ps(a[s], d[s]),
							 tot[s]);
				tail[s] += sr[s][b] * part;
			}
		}
#pragma GCC unroll 4
		for (int s = 0; s < 4; s++)
			y[j + s * q] = _mm512_reduce_add_ps(tot[s]) + tail[s];
	}
	if (j0 + 4 * q < j1)
		gemv_tab_body(y, xp, w, e5, j0 + 4 * q, j1, k);
}

/*
 * gf (e4m3 without subnormal codes, DAY0_KERNEL=avx512-gf4):
 * one GF2P8AFFINEQB a byte of the bf16 bits of value times 2^-120, high
 * byte S 0 0 0 0 E3 E2 E1, low byte E0 M2 M1 M0 0 0 0 0: a pure bit move
 * for every normal code and for zero, no patch, no sign merge (12 uops a
 * 64-byte line against gfx's 16; 21-24 GB/s a core from L2 against 17-20,
 * bench/README.md).  A subnormal code would become an f32 denormal, which
 * costs the FMA a microcode assist each (50x slower on a block of them):
 * the runtime takes them out of the resident codes at load
 * (op_fp8_take_subnormals, w->nosub) and op_fp8_gemv_rows adds their
 * products back from the sparse list.  x is read times 2^64 (xs, a copy
 * per call) so that the products v x 2^-56 stay normal; the row's sum is
 * scaled back by 2^48 (the scales carry e4m3's 2^8).  NS streams: the
 * range's NS parts side by side (4; the rows past the quarters one at a
 * time).
 */

__attribute__((target("avx512f,avx512bw,avx512vbmi"), always_inline)) static inline void
gemv_gf_body(float *y, const float *xs, const struct wmat *w, const int NS, int j0,
	     int j1, int k)
{
	const int bc = w->bc, kk = k - k % 64, q = (j1 - j0) / NS;
	const __m512i gh = _mm512_set1_epi64((long long)GF_HI), gl = _mm512_set1_epi64((long long)GF_LO);
	const __m512i mask = _mm512_set1_epi32((int)0xffff0000u);
	for (int j = j0; j < j0 + q; j++) {
		const uint8_t *wr[4];
		const float *sr[4];
		__m512 tot[4];
		float tail[4] = {0, 0, 0, 0};
#pragma GCC unroll 4
		for (int s = 0; s < NS; s++) {
			wr[s] = (const uint8_t *)w->p + (size_t)(j + s * q) * k;
			sr[s] = scale_row(w, j + s * q);
			tot[s] = _mm512_setzero_ps();
		}
		for (int c0 = 0, b = 0; c0 < k; c0 += bc, b++) {
			int c1 = c0 + bc < k ? c0 + bc : k, c = c0;
			__m512 a[4], d[4];
#pragma GCC unroll 4
			for (int s = 0; s < NS; s++)
				a[s] = d[s] = _mm512_setzero_ps();
			for (; c + 64 <= c1 && c < kk; c += 64) {
				__m512 x0 = _mm512_loadu_ps(xs + c), x1 = _mm512_loadu_ps(xs + c + 16);
				__m512 x2 = _mm512_loadu_ps(xs + c + 32), x3 = _mm512_loadu_ps(xs + c + 48);
#pragma GCC unroll 4
				for (int s = 0; s < NS; s++) {
					__m512i v = _mm512_loadu_si512((const void *)(wr[s] + c));
					_mm_prefetch((const char *)(wr[s] + c) + PREFETCH, _MM_HINT_T0);
					__m512i hi = GF_AFFINE(v, gh, 0), lo = GF_AFFINE(v, gl, 0);
					__m512i w0 = _mm512_unpacklo_epi8(lo, hi), w1 = _mm512_unpackhi_epi8(lo, hi);
					a[s] = _mm512_fmadd_ps(x0, _mm512_castsi512_ps(_mm512_slli_epi32(w0, 16)), a[s]);
					d[s] = _mm512_fmadd_ps(x1, _mm512_castsi512_ps(_mm512_and_si512(w0, mask)), d[s]);
					a[s] = _mm512_fmadd_ps(x2, _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16)), a[s]);
					d[s] = _mm512_fmadd_ps(x3, _mm512_castsi512_ps(_mm512_and_si512(w1, mask)), d[s]);
				}
			}
#pragma GCC unroll 4
			for (int s = 0; s < NS; s++) {
				float part = 0;
				for (int cc = c; cc < c1; cc++) /* past the last whole 64 */
					part += xs[cc] * tabg[wr[s][cc]];
				tot[s] = _mm512_fmadd_ps(_mm512_set1_ps(sr[s][b]), _mm512_add_ps(a[s], d[s]),
							 tot[s]);
				tail[s] += sr[s][b] * part;
			}
		}
#pragma GCC unroll 4
		for (int s = 0; s < NS; s++)
			y[j + s * q] = (_mm512_reduce_add_ps(tot[s]) + tail[s]) * 0x1p48f;
	}
}

/* x (permuted) times 2^64 into xs; 0 where some |x| is 2^60 or more, NaN,
 * or below 2^-60 but not zero (a product could overflow, or be a denormal
 * and cost an assist): that call takes gfx instead. */
__attribute__((target("avx512f,avx512bw"))) static int gf_scale_x(float *xs, const float *xp,
								    int k)
{
	const __m512 big = _mm512_set1_ps(0x1p60f), tiny = _mm512_set1_ps(0x1p-60f);
	const __m512 mul = _mm512_set1_ps(0x1p64f), zero = _mm512_setzero_ps();
	__mmask16 bad = 0;
	int c = 0;
	for (; c + 16 <= k; c += 16) {
		__m512 v = _mm512_loadu_ps(xp + c), a = _mm512_abs_ps(v);
		bad |= _mm512_cmp_ps_mask(a, big, _CMP_NLT_UQ) |
		       (_mm512_cmp_ps_mask(a, tiny, _CMP_LT_OQ) & _mm512_cmp_ps_mask(a, zero, _CMP_NEQ_OQ));
		_mm512_storeu_ps(xs + c, _mm512_mul_ps(v, mul));
	}
	for (; c < k; c++) {
		float a = fabsf(xp[c]);
		bad |= !(a < 0x1p60f) || (a < 0x1p-60f && a != 0);
		xs[c] = xp[c] * 0x1p64f;
	}
	return !bad;
}

/* 1: y = x W^T by gf for rows [j0, j1); 0: x does not fit (gf_scale_x). */
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) static int
gemv_gf4(float *y, const float *xp, const struct wmat *w, int j0, int j1, int k)
{
	_Alignas(64) float buf[4096];
	float *xs = k <= 4096 ? buf : aligned_alloc(64, ((size_t)k * 4 + 63) & ~(size_t)63);
	int q = (j1 - j0) / 4, ok;
	if (!xs)
		return 0;
	ok = gf_scale_x(xs, xp, k);
	if (ok) {
		gemv_gf_body(y, xs, w, 4, j0, j1, k);
		if (j0 + 4 * q < j1)
			gemv_gf_body(y, xs, w, 1, j0 + 4 * q, j1, k);
	}
	if (xs != buf)
		free(xs);
	return ok;
}

/*
 * dp (e4m3 without subnormal codes, DAY0_KERNEL=avx512-dp4; the default
 * where the CPU has AVX512-BF16 besides GFNI and VBMI): gf's bf16 words of
 * value x 2^-120 times x as two bf16 terms, hi = bf16(x) and lo =
 * bf16(x - hi), by VDPBF16PS (two products a lane, each exact in f32,
 * added in f32): 8 uops a 64-byte line against gf's 12 and gfx's 16, no
 * widening to f32 (bench/fp8_gemv.c: 0.81 of a plain read of the same
 * bytes against gfx's 0.70 on Zen 5).  x to ~16 bits, as prefill's
 * DAY0_PREFILL_X=split: a product within 2^-16 of f32 compute's, the sums
 * f32 ones.  VDPBF16PS reads bf16 denormals as zero and flushes its own,
 * so it needs gf's conditions: the subnormal codes out of the resident
 * codes (w->nosub; their products from the list) and x in gf_scale_x's
 * range (times 2^64, hi >= 2^4; a lo product below f32's normals, < 2^-146
 * of the row's, is dropped).
 */
#define DP_TARGET "avx512f,avx512bw,avx512vbmi,avx512bf16"
/* dp reads a line in fewer uops than the other kernels, and from memory
 * reads closer to a plain sum with its prefetch 2 KiB ahead than 1
 * (bench/fp8_gemv.c on Zen 5: 0.91 / 0.85 of a plain sum at 1 / 2
 * threads against 0.87 / 0.74; bench/README.md, "2026-12-05") */
#define DP_PREFETCH 2048

/* xs (gf_scale_x's: permuted, times 2^64), its whole 64s as dp reads
 * them: per 64 columns the 32 words w0 pairs with (codes lane * 16 + m,
 * m < 8, of each 128-bit lane), the 32 of w1 (m + 8), then the same as lo.
 * w0's code lane * 16 + r is xs's (r % 2) * 16 + lane * 4 + r / 2
 * (lane_pos), w1's that plus 32. */
__attribute__((target(DP_TARGET))) static void dp_x(uint16_t *xb, const float *xs, int kk)
{
	const __m512i i0 = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
	const __m512i i1 = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
	for (int c = 0; c < kk; c += 64)
		for (int v = 0; v < 2; v++) {
			__m512 a = _mm512_loadu_ps(xs + c + 32 * v), b = _mm512_loadu_ps(xs + c + 32 * v + 16);
			__m512 f[2] = {_mm512_permutex2var_ps(a, i0, b), _mm512_permutex2var_ps(a, i1, b)};
			for (int h = 0; h < 2; h++) {
				__m256bh hi = _mm512_cvtneps_pbh(f[h]);
				__m256bh lo = _mm512_cvtneps_pbh(_mm512_sub_ps(f[h], _mm512_cvtpbh_ps(hi)));
				uint16_t *o = xb + (size_t)c * 2 + 32 * v + 16 * h;
				_mm256_storeu_si256((__m256i *)o, (__m256i)hi);
				_mm256_storeu_si256((__m256i *)(o + 64), (__m256i)lo);
			}
		}
}

__attribute__((target(DP_TARGET), always_inline)) static inline void
gemv_dp_body(float *y, const float *xs, const uint16_t *xb, const struct wmat *w, const int NS,
	     int j0, int j1, int k)
{
	const int bc = w->bc, kk = k - k % 64, q = (j1 - j0) / NS;
	const __m512i gh = _mm512_set1_epi64((long long)GF_HI), gl = _mm512_set1_epi64((long long)GF_LO);
	for (int j = j0; j < j0 + q; j++) {
		const uint8_t *wr[4];
		const float *sr[4];
		__m512 tot[4];
		float tail[4] = {0, 0, 0, 0};
#pragma GCC unroll 4
		for (int s = 0; s < NS; s++) {
			wr[s] = (const uint8_t *)w->p + (size_t)(j + s * q) * k;
			sr[s] = scale_row(w, j + s * q);
			tot[s] = _mm512_setzero_ps();
		}
		for (int c0 = 0, b = 0; c0 < k; c0 += bc, b++) {
			int c1 = c0 + bc < k ? c0 + bc : k, c = c0;
			__m512 a[4], d[4];
#pragma GCC unroll 4
			for (int s = 0; s < NS; s++)
				a[s] = d[s] = _mm512_setzero_ps();
			for (; c + 64 <= c1 && c < kk; c += 64) {
				const uint16_t *xc = xb + (size_t)c * 2;
				__m512bh h0 = (__m512bh)_mm512_loadu_si512(xc);
				__m512bh h1 = (__m512bh)_mm512_loadu_si512(xc + 32);
				__m512bh l0 = (__m512bh)_mm512_loadu_si512(xc + 64);
				__m512bh l1 = (__m512bh)_mm512_loadu_si512(xc + 96);
#pragma GCC unroll 4
				for (int s = 0; s < NS; s++) {
					__m512i v = _mm512_loadu_si512((const void *)(wr[s] + c));
					_mm_prefetch((const char *)(wr[s] + c) + DP_PREFETCH, _MM_HINT_T0);
					__m512i hi = GF_AFFINE(v, gh, 0), lo = GF_AFFINE(v, gl, 0);
					__m512bh w0 = (__m512bh)_mm512_unpacklo_epi8(lo, hi);
					__m512bh w1 = (__m512bh)_mm512_unpackhi_epi8(lo, hi);
					a[s] = _mm512_dpbf16_ps(a[s], w0, h0);
					d[s] = _mm512_dpbf16_ps(d[s], w1, h1);
					a[s] = _mm512_dpbf16_ps(a[s], w0, l0);
					d[s] = _mm512_dpbf16_ps(d[s], w1, l1);
				}
			}
#pragma GCC unroll 4
			for (int s = 0; s < NS; s++) {
				float part = 0;
				for (int cc = c; cc < c1; cc++) /* past the last whole 64 */
					part += xs[cc] * tabg[wr[s][cc]];
				tot[s] = _mm512_fmadd_ps(_mm512_set1_ps(sr[s][b]), _mm512_add_ps(a[s], d[s]),
							 tot[s]);
				tail[s] += sr[s][b] * part;
			}
		}
#pragma GCC unroll 4
		for (int s = 0; s < NS; s++)
			y[j + s * q] = (_mm512_reduce_add_ps(tot[s]) + tail[s]) * 0x1p48f;
	}
}

/* 1: y = x W^T by dp for rows [j0, j1); 0: x does not fit (gf_scale_x). */
__attribute__((target(DP_TARGET))) static int gemv_dp4(float *y, const float *xp,
						      const struct wmat *w, int j0, int j1, int k)
{
	_Alignas(64) float buf[4096];
	_Alignas(64) uint16_t bbuf[8192];
	int kk = k - k % 64, q = (j1 - j0) / 4, ok;
	float *xs = k <= 4096 ? buf : aligned_alloc(64, ((size_t)k * 4 + 63) & ~(size_t)63);
	uint16_t *xb = k <= 4096 ? bbuf : aligned_alloc(64, ((size_t)kk * 4 + 63) & ~(size_t)63);
	ok = xs && xb && gf_scale_x(xs, xp, k);
	if (ok) {
		dp_x(xb, xs, kk);
		gemv_dp_body(y, xs, xb, w, 4, j0, j1, k);
		if (j0 + 4 * q < j1)
			gemv_dp_body(y, xs, xb, w, 1, j0 + 4 * q, j1, k);
	}
	if (xs != buf)
		free(xs);
	if (xb != bbuf)
		free(xb);
	return ok;
}

__attribute__((target("avx512f,avx512bw,avx512vbmi"))) static void
gemv_tab4_0(float *y, const float *xp, const struct wmat *w, int j0, int j1, int k)
{
	gemv_tab4_body(y, xp, w, 0, 0, j0, j1, k);
}

__attribute__((target("avx512f,avx512bw,avx512vbmi"))) static void
gemv_tab4_1(float *y, const float *xp, const struct wmat *w, int j0, int j1, int k)
{
	gemv_tab4_body(y, xp, w, 1, 0, j0, j1, k);
}

__attribute__((target("avx512f,avx512bw,avx512vbmi"))) static void
gemv_gfx4(float *y, const float *xp, const struct wmat *w, int j0, int j1, int k)
{
	gemv_tab4_body(y, xp, w, 0, 1, j0, j1, k);
}

__attribute__((target("avx512f,avx512bw,avx512vbmi"))) static void
gemv_tab_0(float *y, const float *xp, const struct wmat *w, int j0, int j1, int k)
{
	gemv_tab_body(y, xp, w, 0, j0, j1, k);
}

__attribute__((target("avx512f,avx512bw,avx512vbmi"))) static void
gemv_tab_1(float *y, const float *xp, const struct wmat *w, int j0, int j1, int k)
{
	gemv_tab_body(y, xp, w, 1, j0, j1, k);
}

#define GEMV512_INSTANCE(M, E5)                                                     \
	__attribute__((target("avx512f,avx512bw"))) static void gemv512_##M##_##E5(   \
		float *y, int ldy, const float *x, const struct wmat *w, int j0,    \
		int j1, int k)                                                      \
	{                                                                           \
		gemv512_body(y, ldy, x, w, M, E5, j0, j1, k);                       \
	}
GEMV512_INSTANCE(1, 0)
GEMV512_INSTANCE(2, 0)
GEMV512_INSTANCE(3, 0)
GEMV512_INSTANCE(4, 0)
GEMV512_INSTANCE(1, 1)
GEMV512_INSTANCE(2, 1)
GEMV512_INSTANCE(3, 1)
GEMV512_INSTANCE(4, 1)

__attribute__((target("avx512f,avx512bw"))) static void
widen_avx512(float *out, const struct wmat *w, int j0, int n, int k)
{
	const float *t = fp8_tab(w->dtype);
	const int e5 = w->dtype == DT_F8_E5M2;
	for (int j = j0; j < j0 + n; j++) {
		const uint8_t *wr = (const uint8_t *)w->p + (size_t)j * k;
		const float *s = scale_row(w, j);
		float *o = out + (size_t)(j - j0) * k;
		for (int c0 = 0, b = 0; c0 < k; c0 += w->bc, b++) {
			int c1 = c0 + w->bc < k ? c0 + w->bc : k, c = c0;
			int c16 = c0 + (c1 - c0) / 16 * 16;
			__m512 sv = _mm512_set1_ps(s[b]);
			for (; c < c16; c += 16)
				_mm512_storeu_ps(o + c, _mm512_mul_ps(e5 ? fp8x16_512(wr + c, 1)
									 : fp8x16_512(wr + c, 0),
								      sv));
			for (; c < c1; c++)
				o[c] = t[wr[c]] * s[b];
		}
	}
}
#endif

int op_fp8_vector(void)
{
#ifdef HAVE_X86
	/* F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports
	 * does not know "f16c".  Asked once: in a VM each CPUID traps to the
	 * hypervisor, and every product asks. */
	static int have = -1;
	int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
	if (h < 0) {
		unsigned a, b, c, d;
		h = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
		    __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
		__atomic_store_n(&have, h, __ATOMIC_RELAXED);
	}
	return h;
#else
	return 0;
#endif
}

/* FP8's one-row e4m3 kernel with four streams (vec 4): -1 not yet
 * decided, else an enum e4m3_kind; fp8_named: the DAY0_KERNEL name that
 * forced one (op_fp8_select), NULL for the best. */
enum e4m3_kind { E4M3_TABLES, E4M3_GFX, E4M3_GF, E4M3_DP };
static int e4m3_kind = -1;
static const char *fp8_named;

static int have_gfni(void)
{
#ifdef HAVE_X86
	return op_fp8_vbmi() && __builtin_cpu_supports("gfni");
#else
	return 0;
#endif
}

/* dp's: GFNI and VBMI, and AVX512-BF16 (CPUID leaf 7 subleaf 1, EAX bit
 * 5; asked once, as op_fp8_vector does) */
static int have_dp(void)
{
#ifdef HAVE_X86
	static int have = -1;
	int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
	if (h < 0) {
		unsigned a, b, c, d;
		h = have_gfni() && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));
		__atomic_store_n(&have, h, __ATOMIC_RELAXED);
	}
	return h;
#else
	return 0;
#endif
}

int op_fp8_named(const char *name)
{
	if (!name)
		return 0;
	if (!strcmp(name, "avx512-vbmi"))
		return op_fp8_vbmi();
	if (!strcmp(name, "avx512-gfx4") || !strcmp(name, "avx512-gf4"))
		return have_gfni();
	if (!strcmp(name, "avx512-dp4"))
		return have_dp();
	return 0;
}

void op_fp8_select(const char *name)
{
	static const char *const names[] = {"avx512-vbmi", "avx512-gfx4", "avx512-gf4",
					    "avx512-dp4"};
	int k = -1;
	const char *n = NULL;
	for (int i = 0; i < 4 && op_fp8_named(name); i++)
		if (!strcmp(name, names[i]))
			n = names[i], k = i; /* enum e4m3_kind's order */
	__atomic_store_n(&fp8_named, n, __ATOMIC_RELAXED);
	__atomic_store_n(&e4m3_kind, k, __ATOMIC_RELAXED);
}

const char *op_fp8_named_kernel(void)
{
	return __atomic_load_n(&fp8_named, __ATOMIC_RELAXED);
}

/* The best: dp where the CPU has AVX512-BF16 (decode TPOT 0.92-0.93 of
 * gfx's at 1 and 2 threads on Zen 5, bench/README.md "FP8 decode by
 * VDPBF16PS"), else gfx where it has GFNI.  gf only by name: from L2 it
 * is 1.19x gfx (with the lists), but in the engine, where the GEMV reads
 * memory, it measured no faster (bench/README.md, "FP8 decode: gf4 on
 * codes without subnormals"), and it needs the lists. */
static int e4m3_kernel(void)
{
	int h = __atomic_load_n(&e4m3_kind, __ATOMIC_RELAXED);
	if (h < 0) {
		h = have_dp() ? E4M3_DP : have_gfni() ? E4M3_GFX : E4M3_TABLES;
		__atomic_store_n(&e4m3_kind, h, __ATOMIC_RELAXED);
	}
	return h;
}

int op_fp8_gfni(void)
{
	return op_fp8_vbmi() && e4m3_kernel() >= E4M3_GFX;
}

int op_fp8_wants_nosub(void)
{
	(void)op_bf16_kernel(); /* DAY0_KERNEL read: it may name gf4 */
	return op_fp8_vbmi() && (e4m3_kernel() == E4M3_GF || e4m3_kernel() == E4M3_DP);
}

const char *op_fp8_e4m3_kernel(void)
{
	if (!op_fp8_vbmi())
		return op_fp8_vector() ? "f16c" : "portable";
	switch (e4m3_kernel()) {
	case E4M3_DP: return "dp4";
	case E4M3_GF: return "gf4";
	case E4M3_GFX: return "gfx4";
	default: return "vbmi";
	}
}

/* ------------------------------------------- subnormal codes taken out */

/* e4m3's subnormals: exponent field 0, mantissa not */
static inline int e4m3_sub(uint8_t c)
{
	return !(c & 0x78) && (c & 7);
}

/* Where the table kernels read x's column col (op_fp8_permute_x's lanes:
 * the inverse of lane_code). */
static inline int lane_pos(int col, int kk)
{
	if (col >= kk)
		return col;
	int u = col & 63, lane = u / 16, half = u % 16 / 8, r = u % 8;
	return (col & ~63) + half * 32 + r % 2 * 16 + lane * 4 + r / 2;
}

/* The high bit of each byte of the eight codes at p that is subnormal. */
static inline uint64_t sub8(const uint8_t *p)
{
	const uint64_t lo7 = 0x7f7f7f7f7f7f7f7full, hi = 0x8080808080808080ull;
	uint64_t u, e, z, nz;
	memcpy(&u, p, 8);
	e = u & 0x7878787878787878ull;
	z = ~(((e & lo7) + lo7) | e) & hi;        /* exponent == 0 */
	nz = ((u & 0x0707070707070707ull) + lo7) & hi; /* mantissa != 0 */
	return z & nz;
}

uint64_t op_fp8_subnormals(const struct wmat *w, int rows, int k)
{
	const uint8_t *p = w->p;
	uint64_t n = (uint64_t)rows * (uint64_t)k, i = 0, count = 0;
	if (w->dtype != DT_F8_E4M3)
		return 0;
	for (; i + 8 <= n; i += 8) /* the bytes' 0/1 summed into the top one */
		count += (sub8(p + i) >> 7) * 0x0101010101010101ull >> 56;
	for (; i < n; i++)
		count += (uint64_t)e4m3_sub(p[i]);
	return count;
}

size_t op_fp8_sub_bytes(int rows, uint64_t count)
{
	return ((size_t)rows + 1) * sizeof(uint32_t) + (size_t)count * sizeof(struct fp8_sub);
}

/* Code c of row wr into the list if subnormal: its widened weight (the
 * kernels' value x 2^-8 times the scale x 2^8, rounded once), and a zero
 * of its sign in its place. */
static inline void take_code(uint8_t *wr, int c, struct fp8_sub *sw, uint32_t *at,
			     const float *t, const float *s, int bc)
{
	if (e4m3_sub(wr[c])) {
		sw[(*at)++] = (struct fp8_sub){(uint32_t)c, t[wr[c]] * s[c / bc]};
		wr[c] &= 0x80;
	}
}

void op_fp8_take_subnormals(struct wmat *w, int rows, int k, void *mem)
{
	uint32_t *row = mem, at = 0;
	struct fp8_sub *sw = mem ? (struct fp8_sub *)(row + rows + 1) : NULL;
	const float *t = fp8_tab(w->dtype);
	for (int j = 0; mem && j < rows; j++) {
		uint8_t *wr = (uint8_t *)w->p + (size_t)j * (size_t)k;
		const float *s = scale_row(w, j);
		int c = 0;
		row[j] = at;
		for (; c + 8 <= k; c += 8) /* eight codes without one skipped */
			if (sub8(wr + c))
				for (int cc = c; cc < c + 8; cc++)
					take_code(wr, cc, sw, &at, t, s, w->bc);
		for (; c < k; c++)
			take_code(wr, c, sw, &at, t, s, w->bc);
	}
	if (mem)
		row[rows] = at;
	w->sub_row = row;
	w->sub_w = sw;
	w->nosub = 1;
}

/* y[i][j] += each taken-out code's weight times x[i] at its column, rows
 * [j0, j1) (x in the table kernels' lanes where perm). */
static void sub_gemv(float *y, int ldy, const float *x, const struct wmat *w, int m, int j0,
		     int j1, int k, int perm)
{
	const uint32_t *row = w->sub_row;
	const struct fp8_sub *sw = w->sub_w;
	int kk = perm ? k - k % 64 : 0;
	if (row[j0] == row[j1])
		return;
	for (int j = j0; j < j1; j++)
		for (uint32_t e = row[j]; e < row[j + 1]; e++) {
			int at = lane_pos((int)sw[e].col, kk);
			for (int i = 0; i < m; i++)
				y[(size_t)i * ldy + j] += sw[e].w * x[(size_t)i * k + at];
		}
}

/* The same for rows widened: each taken-out code's weight put back. */
static void sub_widen(float *out, const struct wmat *w, int j0, int n, int k)
{
	const uint32_t *row = w->sub_row;
	const struct fp8_sub *sw = w->sub_w;
	for (int j = j0; j < j0 + n; j++)
		for (uint32_t e = row[j]; e < row[j + 1]; e++)
			out[(size_t)(j - j0) * k + sw[e].col] = sw[e].w;
}

int op_fp8_vbmi(void)
{
#ifdef HAVE_X86
	static int have = -1;
	int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
	if (h < 0) {
		h = __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw");
		__atomic_store_n(&have, h, __ATOMIC_RELAXED);
	}
	return h;
#else
	return 0;
#endif
}

void op_fp8_gemv_rows(float *y, int ldy, const float *x, const struct wmat *w,
		      int m, int j0, int j1, int k, int vec)
{
#ifdef HAVE_X86
	if (vec) {
		typedef void (*fn)(float *, int, const float *, const struct wmat *, int,
				   int, int);
		static const fn f[2][2][4] = {
			{{gemv_1_0, gemv_2_0, gemv_3_0, gemv_4_0},
			 {gemv_1_1, gemv_2_1, gemv_3_1, gemv_4_1}},
			{{gemv512_1_0, gemv512_2_0, gemv512_3_0, gemv512_4_0},
			 {gemv512_1_1, gemv512_2_1, gemv512_3_1, gemv512_4_1}}};
		if (vec == 4 && m == 1) {
			int kind = e4m3_kernel();
			fp8_tab16();
			if (w->dtype == DT_F8_E5M2)
				gemv_tab4_1(y, x, w, j0, j1, k);
			else if (!(kind == E4M3_DP && w->nosub && gemv_dp4(y, x, w, j0, j1, k)) &&
				 !(kind == E4M3_GF && w->nosub && gemv_gf4(y, x, w, j0, j1, k)))
				(kind >= E4M3_GFX ? gemv_gfx4 : gemv_tab4_0)(y, x, w, j0, j1, k);
		} else if (vec == 3 && m == 1) {
			fp8_tab16();
			(w->dtype == DT_F8_E5M2 ? gemv_tab_1 : gemv_tab_0)(y, x, w, j0, j1, k);
		} else {
			f[vec >= 2][w->dtype == DT_F8_E5M2][(m > 4 ? 4 : m) - 1](y, ldy, x, w, j0,
										  j1, k);
		}
		if (w->sub_row)
			sub_gemv(y, ldy, x, w, m > 4 ? 4 : m, j0, j1, k, vec >= 3 && m == 1);
		return;
	}
#endif
	(void)vec;
	gemv_portable(y, ldy, x, w, m > 4 ? 4 : m, j0, j1, k);
	if (w->sub_row)
		sub_gemv(y, ldy, x, w, m > 4 ? 4 : m, j0, j1, k, 0);
}

void op_fp8_widen_rows(float *out, const struct wmat *w, int j0, int n, int k, int vec)
{
#ifdef HAVE_X86
	if (vec)
		(vec >= 2 ? widen_avx512 : widen_avx2)(out, w, j0, n, k);
	else
#endif
		widen_portable(out, w, j0, n, k);
	(void)vec;
	if (w->sub_row)
		sub_widen(out, w, j0, n, k);
}
