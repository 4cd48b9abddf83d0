/* bf16_gemv - the bf16 decode GEMV's kernels against a plain read of the
 * same bytes, in one process, in the engine's read pattern (#33,
 * bench/README.md "2026-12-05 (night)").
 *
 *   [CH=BYTES] [NOBAR=1] [SPIN=1] bf16_gemv [ROUNDS [THREADS]]
 *
 * W: a decode step's products of forward.sh's llama in bf16 (308 MB); each
 * product's rows cut into CH-byte chunks (default 256 KiB, the engine's),
 * thread t reading the t-th contiguous share of them, each chunk as four
 * quarter streams side by side; a barrier after every product (pthread's,
 * SPIN=1 a spinning one as the engine's pool, NOBAR=1 none).  Kernels:
 * sum4 a plain sum, q4 the engine's (slli/and to f32, two FMAs a line),
 * dp4s VDPBF16PS against x as bf16 hi + lo, dp4sx the lo apart, dp4 x
 * rounded once; -pf2k a prefetch 2 KiB ahead instead of 1.  Prints sum4's
 * GB/s and each kernel's median of (sum4's time / its time).  Outputs of
 * rows past a chunk's four whole quarters are not computed: a read
 * benchmark, not a check (the engine's kernels are tested in tests/). */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <immintrin.h>
#include <stdatomic.h>
static atomic_int sbar_n, sbar_gen; static int spinbar;
static void sbar(int nth){int g=atomic_load(&sbar_gen); if(atomic_fetch_add(&sbar_n,1)==nth-1){atomic_store(&sbar_n,0);atomic_fetch_add(&sbar_gen,1);} else while(atomic_load(&sbar_gen)==g) __builtin_ia32_pause();}


#define T512 __attribute__((target("avx512f,avx512bw,avx512bf16")))
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
struct prod { uint16_t *w; int n, k; float *y; };
#define NPROD (12 * 7)
static struct prod prods[NPROD];
static float *xp;        /* permuted f32 x (even 16 then odd 16 per 32) */
static uint16_t *xh, *xl; /* natural order bf16 hi, lo */
static void *huge_alloc(size_t n){size_t b=(n+(2u<<20)-1)&~((size_t)(2u<<20)-1);void*p;if(posix_memalign(&p,2u<<20,b))abort();madvise(p,b,MADV_HUGEPAGE);return p;}

