/*
 * ops_bf16.c - products with bf16 weights kept as stored.
 *
 * A bf16 checkpoint stays bf16 in memory: half the bytes of f32, so half
 * the bytes a decode step streams.  Products accumulate in f32 (a bf16
 * value widened to f32 is exact: its 16 bits are the f32's top half).
 *
 * - Decode (few rows of x): our own GEMV, each weight row read once for
 *   up to four rows of x; AVX2+FMA when the CPU has it (chosen at run time
 *   with __builtin_cpu_supports), a portable loop otherwise.
 * - Prefill (many rows): panels of W widened to f32 in a scratch buffer,
 *   each multiplied by OpenBLAS sgemm; the widening costs n*k operations
 *   against the product's m*n*k.  (This OpenBLAS exports no sbgemm and
 *   this CPU has no AVX512-BF16; see docs/runtime.md.)
 *
 * The GEMV's rows are split over a small pool of threads, as many as
 * OpenBLAS uses, so decode runs on the cores sgemv would: chunks of rows
 * taken from a counter, so a worker the scheduler has parked does not hold
 * a product up.  Workers spin a little for the next product (a decode
 * step is ~100 short products), then sleep.  DAY0_KERNEL=portable forces the portable loop (tests).
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
 * The same with AVX2+FMA.  The row count m is a compile-time constant in
 * each instance (gemv_rows_avx2 switches on it), and the loops over rows
 * and accumulators are unrolled, so every accumulator stays in a register:
 * indexed by a run-time m, gcc kept them on the stack and every FMA
 * loaded and stored its accumulator (bf16 decode read 5.5 GB/s of weights
 * against 10 GB/s for the f32 path).  One row of x (decode) uses four
 * accumulators, 32 weights a step, so the FMA latency is hidden; more
 * rows use two each (their FMAs are independent already).
 */
__attribute__((target("avx2,fma"), always_inline)) static inline void
gemv_avx2_body(float *y, int ldy, const float *x, const uint16_t *w,
	       const int m, int j0, int j1, int k)
{
	enum { MAXM = 4, MAXACC = 4 };
	const int nacc = m == 1 ? 4 : 2, step = 8 * nacc;
	const int kk = k - k % step;
	for (int j = j0; j < j1; j++) {
		const uint16_t *wr = w + (size_t)j * k;
		__m256 a[MAXM][MAXACC];
		float tail[MAXM] = {0, 0, 0, 0};
#pragma GCC unroll 4
		for (int i = 0; i < m; i++)
#pragma GCC unroll 4
			for (int q = 0; q < nacc; q++)
				a[i][q] = _mm256_setzero_ps();
		if (j + 1 < j1)
			_mm_prefetch((const char *)(wr + k), _MM_HINT_T0);
		for (int c = 0; c < kk; c += step) {
#pragma GCC unroll 4
			for (int q = 0; q < nacc; q++) {
				__m256 wv = ld_bf16(wr + c + 8 * q);
#pragma GCC unroll 4
				for (int i = 0; i < m; i++)
					a[i][q] = _mm256_fmadd_ps(
						_mm256_loadu_ps(x + (size_t)i * k + c + 8 * q),
						wv, a[i][q]);
			}
		}
		for (int c = kk; c < k; c++) {
			float wv = bf16_f32(wr[c]);
#pragma GCC unroll 4
			for (int i = 0; i < m; i++)
				tail[i] += x[(size_t)i * k + c] * wv;
		}
#pragma GCC unroll 4
		for (int i = 0; i < m; i++) {
			__m256 t = a[i][0];
#pragma GCC unroll 4
			for (int q = 1; q < nacc; q++)
				t = _mm256_add_ps(t, a[i][q]);
			y[(size_t)i * ldy + j] = hsum(t) + tail[i];
		}
	}
}

