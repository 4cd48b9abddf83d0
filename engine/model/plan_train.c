/*
 * plan_train.c - can this cluster fine-tune the model, and how should it
 * be split?  The training side of plan (plan --train, docs/plan.md
 * "Fine-tuning"), and the figure training.memory holds day0-engine
 * train's measured peak to (docs/training.md "Memory model").
 *
 * Memory per card, mixed-precision AdamW as Megatron-LM and DeepSpeed run
 * it (ZeRO, Rajbhandari et al. 2020: 2 + 2 + 12 = 16 bytes a parameter):
 *   weights    the working copy of the rank's slice (bf16: 2 bytes a
 *              parameter, norms included; day0's f32 runs 4), plus the
 *              f32 buffers that are not trained (router biases);
 *   gradients  the same width, the same slice;
 *   optimizer  f32 master weights + Adam's two moments, 12 bytes a
 *              parameter of the slice, divided under ZeRO-1 by the ranks
 *              that hold the same slice (DP x EP for the dense part when
 *              EP is carved out of DP, DP alone when EP ranks share their
 *              replica's sequences, day0's engine; DP for the experts,
 *              which EP shards);
 *   activations what backward keeps (struct train_mem_model says at which
 *              width, whether sequence parallelism divides the residual
 *              stream by TP, whether the attention scores and SwiGLU's
 *              products are kept), for the micro-batches the 1F1B
 *              schedule holds in flight on a stage (PP - s on stage s,
 *              Narayanan et al. 2021); with full recomputation each
 *              layer's input, plus one layer rebuilt at a time;
 *   backward   the working set: one layer's activation gradients at a
 *              time (the widest layer, one micro-batch);
 *   f32 views  trainers that multiply in f32 (day0) hold an f32 copy of
 *              a 16-bit weight and its gradient's f32 sum: twice the
 *              largest tensor slice, 4 bytes each;
 *   pp buffers a [T, H] send buffer a micro-batch in flight on every stage
 *              but the last, a [T, H] gradient receive buffer on every
 *              stage but the first.
 * The terms are summed per (stage, EP) cell and the largest sum is the
 * card's figure (the busiest stage's weights beside another stage's
 * activations would count a card no rank is).
 * EP is carved out of data parallelism, as Megatron-LM and DeepSeek train
 * (not plan's serving layout, where an EP group shares its tokens): each
 * EP rank runs its own micro-batches through attention and trades tokens
 * for its experts, so a replica of tp x pp x ep cards runs ep streams,
 * and a rank's experts take in as many routed slots as its tokens send
 * out (balanced routing).
 * Traffic per rank per step: TP 4 all-reduce equivalents a layer a
 * micro-batch (2 forward, 2 backward), PP an activation forward and a
 * gradient back per boundary, EP dispatch + combine forward and backward
 * a MoE layer, DP one gradient all-reduce (dense gradients over DP x EP,
 * experts' over DP; ZeRO-1's reduce-scatter + all-gather move the same
 * bytes).  The step time orders layouts: 1F1B's
 * (m + PP - 1) slots of one micro-batch's compute and critical-path
 * collectives, plus what of the DP all-reduce the last backward does not
 * hide; FLOPs at the card's peak.  An estimate, not a prediction.
 */
#include "plan_train.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void train_mem_megatron(struct train_mem_model *m)
{
	*m = (struct train_mem_model){.trainer = "megatron", .weight_bytes = 2,
				      .act_bytes = 2, .grad_bytes = 2,
				      .seq_parallel = 1, .flash = 1,
				      .keep_products = 1, .f32_views = 0,
				      .bwd_buffers = 0, .ep_data = 1};
}

void train_mem_day0(struct train_mem_model *m, int weight_bytes)
{
	*m = (struct train_mem_model){.trainer = "day0",
				      .weight_bytes = weight_bytes,
				      .act_bytes = 4, .grad_bytes = 4,
				      .seq_parallel = 0, .flash = 0,
				      .keep_products = 0,
				      .f32_views = weight_bytes < 4,
				      .bwd_buffers = 1, .ep_data = 0};
}

