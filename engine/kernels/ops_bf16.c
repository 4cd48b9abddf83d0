/*
 * ops_bf16.c - products with bf16 weights kept as stored.
 *
 * A bf16 checkpoint stays bf16 in memory: half the bytes of f32, so half
 * the bytes a decode step streams.  Products accumulate in f32 (a bf16
 * value widened to f32 is exact: its 16 bits are the f32's top half).
 *
 * - Decode (few rows of x): our own GEMV, each weight row read once for
 *   up to four rows of x; the best kernel the CPU has, chosen at run time
 *   with __builtin_cpu_supports: AVX-512 (F and BW), else AVX2+FMA, else a
 *   portable loop (DAY0_KERNEL names one; avx512-stream the AVX-512 one
 *   reading one row of x's W as one stream, as before the four streams).
 *   One row of x times f32 W (an f32 checkpoint's decode) goes through
 *   the same kernels' f32 forms and pool (gemv_f32), sgemv without AVX2.
 * - Prefill (many rows): on oneDNN's matmul where it has a native kernel
 *   for the CPU (ops_onednn.c; AMX-BF16, AVX512-BF16, AVX-512): x rounded
 *   to bf16, W's panels as stored (FP8's widened with their scales and
 *   rounded to bf16), f32 sums, each pool thread its own panels
 *   (onednn_panels()); f32 W through oneDNN's f32 matmul the same way.
 *   Otherwise, or with a GEMV named by DAY0_KERNEL: panels of W widened to
 *   f32 in a scratch buffer, each multiplied by OpenBLAS sgemm (panels();
 *   Debian's OpenBLAS 0.3.21 exports no sbgemm); f32 W by sgemm.
 *
 * The work is split over a small pool of threads, as many as OpenBLAS
 * uses, so it runs on the cores sgemv would: chunks (GEMV rows, prefill
 * panels, or op_parallel_for's items: a decode step's attention heads),
 * each thread taking its own contiguous share front to back and then
 * what is left of the others' (so a worker the scheduler has parked does
 * not hold a product up, and each core reads one stream of W rather than
 * every other chunk: 2 threads summing a decode step's products read
 * 12-15% faster so on the Zen 5 VM, bench/README.md).  Workers spin a little for the next job (a decode
 * step is ~100 short products), then sleep.  While workers call OpenBLAS
 * it is told to use one thread, and oneDNN always is.  DAY0_KERNEL=
 * portable|avx2|avx512|avx512-stream|avx512-vbmi|avx512-gfx4|avx512-gf4|
 * avx512-dp4 forces a GEMV and the sgemm prefill (tests, A/B; avx512 with
 * FP8's e4m3 decode by the VBMI tables, by GFNI with the zero-exponent
 * codes patched (gfx4), by GFNI on codes whose subnormals load took out
 * with f32 FMAs (gf4) or VDPBF16PS (dp4, the default where the CPU has
 * AVX512-BF16; else gfx4); perf's kernel says which, ops_fp8.c),
 * DAY0_KERNEL=onednn the oneDNN prefill.
 *
 * op_linear_w also takes block-scaled FP8 W (ops_fp8.c's kernels) through
 * the same pool: its GEMV for up to GEMV_ROWS rows, its widened panels for
 * sgemm beyond.
 */
#include "engine.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_X86 1
#include <cpuid.h>
#include <immintrin.h>
#endif

static inline float bf16_f32(uint16_t h)
{
	union {
		uint32_t u;
		float f;
	} v = {.u = (uint32_t)h << 16};
	return v.f;
}

static void widen_portable(float *out, const uint16_t *in, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = bf16_f32(in[i]);
}

/* y[i*ldy + j] = sum_c x[i*k + c] w[j*k + c] for i < m (m <= 4), rows j
 * in [j0, j1): portable. */
static void gemv_rows_portable(float *y, int ldy, const float *x,
			       const uint16_t *w, int m, int j0, int j1, int k)
{
	for (int j = j0; j < j1; j++) {
		const uint16_t *wr = w + (size_t)j * k;
		float acc[4] = {0, 0, 0, 0};
		for (int c = 0; c < k; c++) {
			float wv = bf16_f32(wr[c]);
			for (int i = 0; i < m; i++)
				acc[i] += x[(size_t)i * k + c] * wv;
		}
		for (int i = 0; i < m; i++)
			y[(size_t)i * ldy + j] = acc[i];
	}
}

#ifdef HAVE_X86
__attribute__((target("avx2,fma"))) static inline __m256 ld_bf16(const uint16_t *p)
{
	__m128i h = _mm_loadu_si128((const __m128i *)p);
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

__attribute__((target("avx2,fma"))) static inline float hsum(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
	return _mm_cvtss_f32(s);
}

/* Widening with AVX2: 16 values a step (the scalar loop is not
 * vectorised at -O2); prefill widens every panel of W before sgemm. */
__attribute__((target("avx2,fma"))) static void
widen_avx2(float *out, const uint16_t *in, size_t n)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		_mm256_storeu_ps(out + i, ld_bf16(in + i));
		_mm256_storeu_ps(out + i + 8, ld_bf16(in + i + 8));
	}
	for (; i < n; i++)
		out[i] = bf16_f32(in[i]);
}

/*
 * The same with AVX2+FMA.  A 32-byte load holds 16 bf16 weights, two in
 * each 32-bit lane: the even-numbered one in the low half, the odd one in
 * the high half.  Shifting each lane left by 16 gives the even weights as
 * f32, masking off the low half the odd ones: two cheap integer ops and no
 * shuffle (vpmovzxwd runs on one port only).  x is laid out to match
 * (xp_permute: per block of 16, its 8 even then its 8 odd values), once
 * per product, so each block is 1 load of W, 2 of x and 2 FMAs.
 *
 * A decode step streams every weight once, so the kernel is there to keep
 * the memory busy: few instructions per byte, and a software prefetch
 * PREFETCH bytes ahead in the (contiguous) rows, which keeps more lines in
 * flight than the out-of-order window alone (standalone, over 512 MB:
 * 0.75-0.8 of a plain sum's read rate without it, 0.85-0.95 with it).
 *
 * The row count m is a compile-time constant in each instance
 * (gemv_rows_avx2 switches on it) and the loops over rows are unrolled,
 * so every accumulator stays in a register: indexed by a run-time m, gcc
 * kept them on the stack and every FMA loaded and stored its accumulator.
 * One row of x (decode) takes two blocks a step, four accumulators, so the
 * FMA latency is hidden; more rows use two each.
 */
#define PREFETCH 1024

__attribute__((target("avx2,fma"), always_inline)) static inline __m256
bf16_even(__m256i v)
{
	return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

__attribute__((target("avx2,fma"), always_inline)) static inline __m256
bf16_odd(__m256i v)
{
	return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xffff0000u)));
}

/* xp[i*k + ...] for the m rows of x: each whole block of blk (16 for
 * AVX2, 32 for AVX-512) as its blk/2 even then its blk/2 odd values; the
 * k % blk tail as it is. */
static void xp_permute(float *xp, const float *x, int m, int k, int blk)
{
	int kk = k - k % blk, h = blk / 2;
	for (int i = 0; i < m; i++) {
		const float *xr = x + (size_t)i * k;
		float *o = xp + (size_t)i * k;
		for (int c = 0; c < kk; c += blk)
			for (int t = 0; t < h; t++) {
				o[c + t] = xr[c + 2 * t];
				o[c + h + t] = xr[c + 2 * t + 1];
			}
		for (int c = kk; c < k; c++)
			o[c] = xr[c];
	}
}

/* x (m x k) in the kernel's order (blocks of blk; 1: as it is; 64: FP8's
 * table kernel's lanes, one row), in buf
 * (nbuf floats, 64-byte aligned) when it fits, else in 64-byte aligned
 * memory the caller frees (*owned): an AVX-512 load of x across two cache
 * lines, two of them per 64 bytes of W, cost the bf16 GEMV a third of its
 * rate. */
