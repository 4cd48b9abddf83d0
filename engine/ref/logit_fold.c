/*
 * logit_fold.c - validate's end-to-end statistics folded over vocabulary
 * blocks (logit_fold.h says what and why).  The run's logits are pread a
 * block of columns per position, beside the reference's block.
 */
#include "engine.h"
#include "logit_fold.h"

#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int lfold_open(struct lfold *f, const char *path, int T, int V,
	       const int64_t *tokens, struct d0_err *err)
{
	struct st_file st;
	const struct st_tensor *t;
	memset(f, 0, sizeof *f);
	f->fd = -1;
	if (st_open(path, &st, err) < 0)
		return -1;
	t = st_find(&st, "logits");
	if (!t || t->dtype != DT_F32 || t->ndim != 2 ||
	    t->shape[0] != (uint64_t)T || t->shape[1] != (uint64_t)V) {
		st_free(&st);
		return d0_errf(err, "%s: expected an F32 tensor 'logits' of "
			       "shape [%d, %d]", path, T, V);
	}
	f->off = st.data_off + t->begin;
	st_free(&st);
	if ((f->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return d0_errf(err, "%s: cannot open", path);
	f->path = path;
	f->T = T;
	f->V = V;
	f->tokens = tokens;
	f->pos = calloc((size_t)T, sizeof *f->pos);
	for (int i = 0; i < T; i++) {
		struct lfold_pos *p = &f->pos[i];
		p->m = p->br = p->bq = -INFINITY;
		p->ar = p->aq = -1;
		p->lr_next = p->lq_next = NAN;
	}
	return 0;
}

void lfold_close(struct lfold *f)
{
	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
	free(f->pos);
	free(f->buf);
	f->pos = NULL;
	f->buf = NULL;
}

/*
 * One position's block: ref r[n], run q[n], vocabulary ids from v0.  With
 * d_i = q_i - r_i and p the reference's softmax, sum_i e^{q_i} =
 * sum_i e^{r_i} (1 + U) for U = sum_i p_i expm1(d_i), so
 *   KL(p || q) = -sum_i p_i d_i + log1p(U)
 *              = sum_i p_i (expm1(d_i) - d_i) - (U - log1p(U)),
 * two sums of small non-negative terms: no cancellation between the
 * vocabulary-sized log-sum-exps of the two distributions, so the figure
 * is accurate to ~1e-23 where a run agrees to ~1e-7, and does not move
 * with the block boundaries.  a, u and z are kept relative to the running
 * maximum m of r and rescaled when it grows.
 */
static void fold_pos(struct lfold *f, struct lfold_pos *p, int64_t next,
		     int v0, int n, const double *r, const float *q)
{
	double bm = -INFINITY;
	for (int i = 0; i < n; i++) {
		double d = fabs((double)q[i] - r[i]);
		f->max_abs = fmax(f->max_abs, isnan(d) ? INFINITY : d);
		f->scale = fmax(f->scale, fabs(r[i]));
		if (r[i] > p->br) {
			p->br = r[i];
			p->ar = v0 + i;
		}
		if (q[i] > p->bq) {
			p->bq = q[i];
			p->aq = v0 + i;
		}
		bm = fmax(bm, r[i]);
	}
	if (next >= v0 && next < v0 + n) {
		p->lr_next = r[next - v0];
		p->lq_next = q[next - v0];
	}
	if (bm > p->m) { /* rescale the sums to the new maximum */
		double k = exp(p->m - bm);
		p->z *= k;
		p->a *= k;
		p->u *= k;
		p->m = bm;
	}
	for (int i = 0; i < n; i++) {
		double w = exp(r[i] - p->m), d, e;
		if (!(w > 0) && !isnan(w))
			continue; /* p_i = 0 adds nothing, whatever the run says */
		d = (double)q[i] - r[i];
		e = expm1(d);
		p->z += w;
		p->u += w * e;
		p->a += w * (e - d);
	}
}

int lfold_block(void *ctx, int v0, int n, const double *ref,
		struct d0_err *err)
{
	struct lfold *f = ctx;
	if (n > f->buf_n) {
		free(f->buf);
		f->buf = malloc((size_t)f->T * n * 4 + 4);
		f->buf_n = n;
	}
	for (int t = 0; t < f->T; t++)
		if (pread_full(f->fd, f->buf + (size_t)t * n, (size_t)n * 4,
			       f->off + ((uint64_t)t * f->V + (uint64_t)v0) * 4) < 0)
			return d0_errf(err, "%s: read failed", f->path);
	for (int t = 0; t < f->T; t++)
		fold_pos(f, &f->pos[t],
			 f->tokens && t + 1 < f->T ? f->tokens[t + 1] : -1, v0, n,
			 ref + (size_t)t * n, f->buf + (size_t)t * n);
	return 0;
}

void lfold_finish(const struct lfold *f, struct lfold_result *r)
{
	double nll_r = 0, nll_q = 0, sum = 0;
	int T = f->T;
	memset(r, 0, sizeof *r);
	r->max_abs = f->max_abs;
	r->max_rel = f->scale > 0 ? f->max_abs / f->scale : f->max_abs;
	r->kl = malloc((size_t)(T ? T : 1) * 8);
	for (int t = 0; t < T; t++) {
		const struct lfold_pos *p = &f->pos[t];
		double U = p->u / p->z, lse_r = p->m + log(p->z);
		double k = p->a / p->z - (U - log1p(U));
		r->kl[t] = k;
		sum += k;
		r->kl_max = isnan(k) || isnan(r->kl_max) ? NAN : fmax(r->kl_max, k);
		r->top1 += p->ar == p->aq;
		if (f->tokens && t + 1 < T) {
			nll_r -= p->lr_next - lse_r;
			nll_q -= p->lq_next - (lse_r + log1p(U));
		}
	}
	r->kl_mean = T ? sum / T : 0;
	r->ppl_ref = T > 1 ? exp(nll_r / (T - 1)) : 1;
	r->ppl_run = T > 1 ? exp(nll_q / (T - 1)) : 1;
}