int train_mem_by_name(const char *name, int weight_bytes,
		      struct train_mem_model *m)
{
	if (!strcmp(name, "megatron"))
		train_mem_megatron(m);
	else if (!strcmp(name, "day0"))
		train_mem_day0(m, weight_bytes);
	else
		return -1;
	m->weight_bytes = weight_bytes;
	return 0;
}

/* The trained parameters (all, experts'), f32 buffers and largest
 * tensor of each (stage, EP) cell, stage-major; calloc'd, NULL on no
 * memory. */
static int cell_params(const struct model_config *c,
		       const struct tensor_spec *t, size_t n,
		       const struct layout_dims *d, uint64_t **all,
		       uint64_t **exp, uint64_t **buf, uint64_t **big)
{
	size_t cells = (size_t)d->pp * (size_t)d->ep;
	*all = calloc(cells, sizeof **all);
	*exp = calloc(cells, sizeof **exp);
	*buf = calloc(cells, sizeof **buf);
	*big = calloc(cells, sizeof **big);
	if (!*all || !*exp || !*buf || !*big)
		return -1;
	for (size_t i = 0; i < n; i++) {
		struct tensor_split sp;
		int st[2], ns;
		uint64_t k;
		if (t[i].mtp)
			continue;
		layout_split(c, d, &t[i], &sp);
		k = layout_slice_numel(&t[i], &sp);
		ns = layout_tensor_stages(c, d, &t[i], st);
		for (int j = 0; j < ns; j++)
			for (int e = 0; e < d->ep; e++) {
				size_t cell = (size_t)st[j] * (size_t)d->ep + (size_t)e;
				if (t[i].expert >= 0 &&
				    layout_expert_owner(c, d, t[i].expert) != e)
					continue;
				if (t[i].role == ROLE_ROUTER_BIAS) {
					(*buf)[cell] += 4 * k;
					continue;
				}
				(*all)[cell] += k;
				if (t[i].expert >= 0)
					(*exp)[cell] += k;
				if (k > (*big)[cell])
					(*big)[cell] = k;
			}
	}
	return 0;
}

static void cells_free(uint64_t *all, uint64_t *exp, uint64_t *buf,
		       uint64_t *big)
{
	free(all);
	free(exp);
	free(buf);
	free(big);
}

void train_layout_params(const struct model_config *c,
			 const struct tensor_spec *t, size_t n,
			 const struct layout_dims *d, int weight_bytes,
			 struct train_layout *l)
{
	size_t cells = (size_t)d->pp * (size_t)d->ep;
	uint64_t *all, *exp, *buf, *big, best = 0;
	l->params = l->expert_params = l->buffers = l->max_tensor = 0;
	if (cell_params(c, t, n, d, &all, &exp, &buf, &big) < 0) {
		cells_free(all, exp, buf, big);
		return;
	}
	for (size_t cell = 0; cell < cells; cell++) {
		uint64_t b = all[cell] * (uint64_t)weight_bytes + buf[cell];
		if (b > best || cell == 0) {
			best = b;
			l->params = all[cell];
			l->expert_params = exp[cell];
			l->buffers = buf[cell];
			l->max_tensor = big[cell];
		}
	}
	cells_free(all, exp, buf, big);
}

/* What the tensor table says about a layer beyond the config's sizes. */
struct layer_shape {
	int qk_norm; /* qwen3's per-head q/k RMSNorm */
};

/* One token of one layer on one rank, per part (bytes). */
struct lay_parts {
	double residual, attention, scores, mlp, moe, mla;
};

static double lay_sum(const struct lay_parts *p)
{
	return p->residual + p->attention + p->scores + p->mlp + p->moe +
	       p->mla;
}

/*
 * What backward keeps of layer l for one token on one rank, at ab bytes
 * an activation (the statistics: norms' inverse RMS, router
 * probabilities, choices, FlashAttention's log-sum-exp, f32 always).
 * S: the sequence (the attention probabilities are [heads, S] a token).
 */