static const float *permuted_x(const float *x, int m, int k, int blk, float *buf,
			       size_t nbuf, float **owned)
{
	size_t need = (size_t)m * (size_t)k;
	float *xp = need <= nbuf ? buf : aligned_alloc(64, (need * sizeof *xp + 63) & ~(size_t)63);
	if (!xp)
		abort();
	if (blk == 64) /* FP8 by table lookups: one row */
		op_fp8_permute_x(xp, x, k);
	else if (blk > 1)
		xp_permute(xp, x, m, k, blk);
	else
		memcpy(xp, x, need * sizeof *xp);
	*owned = xp == buf ? NULL : xp;
	return xp;
}

__attribute__((target("avx2,fma"), always_inline)) static inline void
gemv_avx2_body(float *y, int ldy, const float *xp, const uint16_t *w,
	       const int m, int j0, int j1, int k)
{
	enum { MAXM = 4 };
	const int step = m == 1 ? 32 : 16;
	const int kk = k - k % step;
	for (int j = j0; j < j1; j++) {
		const uint16_t *wr = w + (size_t)j * k;
		__m256 ae[MAXM], ao[MAXM], be = _mm256_setzero_ps(), bo = be;
		float tail[MAXM] = {0, 0, 0, 0};
#pragma GCC unroll 4
		for (int i = 0; i < m; i++)
			ae[i] = ao[i] = _mm256_setzero_ps();
		for (int c = 0; c < kk; c += step) {
			__m256i v = _mm256_loadu_si256((const __m256i *)(wr + c));
			_mm_prefetch((const char *)(wr + c) + PREFETCH, _MM_HINT_T0);
#pragma GCC unroll 4
			for (int i = 0; i < m; i++) {
				const float *xr = xp + (size_t)i * k + c;
				ae[i] = _mm256_fmadd_ps(_mm256_loadu_ps(xr), bf16_even(v), ae[i]);
				ao[i] = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 8), bf16_odd(v), ao[i]);
			}
			if (m == 1) {
				__m256i u = _mm256_loadu_si256((const __m256i *)(wr + c + 16));
				be = _mm256_fmadd_ps(_mm256_loadu_ps(xp + c + 16), bf16_even(u), be);
				bo = _mm256_fmadd_ps(_mm256_loadu_ps(xp + c + 24), bf16_odd(u), bo);
			}
		}
		/* a last whole block of 16 (m == 1 steps by 32), then the
		 * k % 16 tail, whose x is not permuted */
		int c = kk;
		if (m == 1 && k - c >= 16) {
			__m256i v = _mm256_loadu_si256((const __m256i *)(wr + c));
			be = _mm256_fmadd_ps(_mm256_loadu_ps(xp + c), bf16_even(v), be);
			bo = _mm256_fmadd_ps(_mm256_loadu_ps(xp + c + 8), bf16_odd(v), bo);
			c += 16;
		}
		for (; c < k; c++) {
			float wv = bf16_f32(wr[c]);
#pragma GCC unroll 4
			for (int i = 0; i < m; i++)
				tail[i] += xp[(size_t)i * k + c] * wv;
		}
#pragma GCC unroll 4
		for (int i = 0; i < m; i++) {
			__m256 t = _mm256_add_ps(ae[i], ao[i]);
			if (m == 1)
				t = _mm256_add_ps(t, _mm256_add_ps(be, bo));
			y[(size_t)i * ldy + j] = hsum(t) + tail[i];
		}
	}
}

/*
 * One row of x (decode) over rows [j0, j1) of W as four streams: the
 * range's quarters side by side, a row of each per step, sharing the loads
 * of x.  Each stream reads its quarter front to back, so every 4 KiB page
 * is read by one stream at a time, which is what the hardware's stream
 * prefetcher follows; two rows of a 1024-wide bf16 W side by side (one
 * page, two streams) ran at 0.5 of a plain sum's read rate, these four
 * quarters at 0.9-1.0 (bench/README.md), one row at a time at 0.75-0.8.
 */
__attribute__((target("avx2,fma"))) static void
gemv_quarters_avx2(float *y, const float *xp, const uint16_t *w, int j0, int j1, int k)
{
	int q = (j1 - j0) / 4, kk = k - k % 16;
	for (int j = j0; j < j0 + q; j++) {
		const uint16_t *r[4];
		__m256 ae[4], ao[4];
		float tail[4] = {0, 0, 0, 0};
#pragma GCC unroll 4
		for (int s = 0; s < 4; s++) {
			r[s] = w + (size_t)(j + s * q) * k;
			ae[s] = ao[s] = _mm256_setzero_ps();
		}
		for (int c = 0; c < kk; c += 16) {
			__m256 xe = _mm256_loadu_ps(xp + c), xo = _mm256_loadu_ps(xp + c + 8);
#pragma GCC unroll 4
			for (int s = 0; s < 4; s++) {
				__m256i v = _mm256_loadu_si256((const __m256i *)(r[s] + c));
				if (!(c & 31))
					_mm_prefetch((const char *)(r[s] + c) + PREFETCH, _MM_HINT_T0);
				ae[s] = _mm256_fmadd_ps(xe, bf16_even(v), ae[s]);
				ao[s] = _mm256_fmadd_ps(xo, bf16_odd(v), ao[s]);
			}
		}
		for (int c = kk; c < k; c++)
#pragma GCC unroll 4
			for (int s = 0; s < 4; s++)
				tail[s] += xp[c] * bf16_f32(r[s][c]);
#pragma GCC unroll 4
		for (int s = 0; s < 4; s++)
			y[j + s * q] = hsum(_mm256_add_ps(ae[s], ao[s])) + tail[s];
	}
	if (j0 + 4 * q < j1)
		gemv_avx2_body(y, 1, xp, w, 1, j0 + 4 * q, j1, k);
}

/* The same four streams for f32 W (decode on an f32 checkpoint): OpenBLAS's
 * sgemv, threaded by OpenBLAS, read 0.6-0.7 of the bound here. */
__attribute__((target("avx2,fma"))) static void
gemv_f32_quarters_avx2(float *y, const float *x, const float *w, int j0, int j1, int k)
{
	int q = (j1 - j0) / 4, kk = k - k % 16;
	for (int j = j0; j < j0 + q; j++) {
		const float *r[4];
		__m256 a[4], b[4];
		float tail[4] = {0, 0, 0, 0};
#pragma GCC unroll 4
		for (int s = 0; s < 4; s++) {
			r[s] = w + (size_t)(j + s * q) * k;
			a[s] = b[s] = _mm256_setzero_ps();
		}
		for (int c = 0; c < kk; c += 16) {
			__m256 x0 = _mm256_loadu_ps(x + c), x1 = _mm256_loadu_ps(x + c + 8);
#pragma GCC unroll 4
			for (int s = 0; s < 4; s++) {
				_mm_prefetch((const char *)(r[s] + c) + PREFETCH, _MM_HINT_T0);
				a[s] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(r[s] + c), a[s]);
				b[s] = _mm256_fmadd_ps(x1, _mm256_loadu_ps(r[s] + c + 8), b[s]);
			}
		}
		for (int c = kk; c < k; c++)
#pragma GCC unroll 4
			for (int s = 0; s < 4; s++)
				tail[s] += x[c] * r[s][c];
#pragma GCC unroll 4
		for (int s = 0; s < 4; s++)
			y[j + s * q] = hsum(_mm256_add_ps(a[s], b[s])) + tail[s];
	}
	/* the rows past the four quarters, one at a time */
	for (int j = j0 + 4 * q; j < j1; j++) {
		const float *r = w + (size_t)j * k;
		__m256 a = _mm256_setzero_ps(), b = a;
		float tail = 0;
		for (int c = 0; c < kk; c += 16) {
			a = _mm256_fmadd_ps(_mm256_loadu_ps(x + c), _mm256_loadu_ps(r + c), a);
			b = _mm256_fmadd_ps(_mm256_loadu_ps(x + c + 8), _mm256_loadu_ps(r + c + 8), b);
		}
		for (int c = kk; c < k; c++)
			tail += x[c] * r[c];
		y[j] = hsum(_mm256_add_ps(a, b)) + tail;
	}
}

