/*
 * step_plan.c - `day0-engine plan`: how must the model be split so it fits
 * this cluster?  Enumerates TP x PP x EP x DP layouts, sizes every card
 * (weights, KV cache, activation workspace, communication buffers),
 * estimates per-token communication and whether it crosses nodes, ranks
 * what fits, and says why the rest does not.
 *
 * Weight bytes use layout.c's sharding rules and model.c's tensor table,
 * the code convert uses, so for a layout convert can write the per-rank
 * bytes predicted here are exactly the bytes convert writes (a test holds
 * them together).  KV cache, activation and buffer sizes are estimates;
 * their formulas are in docs/plan.md.
 */
#include "engine.h"
#include "plan_rank.h"
#include "plan_train.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int run(int argc, char **argv);

const struct step_entry step_plan = {
	.name = "plan",
	.usage = "(MODEL_DIR | CONFIG.json) (--inventory INV.json | --nodes N "
		 "--cards C --card-mem SIZE [--intra-gbps X] [--inter-gbps Y]) "
		 "[--ctx N] "
		 "[--concurrency C] [--weights-dtype f32|bf16|f16|fp8|int8|int4] "
		 "[--kv-dtype f32|bf16|f16|fp8] [--margin 0.1] "
		 "[--batch-tokens N] [--layout TP,PP,EP[,DP]] [--top N] "
		 "[--objective cards|throughput|latency] [--card-tflops X] "
		 "[--card-hbm-tbps X] [--blast-penalty F] [--intra-latency-us X] "
		 "[--inter-latency-us Y] [--straggler F] [--train "
		 "[--micro-batch N] [--global-batch N] [--recompute "
		 "auto|none|full] [--no-zero1] [--trainer megatron|day0]] "
		 "[--json] [--events]\n"
		 "  --objective: rank what fits by the fewest cards (default), "
		 "by tokens/s of full steps, or by the decode step (TPOT) at "
		 "--concurrency; --card-tflops/--card-hbm-tbps: the card's dense "
		 "bf16 TFLOP/s and HBM TB/s (default 989 and 4.8, an H200); "
		 "--blast-penalty: the latency rank's penalty per extra node a "
		 "replica spans (default 0.5)\n"
		 "  example: plan deepseek-v3.json --inventory h200-8x8.json "
		 "--objective latency --ctx 32768 --concurrency 16",
	.summary = "rank TP x PP x EP x DP layouts by per-card memory and "
		   "communication",
	.help =
		 "  --inventory INV        the cluster (cards, memory, links per node), or\n"
		 "  --nodes N --cards C --card-mem SIZE   the same by hand, with\n"
		 "  --intra-gbps X, --inter-gbps Y   in-node and inter-node link speeds (Gbit/s;\n"
		 "                         default 7200 and 400)\n"
		 "  --intra-latency-us X, --inter-latency-us Y   one message's latency on\n"
		 "                         each (default 0.6 and 5: NVLink, InfiniBand)\n"
		 "  --straggler F          a step's slow-down per extra node a replica spans\n"
		 "                         (default 0.05)\n"
		 "  --ctx N, --concurrency C   the KV cache to hold: C sequences of N tokens\n"
		 "  --weights-dtype D, --kv-dtype D   bytes per weight / per cached value\n"
		 "                         (default: the checkpoint's format, bf16 KV)\n"
		 "  --margin F             card memory kept free (default 0.1)\n"
		 "  --batch-tokens N       prefill tokens per step for activations (default 8192)\n"
		 "  --layout TP,PP,EP[,DP] one layout in detail (per-rank weight bytes)\n"
		 "  --top N                layouts shown (default 5)\n"
		 "  --objective O          cards (default), throughput or latency (see above)\n"
		 "  --blast-penalty F      latency: rank a replica on N nodes as if its TPOT\n"
		 "                         were (1 + F (N-1)) times longer (default 0.5)\n"
		 "  --train                a fine-tuning step instead of serving: bf16 weights\n"
		 "                         and gradients, AdamW's f32 master + moments, ranked\n"
		 "                         by the step's time; --ctx is the sequence length\n"
		 "  --micro-batch N, --global-batch N   sequences a micro-batch / a step\n"
		 "                         (default 1 and 128)\n"
		 "  --recompute M          auto (full recomputation only where it must),\n"
		 "                         none or full\n"
		 "  --no-zero1             optimizer states not sharded over DP\n"
		 "  --trainer T            how the trainer holds a step: megatron (default:\n"
		 "                         bf16 activations, sequence parallel, FlashAttention)\n"
		 "                         or day0 (day0-engine train's: f32 activations, ...);\n"
		 "                         with --train, --weights-dtype f32|bf16|f16 is the\n"
		 "                         working weights' width (default bf16)\n"
		 "  --json, --events       one JSON document / day0 protocol events on stdout\n"
		 "example: day0-engine plan deepseek-v3.json --nodes 2 --cards 8 --card-mem 141G --ctx 8192",
	.run = run,
};

/* Bits per element for the planner's dtypes (fp8/int8/int4 included). */
static int dtype_bits(const char *name)
{
	static const struct {
		const char *n;
		int bits;
	} t[] = {{"f32", 32}, {"float32", 32}, {"bf16", 16}, {"bfloat16", 16},
		 {"f16", 16}, {"float16", 16}, {"fp8", 8}, {"int8", 8},
		 {"int4", 4}};
	for (size_t i = 0; i < sizeof t / sizeof *t; i++)
		if (!strcmp(t[i].n, name))
			return t[i].bits;
	return 0;
}

struct cluster {
	int nodes, cards_per_node, total_cards;
	uint64_t card_mem;
	double intra_gbps, inter_gbps;
	double intra_lat_us, inter_lat_us, straggler; /* < 0: the default */
	int heterogeneous;
};

struct opts {
	int64_t ctx, conc, batch_tokens;
	int wbits, kvbits;
	int stored; /* weights sized as the checkpoint stores them */
	const char *wname, *kvname;
	double margin;
	int top;
	enum plan_objective objective;
	double tflops, hbm_tbps;
	double blast; /* --blast-penalty */
	int train;    /* --train: a fine-tuning step, not serving */
	struct train_load tl;
	struct train_mem_model mm; /* --trainer, --weights-dtype */
	const char *trainer;
};

struct plan {
	struct layout_dims d;
	int dp, world, cards;
	uint64_t *rank_weights; /* per rank of one replica */
	uint64_t weights, kv, act, comm, total, usable;
	uint64_t kv_per_token; /* on the busiest card */
	int64_t kv_capacity;   /* tokens of context that fit per card */
	int fits, tp_in_node;
	int tp_nodes, ep_nodes, replica_nodes, pp_cross; /* the most any spans */
	double comm_token, inter_token; /* bytes per token (per rank) */
	char reason[1100];
	struct serve_score serve; /* --objective throughput|latency */
	struct train_need train;  /* --train */
	struct train_layout tl;   /* --train: the busiest cell's parameters */
};

/*
 * Stored bytes of each tensor (values + scales, which a split divides, and
 * a packed weight_shape, which it does not), worked out once per tensor
 * table: plan sizes every candidate layout, and a quantised trillion-
 * parameter MoE has ~70k weights whose format answers cost a regex each.
 */
static const struct tensor_spec *stored_for;
static uint64_t *stored_div, *stored_fix;