static void layer_act(const struct model_config *c,
		      const struct layer_shape *sh, int64_t l, int tp,
		      int64_t S, const struct train_mem_model *m, double ab,
		      struct lay_parts *p)
{
	double H = (double)c->hidden, R = m->seq_parallel ? tp : 1;
	double nh = (double)(c->heads / tp), nkv, dqk, dv;
	memset(p, 0, sizeof *p);
	if (c->mla) {
		nkv = nh;
		dqk = (double)(c->qk_nope_dim + c->qk_rope_dim);
		dv = (double)c->v_head_dim;
	} else {
		nkv = (double)(c->kv_heads >= tp ? c->kv_heads / tp : 1);
		dqk = dv = (double)c->head_dim;
	}
	/* both norms' inputs and outputs, and their inverse RMS */
	p->residual = (4 * H * ab + 2 * 4.0) / R;
	/* Q and K after RoPE, V, the attention output; qk-norm's inputs */
	p->attention = ((nh + nkv) * dqk + (nkv + nh) * dv) * ab;
	if (sh->qk_norm)
		p->attention += (nh + nkv) * dqk * ab + (nh + nkv) * 4.0;
	p->scores = m->flash ? nh * 4.0 : nh * (double)S * ab;
	if (c->mla) {
		/* the q latent before and after its norm, the kv latent with
		 * the rope key and the normed latent, their statistics
		 * (computed from the whole hidden state: replicated over TP,
		 * sequence-parallel with it); K/V's up-projection */
		double ql = (double)c->q_lora_rank, kvl = (double)c->kv_lora_rank;
		p->mla = ((2 * ql + 2 * kvl + (double)c->qk_rope_dim) * ab +
			  (ql > 0 ? 2 : 1) * 4.0) / R +
			 nh * (double)(c->qk_nope_dim + c->v_head_dim) * ab;
	}
	if (model_layer_is_moe(c, l)) {
		double K = (double)c->top_k, Fm = (double)(c->moe_ffn / tp);
		double Fs = (double)(c->shared_ffn / tp);
		/* the router's probabilities, each slot's choice and weight;
		 * a routed slot's gate and up, its output (the combine's
		 * weight gradient), with products kept the SwiGLU product and
		 * the dispatched input; balanced routing: a rank's experts
		 * take in as many slots as its tokens send out */
		p->moe = ((double)c->experts * 4.0 + K * 8.0) / R +
			 K * (2 * Fm * ab + H * ab / R +
			      (m->keep_products ? Fm * ab + H * ab / R : 0));
		/* a shared expert: gate, up (product), its output and its
		 * gate's logit */
		if (Fs > 0)
			p->mlp = (2 + m->keep_products) * Fs * ab +
				 (H * ab + 4.0) / R;
	} else {
		double F = (double)(c->ffn / tp);
		p->mlp = (2 + m->keep_products) * F * ab;
	}
}

/*
 * day0's backward working set for layers [first, first + count) on one
 * rank, bytes for T tokens: train.c's alloc_acts holds dh, dh2 and dxn
 * ([T, H] each) and six buffers b[0..5] of T x width (+4 B each), each
 * width the widest use of that buffer over the stage's layer kinds (the
 * attention's dq/dk/dv/datt, MLA's latent gradients, the router's and
 * routed slots' gradients, a SwiGLU's); the attention score gradient is
 * one row of S floats at a time, not counted.  Kept in step with
 * alloc_acts: training.memory fails when the two part.
 */
static double day0_bwd(const struct model_config *c, int tp, int64_t first,
		       int64_t count, double T)
{
	int64_t H = c->hidden, nh = c->heads / tp;
	int64_t nkv = c->mla ? nh : c->kv_heads / tp;
	int64_t dqk = c->mla ? c->qk_nope_dim + c->qk_rope_dim : c->head_dim;
	int64_t dv = c->mla ? c->v_head_dim : c->head_dim;
	int64_t rd = c->mla ? c->qk_rope_dim : c->head_dim;
	int64_t nope = c->qk_nope_dim, kvl = c->kv_lora_rank, ql = c->q_lora_rank;
	int64_t F = c->ffn / tp, Fm = c->moe_ffn / tp, Fs = c->shared_ffn / tp;
	int64_t E = c->experts, K = c->top_k, KH = 0, KF = 0, bw[6];
	int moe = 0, mla = c->mla != 0;
	double b = 3.0 * T * (double)H * 4;
	for (int64_t i = first; i < first + count; i++)
		moe |= model_layer_is_moe(c, i);
	if (moe) {
		KH = K * H;
		KF = K * Fm;
	}
#define MX(a, b) ((a) > (b) ? (a) : (b))
	bw[0] = MX(MX(nh * dv, mla * nh * (nope + dv)), MX(moe * E, KH));
	bw[1] = MX(MX(nh * dqk, KH), ql);
	bw[2] = MX(MX(nkv * dqk, KF), MX(MX(F, Fs), moe * E));
	bw[3] = MX(MX(nkv * dv, KF), MX(F, Fs));
	bw[4] = MX(MX(mla * (kvl + rd), nh * dqk), MX(MX(KH, KF), MX(F, Fs)));
	bw[5] = MX(MX(kvl, ql), MX(MX(nkv * dqk, KF), MX(F, Fs)));
#undef MX
	for (int i = 0; i < 6; i++)
		b += T * (double)(bw[i] ? bw[i] : 1) * 4 + 4;
	return b;
}