__attribute__((target("avx2,fma")))
static void gemv_rows_avx2(float *y, int ldy, const float *x,
			   const uint16_t *w, int m, int j0, int j1, int k)
{
	switch (m) {
	case 1:
		(void)ldy;
		gemv_quarters_avx2(y, x, w, j0, j1, k);
		break;
	case 2:
		gemv_avx2_body(y, ldy, x, w, 2, j0, j1, k);
		break;
	case 3:
		gemv_avx2_body(y, ldy, x, w, 3, j0, j1, k);
		break;
	default:
		gemv_avx2_body(y, ldy, x, w, 4, j0, j1, k);
		break;
	}
}

/*
 * The same products with AVX-512 (F and BW), where the CPU has it: a
 * 64-byte load holds 32 bf16 weights, widened by the same shift and mask
 * (x permuted per block of 32: its 16 even, then its 16 odd values), half
 * the instructions a byte of AVX2's.  One row of x (decode) reads W as ONE
 * stream, rows front to back (a chunk's rows are contiguous), with two
 * 64-byte blocks a step into four sums and a software prefetch
 * PREFETCH512 bytes ahead, one a cache line: on the AVX-512 machine
 * measured (Zen 5, bench/README.md) the four quarters side by side read at
 * 0.5 of a plain sum's rate and one stream at 0.9-1.0, the opposite of the
 * AVX2 machine the quarters were measured on (Zen 2).
 */
#define PREFETCH512 2048

__attribute__((target("avx512f,avx512bw"), always_inline)) static inline __m512
bf16_even512(__m512i v)
{
	return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

__attribute__((target("avx512f,avx512bw"), always_inline)) static inline __m512
bf16_odd512(__m512i v)
{
	return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u)));
}

__attribute__((target("avx512f,avx512bw"))) static void
widen_avx512(float *out, const uint16_t *in, size_t n)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m256i h = _mm256_loadu_si256((const __m256i *)(in + i));
		_mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(
						  _mm512_cvtepu16_epi32(h), 16)));
	}
	for (; i < n; i++)
		out[i] = bf16_f32(in[i]);
}

__attribute__((target("avx512f,avx512bw"), always_inline)) static inline void
gemv_avx512_body(float *y, int ldy, const float *xp, const uint16_t *w,
		 const int m, int j0, int j1, int k)
{
	enum { MAXM = 4 };
	const int kk = k - k % 32;
	for (int j = j0; j < j1; j++) {
		const uint16_t *wr = w + (size_t)j * k;
		__m512 ae[MAXM], ao[MAXM];
		float tail[MAXM] = {0, 0, 0, 0};
		int c = 0;
#pragma GCC unroll 4
		for (int i = 0; i < m; i++)
			ae[i] = ao[i] = _mm512_setzero_ps();
		if (m == 1) {
			__m512 be = _mm512_setzero_ps(), bo = be;
			for (; c + 64 <= kk; c += 64) {
				__m512i v = _mm512_loadu_si512((const void *)(wr + c));
				__m512i u = _mm512_loadu_si512((const void *)(wr + c + 32));
				_mm_prefetch((const char *)(wr + c) + PREFETCH512, _MM_HINT_T0);
				_mm_prefetch((const char *)(wr + c) + PREFETCH512 + 64, _MM_HINT_T0);
				ae[0] = _mm512_fmadd_ps(_mm512_loadu_ps(xp + c), bf16_even512(v), ae[0]);
				ao[0] = _mm512_fmadd_ps(_mm512_loadu_ps(xp + c + 16), bf16_odd512(v), ao[0]);
				be = _mm512_fmadd_ps(_mm512_loadu_ps(xp + c + 32), bf16_even512(u), be);
				bo = _mm512_fmadd_ps(_mm512_loadu_ps(xp + c + 48), bf16_odd512(u), bo);
			}
			ae[0] = _mm512_add_ps(ae[0], be);
			ao[0] = _mm512_add_ps(ao[0], bo);
		}
		for (; c < kk; c += 32) {
			__m512i v = _mm512_loadu_si512((const void *)(wr + c));
			_mm_prefetch((const char *)(wr + c) + PREFETCH512, _MM_HINT_T0);
#pragma GCC unroll 4
			for (int i = 0; i < m; i++) {
				const float *xr = xp + (size_t)i * k + c;
				ae[i] = _mm512_fmadd_ps(_mm512_loadu_ps(xr), bf16_even512(v), ae[i]);
				ao[i] = _mm512_fmadd_ps(_mm512_loadu_ps(xr + 16), bf16_odd512(v), ao[i]);
			}
		}
		/* the k % 32 tail, whose x is not permuted */
		for (; c < k; c++) {
			float wv = bf16_f32(wr[c]);
#pragma GCC unroll 4
			for (int i = 0; i < m; i++)
				tail[i] += xp[(size_t)i * k + c] * wv;
		}
#pragma GCC unroll 4
		for (int i = 0; i < m; i++)
			y[(size_t)i * ldy + j] = _mm512_reduce_add_ps(_mm512_add_ps(ae[i], ao[i])) +
						 tail[i];
	}
}

/*
 * One row of x (decode) over rows [j0, j1) of W with AVX-512 as four
 * streams, the range's quarters side by side (the AVX2 kernel's order,
 * gemv_quarters_avx2), 64 bytes of each a step, the loads of x shared,
 * a prefetch a cache line PREFETCH bytes ahead in each.  On the Sapphire
 * Rapids VM (bench/README.md, 2026-12-03) one core reads memory faster
 * from several pages at once than from one stream: this kernel read a
 * decode step's 325 MB of bf16 W at 1.08-1.16x the time-per-byte of a
 * one-stream AVX-512 sum, the one-stream kernel (gemv_avx512_body, kept
 * as DAY0_KERNEL=avx512-stream) at 0.87-0.92x.
 */
__attribute__((target("avx512f,avx512bw"))) static void
gemv_quarters_avx512(float *y, const float *xp, const uint16_t *w, int j0, int j1, int k)
{
	const int q = (j1 - j0) / 4, kk = k - k % 32;
	for (int j = j0; j < j0 + q; j++) {
		const uint16_t *r[4];
		__m512 ae[4], ao[4];
#pragma GCC unroll 4
		for (int s = 0; s < 4; s++) {
			r[s] = w + (size_t)(j + s * q) * k;
			ae[s] = ao[s] = _mm512_setzero_ps();
		}
		for (int c = 0; c < kk; c += 32) {
			__m512 xe = _mm512_loadu_ps(xp + c), xo = _mm512_loadu_ps(xp + c + 16);
#pragma GCC unroll 4
			for (int s = 0; s < 4; s++) {
				__m512i v = _mm512_loadu_si512((const void *)(r[s] + c));
				_mm_prefetch((const char *)(r[s] + c) + PREFETCH, _MM_HINT_T0);
				ae[s] = _mm512_fmadd_ps(xe, bf16_even512(v), ae[s]);
				ao[s] = _mm512_fmadd_ps(xo, bf16_odd512(v), ao[s]);
			}
		}
#pragma GCC unroll 4
		for (int s = 0; s < 4; s++) {
			float t = 0; /* the k % 32 tail, x not permuted */
			for (int c = kk; c < k; c++)
				t += xp[c] * bf16_f32(r[s][c]);
			y[j + s * q] = _mm512_reduce_add_ps(_mm512_add_ps(ae[s], ao[s])) + t;
		}
	}
	if (j0 + 4 * q < j1)
		gemv_avx512_body(y, 1, xp, w, 1, j0 + 4 * q, j1, k);
}

__attribute__((target("avx512f,avx512bw"))) static void
gemv_f32_avx512(float *y, const float *x, const float *w, int j0, int j1, int k);

