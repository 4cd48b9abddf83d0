/*
 * layout.c - how a model is split over tp x pp x ep ranks, as Megatron
 * lays it out:
 *   - q/k/v and gate/up (w1/w3) are column-parallel: split on the output
 *     axis (0), whole heads per rank;
 *   - o and down (w2) are row-parallel: split on the input axis (1), the
 *     runtime all-reduces after them;
 *   - embeddings and lm_head are vocab-parallel (axis 0);
 *   - norms, routers and the shared-expert gate are replicated;
 *   - with fewer kv heads than tp ranks, each kv head is replicated on
 *     tp / kv_heads consecutive ranks (as vLLM does);
 *   - routed experts are partitioned over ep (contiguous blocks), and each
 *     expert's FFN is split over tp like a dense MLP;
 *   - layers are partitioned into pp balanced stages (the first
 *     layers % pp stages hold one layer more); the embedding lives on
 *     the first stage, the final norm and lm_head on the last (a tied
 *     embedding on both), and DeepSeek's multi-token-prediction layers on
 *     the last;
 *   - MLA: q_b_proj and kv_b_proj are column-parallel by heads, the
 *     low-rank q_a/kv_a projections replicated.
 * Rank order: tp fastest (so a TP group sits inside a node), then ep,
 * then pp.
 */
#include "engine.h"

int layout_rank(const struct layout_dims *d, int pp, int ep, int tp)
{
	return (pp * d->ep + ep) * d->tp + tp;
}

void layout_coords(const struct layout_dims *d, int rank, int *pp, int *ep,
		   int *tp)
{
	*tp = rank % d->tp;
	*ep = (rank / d->tp) % d->ep;
	*pp = rank / (d->tp * d->ep);
}

void layout_stage_layers(int64_t layers, int pp, int s, int64_t *first,
			 int64_t *count)
{
	int64_t base = layers / pp, extra = layers % pp;
	*count = base + (s < extra ? 1 : 0);
	*first = s * base + (s < extra ? s : extra);
}

static int stage_of_layer(const struct model_config *c, int pp, int64_t l)
{
	int64_t base = c->layers / pp, extra = c->layers % pp;
	if (l >= c->layers) /* multi-token-prediction layers follow the last */
		return pp - 1;
	if (l < extra * (base + 1)) /* the first `extra` stages hold base+1 */
		return (int)(l / (base + 1));
	return (int)(extra + (l - extra * (base + 1)) / base);
}

int layout_tensor_stages(const struct model_config *c,
			 const struct layout_dims *d,
			 const struct tensor_spec *t, int stages[2])
{
	if (t->layer >= 0) {
		stages[0] = stage_of_layer(c, d->pp, t->layer);
		return 1;
	}
	if (t->group == GROUP_VISION || t->group == GROUP_PROJECTOR) {
		stages[0] = 0; /* the tower feeds the first stage's embeddings */
		return 1;
	}
	if (t->role == ROLE_EMBED) { /* a tied embedding is also the head */
		stages[0] = 0;
		if (c->tie_embeddings && d->pp > 1) {
			stages[1] = d->pp - 1;
			return 2;
		}
		return 1;
	}
	stages[0] = d->pp - 1; /* final norm, lm_head */
	return 1;
}

uint64_t layout_slice_numel(const struct tensor_spec *t,
			    const struct tensor_split *s)
{
	uint64_t n = t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1);
	return s->axis < 0 ? n : n / (uint64_t)s->parts;
}