static void stored_table(const struct model_config *c,
			 const struct tensor_spec *t, size_t n)
{
	if (stored_for == t)
		return;
	free(stored_div);
	free(stored_fix);
	stored_div = calloc(n + 1, sizeof *stored_div);
	stored_fix = calloc(n + 1, sizeof *stored_fix);
	for (size_t i = 0; i < n; i++) {
		struct stored_part sp[3];
		int np = quant_parts(&c->qc, &t[i], c->dtype, sp);
		for (int p = 0; p < np; p++) {
			uint64_t b = sp[p].shape[0] *
				     (sp[p].ndim == 2 ? sp[p].shape[1] : 1) *
				     dtype_size(sp[p].dtype);
			*(sp[p].kind == PART_SHAPE ? &stored_fix[i]
						   : &stored_div[i]) += b;
		}
	}
	stored_for = t;
}
static enum plan_objective rank_objective; /* cmp_plan's key (qsort) */
static int rank_train;                     /* --train ranks by step time */

/* Per-rank weight bytes: layout.c decides which slice each rank holds. */
static void weight_bytes(const struct model_config *c,
			 const struct tensor_spec *t, size_t n,
			 const struct layout_dims *d, int wbits, uint64_t *out)
{
	int world = d->tp * d->pp * d->ep;
	uint64_t *bits = calloc((size_t)(d->pp * d->ep), sizeof *bits);
	for (size_t i = 0; i < n; i++) {
		struct tensor_split s;
		int st[2], ns;
		uint64_t b;
		layout_split(c, d, &t[i], &s);
		if (wbits == 0) { /* as stored: FP8/int values + their scales */
			stored_table(c, t, n);
			b = 8 * (stored_div[i] / (s.axis < 0 ? 1 : (uint64_t)s.parts) +
				 stored_fix[i]);
		} else
			b = layout_slice_numel(&t[i], &s) *
			    (uint64_t)(role_keeps_f32(t[i].role) ? 32 : wbits);
		ns = layout_tensor_stages(c, d, &t[i], st);
		for (int k = 0; k < ns; k++) {
			if (t[i].expert >= 0) {
				int e = layout_expert_owner(c, d, t[i].expert);
				bits[st[k] * d->ep + e] += b;
			} else {
				for (int e = 0; e < d->ep; e++)
					bits[st[k] * d->ep + e] += b;
			}
		}
	}
	/* every tp rank of a (stage, ep) holds a slice of the same size */
	for (int r = 0; r < world; r++) {
		int pp, ep, tp;
		layout_coords(d, r, &pp, &ep, &tp);
		out[r] = (bits[pp * d->ep + ep] + 7) / 8;
	}
	free(bits);
}

/* Nodes of cpn cards that ranks [first, first + n) touch. */
static int node_span(int first, int n, int cpn)
{
	return (first + n - 1) / cpn - first / cpn + 1;
}

static int64_t stage_layers_max(const struct model_config *c, int pp)
{
	int64_t first, count;
	layout_stage_layers(c->layers, pp, 0, &first, &count);
	return count; /* stage 0 is among the largest */
}

static void evaluate(const struct model_config *c, const struct tensor_spec *t,
		     size_t n, const struct cluster *cl, const struct opts *o,
		     struct plan *p)
{
	const struct layout_dims *d = &p->d;
	int64_t L = stage_layers_max(c, d->pp), seqs, T;
	uint64_t H = (uint64_t)c->hidden, per_tok, q_local, kv_local, f_local;
	double ring, moe_frac;
	int64_t moe_layers = 0;
	struct d0_err err;

	p->world = d->tp * d->pp * d->ep;
	p->cards = p->world * p->dp;
	p->rank_weights = calloc((size_t)p->world, sizeof *p->rank_weights);
	if (layout_check(c, d, &err) < 0) {
		snprintf(p->reason, sizeof p->reason, "%s", err.msg);
		return;
	}
	weight_bytes(c, t, n, d, o->stored ? 0 : o->wbits, p->rank_weights);
	for (int r = 0; r < p->world; r++)
		if (p->rank_weights[r] > p->weights)
			p->weights = p->rank_weights[r];

	/* KV cache: the sequences one replica serves, at full context */
	seqs = (o->conc + p->dp - 1) / p->dp;
	if (c->mla) /* compressed latent + rope key, same on every tp rank */
		per_tok = (uint64_t)(c->kv_lora_rank + c->qk_rope_dim) *
			  (uint64_t)L * (uint64_t)o->kvbits / 8;
	else
		per_tok = 2 * (uint64_t)(c->kv_heads >= d->tp ? c->kv_heads / d->tp : 1) *
			  (uint64_t)c->head_dim * (uint64_t)L *
			  (uint64_t)o->kvbits / 8;
	p->kv_per_token = per_tok;
	p->kv = per_tok * (uint64_t)o->ctx * (uint64_t)seqs;

	/* activation workspace for one step of T tokens, f32 */
	T = o->batch_tokens < o->ctx * seqs ? o->batch_tokens : o->ctx * seqs;
	q_local = (uint64_t)(c->heads / d->tp) *
		  (uint64_t)(c->mla ? c->qk_nope_dim + c->qk_rope_dim : c->head_dim);
	kv_local = c->mla ? (uint64_t)(c->kv_lora_rank + c->qk_rope_dim)
			  : (uint64_t)(c->kv_heads >= d->tp ? c->kv_heads / d->tp : 1) *
				    (uint64_t)c->head_dim;
	f_local = (uint64_t)c->ffn;
	if (c->experts) {
		uint64_t m = (uint64_t)(c->moe_ffn * c->top_k + c->shared_ffn);
		if (m > f_local)
			f_local = m;
	}
	f_local /= (uint64_t)d->tp;
	p->act = (uint64_t)T * 4 * (2 * H + q_local + 2 * kv_local + 2 * f_local) +
		 (uint64_t)seqs * 4 * (uint64_t)(c->vocab / d->tp);

	/* communication buffers (bf16, double-buffered) */
	for (int64_t l = 0; l < c->layers; l++)
		moe_layers += model_layer_is_moe(c, l);
	p->comm = 0;
	if (d->tp > 1)
		p->comm += 2 * (uint64_t)T * H * 2;
	if (d->pp > 1)
		p->comm += 2 * (uint64_t)T * H * 2;
	if (d->ep > 1)
		p->comm += 2 * (uint64_t)T * (uint64_t)c->top_k * H * 2;

	p->total = p->weights + p->kv + p->act + p->comm;
	p->usable = (uint64_t)((double)cl->card_mem * (1.0 - o->margin));
	p->fits = p->total <= p->usable;
	if (p->usable > p->weights + p->act + p->comm && per_tok)
		p->kv_capacity = (int64_t)((p->usable - p->weights - p->act -
					    p->comm) / per_tok);

