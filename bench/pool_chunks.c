/* pool_chunks - how long a decode pool's chunks should be, as a plain
 * read (#33, bench/README.md "2026-12-05 (night)").
 *
 *   pool_chunks ROUNDS THREADS [CHUNK_BYTES]       (chunk default 256 KiB)
 *
 * The bytes of forward.sh's bf16 decode step (84 products, 308 MB) read by
 * persistent spinning threads (the engine's pool), each chunk's four
 * quarters side by side, prefetch 1 KiB ahead, modes rotated each round:
 *   per-product  each product its own buffer, thread t its t-th share in
 *                CHUNK_BYTES chunks, a spin barrier after each product
 *                (the engine's pattern);
 *   arena        each thread's shares of every product contiguous in a
 *                buffer of its own; -nobar without the barriers; -1pass
 *                a share read in one chunk;
 *   one-pass     each thread its whole arena in one pass (membw's shape).
 * Prints each mode's median GB/s (min-max). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <immintrin.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void *huge_alloc(size_t n){size_t b=(n+(2u<<20)-1)&~((size_t)(2u<<20)-1);void*p;if(posix_memalign(&p,2u<<20,b))abort();madvise(p,b,MADV_HUGEPAGE);memset(p,1,b);return p;}
#define NPROD 84
static const int shape[7][2] = {{1024, 1024}, {1024, 1024}, {1024, 1024}, {1024, 1024}, {2816, 1024}, {2816, 1024}, {1024, 2816}};
static atomic_int bn, bg;
static void sbar(int nth){int g=atomic_load(&bg); if(atomic_fetch_add(&bn,1)==nth-1){atomic_store(&bn,0);atomic_fetch_add(&bg,1);} else while(atomic_load(&bg)==g) __builtin_ia32_pause();}
static volatile float sink;
/* quarters sum over `bytes` at p */
__attribute__((target("avx512f"))) static float q4(const char *p, size_t bytes, int pf)
{
	size_t q = bytes / 4 & ~(size_t)63; __m512 a[4]; for (int s=0;s<4;s++) a[s]=_mm512_setzero_ps();
	for (size_t i = 0; i < q; i += 64)
#pragma GCC unroll 4
		for (int s = 0; s < 4; s++) { _mm_prefetch(p + s*q + i + pf, _MM_HINT_T0); a[s] = _mm512_add_ps(a[s], _mm512_loadu_ps((const float*)(p + s*q + i))); }
	return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0],a[1]),_mm512_add_ps(a[2],a[3])));
}
static char *prodbuf[NPROD]; static size_t pbytes[NPROD];
static char *arena[8]; static size_t aoff[8][NPROD];
static int nth, mode; static size_t chunk = 262144;
static atomic_int go_gen; static atomic_int done_n;
static void run(int id)
{
	float s = 0;
	for (int i = 0; i < NPROD; i++) {
		size_t share = pbytes[i] / nth;
		const char *base = mode == 0 ? prodbuf[i] + id * share : arena[id] + aoff[id][i];
		if (mode == 4) { if (i == 0) { size_t half = aoff[id][NPROD-1] + pbytes[NPROD-1]/nth; s += q4(arena[id], half, 1024); } continue; }
		if (mode == 3 || mode == 5) s += q4(base, share, 1024);
		else { size_t ch = chunk < share ? chunk : share; for (size_t o = 0; o + ch <= share; o += ch) s += q4(base + o, ch, 1024); }
		if (mode != 2 && mode != 5 && nth > 1) sbar(nth);
	}
	sink = s;
}
static void *work(void *a){int id=(int)(intptr_t)a; int seen=0; for(;;){int g; while((g=atomic_load(&go_gen))==seen) __builtin_ia32_pause(); seen=g; if(g<0) return 0; run(id); atomic_fetch_add(&done_n,1);} }
int main(int argc, char **argv)
{
	int rounds = atoi(argv[1]); nth = atoi(argv[2]); if (argc > 3) chunk = atol(argv[3]);
	size_t tot = 0;
	for (int i = 0; i < NPROD; i++) { pbytes[i] = (size_t)shape[i%7][0]*shape[i%7][1]*2; prodbuf[i] = huge_alloc(pbytes[i]); tot += pbytes[i]; }
	for (int t = 0; t < nth; t++) { size_t o = 0; for (int i = 0; i < NPROD; i++) { aoff[t][i] = o; o += pbytes[i] / nth; } arena[t] = huge_alloc(o); }
	pthread_t th[8]; for (int t = 1; t < nth; t++) pthread_create(&th[t], 0, work, (void*)(intptr_t)t);
	const char *names[6] = {"per-product", "arena", "arena-nobar", "arena-1pass", "one-pass", "arena-1pass-nobar"};
	double g[6][64];
	for (int r = 0; r < rounds; r++) for (int m0 = 0; m0 < 6; m0++) {
		mode = (m0 + r) % 6; atomic_store(&done_n, 0);
		double t0 = now(); atomic_fetch_add(&go_gen, 1); run(0); while (atomic_load(&done_n) < nth - 1) __builtin_ia32_pause();
		g[mode][r] = tot / (now() - t0) / 1e9;
	}
	for (int m = 0; m < 6; m++) { double *v = g[m]; for (int i=1;i<rounds;i++) for(int j=i;j>0&&v[j-1]>v[j];j--){double t=v[j];v[j]=v[j-1];v[j-1]=t;}
		printf("%-12s median %.1f GB/s (%.1f-%.1f)\n", names[m], v[rounds/2], v[0], v[rounds-1]); }
	return 0;
}
