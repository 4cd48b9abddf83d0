/* fp8_gemv - the FP8 decode GEMV's kernels against a plain read of the
 * same bytes, in one process (bench/README.md, issue 33's FP8 decode).
 *
 *   fp8_gemv [ROUNDS [THREADS [SUBNORMAL [HOT]]]]     defaults 9, 1, 0, 0
 *
 * W: a decode step's products of the forward.sh llama (12 layers of
 * q, k, v, o 1024 x 1024, gate, up 2816 x 1024, down 1024 x 2816: 154 MB
 * of e4m3 codes, 128 x 128 block scales), codes of Gaussian weights
 * scaled per block to e4m3's 448 (SUBNORMAL=1: every code a subnormal or
 * zero, the worst case for the kernel that reads them as f32 denormals).
 * Each round times, in turn, a plain AVX-512 sum of the same bytes read
 * the way the kernels read them (each 256 KiB chunk's four quarters side
 * by side, a prefetch 1 KiB ahead) and each kernel over the same chunks;
 * a kernel's figure is the median over the rounds of (sum's time / its
 * time): 1.0 is reading as fast as a plain sum, which is the decode's
 * read bound.  THREADS threads split each product's chunks.
 *
 * The kernels, copies of engine/kernels/ops_fp8.c's (the engine's own are
 * what the unit tests check; this is where the candidates were measured):
 *   tab4  two vpermi2b byte-table lookups a 64-code step (the kernel of
 *         2026-12-03), four streams;
 *   gf4   two GF2P8AFFINEQB bit-matrix moves a step (e4m3 -> the bf16
 *         bits of its value times 2^-120, subnormal codes as bf16
 *         denormals), x scaled by 2^64 to keep the products normal;
 *   gf4pfN the same with a prefetch N bytes ahead;
 *   gfx4  gf4's moves to value times 2^-8 with the 16 zero-exponent codes
 *         patched by a masked vpermb (the default of 2026-12-03 14:00);
 *   gf4s  gf4 plus each row's products of the subnormal codes from a
 *         sparse list (DAY0_KERNEL=avx512-gf4: the runtime takes e4m3's
 *         subnormal codes out of the resident codes at load, so gf4 meets
 *         no f32 denormal);
 *   dp4   (AVX512-BF16) gf4's bf16 words against x rounded once to bf16
 *         by VDPBF16PS, plus the list;
 *   dp4s  the same against x as bf16 hi + lo, two VDPBF16PS a step (the
 *         engine's default since 2026-12-05 where the CPU has
 *         AVX512-BF16; ops_fp8.c's dp4);
 *   dp4sx dp4s with the lo products in accumulators of their own;
 *   dp4s-pfN dp4s with its prefetch N bytes ahead (the engine's: 2048).
 * Unless SUBNORMAL=1, the codes' subnormals are taken out after the
 * checks (each a zero of its sign, listed per row) and every kernel reads
 * those codes; the share is printed.  Prints each kernel's median ratio
 * (min-max), that gf4's and gfx4's y equal tab4's bit for bit on the
 * original codes, and gf4s's largest difference from tab4's (the sums'
 * order), relative to the product's largest |y|.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <immintrin.h>

#define T512 __attribute__((target("avx512f,avx512bw,avx512vbmi,gfni")))
#define I512 __attribute__((target("avx512f,avx512bw,avx512vbmi,gfni"), always_inline)) static inline

/* One thread: its CPU time, which a shared machine's other processes do
 * not add to (they still share the memory); more: the wall clock. */
static int cpu_clock;

