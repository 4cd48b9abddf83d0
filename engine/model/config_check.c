/*
 * config_check.c - what a config.json's numbers may be, one table per
 * family (model.h: model_config_check).
 *
 * model.c reads each family's keys with its transformers defaults; this
 * file holds the parsed result to bounds in one place, so a dimension
 * that is zero, negative or absurd is refused at the door by every step
 * that reads a config (inspect, plan, gen-model, verify, convert, run)
 * instead of turning into a negative parameter count, a plan that "fits"
 * a model of nothing, or a tensor table that overflows.  A row is the
 * config.json key (for the message), the field and its bounds; adding a
 * family's key is a row.
 */
#include "model.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

struct dim_rule {
	const char *key; /* config.json's name for it */
	size_t off;	 /* int64_t field of struct model_config */
	int64_t min, max;
};

#define F(field) offsetof(struct model_config, field)
#define END {NULL, 0, 0, 0}

/* Every family. */
static const struct dim_rule common_dims[] = {
    {"hidden_size", F(hidden), 1, MODEL_DIM_MAX},
    {"num_hidden_layers", F(layers), 1, MODEL_COUNT_MAX},
    {"num_attention_heads", F(heads), 1, MODEL_COUNT_MAX},
    {"num_key_value_heads", F(kv_heads), 1, MODEL_COUNT_MAX},
    {"head_dim", F(head_dim), 2, MODEL_COUNT_MAX},
    {"intermediate_size", F(ffn), 1, MODEL_DIM_MAX},
    {"vocab_size", F(vocab), 1, MODEL_DIM_MAX},
    {"max_position_embeddings", F(max_pos), 1, MODEL_POS_MAX},
    {"sliding_window", F(window), 0, MODEL_POS_MAX},
    END};

static const struct dim_rule mixtral_dims[] = {
    {"num_local_experts", F(experts), 1, MODEL_COUNT_MAX},
    {"num_experts_per_tok", F(top_k), 1, MODEL_COUNT_MAX},
    END};

static const struct dim_rule qwen_moe_dims[] = {
    {"num_experts", F(experts), 1, MODEL_COUNT_MAX},
    {"num_experts_per_tok", F(top_k), 1, MODEL_COUNT_MAX},
    {"moe_intermediate_size", F(moe_ffn), 1, MODEL_DIM_MAX},
    {"shared_expert_intermediate_size", F(shared_ffn), 0, MODEL_DIM_MAX},
    {"decoder_sparse_step", F(decoder_sparse_step), 1, MODEL_COUNT_MAX},
    {"max_window_layers", F(max_window_layers), 0, MODEL_COUNT_MAX},
    END};

static const struct dim_rule qwen_dense_dims[] = {
    {"max_window_layers", F(max_window_layers), 0, MODEL_COUNT_MAX}, END};

static const struct dim_rule deepseek_dims[] = {
    {"n_routed_experts", F(experts), 1, MODEL_COUNT_MAX},
    {"num_experts_per_tok", F(top_k), 1, MODEL_COUNT_MAX},
    {"moe_intermediate_size", F(moe_ffn), 1, MODEL_DIM_MAX},
    {"n_shared_experts", F(shared_experts), 0, MODEL_COUNT_MAX},
    {"q_lora_rank", F(q_lora_rank), 0, MODEL_DIM_MAX},
    {"kv_lora_rank", F(kv_lora_rank), 1, MODEL_DIM_MAX},
    {"qk_rope_head_dim", F(qk_rope_dim), 2, MODEL_COUNT_MAX},
    {"qk_nope_head_dim", F(qk_nope_dim), 0, MODEL_COUNT_MAX},
    {"v_head_dim", F(v_head_dim), 1, MODEL_COUNT_MAX},
    {"first_k_dense_replace", F(first_dense), 0, MODEL_COUNT_MAX},
    {"n_group", F(n_group), 1, MODEL_COUNT_MAX},
    {"topk_group", F(topk_group), 1, MODEL_COUNT_MAX},
    {"num_nextn_predict_layers", F(mtp_layers), 0, 16},
    END};

/* The family's table besides common_dims. */
static const struct {
	const char *model_type;
	const struct dim_rule *dims;
} family_dims[] = {
    {"llama", NULL},
    {"mistral", NULL},
    {"qwen2", qwen_dense_dims},
    {"qwen3", qwen_dense_dims},
    {"mixtral", mixtral_dims},
    {"qwen2_moe", qwen_moe_dims},
    {"qwen3_moe", qwen_moe_dims},
    {"deepseek_v3", deepseek_dims},
};

