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

/*
 * The card and its links (defaults: an H200 on NVLink + 400G NICs;
 * docs/plan.md gives each default's source).  A collective costs its bytes
 * over the link it crosses plus latencies: coll_base_s once per
 * collective and lat_*_s per message along its critical path (ring or tree
 * steps for an all-reduce); a replica that spans N nodes runs every step
 * (1 + straggler (N-1)) slower, waiting for its slowest node.
 */
struct serve_hw {
	double hbm_Bps, flops;         /* memory bandwidth, dense bf16 FLOP/s */
	double intra_Bps, inter_Bps;   /* per-card link bandwidth */
	double lat_intra_s, lat_inter_s; /* one message over one hop */
	double coll_base_s;            /* a collective's launch and sync */
	double straggler;              /* step slow-down per extra node */
	double blast;                  /* latency rank: penalty per extra node */
	int cards_per_node;
};

/* The defaults (docs/plan.md "Crossing nodes"). */
#define SERVE_LAT_NVLINK_US 0.6
#define SERVE_LAT_IB_US 5.0
#define SERVE_COLL_BASE_US 6.6
#define SERVE_STRAGGLER 0.05
#define SERVE_BLAST 0.5

/* What a token costs in the model, from the tensor table. */
struct serve_model {
	double dense_flops, expert_flops; /* per token: 2 x active params */
	double expert_weight_frac;        /* routed experts' share of weights */
	int64_t layers, moe_layers, top_k, experts;
};
void serve_model_from(const struct model_config *c,
		      const struct tensor_spec *t, size_t n,
		      struct serve_model *m);

/* One layout as plan sized it (bytes per card, per-token traffic) and
 * where its groups sit: the nodes a TP group, a TP x EP block and a whole
 * replica span (the most of any), the stage boundaries that cross nodes. */
struct serve_layout {
	int tp, pp, ep, dp, cards, tp_in_node;
	int tp_nodes, ep_nodes, replica_nodes, pp_cross;
	uint64_t weights, kv_per_token; /* busiest card */
	int64_t kv_capacity;            /* tokens of context per card */
	double comm_token, inter_token; /* bytes per token per rank */
};

struct serve_load {
	enum plan_objective objective;
	int64_t ctx, conc, batch_tokens;
};

/* One decode step's collectives, split (seconds). */
struct serve_comm {
	double bw_s;      /* bytes over the links */
	double lat_s;     /* message latencies and launches */
	int64_t messages; /* collectives and stage sends on the path */
};

struct serve_score {
	double score;         /* higher is better */
	double tpot_s;        /* one decode step at concurrency / dp */
	double stage_s;       /* one stage of that step (HBM or FLOPs) */
	struct serve_comm comm; /* that step's collectives */
	double straggler_s;   /* waiting for the slowest node */
	double rank_s;        /* latency objective: tpot with the blast penalty */
	int replica_nodes;    /* blast radius: nodes one loss stops a replica of */
	double lost_share;    /* capacity one lost node stops (worst node) */
	double tokens_s;      /* all replicas, full steps */
	double bubble;        /* pipeline idle share */
	double comm_share;    /* communication share of the step */
	int64_t kv_seqs;      /* sequences of ctx the KV cache holds */
	char why[400];
};
void serve_score_layout(const struct serve_model *m, const struct serve_hw *hw,
			const struct serve_load *load,
			const struct serve_layout *l, struct serve_score *out);

#endif