static void parts_add(struct train_act_parts *o, const struct lay_parts *p,
		      double k)
{
	o->residual += (uint64_t)(p->residual * k);
	o->attention += (uint64_t)(p->attention * k);
	o->scores += (uint64_t)(p->scores * k);
	o->mlp += (uint64_t)(p->mlp * k);
	o->moe += (uint64_t)(p->moe * k);
	o->mla += (uint64_t)(p->mla * k);
}

/*
 * Activations of stage s, without and with full recompute, and the parts
 * of the one counted (recompute); bwd: backward's working set (the
 * stage's widest layer's activation gradients, one micro-batch); pp: the
 * pipeline's buffers (a slot's [T, H] send on all but the last stage, its
 * [T, H] gradient receive on all but the first).
 */
static void stage_acts(const struct model_config *c,
		       const struct layer_shape *sh,
		       const struct train_layout *l,
		       const struct train_mem_model *m, int64_t S,
		       double tokens, int64_t micros, int s, int recompute,
		       double *none, double *full, double *bwd, double *pp,
		       int64_t *in_flight, struct train_act_parts *parts)
{
	double ab = m->act_bytes, R = m->seq_parallel ? l->tp : 1;
	int64_t first, count, fly;
	double kept = 0, inputs = 0, widest = 0, fin = 0;
	struct lay_parts lp, wide = {0};
	*bwd = 0;
	layout_stage_layers(c->layers, l->pp, s, &first, &count);
	for (int64_t i = first; i < first + count; i++) {
		double x, g;
		layer_act(c, sh, i, l->tp, S, m, ab, &lp);
		x = lay_sum(&lp);
		kept += x;
		inputs += (double)c->hidden * ab / R;
		if (x > widest) {
			widest = x;
			wide = lp;
		}
		if (m->bwd_buffers)
			continue;
		layer_act(c, sh, i, l->tp, S, m, m->grad_bytes, &lp);
		g = lay_sum(&lp);
		if (tokens * g > *bwd)
			*bwd = tokens * g;
	}
	if (m->bwd_buffers)
		*bwd = day0_bwd(c, l->tp, first, count, tokens);
	fly = l->pp - s < micros ? l->pp - s : micros;
	/* the final norm's input and output and its statistics, and the f32
	 * logits for the loss's backward */
	if (s == l->pp - 1)
		fin = (2 * (double)c->hidden * ab + 4.0) / R +
		      4.0 * (double)c->vocab / l->tp;
	*none = tokens * (kept * (double)fly + fin);
	*full = tokens * (inputs * (double)fly + widest + fin);
	*pp = tokens * (double)c->hidden * (double)fly *
	      ((s < l->pp - 1 ? ab : 0) + (s > 0 ? m->grad_bytes : 0));
	*in_flight = fly;
	memset(parts, 0, sizeof *parts);
	if (recompute) {
		parts->inputs = (uint64_t)(tokens * inputs * (double)fly);
		parts_add(parts, &wide, tokens);
	} else
		for (int64_t i = first; i < first + count; i++) {
			layer_act(c, sh, i, l->tp, S, m, ab, &lp);
			parts_add(parts, &lp, tokens * (double)fly);
		}
	parts->final = (uint64_t)(tokens * fin);
}