	/* per-token traffic of one rank, and what crosses nodes */
	ring = d->tp > 1 ? 2.0 * (d->tp - 1) / d->tp : 0;
	moe_frac = d->ep > 1 ? (double)(d->ep - 1) / d->ep : 0;
	{
		double tp_b = (double)c->layers * 2 * (double)H * 2 * ring;
		double pp_b = (double)(d->pp - 1) * (double)H * 2;
		double ep_b = (double)moe_layers * 2 * (double)c->top_k *
			      (double)H * 2 * moe_frac;
		int cpn = cl->cards_per_node;
		int ep_span = d->tp * d->ep > cpn;
		int pp_cross = 0;
		p->tp_in_node = d->tp <= cpn && cpn % d->tp == 0;
		for (int s = 0; s + 1 < d->pp; s++)
			pp_cross += layout_rank(d, s, 0, 0) / cpn !=
				    layout_rank(d, s + 1, 0, 0) / cpn;
		p->pp_cross = pp_cross;
		/* the nodes each group spans, the worst of all replicas:
		 * ranks fill nodes in order, TP fastest, then EP, then PP */
		p->tp_nodes = p->ep_nodes = p->replica_nodes = 1;
		for (int r = 0; r < p->dp; r++) {
			int base = r * p->world, k;
			for (int s = 0; s < d->pp; s++) {
				int blk = base + layout_rank(d, s, 0, 0);
				for (int e = 0; e < d->ep; e++) {
					k = node_span(blk + e * d->tp, d->tp, cpn);
					if (k > p->tp_nodes)
						p->tp_nodes = k;
				}
				k = node_span(blk, d->tp * d->ep, cpn);
				if (k > p->ep_nodes)
					p->ep_nodes = k;
			}
			k = node_span(base, p->world, cpn);
			if (k > p->replica_nodes)
				p->replica_nodes = k;
		}
		p->comm_token = tp_b + pp_b + ep_b;
		p->inter_token = (p->tp_in_node ? 0 : tp_b) +
				 (double)pp_cross * (double)H * 2 +
				 (ep_span ? ep_b : 0);
	}
	if (!p->fits) {
		char a[32], b[32];
		snprintf(p->reason, sizeof p->reason,
			 "needs %s per card, %s usable", fmt_bytes(p->total, a),
			 fmt_bytes(p->usable, b));
	}
}

/*
 * --train: the same layout holding a fine-tuning step instead (the
 * trainer's working weights whatever the checkpoint stores, plan_train.c).
 * EP is carved out of DP here, as Megatron-LM and DeepSeek train: each EP
 * rank runs its own micro-batches and exchanges tokens for the experts.
 */
static void evaluate_train(const struct model_config *c,
			   const struct tensor_spec *t, size_t n,
			   const struct cluster *cl, const struct opts *o,
			   struct plan *p)
{
	int cpn = cl->cards_per_node;
	/* the gradient all-reduce's group: same tp and stage, every EP
	 * rank and replica */
	int dp_span = (p->dp - 1) * p->world + (p->d.ep - 1) * p->d.tp + 1;
	struct train_layout l = {
		p->d.tp, p->d.pp, p->d.ep, p->dp, cpn, p->tp_in_node,
		p->ep_nodes, p->pp_cross,
		p->dp * p->d.ep > 1 && node_span(0, dp_span, cpn) > 1, 0, 0, 0, 0,
	};
	struct train_hw hw = {
		o->tflops * 1e12,
		(cl->intra_gbps > 0 ? cl->intra_gbps : 7200) * 1e9 / 8,
		(cl->inter_gbps > 0 ? cl->inter_gbps : 400) * 1e9 / 8,
	};
	char a[32], b[32], w[32], g[32], op[32], ac[32], bw[32];
	if (p->total == 0 && p->reason[0]) { /* layout.c refused it */
		return;
	}
	p->reason[0] = 0;
	/* the busiest (stage, EP) cell's trained parameters */
	train_layout_params(c, t, n, &p->d, o->mm.weight_bytes, &l);
	p->tl = l;
	p->kv = 0;
	p->kv_capacity = 0;
	if (train_need_layout(c, t, n, &o->tl, &o->mm, &l, &hw, p->usable,
			      p->comm, &p->train, p->reason,
			      sizeof p->reason) < 0) {
		p->fits = 0;
		p->total = 0;
		return;
	}
	p->tl = p->train.cell; /* the counted (stage, EP) cell's */
	p->weights = p->train.weights;
	p->act = p->train.act;
	p->total = p->train.total + p->comm;
	p->fits = p->total <= p->usable;
	if (!p->fits)
		snprintf(p->reason, sizeof p->reason,
			 "needs %s per card (weights %s + gradients %s + "
			 "optimizer %s + activations %s%s + backward %s), %s "
			 "usable",
			 fmt_bytes(p->total, a), fmt_bytes(p->train.weights, w),
			 fmt_bytes(p->train.grads, g),
			 fmt_bytes(p->train.optim, op), fmt_bytes(p->train.act, ac),
			 p->train.recompute ? " recomputed" : "",
			 fmt_bytes(p->train.bwd + p->train.views, bw),
			 fmt_bytes(p->usable, b));
}

/*
 * A layout of more ranks than the cluster has cards does not fit, however
 * little memory a card needs (--layout can ask for one; the search never
 * does): the launch would be refused for want of ranks.
 */
static void check_cards(const struct cluster *cl, struct plan *p)
{
	char head[160], mem[sizeof p->reason];
	if (p->cards <= cl->total_cards)
		return;
	snprintf(head, sizeof head,
		 "needs %d cards (tp%d x pp%d x ep%d x dp%d), the cluster has %d",
		 p->cards, p->d.tp, p->d.pp, p->d.ep, p->dp, cl->total_cards);
	snprintf(mem, sizeof mem, "%s", p->reason);
	snprintf(p->reason, sizeof p->reason, "%.159s%s%.900s", head,
		 mem[0] ? "; " : "", mem);
	p->fits = 0;
}

/* --objective: each fitting layout's serving step (plan_rank.c). */
static void score_plans(const struct model_config *c,
			const struct tensor_spec *t, size_t n,
			const struct cluster *cl, const struct opts *o,
			struct plan *plans, size_t np)
{
	struct serve_model m;
	struct serve_hw hw = {
		.hbm_Bps = o->hbm_tbps * 1e12, .flops = o->tflops * 1e12,
		/* links in Gbit/s; an inventory without them: NVLink, NDR */
		.intra_Bps = (cl->intra_gbps > 0 ? cl->intra_gbps : 7200) * 1e9 / 8,
		.inter_Bps = (cl->inter_gbps > 0 ? cl->inter_gbps : 400) * 1e9 / 8,
		.lat_intra_s = (cl->intra_lat_us >= 0 ? cl->intra_lat_us
						      : SERVE_LAT_NVLINK_US) * 1e-6,
		.lat_inter_s = (cl->inter_lat_us >= 0 ? cl->inter_lat_us
						      : SERVE_LAT_IB_US) * 1e-6,
		.coll_base_s = SERVE_COLL_BASE_US * 1e-6,
		.straggler = cl->straggler >= 0 ? cl->straggler : SERVE_STRAGGLER,
		.blast = o->blast,
		.cards_per_node = cl->cards_per_node,
	};
	struct serve_load load = {o->objective, o->ctx, o->conc,
				  o->batch_tokens};
	serve_model_from(c, t, n, &m);
	for (size_t i = 0; i < np; i++) {
		const struct plan *p = &plans[i];
		struct serve_layout l = {
			p->d.tp, p->d.pp, p->d.ep, p->dp, p->cards,
			p->tp_in_node, p->tp_nodes, p->ep_nodes,
			p->replica_nodes, p->pp_cross, p->weights,
			p->kv_per_token, p->kv_capacity, p->comm_token,
			p->inter_token,
		};
		if (p->fits)
			serve_score_layout(&m, &hw, &load, &l, &plans[i].serve);
	}
}

