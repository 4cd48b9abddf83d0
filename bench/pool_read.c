/* pool_read - how the decode pool's threads should split a product's
 * chunks, measured as a plain read (bench/README.md, "the pool's shares").
 *
 *   pool_read [ROUNDS [THREADS]]     defaults 15, 2
 *
 * The bytes of one decode step of forward.sh's llama in FP8 (12 layers of
 * a q/k/v job of 3 MiB, o 1 MiB, gate/up 5.5 MiB, down 2.75 MiB: 147 MB),
 * 2 MiB aligned on huge pages, cut into the engine's 256 KiB chunks, each
 * chunk read as the engine's one-row GEMV reads it (its four quarters side
 * by side, a prefetch 2 KiB ahead) and summed; every product waits for
 * all its chunks before the next starts, as a decode step's do.  Each
 * round reads the step twice, in turn:
 *   counter  one shared counter: the threads take every other chunk (the
 *            engine's pool before 2026-12-05);
 *   shares   thread s owns the s-th contiguous share and takes it front
 *            to back from a counter of its own, then what is left of the
 *            others' (engine/kernels/ops_bf16.c's take_chunks).
 * Prints each way's median GB/s over the rounds and the median of the
 * per-round ratios shares / counter (> 1: the shares read faster).  Wall
 * clock: the machine is shared, so the ratio per round is the figure. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <immintrin.h>

#define CHUNK ((size_t)256 << 10)
#define MAXT 16
#define NPROD 48

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static char *W;
static size_t off[NPROD], len[NPROD];
static int nth, shares;
static struct share {
	_Alignas(64) atomic_int next;
	int end;
} sh[NPROD][MAXT];
static atomic_int counter[NPROD], done[NPROD], round_no, finished;
static float sinks[MAXT];

__attribute__((target("avx512f"))) static float chunk_sum(const char *r)
{
	size_t q = CHUNK / 4;
	__m512 a = _mm512_setzero_ps(), b = a, c = a, d = a;
	for (size_t i = 0; i < q; i += 64) {
		_mm_prefetch(r + i + 2048, _MM_HINT_T0);
		_mm_prefetch(r + q + i + 2048, _MM_HINT_T0);
		_mm_prefetch(r + 2 * q + i + 2048, _MM_HINT_T0);
		_mm_prefetch(r + 3 * q + i + 2048, _MM_HINT_T0);
		a = _mm512_add_ps(a, _mm512_load_ps(r + i));
		b = _mm512_add_ps(b, _mm512_load_ps(r + q + i));
		c = _mm512_add_ps(c, _mm512_load_ps(r + 2 * q + i));
		d = _mm512_add_ps(d, _mm512_load_ps(r + 3 * q + i));
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a, b), _mm512_add_ps(c, d)));
}

static float product(int p, int s)
{
	int nch = (int)(len[p] / CHUNK), k, did = 0;
	float acc = 0;
	if (!shares) {
		while ((k = atomic_fetch_add(&counter[p], 1)) < nch) {
			acc += chunk_sum(W + off[p] + (size_t)k * CHUNK);
			did++;
		}
	} else {
		for (int o = 0; o < nth; o++) {
			struct share *q = &sh[p][(s + o) % nth];
			while ((k = atomic_fetch_add(&q->next, 1)) < q->end) {
				acc += chunk_sum(W + off[p] + (size_t)k * CHUNK);
				did++;
			}
		}
	}
	atomic_fetch_add(&done[p], did);
	while (atomic_load(&done[p]) < nch)
		_mm_pause();
	return acc;
}

static float step(int s)
{
	float acc = 0;
	for (int p = 0; p < NPROD; p++)
		acc += product(p, s);
	return acc;
}

static void *worker(void *arg)
{
	int s = (int)(long)arg, seen = 0, r;
	for (;;) {
		while ((r = atomic_load(&round_no)) == seen)
			_mm_pause();
		if (r < 0)
			return NULL;
		seen = r;
		sinks[s] = step(s);
		atomic_fetch_add(&finished, 1);
	}
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 15, rn = 0;
	size_t sz[4] = {(size_t)3 << 20, (size_t)1 << 20, (size_t)5632 << 10, (size_t)2816 << 10};
	size_t total = 0;
	double *gb[2], *ratio;
	pthread_t th[MAXT];
	nth = argc > 2 ? atoi(argv[2]) : 2;
	if (rounds < 1 || nth < 1 || nth > MAXT) {
		fprintf(stderr, "usage: pool_read [ROUNDS >= 1 [THREADS 1..%d]]\n", MAXT);
		return 2;
	}
	if (!__builtin_cpu_supports("avx512f")) {
		fprintf(stderr, "pool_read: needs AVX-512 (the engine's GEMV read pattern)\n");
		return 2;
	}
	for (int p = 0; p < NPROD; p++) {
		off[p] = total;
		len[p] = sz[p % 4];
		total += len[p];
	}
	if (posix_memalign((void **)&W, (size_t)2 << 20, total)) {
		fprintf(stderr, "pool_read: out of memory\n");
		return 1;
	}
	madvise(W, total, MADV_HUGEPAGE);
	for (size_t i = 0; i < total / 4; i++)
		((float *)W)[i] = 1.0f;
	gb[0] = calloc((size_t)rounds, sizeof(double));
	gb[1] = calloc((size_t)rounds, sizeof(double));
	ratio = calloc((size_t)rounds, sizeof(double));
	for (long s = 1; s < nth; s++)
		pthread_create(&th[s], NULL, worker, (void *)s);
	for (int r = 0; r < rounds; r++)
		for (shares = 0; shares < 2; shares++) {
			double t;
			for (int p = 0; p < NPROD; p++) {
				int nch = (int)(len[p] / CHUNK);
				atomic_store(&counter[p], 0);
				atomic_store(&done[p], 0);
				for (int s = 0; s < nth; s++) {
					atomic_store(&sh[p][s].next, s * nch / nth);
					sh[p][s].end = (s + 1) * nch / nth;
				}
			}
			atomic_store(&finished, 0);
			t = now();
			atomic_store(&round_no, ++rn);
			sinks[0] = step(0);
			while (atomic_load(&finished) < nth - 1)
				_mm_pause();
			gb[shares][r] = (double)total / (now() - t) / 1e9;
		}
	atomic_store(&round_no, -1);
	for (long s = 1; s < nth; s++)
		pthread_join(th[s], NULL);
	for (int r = 0; r < rounds; r++)
		ratio[r] = gb[1][r] / gb[0][r];
	qsort(gb[0], (size_t)rounds, sizeof(double), cmp);
	qsort(gb[1], (size_t)rounds, sizeof(double), cmp);
	qsort(ratio, (size_t)rounds, sizeof(double), cmp);
	printf("%zu MB a step, %d products, %d thread(s), %d rounds (median, min-max):\n"
	       "  counter %.1f GB/s (%.1f-%.1f)\n  shares  %.1f GB/s (%.1f-%.1f)\n"
	       "  shares / counter %.3f (%.3f-%.3f)   [sink %g]\n",
	       total >> 20, NPROD, nth, rounds, gb[0][rounds / 2], gb[0][0], gb[0][rounds - 1],
	       gb[1][rounds / 2], gb[1][0], gb[1][rounds - 1], ratio[rounds / 2], ratio[0],
	       ratio[rounds - 1], (double)sinks[0]);
	free(gb[0]), free(gb[1]), free(ratio), free(W);
	return 0;
}