T512 static void sum4(float *y, const struct prod *p, int j0, int j1, int pf)
{
	const int k = p->k, q = (j1 - j0) / 4;
	for (int j = j0; j < j0 + q; j++) {
		__m512 a[4];
		const uint16_t *r[4];
		for (int s = 0; s < 4; s++) a[s] = _mm512_setzero_ps(), r[s] = p->w + (size_t)(j + s * q) * k;
		for (int c = 0; c < k; c += 32)
#pragma GCC unroll 4
			for (int s = 0; s < 4; s++) {
				_mm_prefetch((const char *)(r[s] + c) + pf, _MM_HINT_T0);
				a[s] = _mm512_add_ps(a[s], _mm512_castsi512_ps(_mm512_loadu_si512(r[s] + c)));
			}
		for (int s = 0; s < 4; s++) y[j + s * q] = _mm512_reduce_add_ps(a[s]);
	}
}
T512 static void q4(float *y, const struct prod *p, int j0, int j1, int pf)
{
	const int k = p->k, q = (j1 - j0) / 4;
	const __m512i m = _mm512_set1_epi32((int)0xffff0000u);
	for (int j = j0; j < j0 + q; j++) {
		__m512 ae[4], ao[4];
		const uint16_t *r[4];
		for (int s = 0; s < 4; s++) ae[s] = ao[s] = _mm512_setzero_ps(), r[s] = p->w + (size_t)(j + s * q) * k;
		for (int c = 0; c < k; c += 32) {
			__m512 xe = _mm512_loadu_ps(xp + c), xo = _mm512_loadu_ps(xp + c + 16);
#pragma GCC unroll 4
			for (int s = 0; s < 4; s++) {
				__m512i v = _mm512_loadu_si512(r[s] + c);
				_mm_prefetch((const char *)(r[s] + c) + pf, _MM_HINT_T0);
				ae[s] = _mm512_fmadd_ps(xe, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), ae[s]);
				ao[s] = _mm512_fmadd_ps(xo, _mm512_castsi512_ps(_mm512_and_si512(v, m)), ao[s]);
			}
		}
		for (int s = 0; s < 4; s++) y[j + s * q] = _mm512_reduce_add_ps(_mm512_add_ps(ae[s], ao[s]));
	}
}
/* SPLIT 1: hi+lo into the same accumulator, 2: lo apart, 0: hi only */
T512 __attribute__((always_inline)) static inline void dp_body(float *y, const struct prod *p, int j0, int j1, int pf, const int SPLIT)
{
	const int k = p->k, q = (j1 - j0) / 4;
	for (int j = j0; j < j0 + q; j++) {
		__m512 a[4], b[4];
		const uint16_t *r[4];
		for (int s = 0; s < 4; s++) a[s] = b[s] = _mm512_setzero_ps(), r[s] = p->w + (size_t)(j + s * q) * k;
		for (int c = 0; c < k; c += 32) {
			__m512bh h = (__m512bh)_mm512_loadu_si512(xh + c), l = (__m512bh)_mm512_loadu_si512(xl + c);
#pragma GCC unroll 4
			for (int s = 0; s < 4; s++) {
				__m512bh v = (__m512bh)_mm512_loadu_si512(r[s] + c);
				_mm_prefetch((const char *)(r[s] + c) + pf, _MM_HINT_T0);
				a[s] = _mm512_dpbf16_ps(a[s], v, h);
				if (SPLIT == 1) a[s] = _mm512_dpbf16_ps(a[s], v, l);
				if (SPLIT == 2) b[s] = _mm512_dpbf16_ps(b[s], v, l);
			}
		}
		for (int s = 0; s < 4; s++) y[j + s * q] = _mm512_reduce_add_ps(SPLIT == 2 ? _mm512_add_ps(a[s], b[s]) : a[s]);
	}
}
T512 static void dp4s(float *y, const struct prod *p, int j0, int j1, int pf) { dp_body(y, p, j0, j1, pf, 1); }
T512 static void dp4sx(float *y, const struct prod *p, int j0, int j1, int pf) { dp_body(y, p, j0, j1, pf, 2); }
T512 static void dp4(float *y, const struct prod *p, int j0, int j1, int pf) { dp_body(y, p, j0, j1, pf, 0); }

struct kern { const char *name; void (*fn)(float *, const struct prod *, int, int, int); int pf; };
static const struct kern ks[] = {{"sum4", sum4, 1024}, {"q4", q4, 1024}, {"q4-pf2k", q4, 2048},
	{"dp4s", dp4s, 1024}, {"dp4s-pf2k", dp4s, 2048}, {"dp4sx", dp4sx, 1024}, {"dp4", dp4, 1024}};