/* The same four streams for f32 W (an f32 checkpoint's decode). */
__attribute__((target("avx512f,avx512bw"))) static void
gemv_f32_quarters_avx512(float *y, const float *x, const float *w, int j0, int j1, int k)
{
	const int q = (j1 - j0) / 4, kk = k - k % 16;
	for (int j = j0; j < j0 + q; j++) {
		const float *r[4];
		__m512 a[4];
#pragma GCC unroll 4
		for (int s = 0; s < 4; s++) {
			r[s] = w + (size_t)(j + s * q) * k;
			a[s] = _mm512_setzero_ps();
		}
		for (int c = 0; c < kk; c += 16) {
			__m512 xv = _mm512_loadu_ps(x + c);
#pragma GCC unroll 4
			for (int s = 0; s < 4; s++) {
				_mm_prefetch((const char *)(r[s] + c) + PREFETCH, _MM_HINT_T0);
				a[s] = _mm512_fmadd_ps(xv, _mm512_loadu_ps(r[s] + c), a[s]);
			}
		}
#pragma GCC unroll 4
		for (int s = 0; s < 4; s++) {
			float t = 0;
			for (int c = kk; c < k; c++)
				t += x[c] * r[s][c];
			y[j + s * q] = _mm512_reduce_add_ps(a[s]) + t;
		}
	}
	if (j0 + 4 * q < j1)
		gemv_f32_avx512(y, x, w, j0 + 4 * q, j1, k);
}

__attribute__((target("avx512f,avx512bw"))) static void
gemv_rows_avx512(float *y, int ldy, const float *x, const uint16_t *w, int m, int j0,
		 int j1, int k)
{
	switch (m) {
	case 1:
		(void)ldy;
		gemv_quarters_avx512(y, x, w, j0, j1, k);
		break;
	case 2:
		gemv_avx512_body(y, ldy, x, w, 2, j0, j1, k);
		break;
	case 3:
		gemv_avx512_body(y, ldy, x, w, 3, j0, j1, k);
		break;
	default:
		gemv_avx512_body(y, ldy, x, w, 4, j0, j1, k);
		break;
	}
}

/* AVX-512 with one row of x as ONE stream (the kernel before the four
 * streams; DAY0_KERNEL=avx512-stream), more rows as gemv_rows_avx512;
 * f32 W then one stream too (gemv_f32_avx512). */
__attribute__((target("avx512f,avx512bw"))) static void
gemv_rows_avx512_stream(float *y, int ldy, const float *x, const uint16_t *w, int m,
			int j0, int j1, int k)
{
	if (m == 1)
		gemv_avx512_body(y, ldy, x, w, 1, j0, j1, k);
	else
		gemv_rows_avx512(y, ldy, x, w, m, j0, j1, k);
}

/* One row of x times f32 W with AVX-512: one stream, four 64-byte blocks
 * a step into four sums, a prefetch a cache line. */
__attribute__((target("avx512f,avx512bw"))) static void
gemv_f32_avx512(float *y, const float *x, const float *w, int j0, int j1, int k)
{
	const int kk = k - k % 64, k16 = k - k % 16;
	for (int j = j0; j < j1; j++) {
		const float *r = w + (size_t)j * k;
		__m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
		float tail = 0;
		int c = 0;
		for (; c < kk; c += 64) {
			const char *p = (const char *)(r + c) + PREFETCH512;
			_mm_prefetch(p, _MM_HINT_T0);
			_mm_prefetch(p + 64, _MM_HINT_T0);
			_mm_prefetch(p + 128, _MM_HINT_T0);
			_mm_prefetch(p + 192, _MM_HINT_T0);
			a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c), _mm512_loadu_ps(r + c), a0);
			a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c + 16), _mm512_loadu_ps(r + c + 16), a1);
			a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c + 32), _mm512_loadu_ps(r + c + 32), a2);
			a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c + 48), _mm512_loadu_ps(r + c + 48), a3);
		}
		for (; c < k16; c += 16)
			a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c), _mm512_loadu_ps(r + c), a0);
		for (; c < k; c++)
			tail += x[c] * r[c];
		y[j] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1),
							  _mm512_add_ps(a2, a3))) + tail;
	}
}
#endif

typedef void (*gemv_fn)(float *, int, const float *, const uint16_t *, int,
			int, int, int);

static gemv_fn fn;
/* (DAY0_KERNEL=avx512-vbmi, avx512-gfx4, avx512-gf4 or avx512-dp4: fn the AVX-512
 * GEMV, FP8 e4m3 by the kernel named; ops_fp8.c remembers which) */

/* An AVX-512 GEMV (four streams or one): x permuted per block of 32, the
 * AVX-512 widening and FP8 kernels. */
static int is512(gemv_fn f)
{
#ifdef HAVE_X86
	return f == gemv_rows_avx512 || f == gemv_rows_avx512_stream;
#else
	(void)f;
	return 0;
#endif
}
/* prefill's bf16 and FP8 products on oneDNN (ops_onednn.c): -1 not yet
 * decided, then 0 or 1 */
static int prefill_onednn = -1;

