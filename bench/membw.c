/* membw - read bandwidth (GB/s): the bound a decode step that streams
 * every weight once per token cannot beat.
 *
 *   membw [--small-pages] [--copy] [THREADS [MIB [REPS]]]    defaults 1, 1024, 7
 *
 * THREADS threads (as many as the decode uses) each sum their share of one
 * array of MIB MiB (>= 1 GiB: far past every cache) with AVX2 (8 floats a
 * load, four accumulators) where the CPU has it, a 4-way unrolled loop
 * otherwise; best of REPS passes, each byte read once per pass.  With AVX2
 * the passes alternate between read patterns and the best of all is the
 * bound: one stream front to back, the four quarters of each thread's
 * share side by side with a software prefetch 1 KiB ahead (the engine's
 * AVX2 decode GEMV reads that way, engine/ops_bf16.c, and on some machines
 * it reads faster than one stream), and where the CPU has AVX-512 one
 * stream of 64-byte loads with a prefetch 2 KiB ahead (the engine's
 * AVX-512 GEMV before 2026-12-03) and the four quarters with 64-byte
 * loads (its AVX-512 GEMV since): the bound must not be below what the
 * engine reaches.  (A copy
 * moves every byte twice - read and write - so memcpy's rate is not the
 * bound.)  --copy instead reports memcpy over the same array (bytes copied).
 * The array is 2 MiB aligned and advised MADV_HUGEPAGE, as the engine's
 * weights and KV cache are since 2026-12-03 (engine/runtime/runtime.c):
 * on 4 KiB pages every page is a TLB miss of its own, which the bound
 * would pay and the engine no longer does (--small-pages: 4 KiB pages). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

struct part {
	const float *p;
	size_t n;
	double sum;
	pthread_barrier_t *go;
};

static float sum_plain(const float *p, size_t n)
{
	float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
	size_t i = 0;
	for (; i + 4 <= n; i += 4) {
		a0 += p[i];
		a1 += p[i + 1];
		a2 += p[i + 2];
		a3 += p[i + 3];
	}
	for (; i < n; i++)
		a0 += p[i];
	return a0 + a1 + a2 + a3;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) static float sum_avx2(const float *p, size_t n)
{
	__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
	float t[8], s = 0;
	size_t i = 0;
	for (; i + 32 <= n; i += 32) {
		a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
		a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
		a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
		a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
	}
	_mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
	for (int k = 0; k < 8; k++)
		s += t[k];
	return s + sum_plain(p + i, n - i);
}
#endif

#if defined(__x86_64__)
__attribute__((target("avx2"))) static float sum_quarters(const float *p, size_t n)
{
	size_t q = (n / 4) & ~(size_t)15, i = 0;
	const float *r[4] = {p, p + q, p + 2 * q, p + 3 * q};
	__m256 a[4], b[4];
	float t[8], s = 0;
	for (int k = 0; k < 4; k++)
		a[k] = b[k] = _mm256_setzero_ps();
	for (; i < q; i += 16)
		for (int k = 0; k < 4; k++) {
			_mm_prefetch((const char *)(r[k] + i) + 1024, _MM_HINT_T0);
			a[k] = _mm256_add_ps(a[k], _mm256_loadu_ps(r[k] + i));
			b[k] = _mm256_add_ps(b[k], _mm256_loadu_ps(r[k] + i + 8));
		}
	for (int k = 1; k < 4; k++) {
		a[0] = _mm256_add_ps(a[0], a[k]);
		b[0] = _mm256_add_ps(b[0], b[k]);
	}
	_mm256_storeu_ps(t, _mm256_add_ps(a[0], b[0]));
	for (int k = 0; k < 8; k++)
		s += t[k];
	return s + sum_plain(p + 4 * q, n - 4 * q);
}
#endif

#if defined(__x86_64__)
/* AVX-512 where the CPU has it, one stream with a prefetch a cache line
 * PF512 bytes ahead: the engine's AVX-512 decode GEMV reads that way
 * (engine/ops_bf16.c), and on the Zen 5 measured it read faster than the
 * plain AVX2 sum on some passes. */
#define PF512 2048
__attribute__((target("avx512f"))) static float sum_avx512(const float *p, size_t n)
{
	__m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
	size_t i = 0;
	for (; i + 64 <= n; i += 64) {
		const char *f = (const char *)(p + i) + PF512;
		_mm_prefetch(f, _MM_HINT_T0);
		_mm_prefetch(f + 64, _MM_HINT_T0);
		_mm_prefetch(f + 128, _MM_HINT_T0);
		_mm_prefetch(f + 192, _MM_HINT_T0);
		a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
		a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
		a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
		a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3))) +
	       sum_plain(p + i, n - i);
}
#endif

