/*
 * plan_train.h - plan --train: what one fine-tuning step of a layout
 * needs per card (mixed-precision AdamW: bf16 weights and gradients, f32
 * master weights and moments, ZeRO-1 over DP; activations of the 1F1B
 * schedule with and without full recomputation) and what it moves per
 * step (plan_train.c, formulas in docs/plan.md "Fine-tuning").
 */
#ifndef DAY0_PLAN_TRAIN_H
#define DAY0_PLAN_TRAIN_H

#include "model.h"

enum train_recompute { RECOMPUTE_AUTO, RECOMPUTE_NONE, RECOMPUTE_FULL };

struct train_load {
	int64_t seq, micro, global; /* tokens a sequence, sequences a
				     * micro-batch, sequences a step */
	int zero1;                  /* optimizer states sharded over DP */
	enum train_recompute recompute;
};

/* Where the layout sits (from plan's placement) and the link speeds. */
struct train_layout {
	int tp, pp, ep, dp, cards_per_node;
	int tp_in_node, ep_nodes, pp_cross, dp_cross;
	uint64_t weights_bf16; /* busiest rank's bf16 weight bytes */
	uint64_t params;       /* that rank's parameters */
	uint64_t expert_params; /* of which routed experts' */
};

struct train_hw {
	double flops, intra_Bps, inter_Bps;
};

struct train_need {
	uint64_t weights, grads, optim;  /* bytes per card */
	uint64_t act_none, act_full;     /* activations without / with full
					  * recomputation */
	uint64_t act;                    /* the one counted */
	int recompute;                   /* 1: full recomputation counted */
	int64_t micro_batches;           /* per replica per step */
	double tp_bytes, pp_bytes, ep_bytes, dp_bytes; /* per rank per step */
	double inter_bytes;              /* of those, across nodes */
	double comm_s, compute_s, step_s, bubble, tokens_s;
	char why[300];
};

/*
 * Fill need for one layout; 0, or -1 with reason when the global batch
 * cannot be split into micro-batches for this DP.  budget: the usable
 * bytes per card (for RECOMPUTE_AUTO: full recomputation only when the
 * layout does not fit without it); other: what plan counts besides
 * (communication buffers).
 */
int train_need_layout(const struct model_config *c,
		      const struct tensor_spec *t, size_t n,
		      const struct train_load *load,
		      const struct train_layout *l, const struct train_hw *hw,
		      uint64_t budget, uint64_t other, struct train_need *out,
		      char *reason, size_t reason_len);

#endif
