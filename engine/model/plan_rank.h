/*
 * plan_rank.h - ranking the layouts that fit by what the operator serves
 * for (plan --objective throughput|latency): a small roofline model of one
 * serving step per layout (plan_rank.c, formulas in docs/plan.md).
 */
#ifndef DAY0_PLAN_RANK_H
#define DAY0_PLAN_RANK_H

#include "model.h"

enum plan_objective { OBJ_CARDS, OBJ_THROUGHPUT, OBJ_LATENCY };

/* "cards", "throughput", "latency"; -1 for anything else. */
int plan_objective_parse(const char *s, enum plan_objective *o);
const char *plan_objective_name(enum plan_objective o);

/* The card and its links (defaults: an H200 on NVLink + 400G NICs). */
struct serve_hw {
	double hbm_Bps, flops;       /* memory bandwidth, dense bf16 FLOP/s */
	double intra_Bps, inter_Bps; /* per-card link bandwidth */
	double alpha_intra_s, alpha_inter_s; /* one collective's latency */
	int cards_per_node;
};

/* What a token costs in the model, from the tensor table. */
struct serve_model {
	double dense_flops, expert_flops; /* per token: 2 x active params */
	double expert_weight_frac;        /* routed experts' share of weights */
	int64_t layers, moe_layers, top_k, experts;
};
void serve_model_from(const struct model_config *c,
		      const struct tensor_spec *t, size_t n,
		      struct serve_model *m);

/* One layout as plan sized it (bytes per card, per-token traffic). */
struct serve_layout {
	int tp, pp, ep, dp, cards, tp_in_node;
	uint64_t weights, kv_per_token; /* busiest card */
	int64_t kv_capacity;            /* tokens of context per card */
	double comm_token, inter_token; /* bytes per token per rank */
};

struct serve_load {
	enum plan_objective objective;
	int64_t ctx, conc, batch_tokens;
};

struct serve_score {
	double score;         /* higher is better */
	double tpot_s;        /* one decode step at concurrency / dp */
	double tokens_s;      /* all replicas, full steps */
	double bubble;        /* pipeline idle share */
	double comm_share;    /* communication share of the step */
	int64_t kv_seqs;      /* sequences of ctx the KV cache holds */
	char why[240];
};
void serve_score_layout(const struct serve_model *m, const struct serve_hw *hw,
			const struct serve_load *load,
			const struct serve_layout *l, struct serve_score *out);

#endif