static double now(void)
{
	struct timespec t;
	clock_gettime(cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* e4m3fn value of a code (NaN codes never generated) */
static float e4m3(uint8_t c)
{
	int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
	float v = e ? ldexpf(1.0f + (float)m / 8, e - 7) : ldexpf((float)m / 8, -6);
	return s ? -v : v;
}

static uint8_t to_e4m3(float f)
{
	uint8_t best = 0;
	float bd = INFINITY;
	/* nearest by bisection over the 127 positive codes (ordered) */
	float a = fabsf(f);
	int lo = 0, hi = 126;
	while (hi - lo > 1) {
		int mid = (lo + hi) / 2;
		if (e4m3((uint8_t)mid) <= a)
			lo = mid;
		else
			hi = mid;
	}
	for (int c = lo; c <= hi; c++)
		if (fabsf(e4m3((uint8_t)c) - a) < bd)
			bd = fabsf(e4m3((uint8_t)c) - a), best = (uint8_t)c;
	return (uint8_t)(best | (f < 0 ? 0x80 : 0));
}

struct prod {
	uint8_t *w;
	const float *scale; /* [n/128][k/128], times 2^8 as the runtime keeps them */
	int n, k;
	float *y;
	/* gf4s: row j's subnormal codes sw[row[j]] .. sw[row[j + 1] - 1]
	 * (row NULL: none), as the engine's struct wmat */
	uint32_t *row;
	struct sub { uint32_t col; float w; } *sw;
};

/* 2 MiB aligned and advised MADV_HUGEPAGE, as the engine's weights are
 * (engine/runtime/runtime.c): on 4 KiB pages each page is a TLB miss the
 * engine does not pay, and the plain sum read slower than membw's bound */
static void *huge_alloc(size_t n)
{
	size_t bytes = (n + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1);
	void *p = NULL;
	if (posix_memalign(&p, (size_t)2 << 20, bytes))
		abort();
	madvise(p, bytes, MADV_HUGEPAGE);
	return p;
}

static float tab[256];         /* e4m3 value times 2^-8 */
static float tabg[256];        /* e4m3 value times 2^-120 */
static uint8_t tab16[2][128];  /* bf16 high, low byte of tab[c] */
static uint8_t fixtab[2][64];  /* the same for the codes 0-7 (zero exponent) */

static void tables(void)
{
	for (int c = 0; c < 256; c++) {
		tab[c] = e4m3((uint8_t)c) * 0x1p-8f;
		tabg[c] = (float)((double)e4m3((uint8_t)c) * 0x1p-120);
	}
	for (int c = 0; c < 128; c++) {
		uint32_t u;
		memcpy(&u, &tab[c], 4);
		tab16[0][c] = (uint8_t)(u >> 24);
		tab16[1][c] = (uint8_t)(u >> 16);
		if (c < 8) { /* zero exponent: the high byte without its sign */
			fixtab[0][c] = (uint8_t)(u >> 24);
			fixtab[1][c] = (uint8_t)(u >> 16);
		}
	}
}

static inline int lane_code(int p)
{
	int half = p / 32, par = p / 16 % 2, lane = p / 4 % 4, q = p % 4;
	return lane * 16 + half * 8 + 2 * q + par;
}

static void permute_x(float *xp, const float *x, int k, float mul)
{
	int kk = k - k % 64;
	for (int c = 0; c < kk; c += 64)
		for (int p = 0; p < 64; p++)
			xp[c + p] = x[c + lane_code(p)] * mul;
	for (int c = kk; c < k; c++)
		xp[c] = x[c] * mul;
}

/* ---- the reference: the same bytes, the same four streams, summed ---- */
T512 static void sum4(float *y, const float *xp, const struct prod *p, int j0, int j1, int pf)
{
	const int k = p->k, q = (j1 - j0) / 4;
	(void)xp;
	__m512i a[4];
	for (int s = 0; s < 4; s++)
		a[s] = _mm512_setzero_si512();
	for (int j = j0; j < j0 + q; j++) {
		const uint8_t *wr[4];
		for (int s = 0; s < 4; s++)
			wr[s] = p->w + (size_t)(j + s * q) * k;
		for (int c = 0; c + 64 <= k; c += 64)
#pragma GCC unroll 4
			for (int s = 0; s < 4; s++) {
				_mm_prefetch((const char *)(wr[s] + c) + pf, _MM_HINT_T0);
				a[s] = _mm512_add_epi32(a[s], _mm512_loadu_si512((const void *)(wr[s] + c)));
			}
	}
	y[j0] = (float)_mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a[0], a[1]),
								  _mm512_add_epi32(a[2], a[3])));
}

/* ---- tab4: ops_fp8.c's gemv_tab4_body for e4m3 (rows past the quarters
 * and k % 64 tails omitted: the shapes here have none) ---- */
T512 static void tab4(float *y, const float *xp, const struct prod *p, int j0, int j1, int pf)
{
	const int k = p->k, q = (j1 - j0) / 4, sc = k / 128;
	const __m512i h0 = _mm512_loadu_si512(tab16[0]), h1 = _mm512_loadu_si512(tab16[0] + 64);
	const __m512i l0 = _mm512_loadu_si512(tab16[1]), l1 = _mm512_loadu_si512(tab16[1] + 64);
	const __m512i sign = _mm512_set1_epi8((char)0x80);
	const __m512i mask = _mm512_set1_epi32((int)0xffff0000u);
	for (int j = j0; j < j0 + q; j++) {
		const uint8_t *wr[4];
		const float *sr[4];
		__m512 tot[4];
#pragma GCC unroll 4
		for (int s = 0; s < 4; s++) {
			wr[s] = p->w + (size_t)(j + s * q) * k;
			sr[s] = p->scale + (size_t)((j + s * q) / 128) * sc;
			tot[s] = _mm512_setzero_ps();
		}
		for (int c0 = 0, b = 0; c0 < k; c0 += 128, b++) {
			__m512 a[4], d[4];
#pragma GCC unroll 4
			for (int s = 0; s < 4; s++)
				a[s] = d[s] = _mm512_setzero_ps();
			for (int c = c0; c < c0 + 128; c += 64) {
				__m512 x0 = _mm512_loadu_ps(xp + c), x1 = _mm512_loadu_ps(xp + c + 16);
				__m512 x2 = _mm512_loadu_ps(xp + c + 32), x3 = _mm512_loadu_ps(xp + c + 48);
#pragma GCC unroll 4
				for (int s = 0; s < 4; s++) {
					__m512i v = _mm512_loadu_si512((const void *)(wr[s] + c));
					_mm_prefetch((const char *)(wr[s] + c) + pf, _MM_HINT_T0);
					__m512i hi = _mm512_permutex2var_epi8(h0, v, h1);
					__m512i lo = _mm512_permutex2var_epi8(l0, v, l1);
					hi = _mm512_ternarylogic_epi32(hi, v, sign, 0xf8);
					__m512i w0 = _mm512_unpacklo_epi8(lo, hi), w1 = _mm512_unpackhi_epi8(lo, hi);
					a[s] = _mm512_fmadd_ps(x0, _mm512_castsi512_ps(_mm512_slli_epi32(w0, 16)), a[s]);
					d[s] = _mm512_fmadd_ps(x1, _mm512_castsi512_ps(_mm512_and_si512(w0, mask)), d[s]);
					a[s] = _mm512_fmadd_ps(x2, _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16)), a[s]);
					d[s] = _mm512_fmadd_ps(x3, _mm512_castsi512_ps(_mm512_and_si512(w1, mask)), d[s]);
				}
			}
#pragma GCC unroll 4
			for (int s = 0; s < 4; s++)
				tot[s] = _mm512_fmadd_ps(_mm512_set1_ps(sr[s][b]), _mm512_add_ps(a[s], d[s]), tot[s]);
		}
