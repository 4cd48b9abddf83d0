/*
 * plan_rank.c - which of the layouts that fit should the operator run?
 *
 * plan sizes every layout (bytes per card, KV capacity, per-token
 * traffic); the memory answer alone ("fewest cards") picks tp1 pp7 for
 * DeepSeek-V3 on 64 H200, which nobody serves.  Operators pick by what
 * they serve for, so this file estimates one serving step of each layout
 * with a roofline: a stage's time is the larger of reading its bytes
 * (weights touched + KV) at HBM speed and doing its FLOPs; collectives add
 * their bytes over the link they cross (NVLink inside a node, the NIC
 * across) plus a fixed latency each; a pipeline idles (pp-1)/(m+pp-1) of
 * the time with m sequences in flight.
 *   latency:    the decode step (TPOT) of concurrency/dp sequences: each
 *               token passes every stage in turn, lower is better;
 *   throughput: tokens/s of all replicas, each running full steps of
 *               batch_tokens tokens (the engine's scheduler budget).
 * The figures are estimates to order layouts, not predictions; the
 * published deployments in docs/plan.md hold the order (test_plan_rank).
 */
#include "plan_rank.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const obj_names[] = {
	[OBJ_CARDS] = "cards",
	[OBJ_THROUGHPUT] = "throughput",
	[OBJ_LATENCY] = "latency",
};

int plan_objective_parse(const char *s, enum plan_objective *o)
{
	for (int i = 0; i < 3; i++)
		if (!strcmp(s, obj_names[i])) {
			*o = (enum plan_objective)i;
			return 0;
		}
	return -1;
}

const char *plan_objective_name(enum plan_objective o)
{
	return obj_names[o];
}

void serve_model_from(const struct model_config *c,
		      const struct tensor_spec *t, size_t n,
		      struct serve_model *m)
{
	struct param_count pc;
	double embed, expert;
	model_count_params(c, t, n, &pc);
	/* the embedding is a lookup, not a matmul (a tied one is the head) */
	embed = c->tie_embeddings ? 0 : (double)pc.group_active[GROUP_EMBED];
	expert = (double)pc.group_active[GROUP_EXPERTS];
	memset(m, 0, sizeof *m);
	m->dense_flops = 2.0 * ((double)pc.active - embed - expert);
	m->expert_flops = 2.0 * expert;
	m->expert_weight_frac =
		pc.total ? (double)pc.group[GROUP_EXPERTS] / (double)pc.total : 0;
	m->layers = c->layers;
	for (int64_t l = 0; l < c->layers; l++)
		m->moe_layers += model_layer_is_moe(c, l);
	m->top_k = c->top_k;
	m->experts = c->experts;
}

/* Weight bytes a card reads for B tokens: routed experts only if hit. */
static double weights_read(const struct serve_model *m,
			   const struct serve_layout *l, double B)
{
	double hit = 1.0;
	if (m->experts)
		hit = fmin(1.0, B * (double)m->top_k / (double)m->experts);
	return (double)l->weights *
	       (1.0 - m->expert_weight_frac + m->expert_weight_frac * hit);
}

/* One stage's time for B tokens of seqs sequences at ctx. */
static double stage_time(const struct serve_model *m,
			 const struct serve_hw *hw,
			 const struct serve_layout *l, double B, double seqs,
			 double ctx)
{
	double bytes = weights_read(m, l, B) +
		       seqs * ctx * (double)l->kv_per_token;
	double flops = B * (m->dense_flops / (l->tp * l->pp) +
			    m->expert_flops / ((double)l->tp * l->pp * l->ep));
	return fmax(bytes / hw->hbm_Bps, flops / hw->flops);
}

/* Collectives of B tokens over the whole path: bytes plus latencies. */
static double comm_time(const struct serve_model *m, const struct serve_hw *hw,
			const struct serve_layout *l, double B)
{
	int cpn = hw->cards_per_node;
	double intra = l->comm_token - l->inter_token, t;
	t = B * (intra / hw->intra_Bps + l->inter_token / hw->inter_Bps);
	if (l->tp > 1)
		t += 2.0 * (double)m->layers *
		     (l->tp_in_node ? hw->alpha_intra_s : hw->alpha_inter_s);
	if (l->ep > 1)
		t += 2.0 * (double)m->moe_layers *
		     (l->tp * l->ep <= cpn ? hw->alpha_intra_s
					   : hw->alpha_inter_s);
	if (l->pp > 1)
		t += (double)(l->pp - 1) * (l->tp * l->ep * l->pp <= cpn
						    ? hw->alpha_intra_s
						    : hw->alpha_inter_s);
	return t;
}

void serve_score_layout(const struct serve_model *m, const struct serve_hw *hw,
			const struct serve_load *load,
			const struct serve_layout *l, struct serve_score *out)
{
	double ctx = (double)load->ctx, T = (double)load->batch_tokens;
	double seqs = ceil((double)load->conc / l->dp); /* per replica */
	double busy = fmin((double)l->dp, (double)load->conc);
	double st, ct;
	memset(out, 0, sizeof *out);
	out->kv_seqs = l->dp * (l->kv_capacity / (load->ctx ? load->ctx : 1));

	/* latency: one decode step, the token through every stage */
	st = stage_time(m, hw, l, seqs, seqs, ctx);
	ct = comm_time(m, hw, l, seqs);
	out->tpot_s = l->pp * st + ct;

	/* throughput: full steps of T tokens, pipelined over m = seqs */
	st = stage_time(m, hw, l, T, seqs, ctx);
	ct = comm_time(m, hw, l, T) / l->pp;
	out->bubble = (l->pp - 1) / (seqs + l->pp - 1);
	out->tokens_s = busy * T / (st + ct) * (1.0 - out->bubble);
	out->comm_share = ct / (st + ct);

	out->score = load->objective == OBJ_LATENCY ? -out->tpot_s
						    : out->tokens_s;
	if (load->objective == OBJ_LATENCY)
		snprintf(out->why, sizeof out->why,
			 "TPOT %.2f ms (%d stage%s x %.2f ms, collectives %.2f "
			 "ms) for %.0f seqs a replica",
			 out->tpot_s * 1e3, l->pp, l->pp > 1 ? "s" : "",
			 stage_time(m, hw, l, seqs, seqs, ctx) * 1e3,
			 comm_time(m, hw, l, seqs) * 1e3, seqs);
	else
		snprintf(out->why, sizeof out->why,
			 "%.0f tok/s from %.0f replica%s (comm %.0f%%, pipeline "
			 "bubble %.0f%% of a step)",
			 out->tokens_s, busy, busy > 1 ? "s" : "",
			 out->comm_share * 100, out->bubble * 100);
	snprintf(out->why + strlen(out->why), sizeof out->why - strlen(out->why),
		 "; KV for %lld seqs of %lld (%lld asked); TP %s",
		 (long long)out->kv_seqs, (long long)load->ctx,
		 (long long)load->conc,
		 l->tp == 1 ? "none" : l->tp_in_node ? "in node" : "ACROSS nodes");
}