int train_need_layout(const struct model_config *c,
		      const struct tensor_spec *t, size_t n,
		      const struct train_load *load,
		      const struct train_mem_model *mm,
		      const struct train_layout *l, const struct train_hw *hw,
		      uint64_t budget, uint64_t other, struct train_need *out,
		      char *reason, size_t reason_len)
{
	struct serve_model_flops {
		double dense, expert;
	} f;
	struct param_count pc;
	struct layer_shape sh = {0};
	double tokens = (double)(load->micro * load->seq), H = (double)c->hidden;
	double ring, stage_layers, moe_layers = 0, flops_tok, att;
	double tp_s, pp_s, ep_s, dp_s, bwd_s, slot;
	int64_t first, count, streams = (int64_t)l->dp * (mm->ep_data ? l->ep : 1);
	int64_t micros = load->global / load->micro;
	uint64_t dense = l->params - l->expert_params;

	memset(out, 0, sizeof *out);
	if (load->global % load->micro || micros % streams) {
		snprintf(reason, reason_len, "a global batch of %lld sequences "
			 "in micro-batches of %lld does not split over DP %d x "
			 "EP %d", (long long)load->global,
			 (long long)load->micro, l->dp, mm->ep_data ? l->ep : 1);
		return -1;
	}
	out->micro_batches = micros / streams;
	for (size_t i = 0; i < n; i++)
		if (strstr(t[i].name, "self_attn.q_norm."))
			sh.qk_norm = 1;

	/* memory per (stage, EP) cell: 2 + 2 + 12 (/DP) bytes a parameter,
	 * the stage's activations, working set and pipeline buffers; the
	 * cell whose sum is largest is the busiest card (its terms are
	 * shown, not each term's largest over the stages) */
	{
		struct layout_dims d = {.tp = l->tp, .pp = l->pp, .ep = l->ep};
		uint64_t *all, *exp, *buf, *big, best_n = 0, best_f = 0;
		uint64_t zshard = (uint64_t)(mm->ep_data ? streams : l->dp);
		int pass;
		if (cell_params(c, t, n, &d, &all, &exp, &buf, &big) < 0) {
			cells_free(all, exp, buf, big);
			snprintf(reason, reason_len, "out of memory");
			return -1;
		}
		/* pass 0: the largest totals without and with recomputation
		 * (which one counts); pass 1: fill the counted cell's terms */
		for (pass = 0; pass < 2; pass++) {
			uint64_t best = 0;
			if (pass == 1)
				out->recompute =
					load->recompute == RECOMPUTE_FULL ||
					(load->recompute == RECOMPUTE_AUTO &&
					 best_n + other > budget);
			for (int s = 0; s < l->pp; s++) {
				double none, full, bwd, pp;
				int64_t fly;
				struct train_act_parts pa;
				stage_acts(c, &sh, l, mm, load->seq, tokens,
					   out->micro_batches, s,
					   pass ? out->recompute : 0, &none,
					   &full, &bwd, &pp, &fly, &pa);
				for (int e = 0; e < l->ep; e++) {
					size_t k = (size_t)s * (size_t)l->ep + (size_t)e;
					uint64_t w = all[k] * (uint64_t)mm->weight_bytes;
					uint64_t dn = all[k] - exp[k];
					uint64_t o = load->zero1
						? 12 * (dn / zshard + exp[k] / (uint64_t)l->dp)
						: 12 * all[k];
					uint64_t v = mm->f32_views && mm->weight_bytes < 4
						? 8 * big[k] : 0;
					uint64_t base = 2 * w + buf[k] + o + v +
							(uint64_t)bwd + (uint64_t)pp;
					uint64_t tn = base + (uint64_t)none;
					uint64_t tf = base + (uint64_t)full;
					uint64_t tc = out->recompute ? tf : tn;
					if (pass == 0) {
						if (tn > best_n)
							best_n = tn;
						if (tf > best_f)
							best_f = tf;
						continue;
					}
					if (tc <= best && !(s == 0 && e == 0))
						continue;
					best = tc;
					out->stage = s;
					out->cell = *l;
					out->cell.params = all[k];
					out->cell.expert_params = exp[k];
					out->cell.buffers = buf[k];
					out->cell.max_tensor = big[k];
					out->weights = w + buf[k];
					out->grads = w;
					out->optim = o;
					out->views = v;
					out->bwd = (uint64_t)bwd;
					out->pp_bufs = (uint64_t)pp;
					out->act_none = (uint64_t)none;
					out->act_full = (uint64_t)full;
					out->act = out->recompute ? out->act_full
								  : out->act_none;
					out->parts = pa;
					out->in_flight = fly;
					out->total = tc;
				}
			}
		}
		cells_free(all, exp, buf, big);
	}

	/* traffic per rank per step */
	layout_stage_layers(c->layers, l->pp, 0, &first, &count);
	stage_layers = (double)count;
	for (int64_t i = first; i < first + count; i++)
		moe_layers += model_layer_is_moe(c, i);
	ring = l->tp > 1 ? 2.0 * (l->tp - 1) / l->tp : 0;
	out->tp_bytes = (double)out->micro_batches * stage_layers * 4 * ring *
			tokens * H * 2;
	out->pp_bytes = l->pp > 1 ? (double)out->micro_batches * 2 * tokens * H * 2
				  : 0;
	out->ep_bytes = l->ep > 1 ? (double)out->micro_batches * moe_layers * 4 *
					    tokens * (double)c->top_k * H * 2 *
					    (l->ep - 1) / l->ep
				  : 0;
	out->dp_bytes = 2.0 * (streams - 1) / streams * 2.0 * (double)dense +
			2.0 * (l->dp - 1) / l->dp * 2.0 * (double)l->expert_params;
	out->inter_bytes = (l->tp_in_node ? 0 : out->tp_bytes) +
			   (l->pp_cross ? out->pp_bytes * l->pp_cross / (l->pp - 1)
					: 0) +
			   (l->ep_nodes > 1 ? out->ep_bytes : 0) +
			   (l->dp_cross ? out->dp_bytes : 0);

	/* the step: 1F1B slots of one micro-batch's fwd + bwd on a stage */
	model_count_params(c, t, n, &pc);
	f.expert = 2.0 * (double)pc.group_active[GROUP_EXPERTS];
	f.dense = 2.0 * (double)pc.active - f.expert -
		  (c->tie_embeddings ? 0 : 2.0 * (double)pc.group_active[GROUP_EMBED]);
	att = 2.0 * (double)c->layers * (double)c->heads * (double)load->seq *
	      (c->mla ? (double)(c->qk_nope_dim + c->qk_rope_dim + c->v_head_dim)
		      : 2.0 * (double)c->head_dim) / 2; /* causal: half */
	/* a rank's experts do the work of as many routed tokens as it
	 * sends: no EP division for its own tokens' FLOPs */
	flops_tok = (f.dense + att + f.expert) / ((double)l->tp * l->pp);
	/* forward 1x, backward 2x, and a second forward when recomputing */
	out->compute_s = tokens * flops_tok * (out->recompute ? 4 : 3) / hw->flops;
	tp_s = out->tp_bytes / (l->tp_in_node ? hw->intra_Bps : hw->inter_Bps);
	pp_s = out->pp_bytes / (l->pp_cross ? hw->inter_Bps : hw->intra_Bps);
	ep_s = out->ep_bytes / (l->ep_nodes > 1 ? hw->inter_Bps : hw->intra_Bps);
	dp_s = out->dp_bytes / (l->dp_cross ? hw->inter_Bps : hw->intra_Bps);
	slot = out->compute_s + (tp_s + pp_s + ep_s) / (double)out->micro_batches;
	bwd_s = out->compute_s * 2.0 / 3.0;
	out->bubble = (l->pp - 1.0) / ((double)out->micro_batches + l->pp - 1);
	out->comm_s = tp_s + pp_s + ep_s + fmax(0, dp_s - bwd_s);
	out->step_s = ((double)out->micro_batches + l->pp - 1) * slot +
		      fmax(0, dp_s - bwd_s);
	out->tokens_s = (double)load->global * (double)load->seq / out->step_s;
	snprintf(out->why, sizeof out->why,
		 "step %.2f s for %lld x %lld tokens (%.0f tok/s): %lld "
		 "micro-batches a data-parallel rank, bubble %.0f%%, recompute %s; per "
		 "rank a step: TP %.1f GB, PP %.2f GB, EP %.1f GB, DP %.1f GB "
		 "(%.1f GB across nodes)",
		 out->step_s, (long long)load->global, (long long)load->seq,
		 out->tokens_s, (long long)out->micro_batches, out->bubble * 100,
		 out->recompute ? "full" : "none", out->tp_bytes / 1e9,
		 out->pp_bytes / 1e9, out->ep_bytes / 1e9, out->dp_bytes / 1e9,
		 out->inter_bytes / 1e9);
	return 0;
}