#pragma GCC unroll 4
		for (int s = 0; s < 4; s++)
			y[j + s * q] = _mm512_reduce_add_ps(tot[s]);
	}
}

/* ---- gf4: the bf16 bytes of value * 2^-120 by GF(2) bit moves ----
 * high byte: S 0 0 0 0 E3 E2 E1; low byte: E0 M2 M1 M0 0 0 0 0.
 * GF2P8AFFINEQB: result bit i = parity(matrix byte (7 - i) & code). */
#define GF_HI 0x1020400000000080ull
#define GF_LO 0x0000000001020408ull

/* NS streams (the range's NS parts side by side); pf > 0: a prefetch to
 * L1 pf bytes ahead in each stream, pf < 0: to L2 -pf bytes ahead, 0: none */
I512 void gf_body(float *y, const float *xp, const struct prod *p, int j0, int j1, int pf,
		  const int NS)
{
	const int k = p->k, q = (j1 - j0) / NS, sc = k / 128;
	const __m512i mh = _mm512_set1_epi64((long long)GF_HI), ml = _mm512_set1_epi64((long long)GF_LO);
	const __m512i mask = _mm512_set1_epi32((int)0xffff0000u);
	for (int j = j0; j < j0 + q; j++) {
		const uint8_t *wr[8];
		const float *sr[8];
		__m512 tot[8];
#pragma GCC unroll 8
		for (int s = 0; s < NS; s++) {
			wr[s] = p->w + (size_t)(j + s * q) * k;
			sr[s] = p->scale + (size_t)((j + s * q) / 128) * sc;
			tot[s] = _mm512_setzero_ps();
		}
		for (int c0 = 0, b = 0; c0 < k; c0 += 128, b++) {
			__m512 a[8], d[8];
#pragma GCC unroll 8
			for (int s = 0; s < NS; s++)
				a[s] = d[s] = _mm512_setzero_ps();
			for (int c = c0; c < c0 + 128; c += 64) {
				__m512 x0 = _mm512_loadu_ps(xp + c), x1 = _mm512_loadu_ps(xp + c + 16);
				__m512 x2 = _mm512_loadu_ps(xp + c + 32), x3 = _mm512_loadu_ps(xp + c + 48);
#pragma GCC unroll 8
				for (int s = 0; s < NS; s++) {
					__m512i v = _mm512_loadu_si512((const void *)(wr[s] + c));
					if (pf > 0)
						_mm_prefetch((const char *)(wr[s] + c) + pf, _MM_HINT_T0);
					else if (pf < 0)
						_mm_prefetch((const char *)(wr[s] + c) - pf, _MM_HINT_T1);
					__m512i hi = _mm512_gf2p8affine_epi64_epi8(v, mh, 0);
					__m512i lo = _mm512_gf2p8affine_epi64_epi8(v, ml, 0);
					__m512i w0 = _mm512_unpacklo_epi8(lo, hi), w1 = _mm512_unpackhi_epi8(lo, hi);
					a[s] = _mm512_fmadd_ps(x0, _mm512_castsi512_ps(_mm512_slli_epi32(w0, 16)), a[s]);
					d[s] = _mm512_fmadd_ps(x1, _mm512_castsi512_ps(_mm512_and_si512(w0, mask)), d[s]);
					a[s] = _mm512_fmadd_ps(x2, _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16)), a[s]);
					d[s] = _mm512_fmadd_ps(x3, _mm512_castsi512_ps(_mm512_and_si512(w1, mask)), d[s]);
				}
			}
#pragma GCC unroll 8
			for (int s = 0; s < NS; s++)
				tot[s] = _mm512_fmadd_ps(_mm512_set1_ps(sr[s][b]), _mm512_add_ps(a[s], d[s]), tot[s]);
		}
