/*
 * kv_attn_bench - attention over the paged KV cache, three ways in the
 * same run (bench/kv_attention.sh prints the ratios):
 *
 *   kv_attn_bench CTX BLOCK_TOKENS ROUNDS [HEADS KV_HEADS HEAD_DIM]
 *
 * decode (one query row) at CTX positions, GQA 32 query / 8 kv heads of
 * 128 (a Llama-3-8B card; the optional arguments give another shape,
 * e.g. 16 16 64 for bench/forward.sh's model): in place through a
 * scattered block table
 * (op_attention_paged), the design before it (each kv head's blocks
 * gathered into one buffer, then the same kernel), and one contiguous
 * block (the ideal), and a plain AVX-512 read of the same keys and values
 * through the same table (decode_read: the rate attention could read at);
 * a 256-row prefill chunk at the end of the context:
 * in place against the sgemm kernel the gather fed before (QK^T, softmax,
 * PV by sgemm per head); MLA decode (DeepSeek-V3 at TP 8: 16 heads): the
 * absorbed attention on the latent cache (one row of 512 + 64 shared by
 * the heads) against per-head keys of 192 and values of 128.  Best of
 * ROUNDS, rounds interleaved, each from cold caches (a 256 MiB write
 * between measurements).  Prints "NAME seconds" lines.
 */
#include "engine.h"

#include <math.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>
#include <time.h>

#include <cblas.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID,
		      &t); /* CPU time: the machine is shared */
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Every measurement starts with the caches holding none of its data. */
static char *flush_buf;
static void flush(void)
{
	if (!flush_buf)
		flush_buf = malloc((size_t)256 << 20);
	memset(flush_buf, rand() & 0xff, (size_t)256 << 20);
}

/* n floats, 2 MiB aligned and advised huge, as the engine's KV cache is
 * (runtime.c's chunks): on 4 KiB pages a block of 16 tokens is a TLB
 * miss of its own, which the engine does not pay */
static float *huge(size_t n)
{
	size_t bytes = (n * sizeof(float) + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1);
	void *x = NULL;
	if (posix_memalign(&x, (size_t)2 << 20, bytes))
		abort();
	madvise(x, bytes, MADV_HUGEPAGE);
	return x;
}

static float *rnd(size_t n)
{
	float *x = huge(n);
	for (size_t i = 0; i < n; i++)
		x[i] = (float)((rand() % 2001) - 1000) / 1000.0f;
	return x;
}

/* The prefill kernel of before: S = Q K^T by sgemm, masked softmax rows,
 * O = P V by sgemm, per head over the pool. */
struct old {
	float *out, *S;
	const float *q, *k, *v;
	int n_q, n_kv, nh, group, d;
	int64_t pos0;
	size_t hs;
};

static void old_head(void *ctx, int h, int slot)
{
	const struct old *a = ctx;
	float *S = a->S + (size_t)slot * a->n_q * a->n_kv;
	const float *k = a->k + (size_t)(h / a->group) * a->hs;
	const float *v = a->v + (size_t)(h / a->group) * a->hs;
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, a->n_q, a->n_kv,
		    a->d, 0.088f, a->q + (size_t)h * a->d, a->nh * a->d, k,
		    a->d, 0.0f, S, a->n_kv);
	for (int i = 0; i < a->n_q; i++) {
		int last = (int)(a->pos0 + i);
		float *row = S + (size_t)i * a->n_kv;
		op_softmax(row, last + 1);
		for (int j = last + 1; j < a->n_kv; j++)
			row[j] = 0;
	}
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, a->n_q, a->d,
		    a->n_kv, 1.0f, S, a->n_kv, v, a->d, 0.0f,
		    a->out + (size_t)h * a->d, a->nh * a->d);
}

/* A plain read of kv heads x n positions of d floats through the table,
 * as decode attention reads them (each kv head's keys, then its values);
 * the sum is returned so the loads are not thrown away. */
