/*
 * plan_train.c - can this cluster fine-tune the model, and how should it
 * be split?  The training side of plan (plan --train, docs/plan.md
 * "Fine-tuning").
 *
 * Memory per card, mixed-precision AdamW as Megatron-LM and DeepSpeed run
 * it (ZeRO, Rajbhandari et al. 2020: 2 + 2 + 12 = 16 bytes a parameter):
 *   weights    bf16 working copy, the rank's slice (plan's weight_bytes);
 *   gradients  bf16, the same slice;
 *   optimizer  f32 master weights + Adam's two moments, 12 bytes a
 *              parameter of the slice, divided under ZeRO-1 by the ranks
 *              that hold the same slice (DP x EP for the dense part,
 *              DP for the experts);
 *   activations what backward keeps, bf16, with sequence parallelism
 *              when TP > 1 (everything divided by TP), FlashAttention (no
 *              seq x seq scores kept), for the micro-batches the 1F1B
 *              schedule holds in flight on a stage (PP - s on stage s,
 *              Narayanan et al. 2021); with full recomputation only each
 *              layer's input is kept, plus one layer rebuilt at a time.
 * EP is carved out of data parallelism, as Megatron-LM and DeepSeek train
 * (not plan's serving layout, where an EP group shares its tokens): each
 * EP rank runs its own micro-batches through attention and trades tokens
 * for its experts, so a replica of tp x pp x ep cards runs ep streams.
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
#include "runtime.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Bytes backward keeps for one token of layer l on one rank. */
static double layer_act(const struct model_config *c, int64_t l, int tp)
{
	double H = (double)c->hidden, q, k, v, o, a, mlp;
	if (c->mla) {
		q = (double)c->heads * (double)(c->qk_nope_dim + c->qk_rope_dim);
		k = q;
		v = (double)c->heads * (double)c->v_head_dim;
		o = v;
	} else {
		q = (double)c->heads * (double)c->head_dim;
		k = v = (double)c->kv_heads * (double)c->head_dim;
		o = q;
	}
	/* the inputs of both norms and both blocks, Q K V, the attention
	 * output; MLA's latents too */
	a = 2.0 * (4 * H + q + k + v + o);
	if (c->mla)
		a += 2.0 * (double)(c->kv_lora_rank + c->qk_rope_dim +
				    c->q_lora_rank);
	a /= tp;
	/* SwiGLU keeps gate, up and their product: 3 x F; a routed expert
	 * also its input (balanced routing: a rank's experts take in as
	 * many tokens as it sends out), and a MoE layer its router's f32
	 * logits */
	if (model_layer_is_moe(c, l))
		mlp = (double)c->top_k * (6.0 * (double)c->moe_ffn + 2 * H) /
			      tp +
		      6.0 * (double)c->shared_ffn / tp +
		      4.0 * (double)c->experts;
	else
		mlp = 6.0 * (double)c->ffn / tp;
	return a + mlp;
}

/* Activations of the busiest stage, without and with full recompute. */
static void stage_acts(const struct model_config *c, const struct train_layout *l,
		       double tokens, int64_t m, double *none, double *full)
{
	*none = *full = 0;
	for (int s = 0; s < l->pp; s++) {
		int64_t first, count;
		double kept = 0, inputs = 0, widest = 0, fly, logits = 0, a, b;
		layout_stage_layers(c->layers, l->pp, s, &first, &count);
		for (int64_t i = first; i < first + count; i++) {
			double x = layer_act(c, i, l->tp);
			kept += x;
			inputs += 2.0 * (double)c->hidden / l->tp;
			if (x > widest)
				widest = x;
		}
		fly = (double)(l->pp - s < m ? l->pp - s : m);
		if (s == l->pp - 1) /* f32 logits for the loss's backward */
			logits = 4.0 * (double)c->vocab / l->tp;
		a = tokens * (kept * fly + logits);
		b = tokens * (inputs * fly + widest + logits);
		if (a > *none)
			*none = a;
		if (b > *full)
			*full = b;
	}
}

int train_need_layout(const struct model_config *c,
		      const struct tensor_spec *t, size_t n,
		      const struct train_load *load,
		      const struct train_layout *l, const struct train_hw *hw,
		      uint64_t budget, uint64_t other, struct train_need *out,
		      char *reason, size_t reason_len)
{
	struct serve_model_flops {
		double dense, expert;
	} f;
	struct param_count pc;
	double tokens = (double)(load->micro * load->seq), H = (double)c->hidden;
	double none, full, ring, stage_layers, moe_layers = 0, flops_tok, att;
	double tp_s, pp_s, ep_s, dp_s, bwd_s, slot;
	int64_t first, count, streams = (int64_t)l->dp * l->ep;
	int64_t micros = load->global / load->micro;
	uint64_t fixed, dense = l->params - l->expert_params;

	memset(out, 0, sizeof *out);
	if (load->global % load->micro || micros % streams) {
		snprintf(reason, reason_len, "a global batch of %lld sequences "
			 "in micro-batches of %lld does not split over DP %d x "
			 "EP %d", (long long)load->global,
			 (long long)load->micro, l->dp, l->ep);
		return -1;
	}
	out->micro_batches = micros / streams;

	/* memory: 2 + 2 + 12 (/DP) bytes a parameter, then activations */
	out->weights = l->weights_bf16;
	out->grads = l->weights_bf16;
	out->optim = load->zero1 ? 12 * (dense / (uint64_t)streams +
					 l->expert_params / (uint64_t)l->dp)
				 : 12 * l->params;
	stage_acts(c, l, tokens, out->micro_batches, &none, &full);
	out->act_none = (uint64_t)none;
	out->act_full = (uint64_t)full;
	fixed = out->weights + out->grads + out->optim + other;
	out->recompute = load->recompute == RECOMPUTE_FULL ||
			 (load->recompute == RECOMPUTE_AUTO &&
			  fixed + out->act_none > budget);
	out->act = out->recompute ? out->act_full : out->act_none;

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