#pragma GCC unroll 8
		for (int s = 0; s < NS; s++)
			y[j + s * q] = _mm512_reduce_add_ps(tot[s]) * 0x1p48f;
	}
}

T512 static void gf4(float *y, const float *xp, const struct prod *p, int j0, int j1, int pf)
{
	gf_body(y, xp, p, j0, j1, pf, 4);
}

T512 static void gf2(float *y, const float *xp, const struct prod *p, int j0, int j1, int pf)
{
	gf_body(y, xp, p, j0, j1, pf, 2);
}



/* ---- gf4s: gf4 on codes without subnormals, then each row's taken-out
 * codes from the list (as ops_fp8.c's sub_gemv: the weight widened, times
 * x at its permuted place; xp here is x times 2^64) ---- */
static inline int lane_pos(int col)
{
	int u = col & 63, lane = u / 16, half = u % 16 / 8, r = u % 8;
	return (col & ~63) + half * 32 + r % 2 * 16 + lane * 4 + r / 2;
}

T512 static void gf4s(float *y, const float *xp, const struct prod *p, int j0, int j1, int pf)
{
	gf_body(y, xp, p, j0, j1, pf, 4);
	if (!p->row || p->row[j0] == p->row[j1])
		return;
	for (int j = j0; j < j1; j++)
		for (uint32_t e = p->row[j]; e < p->row[j + 1]; e++)
			y[j] += p->sw[e].w * (xp[lane_pos((int)p->sw[e].col)] * 0x1p-64f);
}

/* ---- gfx4: the same bf16 values as tab4's tables (value * 2^-8), normal
 * codes by two GF(2) bit moves (the exponent's +112 is an XOR: E < 16),
 * the 16 codes with a zero exponent (zero, subnormals) patched from a
 * 64-entry table by a masked vpermb; bit for bit tab4's ---- */
#define GFX_HI 0x1020400000000080ull /* S . . . . E3 E2 E1, XOR 0x38 */

I512 void gfx_body(float *y, const float *xp, const struct prod *p, int j0, int j1, int pf,
		   const int NS)
{
	const int k = p->k, q = (j1 - j0) / NS, sc = k / 128;
	const __m512i mh = _mm512_set1_epi64((long long)GFX_HI), ml = _mm512_set1_epi64((long long)GF_LO);
	const __m512i fh = _mm512_loadu_si512(fixtab[0]), fl = _mm512_loadu_si512(fixtab[1]);
	const __m512i expo = _mm512_set1_epi8(0x78), sign = _mm512_set1_epi8((char)0x80);
	const __m512i mask = _mm512_set1_epi32((int)0xffff0000u);
	for (int j = j0; j < j0 + q; j++) {
		const uint8_t *wr[8];
		const float *sr[8];
		__m512 tot[8];
#pragma GCC unroll 8
		for (int s = 0; s < NS; s++) {
			wr[s] = p->w + (size_t)(j + s * q) * k;
			sr[s] = p->scale + (size_t)((j + s * q) / 128) * sc;
			tot[s] = _mm512_setzero_ps();
		}
		for (int c0 = 0, b = 0; c0 < k; c0 += 128, b++) {
			__m512 a[8], d[8];
#pragma GCC unroll 8
			for (int s = 0; s < NS; s++)
				a[s] = d[s] = _mm512_setzero_ps();
			for (int c = c0; c < c0 + 128; c += 64) {
				__m512 x0 = _mm512_loadu_ps(xp + c), x1 = _mm512_loadu_ps(xp + c + 16);
				__m512 x2 = _mm512_loadu_ps(xp + c + 32), x3 = _mm512_loadu_ps(xp + c + 48);
#pragma GCC unroll 8
				for (int s = 0; s < NS; s++) {
					__m512i v = _mm512_loadu_si512((const void *)(wr[s] + c));
					_mm_prefetch((const char *)(wr[s] + c) + pf, _MM_HINT_T0);
					__mmask64 z = _mm512_testn_epi8_mask(v, expo);
					__m512i hi = _mm512_gf2p8affine_epi64_epi8(v, mh, 0x38);
					__m512i lo = _mm512_gf2p8affine_epi64_epi8(v, ml, 0);
					hi = _mm512_mask_permutexvar_epi8(hi, z, v, fh);
					lo = _mm512_mask_permutexvar_epi8(lo, z, v, fl);
					hi = _mm512_ternarylogic_epi32(hi, v, sign, 0xf8);
					__m512i w0 = _mm512_unpacklo_epi8(lo, hi), w1 = _mm512_unpackhi_epi8(lo, hi);
					a[s] = _mm512_fmadd_ps(x0, _mm512_castsi512_ps(_mm512_slli_epi32(w0, 16)), a[s]);
					d[s] = _mm512_fmadd_ps(x1, _mm512_castsi512_ps(_mm512_and_si512(w0, mask)), d[s]);
					a[s] = _mm512_fmadd_ps(x2, _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16)), a[s]);
					d[s] = _mm512_fmadd_ps(x3, _mm512_castsi512_ps(_mm512_and_si512(w1, mask)), d[s]);
				}
			}
#pragma GCC unroll 8
			for (int s = 0; s < NS; s++)
				tot[s] = _mm512_fmadd_ps(_mm512_set1_ps(sr[s][b]), _mm512_add_ps(a[s], d[s]), tot[s]);
		}
