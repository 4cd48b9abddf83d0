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
 * across) plus their latency counted per message as NCCL's tuner counts
 * it (ring or tree steps of an all-reduce, one message an all-to-all);
 * a replica on N nodes waits for the slowest each step (the straggler
 * factor per extra node); a pipeline idles (pp-1)/(m+pp-1) of the time
 * with m sequences in flight.  The latency objective also weighs the
 * blast radius: a replica on N nodes stops with any of them, and ranks as
 * if (1 + blast (N-1)) times slower -- a stated policy, docs/plan.md.
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

/*
 * Latency of one all-reduce over p ranks on k nodes (g = p/k a node), as
 * NCCL's tuning model counts it (src/graph/tuning.cc): a ring's 2(p-1)
 * steps, 2(k-1) of them across nodes; a tree's 2((g-1) hops in the node
 * + log2 k across); NCCL runs the cheaper for small messages.
 */
static double allreduce_lat(const struct serve_hw *hw, int p, int k)
{
	int g = (p + k - 1) / k, lg = 0;
	double ring, tree;
	while ((1 << lg) < k)
		lg++;
	ring = 2.0 * (p - k) * hw->lat_intra_s + 2.0 * (k - 1) * hw->lat_inter_s;
	tree = 2.0 * ((g - 1) * hw->lat_intra_s + lg * hw->lat_inter_s);
	return hw->coll_base_s + fmin(ring, tree);
}

/*
 * The collectives of B tokens over the whole path of one step: bytes
 * over each link, and per message its latency: 2 all-reduces a layer for
 * TP, 2 all-to-alls (dispatch, combine) a MoE layer for EP, a send per
 * stage boundary for PP.  An all-to-all sends to every peer at once
 * (NCCL's grouped send/recv, DeepEP), so it pays one message on its
 * slowest link, not one per peer; its size is in the bytes.
 */
static void comm_time(const struct serve_model *m, const struct serve_hw *hw,
		      const struct serve_layout *l, double B,
		      struct serve_comm *c)
{
	double intra = l->comm_token - l->inter_token;
	memset(c, 0, sizeof *c);
	c->bw_s = B * (intra / hw->intra_Bps + l->inter_token / hw->inter_Bps);
	if (l->tp > 1) {
		c->lat_s += 2.0 * (double)m->layers *
			    allreduce_lat(hw, l->tp, l->tp_nodes);
		c->messages += 2 * m->layers;
	}
	if (l->ep > 1) {
		c->lat_s += 2.0 * (double)m->moe_layers *
			    (hw->coll_base_s + (l->ep_nodes > 1 ? hw->lat_inter_s
								: hw->lat_intra_s));
		c->messages += 2 * m->moe_layers;
	}
	if (l->pp > 1) {
		c->lat_s += (double)(l->pp - 1) * hw->coll_base_s +
			    (double)l->pp_cross * hw->lat_inter_s +
			    (double)(l->pp - 1 - l->pp_cross) * hw->lat_intra_s;
		c->messages += l->pp - 1;
	}
}

/* The largest share of replicas one node's loss stops. */
static double lost_share(const struct serve_layout *l, int cpn)
{
	int world = l->tp * l->pp * l->ep, nodes, worst = 0;
	nodes = (world * l->dp + cpn - 1) / cpn;
	for (int j = 0; j < nodes; j++) {
		int first = j * cpn / world;
		int last = ((j + 1) * cpn - 1) / world;
		if (last >= l->dp)
			last = l->dp - 1;
		if (last - first + 1 > worst)
			worst = last - first + 1;
	}
	return (double)worst / l->dp;
}

void serve_score_layout(const struct serve_model *m, const struct serve_hw *hw,
			const struct serve_load *load,
			const struct serve_layout *l, struct serve_score *out)
{
	double ctx = (double)load->ctx, T = (double)load->batch_tokens;
	double seqs = ceil((double)load->conc / l->dp); /* per replica */
	double busy = fmin((double)l->dp, (double)load->conc);
	char si[32];
	double slow = 1.0 + hw->straggler * (l->replica_nodes - 1);
	double st, bare;
	struct serve_comm ct;
	size_t w;
	memset(out, 0, sizeof *out);
	out->kv_seqs = l->dp * (l->kv_capacity / (load->ctx ? load->ctx : 1));
	out->replica_nodes = l->replica_nodes;
	out->lost_share = lost_share(l, hw->cards_per_node);

	/* latency: one decode step, the token through every stage, every
	 * node of the replica waited for */
	out->stage_s = stage_time(m, hw, l, seqs, seqs, ctx);
	comm_time(m, hw, l, seqs, &out->comm);
	bare = l->pp * out->stage_s + out->comm.bw_s + out->comm.lat_s;
	out->straggler_s = bare * (slow - 1.0);
	out->tpot_s = bare + out->straggler_s;
	out->rank_s = out->tpot_s * (1.0 + hw->blast * (l->replica_nodes - 1));

	/* throughput: full steps of T tokens, pipelined over m = seqs */
	st = stage_time(m, hw, l, T, seqs, ctx);
	comm_time(m, hw, l, T, &ct);
	bare = (ct.bw_s + ct.lat_s) / l->pp;
	out->bubble = (l->pp - 1) / (seqs + l->pp - 1);
	out->tokens_s = busy * T / ((st + bare) * slow) * (1.0 - out->bubble);
	out->comm_share = bare / (st + bare);

	out->score = load->objective == OBJ_LATENCY ? -out->rank_s
						    : out->tokens_s;
	if (load->objective == OBJ_LATENCY) {
		snprintf(out->why, sizeof out->why,
			 "TPOT %.2f ms = %d stage%s x %.2f ms + collectives "
			 "%.2f ms (bandwidth %.2f, latency %.2f: %lld "
			 "messages) + straggler %.2f ms (%d node%s)",
			 out->tpot_s * 1e3, l->pp, l->pp > 1 ? "s" : "",
			 out->stage_s * 1e3,
			 (out->comm.bw_s + out->comm.lat_s) * 1e3,
			 out->comm.bw_s * 1e3, out->comm.lat_s * 1e3,
			 (long long)out->comm.messages, out->straggler_s * 1e3,
			 l->replica_nodes, l->replica_nodes > 1 ? "s" : "");
		if (l->replica_nodes > 1 && hw->blast > 0)
			snprintf(out->why + strlen(out->why),
				 sizeof out->why - strlen(out->why),
				 "; ranked as %.2f ms (blast radius)",
				 out->rank_s * 1e3);
		snprintf(out->why + strlen(out->why),
			 sizeof out->why - strlen(out->why),
			 "; %.0f seqs a replica", seqs);
	} else
		snprintf(out->why, sizeof out->why,
			 "%s tok/s from %.0f replica%s (comm %.0f%%, pipeline "
			 "bubble %.0f%% of a step, straggler %.0f%%)",
			 fmt_si(out->tokens_s, si), busy, busy > 1 ? "s" : "",
			 out->comm_share * 100, out->bubble * 100,
			 (slow - 1.0) * 100);
	w = strlen(out->why);
	snprintf(out->why + w, sizeof out->why - w,
		 "; KV for %lld seqs of %lld (%lld asked); TP %s; a lost node "
		 "stops %.0f%% (replica on %d node%s)",
		 (long long)out->kv_seqs, (long long)load->ctx,
		 (long long)load->conc,
		 l->tp == 1 ? "none" : l->tp_in_node ? "in node" : "ACROSS nodes",
		 out->lost_share * 100, l->replica_nodes,
		 l->replica_nodes > 1 ? "s" : "");
}