static int cmp_plan(const void *x, const void *y)
{
	const struct plan *a = x, *b = y;
	if (a->fits != b->fits)
		return b->fits - a->fits;
	if (rank_train && a->fits && a->train.step_s != b->train.step_s)
		return a->train.step_s < b->train.step_s ? -1 : 1;
	if (rank_train && a->fits && a->replica_nodes != b->replica_nodes)
		return a->replica_nodes - b->replica_nodes;
	if (rank_objective != OBJ_CARDS && a->fits &&
	    a->serve.score != b->serve.score)
		return a->serve.score > b->serve.score ? -1 : 1;
	if (rank_objective != OBJ_CARDS && a->fits &&
	    a->replica_nodes != b->replica_nodes) /* blast radius */
		return a->replica_nodes - b->replica_nodes;
	if (a->tp_in_node != b->tp_in_node)
		return b->tp_in_node - a->tp_in_node;
	if (a->cards != b->cards)
		return a->cards - b->cards;
	if (a->inter_token != b->inter_token)
		return a->inter_token < b->inter_token ? -1 : 1;
	if (a->total != b->total)
		return a->total < b->total ? -1 : 1;
	return a->d.tp - b->d.tp;
}

static int cmp_rejected(const void *x, const void *y)
{
	const struct plan *a = x, *b = y;
	int va = a->total > 0, vb = b->total > 0; /* 0: layout_check refused */
	if (va != vb)
		return vb - va;
	if (a->total - a->usable != b->total - b->usable)
		return a->total - a->usable < b->total - b->usable ? -1 : 1;
	return a->cards - b->cards;
}

static int load_cluster(const char *path, struct cluster *cl,
			struct d0_err *err)
{
	struct inventory inv;
	if (inventory_load(path, &inv, err) < 0)
		return -1;
	memset(cl, 0, sizeof *cl);
	cl->nodes = (int)inv.n;
	cl->cards_per_node = inv.nodes[0].cards;
	cl->card_mem = inv.nodes[0].card_mem;
	cl->intra_gbps = inv.nodes[0].intra_gbps;
	cl->inter_gbps = inv.nodes[0].inter_gbps;
	cl->intra_lat_us = inv.nodes[0].intra_lat_us;
	cl->inter_lat_us = inv.nodes[0].inter_lat_us;
	cl->straggler = inv.nodes[0].straggler;
	for (size_t i = 0; i < inv.n; i++) {
		cl->total_cards += inv.nodes[i].cards;
		if (inv.nodes[i].cards != cl->cards_per_node ||
		    inv.nodes[i].card_mem != cl->card_mem)
			cl->heterogeneous = 1;
		if (inv.nodes[i].cards < cl->cards_per_node)
			cl->cards_per_node = inv.nodes[i].cards;
		if (inv.nodes[i].card_mem < cl->card_mem)
			cl->card_mem = inv.nodes[i].card_mem;
	}
	inventory_free(&inv);
	return 0;
}

/*
 * The cluster from the command line instead of an inventory file: the
 * console runs plan on a node that does not hold its inventory, and
 * passes what it knows (${nodes} ${cards} ${card_mem}) as numbers.
 */
static int parse_gbps(const char *s, double *out)
{
	char *end;
	*out = strtod(s, &end);
	return *end || end == s || !(*out >= 0) || *out > 1e9 ? -1 : 0;
}

static json_t *plan_json(const struct plan *p, int with_ranks)
{
	json_t *o = json_pack(
		"{s:i, s:i, s:i, s:i, s:i, s:b, s:b, s:I, s:I, s:I, s:I, s:I, "
		"s:I, s:I, s:I, s:f, s:f}",
		"tp", p->d.tp, "pp", p->d.pp, "ep", p->d.ep, "dp", p->dp, "cards",
		p->cards, "fits", p->fits, "tp_in_node", p->tp_in_node,
		"weights_bytes", (json_int_t)p->weights, "kv_bytes",
		(json_int_t)p->kv, "activation_bytes", (json_int_t)p->act,
		"comm_buffer_bytes", (json_int_t)p->comm, "total_bytes",
		(json_int_t)p->total, "usable_bytes", (json_int_t)p->usable,
		"kv_bytes_per_token", (json_int_t)p->kv_per_token,
		"kv_capacity_tokens", (json_int_t)p->kv_capacity,
		"comm_bytes_per_token", p->comm_token,
		"inter_node_bytes_per_token", p->inter_token);
	json_object_set_new(o, "replica_nodes", json_integer(p->replica_nodes));
	if (rank_train && p->train.step_s > 0) {
		const struct train_need *t = &p->train;
		json_object_set_new(
			o, "train",
			json_pack("{s:I, s:I, s:I, s:I, s:I, s:b, s:I, s:f, s:f, "
				  "s:f, s:f, s:f, s:f, s:f, s:f, s:s}",
				  "weights_bytes", (json_int_t)t->weights,
				  "grads_bytes", (json_int_t)t->grads,
				  "optimizer_bytes", (json_int_t)t->optim,
				  "activation_bytes", (json_int_t)t->act_none,
				  "activation_recompute_bytes",
				  (json_int_t)t->act_full, "recompute",
				  t->recompute, "micro_batches",
				  (json_int_t)t->micro_batches, "tp_bytes",
				  t->tp_bytes, "pp_bytes", t->pp_bytes,
				  "ep_bytes", t->ep_bytes, "dp_bytes",
				  t->dp_bytes, "inter_node_bytes",
				  t->inter_bytes, "step_s", t->step_s,
				  "bubble", t->bubble, "tokens_per_s",
				  t->tokens_s, "why", t->why));
		/* the terms plan_train.c adds, and the activations' parts */
		json_object_update_new(
			json_object_get(o, "train"),
			json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o}",
				  "backward_bytes", (json_int_t)t->bwd,
				  "views_bytes", (json_int_t)t->views,
				  "pp_buffer_bytes", (json_int_t)t->pp_bufs,
				  "buffer_bytes", (json_int_t)p->tl.buffers,
				  "total_bytes", (json_int_t)t->total,
				  "params", (json_int_t)p->tl.params,
				  "expert_params", (json_int_t)p->tl.expert_params,
				  "max_tensor", (json_int_t)p->tl.max_tensor,
				  "in_flight", (json_int_t)t->in_flight,
				  "activation_parts",
				  json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
					    "residual", (json_int_t)t->parts.residual,
					    "attention", (json_int_t)t->parts.attention,
					    "scores", (json_int_t)t->parts.scores,
					    "mlp", (json_int_t)t->parts.mlp,
					    "moe", (json_int_t)t->parts.moe,
					    "mla", (json_int_t)t->parts.mla,
					    "inputs", (json_int_t)t->parts.inputs,
					    "final", (json_int_t)t->parts.final)));
	}
	json_object_set_new(o, "tp_nodes", json_integer(p->tp_nodes));
	if (p->reason[0])
		json_object_set_new(o, "reason", json_string(p->reason));
	if (rank_objective != OBJ_CARDS && p->fits) {
		const struct serve_score *v = &p->serve;
		json_t *sv = json_pack(
			"{s:f, s:f, s:f, s:f, s:f, s:I, s:s}", "score", v->score,
			"tpot_ms", v->tpot_s * 1e3, "tokens_per_s", v->tokens_s,
			"bubble", v->bubble, "comm_share", v->comm_share,
			"kv_seqs", (json_int_t)v->kv_seqs, "why", v->why);
		/* the decode step's split, and the blast radius */
		json_object_update_missing_new(
			sv, json_pack("{s:f, s:f, s:f, s:I, s:f, s:f, s:i, s:f}",
				      "stage_ms", v->stage_s * 1e3,
				      "comm_bandwidth_ms", v->comm.bw_s * 1e3,
				      "comm_latency_ms", v->comm.lat_s * 1e3,
				      "comm_messages", (json_int_t)v->comm.messages,
				      "straggler_ms", v->straggler_s * 1e3,
				      "rank_ms", v->rank_s * 1e3,
				      "replica_nodes", v->replica_nodes,
				      "lost_node_share", v->lost_share));
		json_object_set_new(o, "serve", sv);
	}
	if (with_ranks) {
		json_t *a = json_array();
		for (int r = 0; r < p->world; r++)
			json_array_append_new(a,
					      json_integer((json_int_t)p->rank_weights[r]));
		json_object_set_new(o, "rank_weight_bytes", a);
	}
	return o;
}

