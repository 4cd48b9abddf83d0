/*
 * test_attention_paged.c - op_attention_paged (engine/kernels/ops.c): keys
 * and values read in place through a scattered block table give the bits
 * of the same positions in one contiguous block, for decode rows and
 * prefill chunks, head dims that are and are not whole vectors of 16,
 * GQA groups, a sliding window, and values inside the keys' rows (MLA's
 * latent); a prompt row gives the bits of a decode step at its position;
 * the bits do not depend on the thread count (how a GQA group's heads are
 * cut into items); every output within 1e-5 of a float64 softmax
 * attention; the portable
 * loops (DAY0_KERNEL=portable) the same properties.
 */
#include "engine.h"
#include "unit.h"

#include <cblas.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float frand(unsigned *s)
{
	*s = *s * 1103515245u + 12345u;
	return (float)((*s >> 8) % 2001) / 1000.0f - 1.0f;
}

/* float64 attention of query row i (position pos0 + i), head h, into o */
static double ref_err(const float *q, const float *k, const float *v,
		      const float *out, int n_q, int n_kv, int64_t pos0, int nh,
		      int nkv, int dqk, int dv, int kld, int vld, double scale,
		      int window)
{
	double worst = 0, *s = malloc((size_t)n_kv * sizeof *s);
	for (int i = 0; i < n_q; i++)
		for (int h = 0; h < nh; h++) {
			int kh = h / (nh / nkv);
			int64_t last =
			    pos0 + i < n_kv - 1 ? pos0 + i : n_kv - 1;
			int64_t first = window > 0 && pos0 + i - window + 1 > 0
					    ? pos0 + i - window + 1
					    : 0;
			double mx = -1e300, sum = 0;
			for (int64_t p = first; p <= last; p++) {
				double a = 0;
				for (int c = 0; c < dqk; c++)
					a += (double)
						 q[((size_t)i * nh + h) * dqk +
						   c] *
					     k[((size_t)kh * n_kv + p) * kld +
					       c];
				s[p] = a * scale;
				mx = fmax(mx, s[p]);
			}
			for (int64_t p = first; p <= last; p++)
				sum += (s[p] = exp(s[p] - mx));
			for (int c = 0; c < dv; c++) {
				double o = 0;
				for (int64_t p = first; p <= last; p++)
					o += s[p] / sum *
					     v[((size_t)kh * n_kv + p) * vld +
					       c];
				worst = fmax(
				    worst,
				    fabs(o -
					 out[((size_t)i * nh + h) * dv + c]));
			}
		}
	free(s);
	return worst;
}

struct shape {
	const char *name;
	int nh, nkv, dqk, dv, bt, window, shared; /* shared: v = k's first dv */
	int n;                                    /* positions (0: 45) */
};