#if defined(__x86_64__)
/* AVX-512 over the four quarters side by side, a prefetch 1 KiB ahead in
 * each: the engine's AVX-512 decode GEMV reads that way since it read
 * faster than one stream on the Sapphire Rapids VM (engine/ops_bf16.c). */
__attribute__((target("avx512f"))) static float sum_quarters512(const float *p, size_t n)
{
	size_t q = (n / 4) & ~(size_t)15, i = 0;
	const float *r[4] = {p, p + q, p + 2 * q, p + 3 * q};
	__m512 a[4];
	for (int k = 0; k < 4; k++)
		a[k] = _mm512_setzero_ps();
	for (; i < q; i += 16)
		for (int k = 0; k < 4; k++) {
			_mm_prefetch((const char *)(r[k] + i) + 1024, _MM_HINT_T0);
			a[k] = _mm512_add_ps(a[k], _mm512_loadu_ps(r[k] + i));
		}
	return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]),
						  _mm512_add_ps(a[2], a[3]))) +
	       sum_plain(p + 4 * q, n - 4 * q);
}
#endif

static float (*sum_fn)(const float *, size_t) = sum_plain;

static void *reader(void *arg)
{
	struct part *q = arg;
	pthread_barrier_wait(q->go);
	q->sum += sum_fn(q->p, q->n);
	pthread_barrier_wait(q->go);
	return NULL;
}

int main(int argc, char **argv)
{
	int small = argc > 1 && !strcmp(argv[1], "--small-pages");
	int copy = argc > 1 + small && !strcmp(argv[1 + small], "--copy");
	int a0 = 1 + small + copy;
	int th = argc > a0 ? atoi(argv[a0]) : 1;
	size_t mib = argc > a0 + 1 ? (size_t)atol(argv[a0 + 1]) : 1024;
	int reps = argc > a0 + 2 ? atoi(argv[a0 + 2]) : 7;
	size_t n = mib << 20, nf = n / sizeof(float);
	float *a = aligned_alloc(small ? 64 : (size_t)2 << 20, n);
	double best = 0, check = 0;
	if (th < 1 || th > 256 || !mib || reps < 1 || !a) {
		fprintf(stderr, "usage: membw [--small-pages] [--copy] [THREADS [MIB [REPS]]]\n");
		return 2;
	}
#if defined(__x86_64__)
	if (__builtin_cpu_supports("avx2"))
		sum_fn = sum_avx2;
#endif
	if (a && !small)
		madvise(a, n, MADV_HUGEPAGE);
	for (size_t i = 0; i < nf; i++) /* touch every page; values that sum exactly */
		a[i] = (float)(i & 1);
	if (copy) {
		float *b = aligned_alloc(small ? 64 : (size_t)2 << 20, n);
		if (!b)
			return 2;
		if (!small)
			madvise(b, n, MADV_HUGEPAGE);
		memset(b, 0, n);
		for (int r = 0; r < reps; r++) {
			double t = now(), g;
			memcpy(r % 2 ? a : b, r % 2 ? b : a, n);
			g = (double)n / (now() - t) / 1e9;
			if (g > best)
				best = g;
		}
		printf("%.2f\n", best);
		check = a[7] + b[9];
		free(b);
		free(a);
		return check < 0;
	}
	int npat = 1; /* read patterns the passes alternate between */
#if defined(__x86_64__)
	float (*pat[4])(const float *, size_t) = {sum_avx2, sum_quarters, sum_avx512,
						  sum_quarters512};
	if (sum_fn != sum_plain)
		npat = __builtin_cpu_supports("avx512f") ? 4 : 2;
#endif
	for (int r = 0; r < reps * npat; r++) {
		pthread_t t[256];
		struct part q[256];
		pthread_barrier_t go;
		size_t per = (nf / (size_t)th) & ~(size_t)31;
		double t0, g;
		pthread_barrier_init(&go, NULL, (unsigned)th + 1);
#if defined(__x86_64__)
		if (sum_fn != sum_plain)
			sum_fn = pat[r % npat];
#endif
		for (int k = 0; k < th; k++) {
			q[k] = (struct part){a + (size_t)k * per,
					     k == th - 1 ? nf - (size_t)k * per : per, 0, &go};
			pthread_create(&t[k], NULL, reader, &q[k]);
		}
		pthread_barrier_wait(&go); /* all started: time the reads alone */
		t0 = now();
		pthread_barrier_wait(&go);
		g = (double)n / (now() - t0) / 1e9;
		for (int k = 0; k < th; k++) {
			pthread_join(t[k], NULL);
			check += q[k].sum;
		}
		pthread_barrier_destroy(&go);
		if (g > best)
			best = g;
	}
	printf("%.2f\n", best);
	free(a);
	return check < 0; /* the sums are used: the reads cannot be elided */
}
