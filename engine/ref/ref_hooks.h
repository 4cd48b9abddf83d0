/*
 * ref_hooks.h - how layer-local validation (validate_layer.c) steers ref.c's
 * float64 forward pass without a second copy of its math: which layers to
 * compute, each layer's input taken from the run's own dump, each layer's
 * output handed back, and every token's router inputs for the routing-flip
 * test.  ref_forward() is ref_forward_hooked() with no hooks.
 */
#ifndef DAY0_REF_HOOKS_H
#define DAY0_REF_HOOKS_H

#include "runtime.h"

struct ref_hooks {
	void *ctx;
	int no_embed; /* layer_in supplies every computed layer's input */
	int no_head;  /* no final norm / lm_head: *logits_out is NULL */
	/* non-zero: layer l is not computed here (another rank's) */
	int (*skip)(void *ctx, int l);
	/* fill h [T][hidden] with layer l's input; -1 stops (err set) */
	int (*layer_in)(void *ctx, int l, double *h, struct d0_err *err);
	/* layer l's output h [T][hidden] */
	void (*layer_out)(void *ctx, int l, const double *h);
	/* MoE layer l, token t: router weight [E][H], correction bias (or
	 * NULL), the normed input x [H] and the router logits [E] */
	void (*route)(void *ctx, int l, int t, const double *router,
		      const double *bias, const double *x,
		      const double *logits);
};

int ref_forward_hooked(const char *dir, const int64_t *tokens, int T,
		       double **logits, double **layers,
		       struct model_config *cfg, const struct ref_hooks *hk,
		       struct d0_err *err);

#endif