#if defined(__x86_64__)
__attribute__((target("avx512f"))) static float
read_kv(const float *kc, const float *vc, const int32_t *tab, int n, int bt,
	int nkv, int d, size_t kbs)
{
	__m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
	for (int h = 0; h < nkv; h++)
		for (int pass = 0; pass < 2; pass++)
			for (int i = 0; i * bt < n; i++) {
				int m = n - i * bt < bt ? n - i * bt : bt;
				const float *r = (pass ? vc : kc) + tab[i] * kbs +
						 (size_t)h * bt * d;
				size_t len = (size_t)m * d, c = 0;
				for (; c + 32 <= len; c += 32) {
					a = _mm512_add_ps(a, _mm512_loadu_ps(r + c));
					b = _mm512_add_ps(b, _mm512_loadu_ps(r + c + 16));
				}
				for (; c < len; c++)
					a = _mm512_add_ps(a, _mm512_set1_ps(r[c]));
			}
	return _mm512_reduce_add_ps(_mm512_add_ps(a, b));
}
#else
static float read_kv(const float *kc, const float *vc, const int32_t *tab,
		     int n, int bt, int nkv, int d, size_t kbs)
{
	float s = 0;
	for (int h = 0; h < nkv; h++)
		for (int i = 0; i * bt < n; i++) {
			int m = n - i * bt < bt ? n - i * bt : bt;
			for (size_t c = 0; c < (size_t)m * d; c++)
				s += kc[tab[i] * kbs + (size_t)h * bt * d + c] +
				     vc[tab[i] * kbs + (size_t)h * bt * d + c];
		}
	return s;
}
#endif

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 4096,
	    bt = argc > 2 ? atoi(argv[2]) : 16;
	int rounds = argc > 3 ? atoi(argv[3]) : 5;
	int nh = argc > 4 ? atoi(argv[4]) : 32,
	    nkv = argc > 5 ? atoi(argv[5]) : 8,
	    d = argc > 6 ? atoi(argv[6]) : 128, nq = 256;
	if (n < nq || bt < 1 || rounds < 1 || nh < 1 || nkv < 1 || nh % nkv ||
	    d < 1) { /* before any allocation: a bad argument leaks nothing */
		fprintf(stderr, "usage: kv_attn_bench CTX>=256 BLOCK_TOKENS>=1 "
				"ROUNDS>=1 [HEADS KV_HEADS(dividing HEADS) "
				"HEAD_DIM]\n");
		return 2;
	}
	int nb = (n + bt - 1) / bt;
	size_t kbs = (size_t)nkv * bt * d;
	float *kc = rnd((size_t)nb * kbs), *vc = rnd((size_t)nb * kbs);
	float *kf = huge((size_t)nkv * n * d), *vf = huge((size_t)nkv * n * d);
	float *q = rnd((size_t)nq * nh * d),
	      *o = malloc((size_t)nq * nh * d * 4);
	int32_t *tab = malloc((size_t)nb * sizeof *tab);
	double best[8];
	volatile float sink = 0;
	/* MLA: 16 heads, latent 512 + rope 64 against keys 192 / values 128 */
	int mh = 16, lat = 512, rope = 64, mdk = 192, mdv = 128;
	float *lc = rnd((size_t)nb * bt * (lat + rope)),
	      *mq = rnd((size_t)mh * (lat + rope));
	float *mk = rnd((size_t)mh * n * mdk), *mv = rnd((size_t)mh * n * mdv);
	float *mo = malloc((size_t)mh * lat * 4);
	struct kv_view paged = {
	    kc, vc, tab, bt, kbs, kbs, (size_t)bt * d, (size_t)bt * d, d, d};
	struct kv_view lview = {lc,
				lc,
				tab,
				bt,
				(size_t)bt * (lat + rope),
				(size_t)bt * (lat + rope),
				(size_t)bt * (lat + rope),
				(size_t)bt * (lat + rope),
				lat + rope,
				lat + rope};

	for (int i = 0; i < nb; i++) /* a scattered table: a permutation */
		tab[i] = i;
	for (int i = nb - 1; i > 0; i--) {
		int j = rand() % (i + 1), t = tab[i];
		tab[i] = tab[j];
		tab[j] = t;
	}
	for (int i = 0; i < 8; i++)
		best[i] = 1e9;
	for (int r = 0; r < rounds; r++) {
		double t;
		/* decode, in place */
		flush();
		t = now();
		op_attention_paged(o, q, &paged, 1, n, n - 1, nh, nkv, d, d,
				   0.088, 0);
		best[0] = fmin(best[0], now() - t);
		/* a plain read of the same bytes through the same table */
		flush();
		t = now();
		sink += read_kv(kc, vc, tab, n, bt, nkv, d, kbs);
		best[7] = fmin(best[7], now() - t);
		/* decode, gathered as before, then the kernel on one block */
		flush();
		t = now();
		for (int i = 0; i < nb; i++) {
			int m = n - i * bt < bt ? n - i * bt : bt;
			for (int h = 0; h < nkv; h++) {
				memcpy(kf +
					   ((size_t)h * n + (size_t)i * bt) * d,
				       kc + tab[i] * kbs + (size_t)h * bt * d,
				       (size_t)m * d * 4);
				memcpy(vf +
					   ((size_t)h * n + (size_t)i * bt) * d,
				       vc + tab[i] * kbs + (size_t)h * bt * d,
				       (size_t)m * d * 4);
			}
		}
		op_attention_kv(o, q, kf, vf, 1, n, n - 1, nh, nkv, d, d, 0.088,
				0, (size_t)n * d, d, (size_t)n * d, d);
		best[1] = fmin(best[1], now() - t);
		/* decode, one contiguous block (no gather) */
		flush();
		t = now();
		op_attention_kv(o, q, kf, vf, 1, n, n - 1, nh, nkv, d, d, 0.088,
				0, (size_t)n * d, d, (size_t)n * d, d);
		best[2] = fmin(best[2], now() - t);
		/* prefill chunk of nq rows at the end, in place */
		flush();
		t = now();
		op_attention_paged(o, q, &paged, nq, n, n - nq, nh, nkv, d, d,
				   0.088, 0);
		best[3] = fmin(best[3], now() - t);
		/* the same by sgemm on the contiguous copy (the kernel before)
		 */
		{
			int slots =
			    op_pool_threads() < nh ? op_pool_threads() : nh;
			struct old a = {
			    o,	      malloc((size_t)slots * nq * n * 4),
			    q,	      kf,
			    vf,	      nq,
			    n,	      nh,
			    nh / nkv, d,
			    n - nq,   (size_t)n * d};
			flush();
			t = now();
			op_parallel_for(nh, old_head, &a);
			best[4] = fmin(best[4], now() - t);
			free(a.S);
		}
		/* MLA decode: absorbed on the latent, in place */
		flush();
		t = now();
		op_attention_paged(mo, mq, &lview, 1, n, n - 1, mh, 1,
				   lat + rope, lat, 0.07, 0);
		best[5] = fmin(best[5], now() - t);
		/* MLA decode of before: per-head keys and values */
		flush();
		t = now();
		op_attention_kv(mo, mq, mk, mv, 1, n, n - 1, mh, mh, mdk, mdv,
				0.07, 0, (size_t)n * mdk, mdk, (size_t)n * mdv,
				mdv);
		best[6] = fmin(best[6], now() - t);
	}
	printf(
	    "decode_inplace %.6f\ndecode_gather %.6f\ndecode_contiguous %.6f\n"
	    "prefill_inplace %.6f\nprefill_sgemm %.6f\nmla_latent "
	    "%.6f\nmla_perhead %.6f\ndecode_read %.6f\n",
	    best[0], best[1], best[2], best[3], best[4], best[5], best[6],
	    best[7]);
	printf("kv_bytes %.0f\n", 2.0 * nkv * n * d * 4);
	printf("kernel %s threads %d\n", op_bf16_kernel(), op_pool_threads());
	free(kc), free(vc), free(kf), free(vf), free(q), free(o), free(tab);
	free(lc), free(mq), free(mk), free(mv), free(mo), free(flush_buf);
	return 0;
}