static const char *width(int bytes)
{
	return bytes == 4 ? "f32" : "bf16";
}

/* ", NAME X" for a part that holds something. */
static void part(char *b, size_t len, const char *name, uint64_t v)
{
	char x[32];
	size_t k = strlen(b);
	if (v && k < len)
		snprintf(b + k, len - k, "%s%s %s", k ? ", " : "", name,
			 fmt_bytes(v, x));
}

void train_need_lines(const struct train_need *nd,
		      const struct train_mem_model *mm,
		      const struct train_layout *l, const char *indent,
		      char *buf, size_t len)
{
	char w[32], g[32], o[32], a[32], bw[32], v[32], bf[32], pb[32];
	char ps[400] = "";
	const struct train_act_parts *p = &nd->parts;
	(void)l; /* the counted cell's figures are nd->cell's */
	l = &nd->cell;
	const char *wd = mm->weight_bytes == 4 ? "f32" : "16-bit";
	part(ps, sizeof ps, "residual stream", p->residual);
	part(ps, sizeof ps, "attention", p->attention);
	part(ps, sizeof ps, mm->flash ? "softmax statistics" : "attention scores",
	     p->scores);
	part(ps, sizeof ps, "MLP", p->mlp);
	part(ps, sizeof ps, "MoE routing and experts", p->moe);
	part(ps, sizeof ps, "MLA latents", p->mla);
	part(ps, sizeof ps, "layer inputs", p->inputs);
	part(ps, sizeof ps, "final norm and logits", p->final);
	snprintf(buf, len,
		 "%sweights      %10s  %s working copy of %.4g M parameters%s%s%s\n"
		 "%sgradients    %10s  %s\n"
		 "%soptimizer    %10s  f32 master + 2 moments%s\n"
		 "%sactivations  %10s  %s, %s, %s, %s; %lld micro-batch%s in "
		 "flight on %s%s: %s\n"
		 "%sbackward     %10s  working set: %s (%s)\n"
		 "%sf32 views    %10s  %s\n"
		 "%spp buffers   %10s  %s\n",
		 indent, fmt_bytes(nd->weights, w), wd,
		 (double)l->params / 1e6, l->buffers ? " + f32 buffers " : "",
		 l->buffers ? fmt_bytes(l->buffers, bf) : "",
		 l->expert_params ? " (experts sharded over EP)" : "",
		 indent, fmt_bytes(nd->grads, g), wd,
		 indent, fmt_bytes(nd->optim, o),
		 nd->optim < 12 * l->params ? " (ZeRO-1 over the ranks that "
					      "hold the same slice)" : "",
		 indent, fmt_bytes(nd->act, a), width(mm->act_bytes),
		 mm->seq_parallel ? "sequence parallel"
				  : "residual stream whole on each TP rank",
		 mm->flash ? "FlashAttention" : "attention probabilities kept",
		 mm->keep_products ? "SwiGLU products kept"
				   : "SwiGLU products rebuilt",
		 (long long)nd->in_flight, nd->in_flight == 1 ? "" : "es",
		 "the busiest stage",
		 nd->recompute ? ", full recomputation" : "", ps,
		 indent, fmt_bytes(nd->bwd, bw),
		 mm->bwd_buffers ? "three [T, H] gradients and six buffers "
				   "as wide as their widest use, the score "
				   "gradient a row at a time"
				 : "one layer's activation gradients",
		 width(mm->bwd_buffers ? 4 : mm->grad_bytes),
		 indent, fmt_bytes(nd->views, v),
		 nd->views ? "an f32 copy of the largest 16-bit tensor and its "
			     "gradient's f32 sum"
			   : "none (products read the working weights)",
		 indent, fmt_bytes(nd->pp_bufs, pb),
		 nd->pp_bufs ? "pipeline send and gradient receive buffers, "
			       "[T, H] a micro-batch in flight"
			     : "none (no pipeline neighbour)");
}