static void print_row(int idx, const struct plan *p)
{
	char lay[48], w[32], kv[32], ac[32], cm[32], tot[32], cap[32];
	snprintf(lay, sizeof lay, "tp%d pp%d ep%d dp%d", p->d.tp, p->d.pp,
		 p->d.ep, p->dp);
	snprintf(cap, sizeof cap, "%lld", (long long)p->kv_capacity);
	printf("%4d  %-20s %5d %10s %10s %10s %10s %10s  %-4s %-5s %10.0f %12s\n",
	       idx, lay, p->cards, fmt_bytes(p->weights, w), fmt_bytes(p->kv, kv),
	       fmt_bytes(p->act, ac), fmt_bytes(p->comm, cm),
	       fmt_bytes(p->total, tot), p->fits ? "yes" : "NO",
	       p->tp_in_node ? "yes" : "no", p->inter_token, cap);
}

/* --train: the step's bytes per card, activations both ways. */
static void print_train_row(int idx, const struct plan *p)
{
	char lay[48], w[32], g[32], op[32], an[32], af[32], tot[32];
	const struct train_need *t = &p->train;
	snprintf(lay, sizeof lay, "tp%d pp%d ep%d dp%d", p->d.tp, p->d.pp,
		 p->d.ep, p->dp);
	printf("%4d  %-20s %5d %10s %10s %10s %10s %10s %10s  %-4s %-7s %9.0f\n",
	       idx, lay, p->cards, fmt_bytes(t->weights, w),
	       fmt_bytes(t->grads, g), fmt_bytes(t->optim, op),
	       fmt_bytes(t->act_none, an), fmt_bytes(t->act_full, af),
	       fmt_bytes(p->total, tot), p->fits ? "yes" : "NO",
	       t->recompute ? "full" : "none", t->tokens_s);
}

/*
 * Where the vision tower goes (issue #30): replicated on every rank of the
 * first pipeline stage (layout.c puts its tensors there), beside the
 * embeddings its features replace.  Why not split it over tp: it is small
 * against the LM (Qwen2.5-VL-7B 0.68B of 8.29B, llava-1.5 0.32B of 7.06B),
 * an image is a few thousand patches, and a tp split would add two
 * all-reduces per block (64 an image for 32 blocks) for at most its own
 * bytes per card.  The JSON and the text say what it costs each rank.
 */
static json_t *vision_placement(const struct model_config *c,
				const struct tensor_spec *t, size_t n,
				int wbits, uint64_t card_mem, char *line,
				size_t len)
{
	uint64_t params = 0, bytes = 0;
	char a[32];
	line[0] = 0;
	if (c->vision.kind == VISION_NONE || c->vision.kind == VISION_UNSUPPORTED)
		return json_null();
	for (size_t i = 0; i < n; i++)
		if (t[i].group == GROUP_VISION || t[i].group == GROUP_PROJECTOR) {
			uint64_t k = t[i].shape[0] *
				     (t[i].ndim == 2 ? t[i].shape[1] : 1);
			params += k;
			bytes += k * (uint64_t)(role_keeps_f32(t[i].role) ? 32
							: wbits ? wbits : 16) / 8;
		}
	snprintf(line, len, "vision   tower + projector %.2fB parameters, %s "
		 "on each rank of stage 0 (replicated: %.1f%% of a card; a tp "
		 "split would add 2 all-reduces per block)",
		 (double)params / 1e9, fmt_bytes(bytes, a),
		 card_mem ? 100.0 * (double)bytes / (double)card_mem : 0.0);
	return json_pack("{s:s, s:i, s:I, s:I, s:f}", "placement", "replicated",
			 "stage", 0, "parameters", (json_int_t)params,
			 "bytes_per_rank", (json_int_t)bytes, "card_share",
			 card_mem ? (double)bytes / (double)card_mem : 0.0);
}

static int parse_layout(const char *s, struct plan *p)
{
	int tp, pp = 1, ep = 1, dp = 1, k;
	k = sscanf(s, "%d,%d,%d,%d", &tp, &pp, &ep, &dp);
	if (k < 1 || tp < 1 || pp < 1 || ep < 1 || dp < 1 || tp > 65536 ||
	    pp > 65536 || ep > 65536 || dp > 65536)
		return -1;
	memset(p, 0, sizeof *p);
	p->d.tp = tp;
	p->d.pp = pp;
	p->d.ep = ep;
	p->dp = dp;
	return 0;
}

