/*
 * ref_hooks.h - how validation (step_validate.c, validate_layer.c) steers
 * ref.c's float64 forward pass without a second copy of its math: which
 * layers to compute, each layer's input taken from the run's own dump,
 * each layer's output handed back, every token's router inputs for the
 * routing-flip test, the lm_head's logits a block of vocabulary rows at a
 * time, and the chunk of weights the pass may hold.  ref_forward() is
 * ref_forward_hooked() with no hooks (the whole [T][vocab] logits).
 */
#ifndef DAY0_REF_HOOKS_H
#define DAY0_REF_HOOKS_H

#include "ref_weights.h"
#include "runtime.h"

struct ref_hooks {
	void *ctx;
	size_t mem;   /* weights held at once (0: REF_MEM_DEFAULT) */
	int no_embed; /* layer_in supplies every computed layer's input */
	int no_head;  /* no final norm / lm_head: *logits_out is NULL */
	/* non-zero: layer l is not computed here (another rank's) */
	int (*skip)(void *ctx, int l);
	/* fill h [T][hidden] with layer l's input; -1 stops (err set) */
	int (*layer_in)(void *ctx, int l, double *h, struct d0_err *err);
	/* layer l's output h [T][hidden] */
	void (*layer_out)(void *ctx, int l, const double *h);
	/* MoE layer l, token t: the correction bias (or NULL), the router
	 * logits [E] and, per expert, sum_j (w[e][j] x[j])^2 (the logit's
	 * rounding spread before its square root) */
	void (*route)(void *ctx, int l, int t, const double *bias,
		      const double *logits, const double *spread_sq);
	/* MoE layer l, token t: idx [top_k] the reference's choice from its
	 * router logits [E] (and correction bias or NULL); returning 1 after
	 * putting other experts in idx makes the reference route the token
	 * there (their weights from the reference's own scores): validate
	 * following the run's choice at a near-tie (route_follow.h) */
	int (*follow)(void *ctx, int l, int t, const double *bias,
		      const double *logits, int *idx);
	/* non-NULL: the logits come here, vocabulary rows [v0, v0+n) of every
	 * token as blk [T][n], instead of into *logits_out (NULL) */
	ref_block_fn head;
	/* the image channel: rows [placeholders][hidden] replacing, in order,
	 * the embeddings of the config's image_token_id tokens among the
	 * first splice_upto tokens (the prompt's: a placeholder id generated
	 * after it keeps its token embedding, as transformers' decode steps
	 * get no pixel values; it must be set with embeds), (NULL: none),
	 * and M-RoPE positions [3][T] (NULL: the token index on all axes) */
	const double *embeds;
	int splice_upto;
	const int64_t *rope_pos;
};

int ref_forward_hooked(const char *dir, const int64_t *tokens, int T,
		       double **logits, double **layers,
		       struct model_config *cfg, const struct ref_hooks *hk,
		       struct d0_err *err);

/* The final norm and lm_head on h [T][hidden] (a last layer's output),
 * the logits to fn block by block, at most mem bytes of weights held. */
int ref_head_logits(const char *dir, const struct model_config *c,
		    const double *h, int T, size_t mem, ref_block_fn fn,
		    void *ctx, struct d0_err *err);

#endif
