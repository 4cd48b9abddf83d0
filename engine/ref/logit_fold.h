/*
 * logit_fold.h - the end-to-end statistics of validate (max abs / max
 * relative error, KL(reference || run) per position, top-1 agreement,
 * perplexity) folded over the vocabulary a block at a time, as ref.c's
 * lm_head hands its logits out: an online log-sum-exp per position for
 * both distributions, so neither the reference's [T][vocab] float64 logits
 * nor the run's are ever held whole (a 163,840-token vocabulary is 1.3 MB
 * of float64 per position).
 *
 * KL is folded as two sums of small non-negative terms (logit_fold.c):
 * it does not depend on where the blocks fall.
 */
#ifndef DAY0_LOGIT_FOLD_H
#define DAY0_LOGIT_FOLD_H

#include <stdint.h>

struct d0_err;

struct lfold_pos {
	double m;                   /* the reference's running maximum */
	double z, u, a;             /* sums of e^{r-m}, and times expm1(d),
				     * expm1(d) - d (logit_fold.c) */
	double br, bq;              /* the largest logits so far */
	int64_t ar, aq;             /* and their (first) indices */
	double lr_next, lq_next;    /* logits of the next token of the prompt */
};

struct lfold {
	int T, V;
	const int64_t *tokens; /* the prompt (perplexity), or NULL */
	struct lfold_pos *pos; /* [T] */
	double max_abs, scale; /* max |run - ref|, max |ref| */
	/* the run's logits file (run --dump-logits, F32 [T][V]) */
	int fd;
	uint64_t off;
	const char *path;
	float *buf; /* [T][block] */
	int buf_n;
};

struct lfold_result {
	double max_abs, max_rel;
	double *kl;  /* [T], in position order */
	double kl_mean, kl_max;
	int top1;    /* positions where the argmaxes agree */
	double ppl_ref, ppl_run;
};

/* Open the run's logits (F32 [T][V] tensor `logits`) for folding. */
int lfold_open(struct lfold *f, const char *logits_path, int T, int V,
	       const int64_t *tokens, struct d0_err *err);
/* ref.c's head callback (ref_block_fn): reference rows [v0, v0+n). */
int lfold_block(void *ctx, int v0, int n, const double *ref,
		struct d0_err *err);
/* The statistics; r->kl is malloc'd (free it). */
void lfold_finish(const struct lfold *f, struct lfold_result *r);
void lfold_close(struct lfold *f);

#endif