#ifdef HAVE_X86
static int have_avx2(void)
{
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* AVX-512 F and BW (libgcc's check includes the OS saving the registers) */
static int have_avx512(void)
{
	return have_avx2() && __builtin_cpu_supports("avx512f") &&
	       __builtin_cpu_supports("avx512bw");
}
#endif

/* The kernel named (NULL or "" for the best this CPU has), or NULL where
 * the CPU lacks it. */
static gemv_fn kernel_named(const char *name)
{
	int any = !name || !*name;
	if (name && !strcmp(name, "portable"))
		return gemv_rows_portable;
#ifdef HAVE_X86
	if ((any || !strcmp(name, "avx512")) && have_avx512())
		return gemv_rows_avx512;
	/* the AVX-512 GEMV with FP8 (e4m3) by a named kernel: avx512-vbmi
	 * the VBMI tables, avx512-gfx4 GFNI with the patch, avx512-gf4,
	 * avx512-dp4 */
	if (!any && op_fp8_named(name) && have_avx512())
		return gemv_rows_avx512;
	if (!any && !strcmp(name, "avx512-stream") && have_avx512())
		return gemv_rows_avx512_stream;
	if ((any || !strcmp(name, "avx2+fma") || !strcmp(name, "avx2")) && have_avx2())
		return gemv_rows_avx2;
#endif
	return any ? gemv_rows_portable : NULL;
}

/* Whether name ("onednn", or NULL/"" for the best) puts prefill on
 * oneDNN: only where oneDNN has a native kernel for this CPU. */
static int onednn_named(const char *name)
{
	if (name && *name && strcmp(name, "onednn"))
		return 0;
	return op_onednn_ready();
}

/* DAY0_KERNEL=portable|avx2|avx512 picks a GEMV kernel and prefill by
 * widened panels through sgemm (tests, A/B runs: the paths before
 * oneDNN); DAY0_KERNEL=onednn the best GEMV and prefill on oneDNN; unset,
 * or one this CPU lacks, the best it has: oneDNN for prefill where it
 * has a native kernel. */
static gemv_fn pick_gemv(void)
{
	if (!fn) {
		const char *name = getenv("DAY0_KERNEL");
		if (name && !strcmp(name, "onednn"))
			name = NULL;
		gemv_fn f = kernel_named(name);
		fn = f ? f : kernel_named(NULL);
		op_fp8_select(f ? name : NULL);
	}
	return fn;
}

static int use_onednn(void)
{
	if (prefill_onednn < 0) {
		const char *name = getenv("DAY0_KERNEL");
		if (name && *name && strcmp(name, "onednn") && !kernel_named(name))
			name = NULL; /* one this CPU lacks: the best */
		prefill_onednn = onednn_named(name);
	}
	return prefill_onednn;
}

int op_bf16_set_kernel(const char *name)
{
	int on = onednn_named(name);
	if (name && !strcmp(name, "onednn") && !on)
		return -1;
	gemv_fn f = kernel_named(name && !strcmp(name, "onednn") ? NULL : name);
	if (!f)
		return -1;
	fn = f;
	prefill_onednn = on;
	op_fp8_select(name);
	return 0;
}

/*
 * How prefill on oneDNN multiplies x by bf16 and FP8 W (PREFILL_X_*):
 * - BF16: x rounded once to bf16 (nearest even), oneDNN's bf16 matmul:
 *   the arithmetic of llama.cpp's AVX512-BF16 path and of GPU engines; a
 *   product within 2^-8 of its value (FP8's W, its block scale applied,
 *   rounded to bf16 too: 2^-7), so an MoE router's near-tie can choose
 *   another expert than float64 would, which validate follows
 *   (engine/ref/route_follow.h);
 * - SPLIT (DAY0_PREFILL_X=split): x as two bf16 terms, hi + lo, ~16
 *   mantissa bits, a product within 2^-16 of f32 compute's, for twice the
 *   bf16 FLOPs: AMX has them to spare; with AVX512-BF16 alone it costs what
 *   f32 compute would;
 * - F32 (DAY0_PREFILL_X=f32): W's panels widened to f32 in each thread's
 *   scratch (bf16 exactly, FP8 with its block scales as the GEMV reads it)
 *   and oneDNN's f32 matmul with x as given: f32 compute, nothing rounded.
 *   The default where oneDNN's bf16 matmul runs no faster than its f32 one
 *   would on the widened panels: Intel's AVX512-BF16 without AMX (on an
 *   Emerald Rapids guest without AMX vdpbf16ps issued at half the rate of
 *   f32 FMAs, and oneDNN's bf16 128 x 1024 x 256 ran at 99-111 GFLOP/s
 *   against f32's 192-203; Cooper Lake is taken to be alike, unmeasured),
 *   and a bf16
 *   matmul oneDNN only emulates (AVX-512 without BF16).  AMX, and AMD's
 *   AVX512-BF16 (Zen 4/5: 412 bf16 GFLOP/s against 215 f32 on Zen 5) keep
 *   BF16.  A rule on the CPU, not a timing: every process on a machine
 *   takes the same arithmetic.
 * DAY0_PREFILL_X=bf16|split|f32 forces one; any other value is warned
 * about once and the default kept.
 */
static int prefill_x = -1;

#ifdef HAVE_X86
static int cpu_is_amd(void)
{
	unsigned a, b, c, d;
	return __get_cpuid(0, &a, &b, &c, &d) && b == 0x68747541u; /* "Auth" */
}
#endif

/* PREFILL_X_F32 where it is the faster (above), else PREFILL_X_BF16:
 * this CPU's default, whatever is forced. */
int op_prefill_x_default(void)
{
	const char *isa = op_onednn_isa(), *f32 = op_onednn_isa_f32();
	if (!isa || !f32 || strstr(isa, "amx"))
		return PREFILL_X_BF16;
#ifdef HAVE_X86
	if (strstr(isa, "bf16") && cpu_is_amd())
		return PREFILL_X_BF16;
	return PREFILL_X_F32;
#else
	return PREFILL_X_BF16;
#endif
}

int op_prefill_x(void)
{
	if (prefill_x < 0) {
		const char *e = getenv("DAY0_PREFILL_X");
		if (e && !strcmp(e, "split"))
			prefill_x = PREFILL_X_SPLIT;
		else if (e && !strcmp(e, "bf16"))
			prefill_x = PREFILL_X_BF16;
		else if (e && !strcmp(e, "f32") && op_onednn_isa_f32())
			prefill_x = PREFILL_X_F32;
		else {
			if (e && *e && strcmp(e, "f32"))
				fprintf(stderr, "day0-engine: DAY0_PREFILL_X=%s: expected "
						"bf16, split or f32; using the default\n", e);
			else if (e && *e)
				fprintf(stderr, "day0-engine: DAY0_PREFILL_X=f32: oneDNN "
						"has no native f32 matmul here; using the "
						"default\n");
			prefill_x = op_prefill_x_default();
		}
	}
	return prefill_x;
}

int op_prefill_x_split(void)
{
	return op_prefill_x() == PREFILL_X_SPLIT;
}

int op_set_prefill_x(int mode)
{
	if (mode == PREFILL_X_F32 && !op_onednn_isa_f32())
		return -1;
	if (mode != PREFILL_X_BF16 && mode != PREFILL_X_SPLIT && mode != PREFILL_X_F32)
		return -1;
	prefill_x = mode;
	return 0;
}

/* The widening that goes with the GEMV kernel picked. */
void op_bf16_widen(float *out, const uint16_t *in, size_t n)
{
#ifdef HAVE_X86
	if (is512(pick_gemv())) {
		widen_avx512(out, in, n);
		return;
	}
	if (pick_gemv() == gemv_rows_avx2) {
		widen_avx2(out, in, n);
		return;
	}
#endif
	widen_portable(out, in, n);
}

const char *op_prefill_kernel(void)
{
	static char name[80];
	if (!use_onednn())
		return "sgemm";
	if (op_prefill_x() == PREFILL_X_F32)
		snprintf(name, sizeof name, "onednn:%s/w-f32", op_onednn_isa_f32());
	else
		snprintf(name, sizeof name, "onednn:%s%s", op_onednn_isa(),
			 op_prefill_x_split() ? "/x-split" : "");
	return name;
}

const char *op_kernels(void)
{
	static char name[96];
	if (!use_onednn())
		return op_fp8_named_kernel() && pick_gemv() == gemv_rows_avx512
			       ? op_fp8_named_kernel()
			       : op_bf16_kernel();
	snprintf(name, sizeof name, "%s+%s", op_bf16_kernel(), op_prefill_kernel());
	return name;
}

const char *op_bf16_kernel(void)
{
#ifdef HAVE_X86
	if (pick_gemv() == gemv_rows_avx512)
		return "avx512"; /* avx512-vbmi too: ops.c's attention asks */
	if (pick_gemv() == gemv_rows_avx512_stream)
		return "avx512-stream";
	if (pick_gemv() == gemv_rows_avx2)
		return "avx2+fma";
#endif
	return "portable";
}

/* ------------------------------------------------------------ the pool */

/*
 * One product in flight, cut into chunks of output rows: slot s (the
 * caller 0, the workers 1..) owns the s-th contiguous share and takes its
 * chunks front to back from a counter of its own, then takes what is
 * left of the others' shares the same way.  On a shared machine a worker
 * that is not scheduled leaves its chunks to the others instead of
 * holding the product up; while all run, each reads its share of W as
 * one stream (a shared counter had the threads take every other chunk:
 * slower to read from memory at 2 threads, bench/README.md).
 */
struct job {
	void (*run)(const struct job *, int chunk, int slot);
	float *y;
	const float *x;
	const uint16_t *w;
	int m, n, k, rows, nchunks;
	int slots;      /* threads that may take chunks: slot 0 the caller */
	gemv_fn fn;     /* GEMV jobs */
	float *scratch; /* panel jobs: slots x rows x k floats */
	void (*each)(void *, int, int); /* op_parallel_for jobs: item c, slot */
	void *ctx;
	/* oneDNN panel jobs: x rounded to bf16, the matmul of a whole panel
	 * and of the last one, FP8's bf16 scratch (slots x rows x k) */
	const uint16_t *xb;
	const float *wf32; /* f32 W (oneDNN's f32 matmul) */
	int widen;         /* bf16/FP8 W widened into scratch, f32 matmul */
	const struct onednn_mm *mm, *mm_last;
	uint16_t *bscratch;
	atomic_int *failed;
	const struct wmat *wm; /* FP8 GEMV and panel jobs */
	int vec;               /* FP8: the vector kernels */
	/* op_linear_many's GEMV jobs: products of one x, chunks numbered
	 * across them (product q's from c0) */
	int np;
	struct prod {
		float *y;
		const struct wmat *w;
		int n, rows, c0;
	} prod[4];
};

#define POOL_MAX 64
/* Slot s's share of a job's chunks, [next, end) as published: a cache
 * line of its own (the slots take from their own counters at once). */
struct range {
	_Alignas(64) atomic_int next; /* the next chunk of the share to take */
	int end;
};
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int nworkers;
	struct job job;
	atomic_uint pub;   /* the published job's number, 0 while writing one */
	atomic_int done;   /* chunks finished */
	atomic_int active; /* workers looking at the job */
	struct range share[POOL_MAX];
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static inline void relax(void)
{
#ifdef HAVE_X86
	__builtin_ia32_pause();
#endif
}


/* Slot's own share front to back, then what is left of the others'
 * (each from its front, the next slot's first). */
static void take_chunks(const struct job *j, int slot)
{
	int c, did = 0;
	for (int o = 0; o < j->slots; o++) {
		struct range *r = &pool.share[(slot + o) % j->slots];
		while ((c = atomic_fetch_add(&r->next, 1)) < r->end) {
			j->run(j, c, slot);
			did++;
		}
	}
	if (did)
		atomic_fetch_add_explicit(&pool.done, did, memory_order_release);
}

static void *worker(void *arg)
{
	unsigned seen = 0;
	int slot = (int)(intptr_t)arg;
	for (;;) {
		unsigned p;
		int spins = 0;
		/* spin a little (the next product of a decode step comes within
		 * microseconds), then sleep until one is published */
		while (((p = atomic_load(&pool.pub)) == 0 || p == seen) && spins < 2000) {
			relax();
			spins++;
		}
		if (p == 0 || p == seen) {
			pthread_mutex_lock(&pool.mu);
			while ((p = atomic_load(&pool.pub)) == 0 || p == seen)
				pthread_cond_wait(&pool.cv, &pool.mu);
			pthread_mutex_unlock(&pool.mu);
		}
		/* announce, then check the job is still the one seen: the
		 * caller rewrites it only when no worker is looking */
		atomic_fetch_add(&pool.active, 1);
		if (atomic_load(&pool.pub) == p) {
			seen = p;
			if (slot < pool.job.slots)
				take_chunks(&pool.job, slot);
		}
		atomic_fetch_sub(&pool.active, 1);
	}
	return NULL;
}

/* Threads for a product: what OpenBLAS was told to use. */
static int pool_threads(void)
{
	int t = openblas_get_num_threads();
	return t < 1 ? 1 : t > POOL_MAX ? POOL_MAX : t;
}

/* Runs j's chunks on the caller (slot 0) and j->slots - 1 workers
 * (started the first time they are needed); returns when all are done. */
static void pool_run(struct job *j)
{
	static unsigned jobs;
	int spins = 0;
	pthread_mutex_lock(&pool.mu);
	while (pool.nworkers < j->slots - 1 && pool.nworkers < POOL_MAX) {
		pthread_t t;
		if (pthread_create(&t, NULL, worker, (void *)(intptr_t)(pool.nworkers + 1)))
			break;
		pthread_detach(t);
		pool.nworkers++;
	}
	if (j->slots > pool.nworkers + 1)
		j->slots = pool.nworkers + 1;
	pthread_mutex_unlock(&pool.mu);
	atomic_store(&pool.pub, 0);
	while (atomic_load(&pool.active) > 0)
		relax();
	pool.job = *j;
	for (int s = 0; s < j->slots; s++) {
		atomic_store_explicit(&pool.share[s].next,
				      (int)((int64_t)s * j->nchunks / j->slots),
				      memory_order_relaxed);
		pool.share[s].end = (int)((int64_t)(s + 1) * j->nchunks / j->slots);
	}
	atomic_store(&pool.done, 0);
	if (++jobs == 0)
		jobs = 1;
	pthread_mutex_lock(&pool.mu);
	atomic_store(&pool.pub, jobs);
	pthread_cond_broadcast(&pool.cv);
	pthread_mutex_unlock(&pool.mu);
	take_chunks(j, 0);
	while (atomic_load_explicit(&pool.done, memory_order_acquire) < j->nchunks) {
		if (++spins < 4000)
			relax();
		else
			sched_yield(); /* a worker holds a chunk but not a core */
	}
}

/* Rows of one chunk of a GEMV of m rows of x over W of dtype and width k,
 * in a job of job_bytes of W over slots threads.  One row of x: a
 * quarter of a thread's share of the job, between 256 KiB and 1 MiB
 * (its four streams of 64-256 KiB): longer streams read faster on this
 * kind of host (a plain read in the engine's pattern, bench/pool_chunks.c:
 * 1 MiB chunks 1.25x 256 KiB ones), and four chunks a thread still leave
 * the shares something to even out (1 MiB for every job left FP8's o
 * projection one chunk: 0.88x at 2 threads).  Against a fixed 256 KiB,
 * TPOT on forward.sh's models, interleaved (Zen 5, 2026-12-06): bf16
 * 1.05-1.07x at 1 thread, 1.07x at 2; FP8 1.04-1.11x and 1.01-1.03x; f32
 * 1.05x at 2.  More rows of x: ~64 KiB. */
static int gemv_rows(int dtype, int m, int k, size_t job_bytes, int slots)
{
	size_t bytes = 65536;
	if (m == 1) {
		bytes = job_bytes / ((size_t)(slots > 0 ? slots : 1) * 4);
		if (bytes > ((size_t)1 << 20))
			bytes = (size_t)1 << 20;
		if (bytes < 262144)
			bytes = 262144;
	}
	int rows = (int)(bytes / dtype_size(dtype) / (size_t)(k > 0 ? k : 1)) & ~7;
	return rows < 8 ? 8 : rows;
}


/* Rows [j0, j0 + len) of a panel job's W (bf16, or FP8 with its block
 * scales) widened to f32 into the slot's own scratch. */
static float *widen_panel(const struct job *j, int j0, int len, int slot)
{
	float *pan = j->scratch + (size_t)slot * (size_t)j->rows * (size_t)j->k;
	if (j->wm)
		op_fp8_widen_rows(pan, j->wm, j0, len, j->k, j->vec);
	else
		op_bf16_widen(pan, j->w + (size_t)j0 * j->k, (size_t)len * j->k);
	return pan;
}

/* A prefill chunk: one panel of W (rows [c*rows, (c+1)*rows)) widened into
 * the slot's own scratch, multiplied by a one-thread sgemm. */
static void panel_chunk(const struct job *j, int c, int slot)
{
	int j0 = c * j->rows, len = j->n - j0 < j->rows ? j->n - j0 : j->rows;
	float *pan = widen_panel(j, j0, len, slot);
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->m, len, j->k, 1.0f,
		    j->x, j->k, pan, j->k, 0.0f, j->y + j0, j->n);
}

/* A prefill chunk on oneDNN: one panel of W (rows [c*rows, (c+1)*rows))
 * times x, one single-threaded matmul in the calling pool thread: f32 W
 * and x as they are; widened (PREFILL_X_F32), the panel widened to f32 in
 * the slot's own scratch and x as it is; else x in bf16, FP8's panel
 * first widened with its block scales and rounded to bf16 in the slot's
 * own scratch. */
static void onednn_chunk(const struct job *j, int c, int slot)
{
	int j0 = c * j->rows, len = j->n - j0 < j->rows ? j->n - j0 : j->rows;
	const void *w = j->w + (size_t)j0 * j->k;
	const void *x = j->xb;
	if (j->wf32) {
		w = j->wf32 + (size_t)j0 * j->k;
		x = j->x;
	} else if (j->widen) { /* PREFILL_X_F32 */
		w = widen_panel(j, j0, len, slot);
		x = j->x;
	} else if (j->wm) {
		size_t off = (size_t)slot * (size_t)j->rows * (size_t)j->k;
		float *pan = j->scratch + off;
		uint16_t *b = j->bscratch + off;
		op_fp8_widen_rows(pan, j->wm, j0, len, j->k, j->vec);
		op_f32_to_bf16(b, pan, (size_t)len * j->k);
		w = b;
	}
	if (op_onednn_run(len == j->rows ? j->mm : j->mm_last, j->y + j0, x, w, slot))
		atomic_store(j->failed, 1);
}

static void each_chunk(const struct job *j, int c, int slot)
{
	j->each(j->ctx, c, slot);
}

int op_pool_threads(void)
{
	return pool_threads();
}

void op_parallel_for(int n, void (*each)(void *ctx, int i, int slot), void *ctx)
{
	int threads = pool_threads();
	struct job j = {.run = each_chunk, .n = n, .rows = 1, .nchunks = n,
			.slots = threads, .each = each, .ctx = ctx};
	if (j.slots > n)
		j.slots = n;
	if (j.slots <= 1) {
		for (int i = 0; i < n; i++)
			each(ctx, i, 0);
		return;
	}
	openblas_set_num_threads(1);
	pool_run(&j);
	openblas_set_num_threads(threads);
}

static void gemv_many(int np, float *const *y, const struct wmat *const *w,
		      const float *const *b, const int *n, const float *x, int m, int k);

/* One row of x times f32 W: our four-stream kernel over the pool where the
 * CPU has AVX2+FMA (and DAY0_KERNEL is not portable), OpenBLAS's sgemv
 * otherwise. */
static void gemv_f32(float *y, const float *x, const struct wmat *w, const float *b,
		     int n, int k)
{
#ifdef HAVE_X86
	if (pick_gemv() != gemv_rows_portable) {
		gemv_many(1, &y, &w, &b, &n, x, 1, k);
		return;
	}
#endif
	op_linear(y, x, w->p, b, 1, n, k);
}

/* FP8 weights (ops_fp8.c's kernels): the vector ones with the bf16
 * kernel's choice (DAY0_KERNEL=portable, op_bf16_set_kernel) where the
 * CPU also has F16C. */
static int fp8_vec(void)
{
#ifdef HAVE_X86
	if (pick_gemv() == gemv_rows_portable || !op_fp8_vector())
		return 0;
	return is512(pick_gemv()) ? 2 : 1;
#else
	return 0;
#endif
}

/* A chunk of op_linear_many: its product's rows [j0, j1) for every row of
 * x, through that dtype's GEMV kernel (x already permuted for bf16's). */
static void many_chunk(const struct job *j, int c, int slot)
{
	int q = 0;
	(void)slot;
	while (q + 1 < j->np && c >= j->prod[q + 1].c0)
		q++;
	const struct prod *p = &j->prod[q];
	int j0 = (c - p->c0) * p->rows, j1 = j0 + p->rows < p->n ? j0 + p->rows : p->n;
	for (int i = 0; i < j->m; i += 4) {
		int mm = j->m - i < 4 ? j->m - i : 4;
		float *y = p->y + (size_t)i * p->n;
		const float *x = j->x + (size_t)i * j->k;
		if (p->w->dtype == DT_BF16)
			j->fn(y, p->n, x, p->w->p, mm, j0, j1, j->k);
		else if (p->w->dtype == DT_F32)
#ifdef HAVE_X86
			(j->fn == gemv_rows_avx512 ? gemv_f32_quarters_avx512
			 : j->fn == gemv_rows_avx512_stream ? gemv_f32_avx512
							     : gemv_f32_quarters_avx2)(
				y, x, p->w->p, j0, j1, j->k);
#else
			abort(); /* op_linear_many takes f32 only with AVX2 */
#endif
		else
			op_fp8_gemv_rows(y, p->n, x, p->w, mm, j0, j1, j->k, j->vec);
	}
}

/* ------------------------------------------------------------- products */

/*
 * A bf16 prefill product: panels of W widened to ~1 MiB of f32 (into the
 * cache, read back by sgemm from it), as many a thread; with more than one
 * thread each widens its own panels and multiplies them by a one-thread
 * sgemm.  Widening on the caller alone while OpenBLAS forked and joined
 * per panel gave 2-thread prefill 0.67x llama.cpp's (4 MiB panels were
 * slower still).  (The same split for f32 W, no widening, measured no
 * better than OpenBLAS's own 2-thread sgemm: f32 stays with op_linear.)
 */
static void panels(float *y, const float *x, const uint16_t *w,
		   const struct wmat *wm, int m, int n, int k)
{
	int threads = pool_threads();
	int np = (int)(((size_t)n * (size_t)k + (1u << 18) - 1) >> 18);
	struct job j = {.run = panel_chunk, .y = y, .x = x, .w = w, .m = m, .n = n,
			.k = k, .slots = threads, .wm = wm, .vec = fp8_vec()};
	if (np < 1)
		np = 1;
	if (threads > 1 && np > 1)
		np = (np + threads - 1) / threads * threads;
	j.rows = ((n + np - 1) / np + 15) & ~15; /* >= 16, whole blocks */
	if (j.rows > n)
		j.rows = n;
	j.nchunks = (n + j.rows - 1) / j.rows;
	if (j.slots > j.nchunks)
		j.slots = j.nchunks;
	j.scratch = malloc((size_t)j.slots * (size_t)j.rows * (size_t)k * sizeof(float));
	if (!j.scratch)
		abort();
	if (j.slots > 1) {
		openblas_set_num_threads(1);
		pool_run(&j);
		openblas_set_num_threads(threads);
	} else {
		for (int c = 0; c < j.nchunks; c++)
			panel_chunk(&j, c, 0);
	}
	free(j.scratch);
}



/*
 * A prefill product on oneDNN: x rounded to bf16 once, or as hi + lo
 * (f32 W, or bf16/FP8 W widened to f32 panels by PREFILL_X_F32: x as it
 * is, oneDNN's f32 matmul), then panels of W (~256 Ki weights each, as
 * many as a multiple of the threads) over the pool, each one matmul of one
 * thread (ops_onednn.c: why not oneDNN's own OpenMP threads).  W is bf16
 * w, FP8 wm or f32 wf.  Returns -1, having written nothing, when its
 * primitives could not be made, else 0; a failed matmul (memory) redoes
 * the product by the path before oneDNN.
 */
/* Products oneDNN could not do (no primitive, a failed matmul) that an
 * older path redid: tests assert none where oneDNN is in use. */
static atomic_int onednn_redone;

int op_onednn_redone(void)
{
	return atomic_load(&onednn_redone);
}

static int onednn_panels(float *y, const float *x, const uint16_t *w,
			 const struct wmat *wm, const float *wf, int m, int n, int k)
{
	int threads = pool_threads();
	int np = (int)(((size_t)n * (size_t)k + (1u << 18) - 1) >> 18);
	atomic_int failed = 0;
	uint16_t *xb = NULL;
	float *ylo = NULL;
	struct job j = {.run = onednn_chunk, .y = y, .x = x, .w = w, .m = m, .n = n,
			.k = k, .slots = threads, .wm = wm, .wf32 = wf, .vec = fp8_vec(),
			.failed = &failed};
	if (np < 1)
		np = 1;
	if (threads > 1 && np > 1)
		np = (np + threads - 1) / threads * threads;
	j.rows = ((n + np - 1) / np + 15) & ~15;
	if (j.rows > n)
		j.rows = n;
	j.nchunks = (n + j.rows - 1) / j.rows;
	if (j.slots > j.nchunks)
		j.slots = j.nchunks;
	/* bf16 and FP8 W: x rounded once to bf16; DAY0_PREFILL_X=split: as
	 * two bf16 terms, hi = bf16(x) and lo = bf16(x - hi), stacked as 2m
	 * rows of one matmul and their products summed: x is carried to ~16
	 * mantissa bits instead of 8 (a product's error near f32 compute's)
	 * for twice the bf16 FLOPs, which AMX has to spare (AVX512-BF16 on
	 * Zen 5: the f32 rate again). */
	int split = !wf && op_prefill_x_split();
	int mx = split ? 2 * m : m;
	j.widen = !wf && op_prefill_x() == PREFILL_X_F32;
	j.mm = op_onednn_get(mx, j.rows, k, n, wf || j.widen, j.slots);
	j.mm_last = n % j.rows ? op_onednn_get(mx, n % j.rows, k, n, wf || j.widen, j.slots)
			       : j.mm;
	if (!j.mm || !j.mm_last) {
		atomic_fetch_add(&onednn_redone, 1);
		return -1;
	}
	if (j.widen) {
		j.scratch = aligned_alloc(64, ((size_t)j.slots * (size_t)j.rows * (size_t)k *
						       sizeof(float) + 63) & ~(size_t)63);
		if (!j.scratch)
			abort();
	} else if (!wf) {
		size_t mk = (size_t)m * k;
		xb = aligned_alloc(64, (mk * (split ? 4 : 2) + 63) & ~(size_t)63);
		if (!xb)
			abort();
		if (split) {
			ylo = aligned_alloc(64, ((size_t)2 * m * n * sizeof(float) + 63) &
							~(size_t)63);
			if (!ylo)
				abort();
			op_f32_to_bf16_split(xb, xb + mk, x, mk);
			j.y = ylo;
		} else {
			op_f32_to_bf16(xb, x, mk);
		}
		j.xb = xb;
	}
	if (wm && !j.widen) {
		size_t per = (size_t)j.slots * (size_t)j.rows * (size_t)k;
		j.scratch = malloc(per * sizeof(float));
		j.bscratch = aligned_alloc(64, (per * 2 + 63) & ~(size_t)63);
		if (!j.scratch || !j.bscratch)
			abort();
	}
	if (j.slots > 1) {
		openblas_set_num_threads(1);
		pool_run(&j);
		openblas_set_num_threads(threads);
	} else {
		for (int c = 0; c < j.nchunks; c++)
			onednn_chunk(&j, c, 0);
	}
	if (ylo && !atomic_load(&failed)) {
		size_t mn = (size_t)m * n;
		for (size_t i = 0; i < mn; i++)
			y[i] = ylo[i] + ylo[mn + i];
	}
	free(xb);
	free(ylo);
	free(j.scratch);
	free(j.bscratch);
	if (atomic_load(&failed)) {
		atomic_fetch_add(&onednn_redone, 1);
		if (wf)
			op_linear(y, x, wf, NULL, m, n, k);
		else
			panels(y, x, w, wm, m, n, k);
	}
	return 0;
}

/* A prefill product of bf16 or FP8 W: oneDNN where it is in use, else
 * widened panels through sgemm. */
static void prefill(float *y, const float *x, const uint16_t *w,
		    const struct wmat *wm, int m, int n, int k)
{
	if (use_onednn() && onednn_panels(y, x, w, wm, NULL, m, n, k) == 0)
		return;
	panels(y, x, w, wm, m, n, k);
}

/* Rows of x below which the GEMV (W read once per 4 rows) beats widening
 * panels of W for sgemm. */
#define GEMV_ROWS 8

void op_linear_bf16(float *y, const float *x, const uint16_t *w,
		    const float *b, int m, int n, int k)
{
	if (m <= GEMV_ROWS) {
		struct wmat wm = {.p = (void *)w, .dtype = DT_BF16};
		const struct wmat *wp = &wm;
		gemv_many(1, &y, &wp, &b, &n, x, m, k);
		return;
	}
	prefill(y, x, w, NULL, m, n, k);
	if (b)
		for (int i = 0; i < m; i++)
			for (int j = 0; j < n; j++)
				y[(size_t)i * n + j] += b[j];
}

void op_linear_w(float *y, const float *x, const struct wmat *w,
		 const float *b, int m, int n, int k)
{
	if (w->dtype == DT_BF16) {
		op_linear_bf16(y, x, w->p, b, m, n, k);
	} else if (w->dtype == DT_F8_E4M3 || w->dtype == DT_F8_E5M2) {
		if (m <= GEMV_ROWS) {
			gemv_many(1, &y, &w, &b, &n, x, m, k);
		} else {
			prefill(y, x, NULL, w, m, n, k);
			if (b)
				for (int i = 0; i < m; i++)
					for (int jj = 0; jj < n; jj++)
						y[(size_t)i * n + jj] += b[jj];
		}
	} else if (m == 1) {
		gemv_f32(y, x, w, b, n, k);
	} else if (m > GEMV_ROWS && use_onednn() &&
		   onednn_panels(y, x, NULL, NULL, w->p, m, n, k) == 0) {
		/* f32 prefill on oneDNN's f32 matmul too: f32 sums of f32
		 * values, as sgemm's, and faster than OpenBLAS's kernels here
		 * (AVX-512: 150 against 131 GFLOP/s with OpenBLAS's own
		 * SkylakeX kernels, 85 with the Haswell ones some machines
		 * force; 1 thread, 128 x 2816 x 1024) */
		if (b)
			for (int i = 0; i < m; i++)
				for (int jj = 0; jj < n; jj++)
					y[(size_t)i * n + jj] += b[jj];
	} else {
		op_linear(y, x, w->p, b, m, n, k);
	}
}

/* The products of op_linear_many as one GEMV job over the pool (the
 * caller has checked the dtypes: bf16, FP8, or one-row f32 with AVX2). */
static void gemv_many(int np, float *const *y, const struct wmat *const *w,
		      const float *const *b, const int *n, const float *x, int m, int k)
{
	struct job j = {.run = many_chunk, .x = x, .m = m, .k = k, .slots = pool_threads(),
			.fn = pick_gemv(), .vec = fp8_vec(), .np = np};
	size_t work = 0;
	float *xp = NULL;
	_Alignas(64) float xbuf[4096];
	size_t job_bytes = 0;
	for (int q = 0; q < np; q++)
		job_bytes += (size_t)n[q] * (size_t)k * dtype_size(w[q]->dtype);
	for (int q = 0; q < np; q++) {
		struct prod *p = &j.prod[q];
		p->y = y[q];
		p->w = w[q];
		p->n = n[q];
		p->rows = gemv_rows(w[q]->dtype, m, k, job_bytes, j.slots);
		p->c0 = j.nchunks;
		j.nchunks += (n[q] + p->rows - 1) / p->rows;
		work += (size_t)n[q] * (size_t)k;
	}
#ifdef HAVE_X86
	if (j.vec == 2 && m == 1 && op_fp8_vbmi()) {
		/* FP8 by table lookups where every product's scale blocks are
		 * whole steps of 64 codes (ops_fp8.c), x in its lanes' order */
		int tab = 1;
		for (int q = 0; q < np; q++)
			tab = tab && w[q]->bc % 64 == 0;
		if (tab) /* four streams but with the one-stream GEMV named */
			j.vec = j.fn == gemv_rows_avx512 ? 4 : 3;
	}
	if (w[0]->dtype == DT_BF16 && j.fn != gemv_rows_portable)
		j.x = permuted_x(x, m, k, is512(j.fn) ? 32 : 16, xbuf,
				 sizeof xbuf / sizeof *xbuf, &xp);
	else if (j.vec >= 3 && w[0]->dtype != DT_F32)
		j.x = permuted_x(x, m, k, 64, xbuf, sizeof xbuf / sizeof *xbuf, &xp);
	else if (is512(j.fn) && ((uintptr_t)x & 63))
		j.x = permuted_x(x, m, k, 1, xbuf, sizeof xbuf / sizeof *xbuf, &xp);
#endif
	/* small products are not worth waking anyone */
	if (work < 65536 || j.slots == 1 || j.nchunks < 2)
		for (int c = 0; c < j.nchunks; c++)
			many_chunk(&j, c, 0);
	else
		pool_run(&j);
	free(xp);
	for (int q = 0; q < np; q++)
		if (b[q])
			for (int i = 0; i < m; i++)
				for (int jj = 0; jj < n[q]; jj++)
					y[q][(size_t)i * n[q] + jj] += b[q][jj];
}

/*
 * np (<= 4) products of one x: y[q] = x . w[q]^T (+ b[q], NULL for none),
 * w[q] n[q] x k.  A decode step's (m <= GEMV_ROWS) run as one job over the
 * pool when the weights share a dtype our GEMV takes (bf16, FP8; f32 for
 * one row of x with AVX2): the q, k and v projections, or gate and up, are
 * then one wake-up of the workers and one wait instead of three or two,
 * and the chunks of the last product no longer leave a thread idle at the
 * end of each.  Otherwise (prefill, mixed dtypes) one op_linear_w each.
 */
void op_linear_many(int np, float *const *y, const struct wmat *const *w,
		    const float *const *b, const int *n, const float *x, int m, int k)
{
	int dt = np >= 1 ? w[0]->dtype : DT_F32;
	int ok = np >= 1 && np <= 4 && m <= GEMV_ROWS && k > 0;
	for (int q = 0; q < np && ok; q++)
		ok = w[q]->dtype == dt && w[q]->p && n[q] > 0;
#ifdef HAVE_X86
	if (dt == DT_F32)
		ok = ok && m == 1 && pick_gemv() != gemv_rows_portable;
#else
	if (dt == DT_F32)
		ok = 0;
#endif
	if (ok) {
		gemv_many(np, y, w, b, n, x, m, k);
		return;
	}
	for (int q = 0; q < np; q++)
		op_linear_w(y[q], x, w[q], b[q], m, n[q], k);
}

void op_embedding_w(float *y, const struct wmat *table, int64_t id, int h)
{
	if (table->dtype == DT_BF16)
		op_bf16_widen(y, (const uint16_t *)table->p + id * h, (size_t)h);
	else if (table->dtype == DT_F8_E4M3 || table->dtype == DT_F8_E5M2)
		op_fp8_widen_rows(y, table, (int)id, 1, h, fp8_vec());
	else
		op_embedding(y, table->p, id, h);
}