int layout_check(const struct model_config *c, const struct layout_dims *d,
		 struct d0_err *err)
{
	int has_dense = 0, has_moe = 0;
	if (d->tp < 1 || d->pp < 1 || d->ep < 1)
		return d0_errf(err, "tp, pp and ep must be at least 1");
	for (int64_t l = 0; l < c->layers; l++) {
		if (model_layer_is_moe(c, l))
			has_moe = 1;
		else
			has_dense = 1;
	}
	if (c->heads % d->tp)
		return d0_errf(err, "num_attention_heads %lld is not divisible "
			       "by tp %d: each tensor-parallel rank must hold "
			       "whole query heads", (long long)c->heads, d->tp);
	if (c->kv_heads >= d->tp ? c->kv_heads % d->tp : d->tp % c->kv_heads)
		return d0_errf(err, "num_key_value_heads %lld does not fit tp "
			       "%d: kv heads are split when there are at least "
			       "tp of them (tp must divide them) and "
			       "replicated when fewer (tp must be a multiple)",
			       (long long)c->kv_heads, d->tp);
	if (c->vocab % d->tp)
		return d0_errf(err, "vocab_size %lld is not divisible by tp %d: "
			       "the embedding and lm_head are split by vocab "
			       "rows (pad the vocabulary)", (long long)c->vocab,
			       d->tp);
	if (has_dense && c->ffn % d->tp)
		return d0_errf(err, "intermediate_size %lld is not divisible by "
			       "tp %d: gate/up/down are split on it",
			       (long long)c->ffn, d->tp);
	if (has_moe && c->moe_ffn % d->tp)
		return d0_errf(err, "expert intermediate size %lld is not "
			       "divisible by tp %d", (long long)c->moe_ffn,
			       d->tp);
	if (has_moe && c->shared_ffn % d->tp)
		return d0_errf(err, "shared_expert_intermediate_size %lld is not "
			       "divisible by tp %d", (long long)c->shared_ffn,
			       d->tp);
	if (d->pp > c->layers)
		return d0_errf(err, "pp %d is more pipeline stages than the "
			       "%lld layers (num_hidden_layers) can fill",
			       d->pp, (long long)c->layers);
	if (d->ep > 1 && !has_moe)
		return d0_errf(err, "ep %d: the model (%s) has no routed experts "
			       "to partition", d->ep, c->model_type);
	if (has_moe && c->experts % d->ep)
		return d0_errf(err, "expert count %lld is not divisible by ep "
			       "%d: each expert-parallel rank must own the same "
			       "number of experts", (long long)c->experts, d->ep);
	return 0;
}

void layout_split(const struct model_config *c, const struct layout_dims *d,
		  const struct tensor_spec *t, struct tensor_split *s)
{
	s->replicas = 1;
	s->parts = d->tp;
	s->axis = 0;
	switch (t->role) {
	case ROLE_EMBED:
	case ROLE_LM_HEAD:
		s->kind = "vocab";
		break;
	case ROLE_Q:
	case ROLE_COL:
		s->kind = "column";
		break;
	case ROLE_KV:
		if (c->kv_heads >= d->tp) {
			s->kind = "column";
		} else {
			s->kind = "kv_heads";
			s->parts = (int)c->kv_heads;
			s->replicas = d->tp / (int)c->kv_heads;
		}
		break;
	case ROLE_O:
	case ROLE_ROW:
		s->kind = "row";
		s->axis = t->ndim == 2 ? 1 : 0;
		if (t->ndim == 1) { /* a row-parallel layer's bias */
			s->kind = "replicated";
			s->axis = -1;
			s->parts = 1;
		}
		break;
	default:
		s->kind = "replicated";
		s->axis = -1;
		s->parts = 1;
		break;
	}
}

int layout_expert_owner(const struct model_config *c,
			const struct layout_dims *d, int expert)
{
	int64_t per = c->experts / d->ep;
	return per ? (int)(expert / per) : 0;
}

int layout_part_for_rank(const struct model_config *c,
			 const struct layout_dims *d,
			 const struct tensor_spec *t,
			 const struct tensor_split *s, int rank)
{
	int pp, ep, tp, st[2], ns, on = 0;
	layout_coords(d, rank, &pp, &ep, &tp);
	ns = layout_tensor_stages(c, d, t, st);
	for (int i = 0; i < ns; i++)
		on |= st[i] == pp;
	if (!on)
		return -1;
	if (t->expert >= 0 && layout_expert_owner(c, d, t->expert) != ep)
		return -1;
	if (s->axis < 0)
		return 0;
	return tp / s->replicas;
}