static int run(int argc, char **argv)
{
	static const struct option lo[] = {
		{"inventory", 1, 0, 'i'}, {"ctx", 1, 0, 'c'},
		{"concurrency", 1, 0, 'n'}, {"weights-dtype", 1, 0, 'w'},
		{"kv-dtype", 1, 0, 'k'}, {"margin", 1, 0, 'm'},
		{"batch-tokens", 1, 0, 'b'}, {"layout", 1, 0, 'l'},
		{"top", 1, 0, 't'}, {"json", 0, 0, 'j'}, {"events", 0, 0, 'e'},
		{"nodes", 1, 0, 'N'}, {"cards", 1, 0, 'C'},
		CARD_MEM_LONG_OPT, {"intra-gbps", 1, 0, 'I'},
		{"inter-gbps", 1, 0, 'X'}, {"objective", 1, 0, 'O'},
		{"card-tflops", 1, 0, 'F'}, {"card-hbm-tbps", 1, 0, 'B'},
		{"intra-latency-us", 1, 0, 'L'}, {"inter-latency-us", 1, 0, 'Y'},
		{"straggler", 1, 0, 'S'}, {"blast-penalty", 1, 0, 'P'},
		{"train", 0, 0, 'T'}, {"micro-batch", 1, 0, 'M'},
		{"global-batch", 1, 0, 'G'}, {"recompute", 1, 0, 'R'},
		{"no-zero1", 0, 0, 'Z'}, {"trainer", 1, 0, 'A'},
		{"help", 0, 0, 'h'}, {0, 0, 0, 0}};
	const struct step_entry *S = &step_plan;
	struct opts o = {.ctx = 0, .conc = 1, .batch_tokens = 8192,
			 .margin = 0.1, .top = 5, .objective = OBJ_CARDS,
			 .tflops = 989, .hbm_tbps = 4.8, .blast = SERVE_BLAST,
			 .tl = {.micro = 1, .global = 128, .zero1 = 1,
				.recompute = RECOMPUTE_AUTO}};
	struct model_config c;
	struct cluster cl;
	struct tensor_spec *t = NULL;
	struct plan *plans = NULL, one;
	struct d0_err err;
	const char *inv_path = NULL, *layout = NULL;
	char *path, *end, a[32], b[32], where[96], vline[240];
	struct cluster given = {.intra_lat_us = -1, .inter_lat_us = -1,
				.straggler = -1};
	int n_given = 0, gbps_given = 0;
	size_t n = 0, np = 0;
	int ch, json = 0, events = 0, nfit = 0;
	const char *train_only = NULL; /* a --train option given */
	long v;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case 'i': inv_path = optarg; break;
		case 'N':
			if (parse_long(optarg, 1, 65536, &v) < 0)
				return step_usage_error(S, "--nodes: expected "
							"1..65536");
			given.nodes = (int)v;
			n_given++;
			break;
		case 'C':
			if (parse_long(optarg, 1, 4096, &v) < 0)
				return step_usage_error(S, "--cards: expected "
							"1..4096 cards per "
							"node");
			given.cards_per_node = (int)v;
			n_given++;
			break;
		case LOPT_CARD_MEM: {
			struct layout_opts lay;
			char why[256];
			layout_opts_init(&lay);
			if (layout_opts_take(&lay, ch, optarg, why, sizeof why) < 0)
				return step_usage_error(S, "%s", why);
			given.card_mem = lay.card_mem;
			n_given++;
			break;
		}
		case 'I':
			if (parse_gbps(optarg, &given.intra_gbps) < 0)
				return step_usage_error(S, "--intra-gbps: "
							"expected a number "
							">= 0");
			gbps_given = 1;
			break;
		case 'X':
			if (parse_gbps(optarg, &given.inter_gbps) < 0)
				return step_usage_error(S, "--inter-gbps: "
							"expected a number "
							">= 0");
			gbps_given = 1;
			break;
		case 'L':
		case 'Y':
			if (parse_gbps(optarg, ch == 'L' ? &given.intra_lat_us
							 : &given.inter_lat_us) < 0 ||
			    (ch == 'L' ? given.intra_lat_us : given.inter_lat_us) > 1e6)
				return step_usage_error(S, "--%s: expected "
							"microseconds from 0 "
							"to 1e6",
							ch == 'L' ? "intra-latency-us"
								  : "inter-latency-us");
			gbps_given = 1;
			break;
		case 'S':
			if (parse_gbps(optarg, &given.straggler) < 0 ||
			    given.straggler > 10)
				return step_usage_error(S, "--straggler: expected "
							"a fraction from 0 to "
							"10 per extra node");
			gbps_given = 1;
			break;
		case 'P':
			if (parse_gbps(optarg, &o.blast) < 0 || o.blast > 10)
				return step_usage_error(S, "--blast-penalty: "
							"expected a fraction "
							"from 0 to 10 per "
							"extra node");
			break;
		case 'T': o.train = 1; break;
		case 'M':
		case 'G':
			if (parse_long(optarg, 1, 1L << 24, &v) < 0)
				return step_usage_error(S, "--%s: expected a "
							"positive number of "
							"sequences",
							ch == 'M' ? "micro-batch"
								  : "global-batch");
			*(ch == 'M' ? &o.tl.micro : &o.tl.global) = v;
			train_only = ch == 'M' ? "--micro-batch" : "--global-batch";
			break;
		case 'R':
			if (!strcmp(optarg, "auto"))
				o.tl.recompute = RECOMPUTE_AUTO;
			else if (!strcmp(optarg, "none"))
				o.tl.recompute = RECOMPUTE_NONE;
			else if (!strcmp(optarg, "full"))
				o.tl.recompute = RECOMPUTE_FULL;
			else
				return step_usage_error(S, "--recompute: expected "
							"auto, none or full, "
							"got '%s'", optarg);
			train_only = "--recompute";
			break;
		case 'Z': o.tl.zero1 = 0; train_only = "--no-zero1"; break;
		case 'A': o.trainer = optarg; break;
		case 'c':
			if (parse_long(optarg, 1, 1L << 30, &v) < 0)
				return step_usage_error(S, "--ctx: expected a "
							"positive token count");
			o.ctx = v;
			break;
		case 'n':
			if (parse_long(optarg, 1, 1L << 24, &v) < 0)
				return step_usage_error(S, "--concurrency: "
							"expected a positive "
							"integer");
			o.conc = v;
			break;
		case 'b':
			if (parse_long(optarg, 1, 1L << 24, &v) < 0)
				return step_usage_error(S, "--batch-tokens: "
							"expected a positive "
							"integer");
			o.batch_tokens = v;
			break;
		case 'w': o.wname = optarg; break;
		case 'k': o.kvname = optarg; break;
		case 'm':
			o.margin = strtod(optarg, &end);
			if (*end || end == optarg || !(o.margin >= 0) ||
			    !(o.margin < 1))
				return step_usage_error(S, "--margin: expected a "
							"fraction in [0, 1)");
			break;
		case 'l': layout = optarg; break;
		case 'O':
			if (plan_objective_parse(optarg, &o.objective) < 0)
				return step_usage_error(S, "--objective: expected "
							"cards, throughput or "
							"latency, got '%s'",
							optarg);
			break;
		case 'F':
		case 'B':
			if (parse_gbps(optarg, ch == 'F' ? &o.tflops
							 : &o.hbm_tbps) < 0 ||
			    (ch == 'F' ? o.tflops : o.hbm_tbps) <= 0)
				return step_usage_error(S, "--%s: expected a "
							"number > 0",
							ch == 'F' ? "card-tflops"
								  : "card-hbm-tbps");
			break;
		case 't':
			if (parse_long(optarg, 1, 1000, &v) < 0)
				return step_usage_error(S, "--top: expected "
							"1..1000");
			o.top = (int)v;
			break;
		case 'j': json = 1; break;
		case 'e': events = 1; break;
		case 'h': step_help(S); return EXIT_OK;
		default:
			return step_usage_error(S, "unknown or incomplete "
						"option '%s'", argv[optind - 1]);
		}
	}
	if (optind != argc - 1)
		return step_usage_error(S, "expected one MODEL_DIR or "
					"CONFIG.json");
	/* a fine-tuning option without --train would be ignored: refused,
	 * as --trainer is */
	if (!o.train && train_only)
		return step_usage_error(S, "%s goes with --train (a fine-tuning "
					"step); without it plan sizes serving",
					train_only);
	/* exactly one way to describe the cluster */
	if (inv_path && (n_given || gbps_given))
		return step_usage_error(S, "--inventory and --nodes/--cards/"
					"--card-mem/--*-gbps/--*-latency-us/"
					"--straggler exclude each other: give "
					"one or the other");
	if (!inv_path && n_given != 3)
		return step_usage_error(S, "the cluster is needed: --inventory "
					"INV.json, or all of --nodes N --cards "
					"C --card-mem SIZE");
	if (!inv_path) {
		given.total_cards = given.nodes * given.cards_per_node;
		snprintf(where, sizeof where, "--nodes/--cards/--card-mem");
	}
	if (o.train && o.objective != OBJ_CARDS)
		return step_usage_error(S, "--train ranks by the step's time: "
					"leave out --objective");
	if (layout && parse_layout(layout, &one) < 0)
		return step_usage_error(S, "--layout: expected TP,PP,EP[,DP] "
					"positive integers, got '%s'", layout);
	events_init(stdout, events && !json);
	path = path_is_dir(argv[optind]) ? path_join(argv[optind], "config.json")
					 : strdup(argv[optind]);
	if (model_config_load(path, &c, &err) < 0 ||
	    model_tensors(&c, &t, &n, &err) < 0 ||
	    (inv_path ? load_cluster(inv_path, &cl, &err) < 0
		      : (cl = given, 0))) {
		fprintf(stderr, "day0-engine: %s\n", err.msg);
		free(path);
		free(t);
		return EXIT_USAGE;
	}
	if (o.train) { /* the trainer's working weights: bf16 unless said */
		const char *w = o.wname ? o.wname : "bf16";
		int wb = !strcmp(w, "f32") ? 4
			 : !strcmp(w, "bf16") || !strcmp(w, "f16") ? 2 : 0;
		if (!wb || train_mem_by_name(o.trainer ? o.trainer : "megatron",
					     wb, &o.mm) < 0) {
			free(path);
			free(t);
			model_config_free(&c);
			return step_usage_error(S, wb ? "--trainer: expected "
						"megatron or day0, got '%s'"
						: "--train: --weights-dtype is "
						"the working weights' (f32, "
						"bf16 or f16), got '%s'",
						wb ? o.trainer : w);
		}
		o.wname = w;
	} else if (o.trainer) {
		free(path);
		free(t);
		model_config_free(&c);
		return step_usage_error(S, "--trainer goes with --train");
	}
	if (!o.wname) { /* default: the checkpoint's own format */
		o.wname = !strcmp(c.quant, "fp8") ? "fp8"
			  : c.qc.kind == QUANT_PACKED_INT
				  ? (c.qc.bits == 4 ? "int4" : "int8")
				  : dtype_user_name(c.dtype);
		o.stored = c.qc.kind != QUANT_NONE;
	}
	o.wbits = dtype_bits(o.wname);
	if (!o.kvname)
		o.kvname = o.wbits == 32 ? "f32" : "bf16";
	o.kvbits = dtype_bits(o.kvname);
	if (!o.wbits || !o.kvbits || !strcmp(o.kvname, "int4") ||
	    !strcmp(o.kvname, "int8")) {
		free(path);
		free(t);
		model_config_free(&c);
		return step_usage_error(S, "--weights-dtype: f32, bf16, f16, fp8, "
					"int8 or int4; --kv-dtype: f32, bf16, "
					"f16 or fp8");
	}
	if (!o.ctx)
		o.ctx = c.max_pos < 4096 ? c.max_pos : 4096;
	o.tl.seq = o.ctx;
	if (o.train) { /* one sequence of ctx at a time for the sizing */
		o.conc = 1;
		o.stored = 0;
	}
	events_stage("plan", "start", 0, 0, path);

	if (layout) {
		plans = calloc(1, sizeof *plans);
		plans[0] = one;
		np = 1;
	} else {
		/* tp: powers of two and divisors of the heads; pp up to the
		 * layers; ep: divisors of the experts; dp fills the rest */
		for (int tp = 1; tp <= cl.total_cards; tp++) {
			if (c.heads % tp)
				continue;
			for (int pp = 1; pp <= c.layers && tp * pp <= cl.total_cards; pp++)
				for (int ep = 1; tp * pp * ep <= cl.total_cards; ep++) {
					if (ep > 1 && (!c.experts || c.experts % ep))
						continue;
					for (int dp = 1; tp * pp * ep * dp <= cl.total_cards; dp *= 2) {
						plans = realloc(plans, (np + 1) * sizeof *plans);
						memset(&plans[np], 0, sizeof *plans);
						plans[np].d = (struct layout_dims){tp, pp, ep};
						plans[np].dp = dp;
						np++;
					}
				}
		}
	}
	for (size_t i = 0; i < np; i++) {
		evaluate(&c, t, n, &cl, &o, &plans[i]);
		if (o.train)
			evaluate_train(&c, t, n, &cl, &o, &plans[i]);
		check_cards(&cl, &plans[i]);
		nfit += plans[i].fits;
	}
	rank_objective = o.objective;
	rank_train = o.train;
	if (o.objective != OBJ_CARDS)
		score_plans(&c, t, n, &cl, &o, plans, np);
	qsort(plans, np, sizeof *plans, cmp_plan);
	/* the rejected: closest to fitting first, invalid layouts last */
	qsort(plans + nfit, np - (size_t)nfit, sizeof *plans, cmp_rejected);

	if (json) {
		json_t *doc = json_object(), *ok = json_array(), *rej = json_array();
		for (size_t i = 0; i < np; i++)
			json_array_append_new(plans[i].fits ? ok : rej,
					      plan_json(&plans[i], layout != NULL));
		json_object_set_new(doc, "model", json_string(path));
		json_object_set_new(doc, "model_type", json_string(c.model_type));
		json_object_set_new(
			doc, "cluster",
			json_pack("{s:i, s:i, s:i, s:I, s:f, s:f, s:f, s:f, "
				  "s:f, s:b}", "nodes",
				  cl.nodes, "cards_per_node", cl.cards_per_node,
				  "cards", cl.total_cards, "card_mem",
				  (json_int_t)cl.card_mem, "intra_node_gbps",
				  cl.intra_gbps, "inter_node_gbps", cl.inter_gbps,
				  "intra_node_latency_us",
				  cl.intra_lat_us >= 0 ? cl.intra_lat_us
						       : SERVE_LAT_NVLINK_US,
				  "inter_node_latency_us",
				  cl.inter_lat_us >= 0 ? cl.inter_lat_us
						       : SERVE_LAT_IB_US,
				  "straggler_per_node",
				  cl.straggler >= 0 ? cl.straggler : SERVE_STRAGGLER,
				  "heterogeneous", cl.heterogeneous));
		json_object_set_new(
			doc, "settings",
			json_pack("{s:s, s:s, s:I, s:I, s:I, s:f, s:s, s:f}",
				  "weights_dtype",
				  o.wname, "kv_dtype", o.kvname, "ctx",
				  (json_int_t)o.ctx, "concurrency",
				  (json_int_t)o.conc, "batch_tokens",
				  (json_int_t)o.batch_tokens, "margin", o.margin,
				  "objective", plan_objective_name(o.objective),
				  "blast_penalty", o.blast));
		if (o.train)
			json_object_set_new(
				json_object_get(doc, "settings"), "train",
				json_pack("{s:I, s:I, s:I, s:b, s:s}", "seq",
					  (json_int_t)o.tl.seq, "micro_batch",
					  (json_int_t)o.tl.micro, "global_batch",
					  (json_int_t)o.tl.global, "zero1",
					  o.tl.zero1, "recompute",
					  o.tl.recompute == RECOMPUTE_AUTO ? "auto"
					  : o.tl.recompute == RECOMPUTE_FULL
						  ? "full"
						  : "none"));
		if (o.train)
			json_object_set_new(
				json_object_get(doc, "settings"), "memory_model",
				json_pack("{s:s, s:s, s:s, s:s, s:b, s:b, s:b, s:b, s:b}",
					  "trainer", o.mm.trainer, "weights",
					  o.wname, "activations",
					  o.mm.act_bytes == 4 ? "f32" : "bf16",
					  "activation_gradients",
					  o.mm.grad_bytes == 4 ? "f32" : "bf16",
					  "sequence_parallel", o.mm.seq_parallel,
					  "flash_attention", o.mm.flash,
					  "products_kept", o.mm.keep_products,
					  "f32_views", o.mm.f32_views,
					  "ep_carved_from_dp", o.mm.ep_data));
		json_object_set_new(doc, "feasible", ok);
		json_object_set_new(doc, "rejected", rej);
		json_object_set_new(doc, "vision",
				    vision_placement(&c, t, n, o.wbits,
						     cl.card_mem, vline,
						     sizeof vline));
		json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		putchar('\n');
		json_decref(doc);
	} else if (!events_enabled()) {
		int shown = 0;
		printf("plan     %s (%s) on %s: %d nodes x %d cards x %s = %d "
		       "cards%s\n", c.model_type, path,
		       inv_path ? inv_path : where, cl.nodes,
		       cl.cards_per_node, fmt_bytes(cl.card_mem, a),
		       cl.total_cards,
		       cl.heterogeneous ? " (mixed nodes: planned with the "
					  "smallest)" : "");
		if (o.train)
			printf("         fine-tuning: AdamW, %s weights and "
			       "gradients, f32 master + moments%s; %lld "
			       "sequences of %lld tokens a step, micro-batches of "
			       "%lld, recompute %s, margin %.0f%%\n"
			       "         memory model: %s (activations %s, "
			       "sequence parallelism %s, FlashAttention %s, "
			       "SwiGLU products %s, f32 views of 16-bit weights "
			       "%s, EP carved out of DP %s)\n\n",
			       o.wname, o.tl.zero1 ? " (ZeRO-1 over DP)" : "",
			       (long long)o.tl.global, (long long)o.ctx,
			       (long long)o.tl.micro,
			       o.tl.recompute == RECOMPUTE_AUTO ? "when needed"
			       : o.tl.recompute == RECOMPUTE_FULL ? "full"
								  : "none",
			       o.margin * 100, o.mm.trainer,
			       o.mm.act_bytes == 4 ? "f32" : "bf16",
			       o.mm.seq_parallel ? "on" : "off",
			       o.mm.flash ? "on" : "off",
			       o.mm.keep_products ? "kept" : "rebuilt",
			       o.mm.f32_views ? "on" : "off",
			       o.mm.ep_data ? "on" : "off");
		else
			printf("         weights %s (norms f32), kv %s, context %lld x %lld "
			       "sequences, %lld tokens a step, margin %.0f%%\n\n",
			       o.wname, o.kvname, (long long)o.ctx, (long long)o.conc,
			       (long long)o.batch_tokens, o.margin * 100);
		if (o.train)
			printf("%4s  %-20s %5s %10s %10s %10s %10s %10s %10s  %-4s %-7s %9s\n",
			       "rank", "layout", "cards", "weights", "grads",
			       "optimizer", "activ.", "recomp.", "total", "fits",
			       "recomp", "tok/s");
		else
			printf("%4s  %-20s %5s %10s %10s %10s %10s %10s  %-4s %-5s %10s %12s\n",
			       "rank", "layout", "cards", "weights", "kv cache", "activ.",
			       "comm buf", "total", "fits", "tp-in", "inter B/tok",
			       "kv tokens");
		for (size_t i = 0; i < np && shown < o.top; i++)
			if (plans[i].fits || layout) {
				if (o.train)
					print_train_row(++shown, &plans[i]);
				else
					print_row(++shown, &plans[i]);
				if (o.objective != OBJ_CARDS && plans[i].fits)
					printf("      why: %s\n",
					       plans[i].serve.why);
				if (o.train && plans[i].train.step_s > 0)
					printf("      why: %s\n",
					       plans[i].train.why);
				/* the first layout's memory, term by term */
				if (o.train && shown == 1 &&
				    plans[i].train.step_s > 0) {
					char lines[2400];
					train_need_lines(&plans[i].train, &o.mm,
							 &plans[i].tl,
							 "      memory  ", lines,
							 sizeof lines);
					printf("%s      memory  comm buffers %10s\n"
					       "      memory  total        %10s  (the %s "
					       "trainer's step)\n",
					       lines, fmt_bytes(plans[i].comm, a),
					       fmt_bytes(plans[i].total, b),
					       o.mm.trainer);
				}
			}
		if (!nfit && !layout)
			printf("      (no layout fits)\n");
		if (!layout) {
			size_t nrej = np - (size_t)nfit;
			int k = 0;
			printf("\nrejected: %zu of %zu layouts%s\n", nrej, np,
			       nrej > 12 ? " (the 12 that come closest)" : "");
			for (size_t i = (size_t)nfit; i < np && k < 12; i++, k++)
				printf("  tp%d pp%d ep%d dp%d: %s\n", plans[i].d.tp,
				       plans[i].d.pp, plans[i].d.ep, plans[i].dp,
				       plans[i].reason);
		} else {
			if (plans[0].reason[0])
				printf("      %s\n", plans[0].reason);
			printf("\nper-rank weights:");
			for (int r = 0; r < plans[0].world; r++)
				printf(" %s", fmt_bytes(plans[0].rank_weights[r], a));
			printf("\n");
		}
		json_decref(vision_placement(&c, t, n, o.wbits, cl.card_mem,
					     vline, sizeof vline));
		if (vline[0])
			printf("%s\n", vline);
	}
	{
		char detail[1300];
		if (nfit)
			snprintf(detail, sizeof detail, "%d of %zu layouts fit; "
				 "best tp%d pp%d ep%d dp%d at %s of %s per card",
				 nfit, np, plans[0].d.tp, plans[0].d.pp,
				 plans[0].d.ep, plans[0].dp,
				 fmt_bytes(plans[0].total, a),
				 fmt_bytes(plans[0].usable, b));
		else
			snprintf(detail, sizeof detail, "no layout of %zu fits%s%s",
				 np, np ? ": " : "", np ? plans[0].reason : "");
		/* The check carries the chosen layout's budget breakdown
		 * (the console's Plan screen and the report show it). */
		if (events_enabled()) {
			json_t *ck = json_pack("{s:s, s:s, s:s, s:i, s:i}", "item",
					      "memory.plan", "status",
					      nfit ? "pass" : "fail", "detail",
					      detail, "value", nfit, "threshold",
					      1);
			if (np)
				json_object_set_new(ck, "plan",
						    plan_json(&plans[0], 1));
			events_emit("check", ck);
		}
		if (!json && !events_enabled())
			printf("\nmemory.plan  %s: %s\n", nfit ? "pass" : "FAIL",
			       detail);
	}
	events_stage("plan", "end", 1, nfit ? 0 : 1, path);
	for (size_t i = 0; i < np; i++)
		free(plans[i].rank_weights);
	free(plans);
	free(t);
	free(path);
	model_config_free(&c);
	return nfit ? EXIT_OK : EXIT_CHECK_FAILED;
}