static int check_dims(const struct model_config *c, const struct dim_rule *r,
		      const char *path, struct d0_err *err)
{
	for (; r && r->key; r++) {
		int64_t v = *(const int64_t *)((const char *)c + r->off);
		if (v < r->min || v > r->max)
			return d0_errf(err, "%s: %s is %lld; expected %lld..%lld",
				       path, r->key, (long long)v,
				       (long long)r->min, (long long)r->max);
	}
	return 0;
}

/* a * b (* ...) into *acc with overflow caught. */
static int mul(int64_t *acc, int64_t b)
{
	return __builtin_mul_overflow(*acc, b, acc);
}

/*
 * An upper bound of the parameters the dimensions imply (the tensor
 * table's products, each checked): embeddings and lm_head, per layer
 * attention (q, k, v, o at their widest), the dense MLP, every routed and
 * shared expert.
 */
static int params_bound(const struct model_config *c, int64_t *out)
{
	int64_t emb = c->vocab, attn = c->hidden, kv = c->hidden, mlp = 3,
		experts = 3, shared = 3, layer = 0, total = 0;
	int64_t heads_w = c->heads, kv_w = c->kv_heads;
	if (mul(&emb, c->hidden) || mul(&emb, 2) || mul(&heads_w, c->head_dim) ||
	    mul(&attn, heads_w) || mul(&attn, 2) || mul(&kv_w, c->head_dim) ||
	    mul(&kv, kv_w) || mul(&kv, 2) || mul(&mlp, c->hidden) ||
	    mul(&mlp, c->ffn) || mul(&experts, c->hidden) ||
	    mul(&experts, c->moe_ffn) || mul(&experts, c->experts) ||
	    mul(&shared, c->hidden) || mul(&shared, c->shared_ffn))
		return -1;
	if (c->mla) { /* low-rank q and kv projections, per head dims */
		int64_t q = c->hidden + c->heads, w = c->qk_nope_dim;
		if (__builtin_add_overflow(w, c->qk_rope_dim, &w) ||
		    __builtin_add_overflow(w, c->v_head_dim, &w) ||
		    mul(&q, c->q_lora_rank + c->kv_lora_rank + 1) ||
		    mul(&q, w) || __builtin_add_overflow(attn, q, &attn))
			return -1;
	}
	if (__builtin_add_overflow(layer, attn, &layer) ||
	    __builtin_add_overflow(layer, kv, &layer) ||
	    __builtin_add_overflow(layer, mlp, &layer) ||
	    __builtin_add_overflow(layer, experts, &layer) ||
	    __builtin_add_overflow(layer, shared, &layer))
		return -1;
	total = layer;
	if (mul(&total, c->layers + c->mtp_layers) ||
	    __builtin_add_overflow(total, emb, &total))
		return -1;
	*out = total;
	return 0;
}

int model_config_check(const struct model_config *c, const char *path,
		       struct d0_err *err)
{
	int64_t params;
	size_t k;
	if (check_dims(c, common_dims, path, err) < 0)
		return -1;
	for (k = 0; k < sizeof family_dims / sizeof *family_dims; k++)
		if (!strcmp(family_dims[k].model_type, c->model_type))
			break;
	if (k == sizeof family_dims / sizeof *family_dims)
		return d0_errf(err, "%s: no validation table for model_type "
			       "'%s'", path, c->model_type);
	if (check_dims(c, family_dims[k].dims, path, err) < 0)
		return -1;
	if (c->kv_heads > c->heads)
		return d0_errf(err, "%s: num_key_value_heads %lld is more than "
			       "num_attention_heads %lld", path,
			       (long long)c->kv_heads, (long long)c->heads);
	if (c->experts && c->top_k > c->experts)
		return d0_errf(err, "%s: num_experts_per_tok %lld is more than "
			       "the %lld experts", path, (long long)c->top_k,
			       (long long)c->experts);
	if (!isfinite(c->rms_eps) || c->rms_eps <= 0 || c->rms_eps >= 1)
		return d0_errf(err, "%s: rms_norm_eps is %g; expected a number "
			       "in (0, 1)", path, c->rms_eps);
	if (!isfinite(c->rope_theta) || c->rope_theta <= 0)
		return d0_errf(err, "%s: rope_theta is %g; expected a positive "
			       "number", path, c->rope_theta);
	if (params_bound(c, &params) < 0 || params > MODEL_PARAMS_MAX)
		return d0_errf(err, "%s: the dimensions imply more than 2^50 "
			       "parameters (%lld layers, hidden %lld, "
			       "intermediate %lld, %lld experts of %lld, vocab "
			       "%lld): not a real model", path,
			       (long long)c->layers, (long long)c->hidden,
			       (long long)c->ffn, (long long)c->experts,
			       (long long)c->moe_ffn, (long long)c->vocab);
	return 0;
}