enum { NK = sizeof ks / sizeof *ks };
struct worker { int id, nth; const struct kern *kern; pthread_barrier_t *go; int quit; };
static int chunkb = 262144, bar = 1;
static void step_part(const struct kern *kr, int id, int nth)
{
	for (int i = 0; i < NPROD; i++) {
		const struct prod *p = &prods[i];
		int rows = chunkb / 2 / p->k, nch = p->n / rows;
		/* the engine's shares: thread id's contiguous share */
		for (int c = id * nch / nth; c < (id + 1) * nch / nth; c++)
			kr->fn(p->y, p, c * rows, (c + 1) * rows, kr->pf);
		if (nth > 1 && bar) { extern pthread_barrier_t pb; if (spinbar) sbar(nth); else pthread_barrier_wait(&pb); }
	}
}
pthread_barrier_t pb;
static void *work(void *arg)
{
	struct worker *w = arg;
	for (;;) {
		pthread_barrier_wait(w->go);
		if (w->quit) return NULL;
		step_part(w->kern, w->id, w->nth);
		pthread_barrier_wait(w->go);
	}
}
static uint16_t bf16_rne(float f){uint32_t u;memcpy(&u,&f,4);return (uint16_t)((u+0x7fff+((u>>16)&1))>>16);}
static float bf(uint16_t h){uint32_t u=(uint32_t)h<<16;float f;memcpy(&f,&u,4);return f;}
int main(int argc, char **argv)
{
	if (getenv("CH"))
		chunkb = atoi(getenv("CH"));
	bar = !getenv("NOBAR");
	spinbar = getenv("SPIN") != NULL;
	int rounds = argc > 1 ? atoi(argv[1]) : 9, nth = argc > 2 ? atoi(argv[2]) : 1;
	static const int shape[7][2] = {{1024, 1024}, {1024, 1024}, {1024, 1024}, {1024, 1024}, {2816, 1024}, {2816, 1024}, {1024, 2816}};
	size_t total = 0;
	uint64_t r = 88172645463325252ull;
	float *x = malloc(4096 * 4);
	xp = aligned_alloc(64, 4096 * 4); xh = aligned_alloc(64, 8192); xl = aligned_alloc(64, 8192);
	for (int c = 0; c < 4096; c++) { r ^= r << 13, r ^= r >> 7, r ^= r << 17; x[c] = (float)((r >> 11) * 0x1p-53 * 2 - 1); }
	for (int c = 0; c < 4096; c += 32) for (int t = 0; t < 16; t++) xp[c + t] = x[c + 2 * t], xp[c + 16 + t] = x[c + 2 * t + 1];
	for (int c = 0; c < 4096; c++) { xh[c] = bf16_rne(x[c]); xl[c] = bf16_rne(x[c] - bf(xh[c])); }
	for (int i = 0; i < NPROD; i++) {
		int n = shape[i % 7][0], k = shape[i % 7][1];
		uint16_t *w = huge_alloc((size_t)n * k * 2);
		for (size_t t = 0; t < (size_t)n * k; t++) { r ^= r << 13, r ^= r >> 7, r ^= r << 17; w[t] = bf16_rne((float)(((r >> 11) * 0x1p-53 * 2 - 1) * 0.04)); }
		prods[i] = (struct prod){w, n, k, aligned_alloc(64, (size_t)n * 4)};
		total += (size_t)n * k * 2;
	}
	pthread_barrier_t go; pthread_t th[8]; struct worker wk[8];
	pthread_barrier_init(&go, NULL, (unsigned)nth); pthread_barrier_init(&pb, NULL, (unsigned)nth);
	for (int t = 1; t < nth; t++) { wk[t] = (struct worker){t, nth, NULL, &go, 0}; pthread_create(&th[t], NULL, work, &wk[t]); }
	double ratio[NK][64], tm[NK], gbs[64];
	if (rounds > 64) rounds = 64;
	for (int rd = 0; rd < rounds; rd++) {
		for (int q = 0; q < NK; q++) {
			int kq = (q + rd) % NK;
			for (int t = 1; t < nth; t++) wk[t].kern = &ks[kq];
			double t0 = now();
			if (nth > 1) pthread_barrier_wait(&go);
			step_part(&ks[kq], 0, nth);
			if (nth > 1) pthread_barrier_wait(&go);
			tm[kq] = now() - t0;
		}
		for (int q = 0; q < NK; q++) ratio[q][rd] = tm[0] / tm[q];
		gbs[rd] = total / tm[0] / 1e9;
	}
	printf("%zu MB bf16, %d thread(s); median of %d rounds (min-max) of sum4's time / the kernel's:\n", total / 1000000, nth, rounds);
	for (int q = 0; q < NK; q++) {
		double *v = q ? ratio[q] : gbs;
		for (int i = 1; i < rounds; i++) for (int j = i; j > 0 && v[j - 1] > v[j]; j--) { double t = v[j]; v[j] = v[j - 1]; v[j - 1] = t; }
		printf("  %-10s %.3f (%.3f-%.3f)%s\n", ks[q].name, rounds % 2 ? v[rounds / 2] : (v[rounds / 2 - 1] + v[rounds / 2]) / 2, v[0], v[rounds - 1], q ? "" : " GB/s");
	}
	return 0;
}