__attribute__((target("avx2,fma")))
static void gemv_rows_avx2(float *y, int ldy, const float *x,
			   const uint16_t *w, int m, int j0, int j1, int k)
{
	switch (m) {
	case 1:
		gemv_avx2_body(y, ldy, x, w, 1, j0, j1, k);
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
#endif

typedef void (*gemv_fn)(float *, int, const float *, const uint16_t *, int,
			int, int, int);

static gemv_fn fn;

static gemv_fn pick_gemv(void)
{
	if (!fn) {
		const char *e = getenv("DAY0_KERNEL");
		fn = gemv_rows_portable;
#ifdef HAVE_X86
		if (!(e && !strcmp(e, "portable")) && __builtin_cpu_supports("avx2") &&
		    __builtin_cpu_supports("fma"))
			fn = gemv_rows_avx2;
#else
		(void)e;
#endif
	}
	return fn;
}

int op_bf16_set_kernel(const char *name)
{
	if (!strcmp(name, "portable")) {
		fn = gemv_rows_portable;
		return 0;
	}
#ifdef HAVE_X86
	if (!strcmp(name, "avx2+fma") && __builtin_cpu_supports("avx2") &&
	    __builtin_cpu_supports("fma")) {
		fn = gemv_rows_avx2;
		return 0;
	}
#endif
	return -1;
}

/* The widening that goes with the GEMV kernel picked. */
void op_bf16_widen(float *out, const uint16_t *in, size_t n)
{
#ifdef HAVE_X86
	if (pick_gemv() == gemv_rows_avx2) {
		widen_avx2(out, in, n);
		return;
	}
#endif
	widen_portable(out, in, n);
}

const char *op_bf16_kernel(void)
{
#ifdef HAVE_X86
	if (pick_gemv() == gemv_rows_avx2)
		return "avx2+fma";
#endif
	return "portable";
}

/* ------------------------------------------------------------ the pool */

/*
 * One product in flight, cut into chunks of output rows that the caller
 * and the workers take in turn (an atomic counter): on a shared machine a
 * worker that is not scheduled leaves its chunks to the others instead of
 * holding the product up.
 */
struct job {
	float *y;
	const float *x;
	const uint16_t *w;
	int m, n, k, rows, nchunks;
	gemv_fn fn;
};

#define POOL_MAX 64
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int nworkers;
	struct job job;
	atomic_uint pub;   /* the published job's number, 0 while writing one */
	atomic_int next;   /* the next chunk to take */
	atomic_int done;   /* chunks finished */
	atomic_int active; /* workers looking at the job */
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static inline void relax(void)
{
#ifdef HAVE_X86
	__builtin_ia32_pause();
#endif
}

static void run_chunk(const struct job *j, int c)
{
	int j0 = c * j->rows, j1 = j0 + j->rows < j->n ? j0 + j->rows : j->n;
	for (int i = 0; i < j->m; i += 4)
		j->fn(j->y + (size_t)i * j->n, j->n, j->x + (size_t)i * j->k, j->w,
		      j->m - i < 4 ? j->m - i : 4, j0, j1, j->k);
}

static void take_chunks(const struct job *j)
{
	int c, did = 0;
	while ((c = atomic_fetch_add(&pool.next, 1)) < j->nchunks) {
		run_chunk(j, c);
		did++;
	}
	if (did)
		atomic_fetch_add_explicit(&pool.done, did, memory_order_release);
}

static void *worker(void *arg)
{
	unsigned seen = 0;
	(void)arg;
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
			take_chunks(&pool.job);
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

static void gemv_parallel(float *y, const float *x, const uint16_t *w, int m,
			  int n, int k)
{
	static unsigned jobs;
	int threads = pool_threads(), spins = 0;
	/* chunks of ~64 KiB of weights */
	int rows = (int)(32768 / (unsigned)(k > 0 ? k : 1)) & ~7;
	struct job j = {y, x, w, m, n, k, 0, 0, pick_gemv()};
	j.rows = rows < 8 ? 8 : rows;
	j.nchunks = (n + j.rows - 1) / j.rows;
	/* small products are not worth waking anyone */
	if ((size_t)n * (size_t)k < 65536 || threads == 1 || j.nchunks < 2) {
		j.rows = n;
		run_chunk(&j, 0);
		return;
	}
	pthread_mutex_lock(&pool.mu);
	while (pool.nworkers < threads - 1 && pool.nworkers < POOL_MAX) {
		pthread_t t;
		if (pthread_create(&t, NULL, worker, NULL))
			break;
		pthread_detach(t);
		pool.nworkers++;
	}
	pthread_mutex_unlock(&pool.mu);
	atomic_store(&pool.pub, 0);
	while (atomic_load(&pool.active) > 0)
		relax();
	pool.job = j;
	atomic_store(&pool.next, 0);
	atomic_store(&pool.done, 0);
	if (++jobs == 0)
		jobs = 1;
	pthread_mutex_lock(&pool.mu);
	atomic_store(&pool.pub, jobs);
	pthread_cond_broadcast(&pool.cv);
	pthread_mutex_unlock(&pool.mu);
	take_chunks(&j);
	while (atomic_load_explicit(&pool.done, memory_order_acquire) < j.nchunks) {
		if (++spins < 4000)
			relax();
		else
			sched_yield(); /* a worker holds a chunk but not a core */
	}
}

/* ------------------------------------------------------------- products */

/* Rows of x below which the GEMV (W read once per 4 rows) beats widening
 * panels of W for sgemm. */
#define GEMV_ROWS 8

void op_linear_bf16(float *y, const float *x, const uint16_t *w,
		    const float *b, int m, int n, int k)
{
	if (m <= GEMV_ROWS) {
		gemv_parallel(y, x, w, m, n, k);
	} else {
		/* panels of nb rows of W (~1 MiB of f32: widened into the
		 * cache, read back by sgemm from it; 4 MiB panels, tried to
		 * give OpenBLAS's second thread larger calls, made 2-thread
		 * prefill 24% slower) */
		int nb = (int)((1u << 18) / (unsigned)(k > 0 ? k : 1));
		float *pan;
		nb = nb < 16 ? 16 : nb & ~15;
		if (nb > n)
			nb = n;
		pan = malloc((size_t)nb * (size_t)k * sizeof *pan + 64);
		if (!pan)
			abort();
		for (int j0 = 0; j0 < n; j0 += nb) {
			int len = n - j0 < nb ? n - j0 : nb;
			op_bf16_widen(pan, w + (size_t)j0 * k, (size_t)len * k);
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, len, k,
				    1.0f, x, k, pan, k, 0.0f, y + j0, n);
		}
		free(pan);
	}
	if (b)
		for (int i = 0; i < m; i++)
			for (int j = 0; j < n; j++)
				y[(size_t)i * n + j] += b[j];
}

void op_linear_w(float *y, const float *x, const struct wmat *w,
		 const float *b, int m, int n, int k)
{
	if (w->dtype == DT_BF16)
		op_linear_bf16(y, x, w->p, b, m, n, k);
	else
		op_linear(y, x, w->p, b, m, n, k);
}

void op_embedding_w(float *y, const struct wmat *table, int64_t id, int h)
{
	if (table->dtype == DT_BF16)
		op_bf16_widen(y, (const uint16_t *)table->p + id * h, (size_t)h);
	else
		op_embedding(y, table->p, id, h);
}