#pragma GCC unroll 8
		for (int s = 0; s < NS; s++)
			y[j + s * q] = _mm512_reduce_add_ps(tot[s]);
	}
}

T512 static void gfx4(float *y, const float *xp, const struct prod *p, int j0, int j1, int pf)
{
	gfx_body(y, xp, p, j0, j1, pf, 4);
}

/* ---- the step: every product's 256 KiB chunks, split over threads ---- */
typedef void (*kern_fn)(float *, const float *, const struct prod *, int, int, int);
struct kern {
	const char *name;
	kern_fn fn;
	int pf, gf;
};

#define NPROD (12 * 7)
static struct prod prods[NPROD];
static float *xps[3]; /* x as tab4 reads it; as gf4 reads it (times 2^64); as dp reads it */

/* ---- dp4: gf4's bf16 words (value * 2^-120, subnormal codes taken out)
 * against x as bf16 by VDPBF16PS (AVX512-BF16): SPLIT 0 x rounded once,
 * 1 x as hi + lo (two dot products); the subnormals' list as gf4s ---- */
#define TBF __attribute__((target("avx512f,avx512bw,avx512vbmi,gfni,avx512bf16")))
TBF __attribute__((always_inline)) static inline void
dp_body(float *y, const float *xp, const struct prod *p, int j0, int j1, int pf, const int NS,
	const int SPLIT)
{
	const int k = p->k, q = (j1 - j0) / NS, sc = k / 128;
	const uint16_t *xb = (const uint16_t *)xp; /* per 64 codes: 64 hi, 64 lo */
	const __m512i mh = _mm512_set1_epi64((long long)GF_HI), ml = _mm512_set1_epi64((long long)GF_LO);
	for (int j = j0; j < j0 + q; j++) {
		const uint8_t *wr[8];
		const float *sr[8];
		__m512 tot[8];
#pragma GCC unroll 8
		for (int s = 0; s < NS; s++) {
			wr[s] = p->w + (size_t)(j + s * q) * k;
			sr[s] = p->scale + (size_t)((j + s * q) / 128) * sc;
			tot[s] = _mm512_setzero_ps();
		}
		for (int c0 = 0, b = 0; c0 < k; c0 += 128, b++) {
			__m512 a[8], d[8], al[8], dl[8];
#pragma GCC unroll 8
			for (int s = 0; s < NS; s++)
				a[s] = d[s] = al[s] = dl[s] = _mm512_setzero_ps();
			for (int c = c0; c < c0 + 128; c += 64) {
				const uint16_t *xc = xb + (size_t)c * 2;
				__m512bh h0 = (__m512bh)_mm512_loadu_si512(xc), h1 = (__m512bh)_mm512_loadu_si512(xc + 32);
				__m512bh l0 = h0, l1 = h1;
				if (SPLIT) {
					l0 = (__m512bh)_mm512_loadu_si512(xc + 64);
					l1 = (__m512bh)_mm512_loadu_si512(xc + 96);
				}
#pragma GCC unroll 8
				for (int s = 0; s < NS; s++) {
					__m512i v = _mm512_loadu_si512((const void *)(wr[s] + c));
					_mm_prefetch((const char *)(wr[s] + c) + pf, _MM_HINT_T0);
					__m512i hi = _mm512_gf2p8affine_epi64_epi8(v, mh, 0);
					__m512i lo = _mm512_gf2p8affine_epi64_epi8(v, ml, 0);
					__m512bh w0 = (__m512bh)_mm512_unpacklo_epi8(lo, hi);
					__m512bh w1 = (__m512bh)_mm512_unpackhi_epi8(lo, hi);
					a[s] = _mm512_dpbf16_ps(a[s], w0, h0);
					d[s] = _mm512_dpbf16_ps(d[s], w1, h1);
					if (SPLIT == 1) {
						a[s] = _mm512_dpbf16_ps(a[s], w0, l0);
						d[s] = _mm512_dpbf16_ps(d[s], w1, l1);
					} else if (SPLIT == 2) {
						al[s] = _mm512_dpbf16_ps(al[s], w0, l0);
						dl[s] = _mm512_dpbf16_ps(dl[s], w1, l1);
					}
				}
			}
#pragma GCC unroll 8
			for (int s = 0; s < NS; s++)
				tot[s] = _mm512_fmadd_ps(_mm512_set1_ps(sr[s][b]),
							 SPLIT == 2 ? _mm512_add_ps(_mm512_add_ps(a[s], d[s]),
										    _mm512_add_ps(al[s], dl[s]))
								    : _mm512_add_ps(a[s], d[s]),
							 tot[s]);
		}
#pragma GCC unroll 8
		for (int s = 0; s < NS; s++)
			y[j + s * q] = _mm512_reduce_add_ps(tot[s]) * 0x1p48f;
	}
}

