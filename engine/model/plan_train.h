/*
 * plan_train.h - plan --train: what one fine-tuning step of a layout
 * needs per card (mixed-precision AdamW: 16-bit working weights and
 * gradients, f32 master weights and moments, ZeRO-1 over DP; the
 * activations of the 1F1B schedule with and without full recomputation;
 * backward's working set) and what it moves per step (plan_train.c,
 * formulas in docs/plan.md "Fine-tuning" and docs/training.md "Memory
 * model").  How the trainer holds a step is a named set of parameters
 * (struct train_mem_model): Megatron-LM's on a real cluster, or
 * day0-engine train's, which training.memory holds against the
 * accountant's measured peak.
 */
#ifndef DAY0_PLAN_TRAIN_H
#define DAY0_PLAN_TRAIN_H

#include "model.h"
#include "runtime.h"

enum train_recompute { RECOMPUTE_AUTO, RECOMPUTE_NONE, RECOMPUTE_FULL };

struct train_load {
	int64_t seq, micro, global; /* tokens a sequence, sequences a
				     * micro-batch, sequences a step */
	int zero1;                  /* optimizer states sharded over DP */
	enum train_recompute recompute;
};

/*
 * How the trainer holds a step: each field a term plan --train shows on
 * its own line.  Widths in bytes.
 */
struct train_mem_model {
	const char *trainer;  /* "megatron" or "day0" */
	int weight_bytes;     /* a working weight, and its gradient: 2
			       * (bf16/f16) or 4 (f32) */
	int act_bytes;        /* an activation kept for backward */
	int grad_bytes;       /* an activation gradient of backward's
			       * working set (one layer's at a time) */
	int seq_parallel;     /* at TP > 1 the residual stream's activations
			       * (norm inputs and outputs, MLA's latents,
			       * routing) divided by TP; 0: whole on every TP
			       * rank */
	int flash;            /* attention scores not kept (FlashAttention:
			       * f32 softmax statistics only); 0: the
			       * [heads, S, S] probabilities kept */
	int keep_products;    /* SwiGLU's product and each routed slot's
			       * dispatched input kept; 0: rebuilt in
			       * backward from gate, up and the norm output */
	int f32_views;        /* 16-bit weights: every product reads an f32
			       * copy of its weight and sums its gradient in
			       * f32 (two buffers of the largest tensor) */
	int bwd_buffers;      /* backward's working set: 0, one layer's
			       * activation gradients at grad_bytes (the
			       * widest layer's, attention scores included
			       * as the layer keeps them); 1, day0's
			       * train.c: three [T, H] gradients of the
			       * residual stream and six buffers, each as
			       * wide as its widest use over the stage's
			       * layer kinds (alloc_acts), f32; the score
			       * gradient a row at a time, never [heads, S,
			       * S] */
	int ep_data;          /* 1: EP carved out of DP (Megatron): each EP
			       * rank runs its own micro-batches, ZeRO-1
			       * shards the dense state over DP x EP; 0: the
			       * EP ranks share their replica's sequences as
			       * TP ranks do, ZeRO-1 over DP only (day0) */
};

/* Megatron-LM's mixed precision on a cluster (bf16 weights, gradients and
 * activations, sequence parallelism, FlashAttention). */
void train_mem_megatron(struct train_mem_model *m);
/* day0-engine train --dtype (weight_bytes 4 for f32, 2 for bf16/f16):
 * f32 activations and gradients, no sequence parallelism, the attention
 * probabilities kept, products rebuilt, f32 views of 16-bit weights,
 * backward's working set as train.c holds it (bwd_buffers). */
void train_mem_day0(struct train_mem_model *m, int weight_bytes);
/* "megatron" or "day0" (weights from weight_bytes); -1 for others. */
int train_mem_by_name(const char *name, int weight_bytes,
		      struct train_mem_model *m);

/* Where the layout sits (from plan's placement) and the link speeds. */
struct train_layout {
	int tp, pp, ep, dp, cards_per_node;
	int tp_in_node, ep_nodes, pp_cross, dp_cross;
	uint64_t params;        /* the busiest rank's trained parameters */
	uint64_t expert_params; /* of which routed experts' */
	uint64_t buffers;       /* f32 buffers that are not trained
				 * (DeepSeek's router correction biases) */
	uint64_t max_tensor;    /* its largest tensor slice, elements */
};

/*
 * The trained parameters of each (stage, EP) cell of d, by layout.c's
 * splits (routed experts on their owner only; multi-token-prediction
 * layers left out: a fine-tune drops them, as day0-engine train does);
 * fills l's params, expert_params, buffers and max_tensor with the
 * busiest cell's (most bytes at weight_bytes a parameter).
 */
void train_layout_params(const struct model_config *c,
			 const struct tensor_spec *t, size_t n,
			 const struct layout_dims *d, int weight_bytes,
			 struct train_layout *l);

struct train_hw {
	double flops, intra_Bps, inter_Bps;
};

/* The counted activations of the counted stage, by what keeps them. */
struct train_act_parts {
	uint64_t residual;  /* norm inputs/outputs and their statistics */
	uint64_t attention; /* Q, K, V, the attention output (qk-norm's
			     * inputs) */
	uint64_t scores;    /* probabilities, or FlashAttention's
			     * statistics */
	uint64_t mlp;       /* dense SwiGLU and shared experts */
	uint64_t moe;       /* router probabilities and choices, routed
			     * slots' gate/up (product, input) and output */
	uint64_t mla;       /* MLA's latents and its K/V up-projection */
	uint64_t inputs;    /* full recomputation: each layer's input */
	uint64_t final;     /* the final norm and the f32 logits */
};

struct train_need {
	uint64_t weights, grads, optim;  /* bytes per card; weights count
					  * the buffers */
	uint64_t act_none, act_full;     /* activations without / with full
					  * recomputation */
	uint64_t act;                    /* the one counted */
	struct train_act_parts parts;    /* act, split */
	uint64_t bwd;                    /* backward's working set */
	uint64_t views;                  /* f32 views of 16-bit weights */
	uint64_t pp_bufs;                /* PP send ([T, H] a slot, all but
					  * the last stage) and gradient
					  * receive buffers (all but the
					  * first) */
	uint64_t total;                  /* all of the above (not other):
					  * the terms of the stage (and EP
					  * cell) whose sum is largest */
	int stage;                       /* that stage */
	struct train_layout cell;        /* l with that cell's params,
					  * expert_params, buffers and
					  * max_tensor */
	int recompute;                   /* 1: full recomputation counted */
	int64_t micro_batches;           /* per replica per step */
	int64_t in_flight;               /* micro-batches the busiest stage
					  * holds */
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
		      const struct train_mem_model *mm,
		      const struct train_layout *l, const struct train_hw *hw,
		      uint64_t budget, uint64_t other, struct train_need *out,
		      char *reason, size_t reason_len);

/* The memory terms as lines for an operator ("  weights  8.5 GiB  bf16
 * working copy of ...\n" ...), each prefixed with indent (the counted
 * cell's, nd->cell; l unused). */
void train_need_lines(const struct train_need *nd,
		      const struct train_mem_model *mm,
		      const struct train_layout *l, const char *indent,
		      char *buf, size_t len);

#endif