static void one(const struct shape *sh, const char *kernel)
{
	int n = sh->n ? sh->n : 45, nh = sh->nh, nkv = sh->nkv, dqk = sh->dqk, bt = sh->bt;
	int dv = sh->dv, kld = dqk, vld = sh->shared ? dqk : dv;
	int nb = (n + bt - 1) / bt + 3, T = 13;
	unsigned seed = 7;
	size_t kbs = (size_t)nkv * bt * kld, vbs = (size_t)nkv * bt * vld;
	float *k = malloc((size_t)nkv * n * kld * 4),
	      *v = sh->shared ? k : malloc((size_t)nkv * n * vld * 4);
	float *kb = calloc((size_t)nb * kbs, 4),
	      *vb = sh->shared ? kb : calloc((size_t)nb * vbs, 4);
	float *q = malloc((size_t)n * nh * dqk * 4);
	float *o1 = malloc((size_t)n * nh * dv * 4),
	      *o2 = malloc((size_t)n * nh * dv * 4);
	float *o3 = malloc((size_t)nh * dv * 4);
	int32_t tab[512];
	char name[200];
	double scale = 1.0 / sqrt((double)dqk);
	for (size_t i = 0; i < (size_t)nkv * n * kld; i++)
		k[i] = frand(&seed);
	if (!sh->shared)
		for (size_t i = 0; i < (size_t)nkv * n * vld; i++)
			v[i] = frand(&seed);
	for (size_t i = 0; i < (size_t)n * nh * dqk; i++)
		q[i] = frand(&seed);
	for (int i = 0; i < (n + bt - 1) / bt;
	     i++) /* backwards, 3 free at the front */
		tab[i] = nb - 1 - i;
	for (int h = 0; h < nkv; h++)
		for (int p = 0; p < n; p++) {
			size_t b = (size_t)tab[p / bt], r = (size_t)(p % bt);
			memcpy(kb + b * kbs + ((size_t)h * bt + r) * kld,
			       k + ((size_t)h * n + p) * kld, (size_t)kld * 4);
			if (!sh->shared)
				memcpy(vb + b * vbs +
					   ((size_t)h * bt + r) * vld,
				       v + ((size_t)h * n + p) * vld,
				       (size_t)vld * 4);
		}
	{
		struct kv_view kv = {kb,
				     vb,
				     tab,
				     bt,
				     kbs,
				     sh->shared ? kbs : vbs,
				     (size_t)bt * kld,
				     (size_t)bt * vld,
				     kld,
				     vld};
		/* a prefill chunk of T rows at positions n-T.., and a decode
		 * row */
		op_attention_kv(o1, q, k, v, T, n, n - T, nh, nkv, dqk, dv,
				scale, sh->window, (size_t)n * kld, kld,
				(size_t)n * vld, vld);
		op_attention_paged(o2, q, &kv, T, n, n - T, nh, nkv, dqk, dv,
				   scale, sh->window);
		snprintf(name, sizeof name,
			 "%s %s: %d-row chunk in scattered blocks of %d "
			 "bit-equal to one block",
			 kernel, sh->name, T, bt);
		CHECKN(name, !memcmp(o1, o2, (size_t)T * nh * dv * 4));
		{ /* the items (a kv head's query heads, split where there are
		   * fewer kv heads than threads) do not change a bit */
			int t0 = openblas_get_num_threads(), bad = 0;
			for (int t = 1; t <= 5; t += 2) {
				openblas_set_num_threads(t);
				op_attention_paged(o1, q, &kv, T, n, n - T, nh, nkv, dqk, dv,
						   scale, sh->window);
				bad += memcmp(o1, o2, (size_t)T * nh * dv * 4) != 0;
			}
			openblas_set_num_threads(t0);
			snprintf(name, sizeof name,
				 "%s %s: the chunk bit-equal at 1, 3 and 5 threads", kernel,
				 sh->name);
			CHECKN(name, bad == 0);
		}
		op_attention_paged(o3, q + (size_t)(T - 1) * nh * dqk, &kv, 1,
				   n, n - 1, nh, nkv, dqk, dv, scale,
				   sh->window);
		snprintf(name, sizeof name,
			 "%s %s: the chunk's last row bit-equal to a decode "
			 "step there",
			 kernel, sh->name);
		CHECKN(name, !memcmp(o3, o2 + (size_t)(T - 1) * nh * dv,
				     (size_t)nh * dv * 4));
		snprintf(name, sizeof name, "%s %s: within 1e-5 of float64",
			 kernel, sh->name);
		CHECKN(name, ref_err(q, k, v, o2, T, n, n - T, nh, nkv, dqk, dv,
				     kld, vld, scale, sh->window) < 1e-5);
		/* a whole prompt from position 0 */
		op_attention_kv(o1, q, k, v, n, n, 0, nh, nkv, dqk, dv, scale,
				sh->window, (size_t)n * kld, kld,
				(size_t)n * vld, vld);
		op_attention_paged(o2, q, &kv, n, n, 0, nh, nkv, dqk, dv, scale,
				   sh->window);
		snprintf(name, sizeof name,
			 "%s %s: a %d-token prompt bit-equal, within 1e-5 of "
			 "float64",
			 kernel, sh->name, n);
		CHECKN(name, !memcmp(o1, o2, (size_t)n * nh * dv * 4) &&
				 ref_err(q, k, v, o2, n, n, 0, nh, nkv, dqk, dv,
					 kld, vld, scale, sh->window) < 1e-5);
	}
	free(k), free(kb), free(q), free(o1), free(o2), free(o3);
	if (!sh->shared)
		free(v), free(vb);
}

int main(void)
{
	static const struct shape shapes[] = {
	    {"gqa 8/2 d64", 8, 2, 64, 64, 4, 0, 0, 0},
	    {"mha 3/3 d24, dv 16", 3, 3, 24, 16, 5, 0, 0, 0},
	    {"gqa 4/1 d8 window 7", 4, 1, 8, 8, 1, 7, 0, 0},
	    {"mla latent 4 heads, 40 (v: first 32)", 4, 1, 40, 32, 4, 0, 1, 0},
	    {"d 100 blocks of 16", 2, 1, 100, 80, 16, 0, 0, 0},
	    /* past a run of 64 positions; groups of more than 4 heads (the
	     * values of 4 heads a call, then the rest); a head dim of 128 and
	     * one of 64 with values of 72 (a 64-column pass and a tail) */
	    {"gqa 12/2 d128, 150 positions in blocks of 16", 12, 2, 128, 128, 16, 0, 0, 150},
	    {"gqa 7/1 d64, dv 72, 100 positions in blocks of 7", 7, 1, 64, 72, 7, 0, 0, 100},
	    {"mla latent 16 heads, 576 (v: first 512), 90 positions", 16, 1, 576, 512, 32, 0, 1, 90},
	    /* small blocks and more kv heads than threads: an item holds
	     * several kv heads (a thread's share of each block) */
	    {"mha 8/8 d64, 70 positions in blocks of 4", 8, 8, 64, 64, 4, 0, 0, 70},
	    {"gqa 12/6 d32 window 9, 50 positions in blocks of 3", 12, 6, 32, 32, 3, 9, 0, 50},
	};
	for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
		one(&shapes[i], op_bf16_kernel());
	if (op_bf16_set_kernel("portable") == 0)
		for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
			one(&shapes[i], "portable");
	return unit_done();
}