static void sub_add(float *y, const struct prod *p, int j0, int j1)
{
	const float *xp = xps[1];
	if (!p->row || p->row[j0] == p->row[j1])
		return;
	for (int j = j0; j < j1; j++)
		for (uint32_t e = p->row[j]; e < p->row[j + 1]; e++)
			y[j] += p->sw[e].w * (xp[lane_pos((int)p->sw[e].col)] * 0x1p-64f);
}

TBF static void dp4(float *y, const float *xp, const struct prod *p, int j0, int j1, int pf)
{
	dp_body(y, xp, p, j0, j1, pf, 4, 0);
	sub_add(y, p, j0, j1);
}

TBF static void dp4s(float *y, const float *xp, const struct prod *p, int j0, int j1, int pf)
{
	dp_body(y, xp, p, j0, j1, pf, 4, 1);
	sub_add(y, p, j0, j1);
}

TBF static void dp4sx(float *y, const float *xp, const struct prod *p, int j0, int j1, int pf)
{
	dp_body(y, xp, p, j0, j1, pf, 4, 2);
	sub_add(y, p, j0, j1);
}

static uint16_t bf16_rne(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* x (times 2^64) as dp reads it: per 64 codes the w0 words (codes
 * lane * 16 + m, m < 8) then the w1 words (m + 8), hi then lo */
static void dp_x(uint16_t *xb, const float *x, int k)
{
	for (int c = 0; c < k; c += 64)
		for (int wv = 0; wv < 2; wv++)
			for (int t = 0; t < 32; t++) {
				int code = c + t / 8 * 16 + wv * 8 + t % 8;
				float v = x[code] * 0x1p64f, hf;
				uint16_t h = bf16_rne(v);
				uint32_t hu = (uint32_t)h << 16;
				memcpy(&hf, &hu, 4);
				xb[(size_t)c * 2 + wv * 32 + t] = h;
				xb[(size_t)c * 2 + 64 + wv * 32 + t] = bf16_rne(v - hf);
			}
}

struct worker {
	int id, nth;
	const struct kern *kern;
	pthread_barrier_t *go;
	int quit;
};

static int hot; /* HOT=1: the first product's 1 MiB over and over (in L2) */

static void step_part(const struct kern *kr, int id, int nth)
{
	for (int i0 = 0; i0 < NPROD; i0++) {
		int i = hot ? 0 : i0;
		const struct prod *p = &prods[i];
		int rows = 262144 / p->k, nch = p->n / rows;
		for (int c = id; c < nch; c += nth)
			kr->fn(p->y, xps[kr->gf], p, c * rows, (c + 1) * rows, kr->pf);
	}
}

static void *work(void *arg)
{
	struct worker *w = arg;
	for (;;) {
		pthread_barrier_wait(w->go);
		if (w->quit)
			return NULL;
		step_part(w->kern, w->id, w->nth);
		pthread_barrier_wait(w->go);
	}
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 9, nth = argc > 2 ? atoi(argv[2]) : 1;
	int subn = argc > 3 ? atoi(argv[3]) : 0;
	hot = argc > 4 ? atoi(argv[4]) : 0;
	cpu_clock = nth == 1;
	if (rounds < 1 || nth < 1 || nth > 8 || !__builtin_cpu_supports("avx512vbmi") ||
	    !__builtin_cpu_supports("gfni")) {
		fprintf(stderr, "usage: fp8_gemv [ROUNDS [THREADS(1-8) [SUBNORMAL]]] (AVX-512 VBMI + GFNI)\n");
		return 2;
	}
	tables();
	static const int shape[7][2] = {{1024, 1024}, {1024, 1024}, {1024, 1024}, {1024, 1024},
					{2816, 1024}, {2816, 1024}, {1024, 2816}};
	size_t total = 0;
	uint64_t r = 88172645463325252ull;
	float *x = aligned_alloc(64, 4096 * 4);
	xps[0] = aligned_alloc(64, 4096 * 4);
	xps[1] = aligned_alloc(64, 4096 * 4);
	for (int i = 0; i < NPROD; i++) {
		int n = shape[i % 7][0], k = shape[i % 7][1];
		uint8_t *w = huge_alloc((size_t)n * k);
		float *s = malloc((size_t)(n / 128) * (k / 128) * 4);
		float *wf = malloc((size_t)128 * k * 4);
		for (int bj = 0; bj < n / 128; bj++) {
			if (i >= 7) { /* past the first layer: the first layer's codes again */
				memcpy(w + (size_t)bj * 128 * k, prods[i % 7].w + (size_t)bj * 128 * k, (size_t)128 * k);
				memcpy(s + bj * (k / 128), prods[i % 7].scale + bj * (k / 128), (size_t)(k / 128) * 4);
				continue;
			}
			/* one band of 128 rows: Gaussian weights, each block
			 * scaled so its largest is 448 */
			for (int t = 0; t < 128 * k; t++) {
				double u1, u2;
				r ^= r << 13, r ^= r >> 7, r ^= r << 17;
				u1 = ((r >> 11) + 1) * 0x1p-53;
				r ^= r << 13, r ^= r >> 7, r ^= r << 17;
				u2 = (r >> 11) * 0x1p-53;
				wf[t] = (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2) * 0.02);
			}
			for (int bc = 0; bc < k / 128; bc++) {
				float mx = 0;
				for (int jj = 0; jj < 128; jj++)
					for (int c = 0; c < 128; c++)
						mx = fmaxf(mx, fabsf(wf[(size_t)jj * k + bc * 128 + c]));
				s[bj * (k / 128) + bc] = mx / 448 * 256;
				for (int jj = 0; jj < 128; jj++)
					for (int c = 0; c < 128; c++) {
						size_t o = (size_t)(bj * 128 + jj) * k + bc * 128 + c;
						float v = wf[(size_t)jj * k + bc * 128 + c] / (mx / 448);
						w[o] = subn ? (uint8_t)((o * 2654435761u >> 7) & 0x87) : to_e4m3(v);
					}
			}
		}
		free(wf);
		prods[i] = (struct prod){w, s, n, k, aligned_alloc(64, (size_t)n * 4), NULL, NULL};
		total += (size_t)n * k;
	}
	for (int c = 0; c < 4096; c++) {
		r ^= r << 13, r ^= r >> 7, r ^= r << 17;
		x[c] = (float)((r >> 11) * 0x1p-53 * 2 - 1);
	}
	permute_x(xps[0], x, 1024, 1.0f);
	permute_x(xps[1], x, 1024, 0x1p64f);
	/* the 2816-wide down projection's x: the first 2816 of x permuted */
	float *xd[2] = {aligned_alloc(64, 4096 * 4), aligned_alloc(64, 4096 * 4)};
	permute_x(xd[0], x, 2816, 1.0f);
	permute_x(xd[1], x, 2816, 0x1p64f);
	memcpy(xps[0], xd[0], 2816 * 4); /* every product reads the same x: its first k */
	memcpy(xps[1], xd[1], 2816 * 4);
	xps[2] = aligned_alloc(64, 4096 * 4);
	dp_x((uint16_t *)xps[2], x, 2816);

	static const struct kern ks[] = {
		{"sum4", sum4, 1024, 0},     {"tab4", tab4, 1024, 0},     {"gf4", gf4, 1024, 1},
		{"gf4pf0", gf4, 0, 1},       {"gf4pfL2-4k", gf4, -4096, 1}, {"gf2", gf2, 1024, 1},
		{"gfx4", gfx4, 1024, 0},     {"gf4s", gf4s, 1024, 1},
		{"dp4", dp4, 1024, 2},       {"dp4s", dp4s, 1024, 2},     {"dp4sx", dp4sx, 1024, 2},
		{"dp4s-pf2k", dp4s, 2048, 2}, {"dp4s-pf4k", dp4s, 4096, 2}, {"dp4s-pf512", dp4s, 512, 2},
	};
	enum { NK = sizeof ks / sizeof *ks };
	/* dp4, dp4s, dp4sx (the last three) need AVX512-BF16 */
	const int have_bf16 = __builtin_cpu_supports("avx512bf16"), nk = NK - (have_bf16 ? 0 : 6);
	/* bit-identity of gf4 and tab4 */
	{
		int diff = 0, diffx = 0;
		float *ya = malloc(2816 * 4);
		for (int i = 0; i < 7; i++) {
			const struct prod *p = &prods[i];
			int rows = 262144 / p->k;
			for (int c = 0; c < p->n / rows; c++)
				tab4(p->y, xps[0], p, c * rows, (c + 1) * rows, 1024);
			memcpy(ya, p->y, (size_t)p->n * 4);
			for (int c = 0; c < p->n / rows; c++)
				gf4(p->y, xps[1], p, c * rows, (c + 1) * rows, 1024);
			for (int j = 0; j < p->n; j++)
				diff += memcmp(&ya[j], &p->y[j], 4) != 0;
			for (int c = 0; c < p->n / rows; c++)
				gfx4(p->y, xps[0], p, c * rows, (c + 1) * rows, 1024);
			for (int j = 0; j < p->n; j++)
				diffx += memcmp(&ya[j], &p->y[j], 4) != 0;
		}
		printf("gf4 against tab4 (one layer): %d outputs differ in any bit; gfx4: %d\n", diff, diffx);
		free(ya);
	}
	if (!subn) { /* take the subnormal codes out, as the runtime's load */
		uint64_t nsub = 0;
		double worst = 0, wdp[3] = {0, 0, 0};
		float *ya = malloc(2816 * 4);
		for (int i = 0; i < NPROD; i++) {
			struct prod *p = &prods[i];
			size_t nk = (size_t)p->n * p->k, ns = 0;
			int rows = 262144 / p->k;
			for (size_t o = 0; o < nk; o++)
				ns += !(p->w[o] & 0x78) && (p->w[o] & 7);
			if (i < 7)
				for (int c = 0; c < p->n / rows; c++)
					tab4(p->y, xps[0], p, c * rows, (c + 1) * rows, 1024);
			if (i < 7)
				memcpy(ya, p->y, (size_t)p->n * 4);
			nsub += ns;
			if (ns) {
				uint32_t at = 0;
				p->row = malloc(((size_t)p->n + 1) * 4);
				p->sw = malloc(ns * sizeof *p->sw);
				for (int j = 0; j < p->n; j++) {
					uint8_t *wr = p->w + (size_t)j * p->k;
					const float *sc = p->scale + (size_t)(j / 128) * (p->k / 128);
					p->row[j] = at;
					for (int c = 0; c < p->k; c++)
						if (!(wr[c] & 0x78) && (wr[c] & 7)) {
							p->sw[at++] = (struct sub){(uint32_t)c, tab[wr[c]] * sc[c / 128]};
							wr[c] &= 0x80;
						}
				}
				p->row[p->n] = at;
			}
			if (i < 7) {
				for (int c = 0; c < p->n / rows; c++)
					gf4s(p->y, xps[1], p, c * rows, (c + 1) * rows, 1024);
				double big = 0, d = 0;
				for (int j = 0; j < p->n; j++) {
					big = fmax(big, fabs((double)ya[j]));
					d = fmax(d, fabs((double)p->y[j] - ya[j]));
				}
				worst = fmax(worst, d / big);
				for (int v = 0; v < 3 && have_bf16; v++) {
					for (int c = 0; c < p->n / rows; c++)
						(v == 2 ? dp4sx : v ? dp4s : dp4)(p->y, xps[2], p, c * rows,
										  (c + 1) * rows, 1024);
					d = 0;
					for (int j = 0; j < p->n; j++)
						d = fmax(d, fabs((double)p->y[j] - ya[j]));
					wdp[v] = fmax(wdp[v], d / big);
				}
			}
		}
		printf("subnormal codes taken out: %llu of %zu (%.2g); gf4s against tab4 on the "
		       "original codes (one layer): largest |difference| / largest |y| %.2g\n",
		       (unsigned long long)nsub, total, (double)nsub / (double)total, worst);
		if (have_bf16)
			printf("dp4 (x rounded once to bf16) against tab4: %.2g; dp4s (x as bf16 hi + lo): %.2g; "
			       "dp4sx (hi + lo, apart): %.2g\n", wdp[0], wdp[1], wdp[2]);
		free(ya);
	}
	pthread_barrier_t go;
	pthread_t th[8];
	struct worker wk[8];
	pthread_barrier_init(&go, NULL, (unsigned)nth);
	for (int t = 1; t < nth; t++) {
		wk[t] = (struct worker){t, nth, NULL, &go, 0};
		pthread_create(&th[t], NULL, work, &wk[t]);
	}
	double ratio[NK][64], tm[NK];
	if (rounds > 64)
		rounds = 64;
	for (int rd = 0; rd < rounds; rd++) {
		for (int q = 0; q < nk; q++) {
			int kq = (q + rd) % nk; /* rotate the order every round */
			for (int t = 1; t < nth; t++)
				wk[t].kern = &ks[kq];
			double t0 = now();
			if (nth > 1)
				pthread_barrier_wait(&go);
			step_part(&ks[kq], 0, nth);
			if (nth > 1)
				pthread_barrier_wait(&go);
			tm[kq] = now() - t0;
		}
		for (int q = 0; q < nk; q++)
			ratio[q][rd] = tm[0] / tm[q];
		printf("round %d: sum4 %.2f GB/s", rd, (hot ? 84.0 * 1048576 : (double)total) / tm[0] / 1e9);
		if (hot)
			for (int q = 1; q < nk; q++)
				printf(", %s %.1f GB/s", ks[q].name, 84.0 * 1048576 / tm[q] / 1e9);
		for (int q = 1; q < nk; q++)
			printf(", %s %.2f", ks[q].name, ratio[q][rd]);
		printf("\n");
	}
	printf("%zu MB of codes, %d thread(s), %s codes; median of %d rounds (min-max) of sum4's time / the kernel's:\n",
	       total / 1000000, nth, subn ? "subnormal/zero" : "Gaussian", rounds);
	for (int q = 1; q < nk; q++) {
		double *v = ratio[q];
		for (int i = 1; i < rounds; i++)
			for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
				double t = v[j];
				v[j] = v[j - 1];
				v[j - 1] = t;
			}
		printf("  %-9s %.3f (%.3f-%.3f)\n", ks[q].name,
		       rounds % 2 ? v[rounds / 2] : (v[rounds / 2 - 1] + v[rounds / 2]) / 2, v[0], v[rounds - 1]);
	}
	for (int t = 1; t < nth; t++) {
		wk[t].quit = 1;
	}
	if (nth > 1)
		pthread_barrier_wait(&go);
	for (int t = 1; t < nth; t++)
		pthread_join(th[t], NULL);
	return 0;
}
