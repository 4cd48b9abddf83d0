/*
 * test_logit_fold.c - validate's end-to-end statistics folded over
 * vocabulary blocks (engine/ref/logit_fold.c) against the same statistics
 * computed over the whole rows in long double: max abs / relative error
 * and top-1 exactly, KL and perplexity within 1e-12, for blocks of 1, 7,
 * 1000 and the whole vocabulary; a NaN in the run and a logits file of
 * the wrong shape.
 */
#include "engine.h"
#include "logit_fold.h"
#include "unit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { T = 3, V = 5003 };

static int write_logits(const char *path, const float *run, int rows, int cols)
{
	struct st_writer *w = st_writer_new();
	struct d0_err err;
	uint64_t shape[2] = {(uint64_t)rows, (uint64_t)cols};
	int rc = st_writer_add(w, "logits", DT_F32, 2, shape) < 0 ||
		 st_writer_begin(w, path, &err) < 0 ||
		 st_writer_put(w, 0, 0, run, (size_t)rows * cols * 4, &err) < 0 ||
		 st_writer_finish(w, &err) < 0;
	st_writer_free(w);
	return rc ? -1 : 0;
}

/* The folded statistics with blocks of nb vocabulary rows. */
static int fold(const char *path, const double *ref, const int64_t *tokens,
		int nb, struct lfold_result *r)
{
	struct lfold f;
	struct d0_err err;
	double *blk = malloc((size_t)T * nb * 8);
	int rc = lfold_open(&f, path, T, V, tokens, &err);
	for (int v0 = 0; v0 < V && rc == 0; v0 += nb) {
		int n = V - v0 < nb ? V - v0 : nb;
		for (int t = 0; t < T; t++)
			memcpy(blk + (size_t)t * n, ref + (size_t)t * V + v0,
			       (size_t)n * 8);
		rc = lfold_block(&f, v0, n, blk, &err);
	}
	if (rc == 0)
		lfold_finish(&f, r);
	lfold_close(&f);
	free(blk);
	return rc;
}

/* log-sum-exp of a row in long double */
static long double lse(const double *r, const float *q, int n)
{
	long double m = -INFINITY, z = 0;
	for (int i = 0; i < n; i++)
		m = fmaxl(m, r ? r[i] : q[i]);
	for (int i = 0; i < n; i++)
		z += expl((r ? r[i] : q[i]) - m);
	return m + logl(z);
}

int main(void)
{
	char path[] = "/tmp/day0-lfold-XXXXXX";
	int fd = mkstemp(path);
	double *ref = malloc((size_t)T * V * 8);
	float *run = malloc((size_t)T * V * 4);
	int64_t tokens[T] = {5, 4321, 17};
	long double kl[T], nll_r = 0, nll_q = 0;
	double max_abs = 0, scale = 0;
	int top1 = 0;
	struct rng g;
	struct lfold_result r[4];
	int sizes[4] = {1, 7, 1000, V};

	close(fd);
	rng_seed(&g, 7);
	for (size_t i = 0; i < (size_t)T * V; i++) {
		ref[i] = (rng_uniform(&g) * 2 - 1) * 8;
		run[i] = (float)(ref[i] + (rng_uniform(&g) * 2 - 1) * 1e-5);
	}
	CHECK(write_logits(path, run, T, V) == 0);
	/* the whole-row statistics, in long double */
	for (int t = 0; t < T; t++) {
		const double *rt = ref + (size_t)t * V;
		const float *qt = run + (size_t)t * V;
		long double lr = lse(rt, NULL, V), lq = lse(NULL, qt, V), k = 0;
		int ar = 0, aq = 0;
		for (int i = 0; i < V; i++) {
			long double lp = rt[i] - lr, lqi = qt[i] - lq;
			k += expl(lp) * (lp - lqi);
			max_abs = fmax(max_abs, fabs((double)qt[i] - rt[i]));
			scale = fmax(scale, fabs(rt[i]));
			ar = rt[i] > rt[ar] ? i : ar;
			aq = qt[i] > qt[aq] ? i : aq;
		}
		kl[t] = k;
		top1 += ar == aq;
		if (t + 1 < T) {
			nll_r -= rt[tokens[t + 1]] - lr;
			nll_q -= qt[tokens[t + 1]] - lq;
		}
	}
	for (int s = 0; s < 4; s++) {
		char name[160];
		int kl_ok = 1;
		CHECKN("fold runs", fold(path, ref, tokens, sizes[s], &r[s]) == 0);
		for (int t = 0; t < T; t++)
			kl_ok &= fabsl(r[s].kl[t] - kl[t]) <= 1e-12 &&
				 fabsl(r[s].kl[t] - kl[t]) <= 1e-6 * kl[t];
		snprintf(name, sizeof name, "blocks of %d: max abs, max rel, top-1 "
			 "exactly those of the whole rows", sizes[s]);
		CHECKN(name, r[s].max_abs == max_abs &&
			     r[s].max_rel == max_abs / scale && r[s].top1 == top1);
		snprintf(name, sizeof name, "blocks of %d: KL per position within "
			 "1e-12 (and 1e-6 relative) of long double (%.6g vs %.6Lg)",
			 sizes[s], r[s].kl[0], kl[0]);
		CHECKN(name, kl_ok);
		snprintf(name, sizeof name, "blocks of %d: perplexities within "
			 "1e-12 relative", sizes[s]);
		CHECKN(name, fabsl(r[s].ppl_ref - expl(nll_r / (T - 1))) <=
				     1e-12 * r[s].ppl_ref &&
			     fabsl(r[s].ppl_run - expl(nll_q / (T - 1))) <=
				     1e-12 * r[s].ppl_run);
	}
	for (int s = 1; s < 4; s++) {
		int same = 1;
		for (int t = 0; t < T; t++)
			same &= fabs(r[s].kl[t] - r[0].kl[t]) <= 1e-12;
		CHECKN("the block size moves KL by less than 1e-12", same);
	}
	CHECK(r[0].kl[0] > 0 && r[0].kl_max >= r[0].kl[1]);
	for (int s = 0; s < 4; s++)
		free(r[s].kl);

	/* a NaN in the run: an infinite error, a NaN KL (the check fails) */
	run[17] = NAN;
	CHECK(write_logits(path, run, T, V) == 0);
	CHECK(fold(path, ref, tokens, 100, &r[0]) == 0);
	CHECK(isinf(r[0].max_abs) && isnan(r[0].kl[0]) && isnan(r[0].kl_max));
	free(r[0].kl);

	{ /* the wrong shape: refused, naming the file */
		struct lfold f;
		struct d0_err err;
		CHECK(write_logits(path, run, T, V - 1) == 0);
		CHECK(lfold_open(&f, path, T, V, tokens, &err) < 0);
		CHECK(strstr(err.msg, path) && strstr(err.msg, "[3, 5003]"));
		lfold_close(&f);
	}
	unlink(path);
	free(ref);
	free(run);
	return unit_done();
}
